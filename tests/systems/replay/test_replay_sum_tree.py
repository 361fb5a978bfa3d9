"""Tests of the K-ary sum tree (seed 003, section IV-C, Algorithm 2) against a flat numpy array of priorities."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systems.replay import sum_tree as sum_tree_module
from systems.replay.sum_tree import SumTree

FANOUTS = [2, 3, 16, 64]
BACKENDS = [
    "numpy",
    pytest.param("numba", marks=pytest.mark.skipif(sum_tree_module.numba is None, reason="numba is not installed")),
]
needs_numba = pytest.mark.skipif(sum_tree_module.numba is None, reason="numba is not installed")


def _reference_sample(priorities, targets):
    """First leaf whose prefix sum exceeds the target; a target at the end goes to the last non-zero leaf."""
    cumulative = np.cumsum(priorities)
    return np.minimum(np.searchsorted(cumulative, targets, side="right"), np.flatnonzero(priorities)[-1])


def _assert_inner_nodes_are_sums(tree):
    """Every inner node equals the sum of its K children (recomputed, so equal up to summation order)."""
    levels, k = tree.levels, tree.k
    for h in range(1, tree.height):
        sums = levels[h][:, :k].sum(axis=1)  # [groups_h] one per node of level h - 1
        parents = levels[h - 1][:, :k].reshape(-1)[: sums.size]
        np.testing.assert_allclose(parents, sums, rtol=1e-12, atol=0)
        assert not levels[h][:, k:].any(), "padding of a sibling group must stay 0"


@st.composite
def _integer_histories(draw):
    """A fan-out, a capacity and a sequence of batched writes of integer priorities (sums exact in float64)."""
    k = draw(st.sampled_from(FANOUTS))
    capacity = draw(st.integers(1, 300))
    writes = draw(
        st.lists(
            st.lists(st.tuples(st.integers(0, capacity - 1), st.integers(0, 1000)), min_size=1, max_size=40),
            min_size=1,
            max_size=6,
        )
    )
    targets = draw(st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=30))
    return k, capacity, writes, targets


@settings(max_examples=120, deadline=None)
@given(_integer_histories())
def test_matches_flat_reference_exactly_with_integer_priorities(history):
    k, capacity, writes, fractions = history
    tree, reference = SumTree(capacity, k), np.zeros(capacity)
    for write in writes:
        indices = np.array([i for i, _ in write])
        values = np.array([p for _, p in write], dtype=np.float64)
        tree.set(indices, values)
        for i, p in write:  # the last write of an index wins
            reference[i] = p
        assert tree.total() == reference.sum()
        np.testing.assert_array_equal(tree.get(np.arange(capacity)), reference)
        np.testing.assert_array_equal(tree.leaf_values(), reference)
        _assert_inner_nodes_are_sums(tree)
        if reference.sum() == 0:
            with pytest.raises(ValueError, match="total priority is 0"):
                tree.sample([0.0])
            continue
        total = reference.sum()
        cumulative = np.cumsum(reference)
        # Random targets, every boundary exactly (where a zero leaf follows, only "> target" skips it), 0 and total.
        targets = np.concatenate([np.array(fractions) * total, cumulative, [0.0, total]])
        sampled = tree.sample(targets)
        np.testing.assert_array_equal(sampled, _reference_sample(reference, targets))
        assert np.all(reference[sampled] > 0)


@settings(max_examples=80, deadline=None)
@given(
    k=st.sampled_from(FANOUTS),
    capacity=st.integers(1, 300),
    data=st.data(),
)
def test_float_priorities_root_is_sum_and_samples_are_positive_and_bracketed(k, capacity, data):
    tree, reference = SumTree(capacity, k), np.zeros(capacity)
    priority = st.one_of(st.just(0.0), st.floats(1e-12, 1e6))
    for _ in range(data.draw(st.integers(1, 5))):
        indices = np.array(data.draw(st.lists(st.integers(0, capacity - 1), min_size=1, max_size=50, unique=True)))
        values = np.array(data.draw(st.lists(priority, min_size=indices.size, max_size=indices.size)))
        tree.set(indices, values)
        reference[indices] = values
        np.testing.assert_allclose(tree.total(), reference.sum(), rtol=1e-12)
        np.testing.assert_array_equal(tree.get(indices), values)
        _assert_inner_nodes_are_sums(tree)
        total = tree.total()
        if total == 0:
            continue
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        # Uniform targets plus the float edges: 0, just below total, and total itself.
        targets = np.concatenate([rng.random(64) * total, [0.0, np.nextafter(total, 0.0), total]])
        sampled = tree.sample(targets)
        assert np.all(reference[sampled] > 0)
        cumulative = np.cumsum(reference)
        tolerance = 1e-9 * total
        left = np.where(sampled > 0, cumulative[np.maximum(sampled - 1, 0)], 0.0)
        assert np.all(left <= targets + tolerance)
        assert np.all(targets[:-2] < cumulative[sampled][:-2] + tolerance)


def test_zeroing_every_leaf_leaves_an_exact_zero_total():
    """Parents are recomputed from their children, so no float residue of earlier deltas survives (Algorithm 2's
    delta propagation would leave one)."""
    rng = np.random.default_rng(0)
    tree = SumTree(1000, 16)
    for _ in range(20):
        indices = rng.integers(0, 1000, size=100)
        tree.set(indices, rng.random(100) * 10 ** rng.uniform(-8, 8, size=100))
    tree.set(np.arange(1000), 0.0)
    assert tree.total() == 0.0
    assert not any(level.any() for level in tree.levels)


@pytest.mark.parametrize("backend", BACKENDS)
def test_duplicate_indices_last_write_wins(backend):
    tree = SumTree(10, 3, backend=backend)
    tree.set([4, 7, 4, 4], [1.0, 2.0, 3.0, 5.0])
    assert tree.get([4, 7]).tolist() == [5.0, 2.0]
    assert tree.total() == 7.0


def test_large_tree_matches_reference():
    capacity, k = 100_003, 16  # not a power of K: the last groups of each level are partly padding
    rng = np.random.default_rng(1)
    priorities = rng.random(capacity) * (rng.random(capacity) > 0.3)
    tree = SumTree(capacity, k)
    tree.set(np.arange(capacity), priorities)
    np.testing.assert_allclose(tree.total(), priorities.sum(), rtol=1e-12)
    targets = rng.random(10_000) * tree.total()
    sampled = tree.sample(targets)
    assert np.all(priorities[sampled] > 0)
    reference = _reference_sample(priorities, targets)
    # Hierarchical and sequential sums round differently; only targets within rounding of a boundary may differ.
    differ = sampled != reference
    assert differ.mean() < 1e-3
    assert tree.height == math.ceil(math.log(capacity, k)) + 1


def _chi_square_p_value(observed, expected):
    from jax.scipy.stats import chi2

    statistic = float(np.sum((observed - expected) ** 2 / expected))
    return float(chi2.sf(statistic, observed.size - 1))


@pytest.mark.parametrize("k", [3, 16])
def test_sampled_frequencies_match_priorities(k):
    rng = np.random.default_rng(2)
    capacity = 50
    priorities = rng.uniform(0.1, 5.0, size=capacity)
    priorities[[3, 17, 18, 49]] = 0.0
    tree = SumTree(capacity, k)
    tree.set(np.arange(capacity), priorities)
    num_samples = 200_000
    counts = np.bincount(tree.sample_proportional(rng, num_samples), minlength=capacity)
    assert counts[priorities == 0].sum() == 0
    positive = priorities > 0
    expected = num_samples * priorities[positive] / priorities.sum()
    assert _chi_square_p_value(counts[positive], expected) > 1e-3
    # The statistic does see a wrong distribution: the counts of a uniform tree fail the same test.
    uniform_counts = np.bincount(rng.integers(0, capacity, num_samples), minlength=capacity)
    assert _chi_square_p_value(uniform_counts[positive], expected) < 1e-3


def test_stratified_sampling_takes_one_target_per_segment():
    rng = np.random.default_rng(3)
    priorities = rng.uniform(0.0, 3.0, size=40)
    priorities[::7] = 0.0
    tree = SumTree(40, 4)
    tree.set(np.arange(40), priorities)
    batch_size = 1000
    sampled = tree.sample_proportional(rng, batch_size, stratified=True)
    assert np.all(np.diff(sampled) >= 0)  # targets increase, so leaves do
    counts = np.bincount(sampled, minlength=40)
    expected = batch_size * priorities / priorities.sum()
    assert np.all(np.abs(counts - expected) <= 2)  # a leaf spanning L segments gets floor(L) - 1 .. ceil(L) + 1
    assert counts[priorities == 0].sum() == 0


@pytest.mark.parametrize("k", [2, 3, 8, 16, 64])
@pytest.mark.parametrize("capacity", [1, 7, 1000])
def test_sibling_groups_are_cache_line_aligned(k, capacity):
    tree = SumTree(capacity, k)
    assert tree.group_stride >= k and tree.group_stride * 8 % 64 == 0
    if k % 8 == 0:
        assert tree.group_stride == k  # the paper's choice K % C == 0 needs no padding
    for h, level in enumerate(tree.levels):
        assert level.ctypes.data % 64 == 0, f"level {h} does not start on a cache line"
        assert level.strides == (tree.group_stride * 8, 8)  # so every row (sibling group) starts on one too
    assert tree.levels[0].shape == (1, tree.group_stride)  # the root padded to a full group
    assert tree.level_sizes[0] == 1 and tree.level_sizes[-1] == capacity
    for h in range(1, tree.height):
        assert tree.levels[h].shape[0] == tree.level_sizes[h - 1]
        assert tree.level_sizes[h] <= tree.level_sizes[h - 1] * k


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_input_raises_and_writes_nothing(backend):
    tree = SumTree(10, 4, backend=backend)
    tree.set(np.arange(10), np.arange(10, dtype=np.float64))
    before = [level.copy() for level in tree.levels]
    for indices, priorities, error in [
        ([1, 2], [1.0, np.nan], ValueError),
        ([1, 2], [1.0, -1.0], ValueError),
        ([1, 2], [np.inf, 1.0], ValueError),
        ([1, 10], [1.0, 1.0], IndexError),
        ([-1, 2], [1.0, 1.0], IndexError),
        ([1.0, 2.0], [1.0, 1.0], IndexError),
        ([[1, 2]], [[1.0, 1.0]], IndexError),
        ([True, False], [1.0, 1.0], IndexError),
    ]:
        with pytest.raises(error):
            tree.set(indices, priorities)
        for level, saved in zip(tree.levels, before, strict=True):
            np.testing.assert_array_equal(level, saved)
    with pytest.raises(IndexError):
        tree.get([10])
    with pytest.raises(ValueError, match="targets"):
        tree.sample([tree.total() * 1.0001])
    with pytest.raises(ValueError, match="targets"):
        tree.sample([-1e-9])
    with pytest.raises(ValueError, match="targets"):
        tree.sample([np.nan])
    with pytest.raises(ValueError, match="batch_size"):
        tree.sample_proportional(np.random.default_rng(0), 0)
    with pytest.raises(ValueError, match="total priority is 0"):
        SumTree(5, backend=backend).sample_proportional(np.random.default_rng(0), 4)
    for capacity, k in [(0, 16), (10, 1), (10, 2.5), (True, 4)]:
        with pytest.raises(ValueError):
            SumTree(capacity, k)


# ----------------------------------------------------------------------------------------------- backends


def test_backend_argument_and_default():
    assert sum_tree_module.DEFAULT_BACKEND == ("numba" if sum_tree_module.numba is not None else "numpy")
    assert SumTree(4).backend == sum_tree_module.DEFAULT_BACKEND
    assert SumTree(4, backend="numpy").backend == "numpy"
    with pytest.raises(ValueError, match="backend"):
        SumTree(4, backend="torch")


@needs_numba
def test_numba_kernels_release_the_gil():
    for kernel in (
        sum_tree_module._set_leaves_kernel,
        sum_tree_module._update_ancestors_kernel,
        sum_tree_module._sample_kernel,
    ):
        assert kernel.targetoptions.get("nogil") is True


def _assert_trees_bit_identical(a, b):
    assert a.height == b.height and a.level_sizes == b.level_sizes
    for level_a, level_b in zip(a.levels, b.levels, strict=True):
        np.testing.assert_array_equal(level_a.view(np.int64), level_b.view(np.int64))  # bits, signed zeros too


def _boundary_targets(tree, fractions):
    """Random targets plus every float edge: 0, each prefix sum of the leaves, just below total, total."""
    total = tree.total()
    cumulative = np.cumsum(tree.leaf_values())
    targets = np.concatenate([np.asarray(fractions) * total, cumulative, [0.0, np.nextafter(total, 0.0), total]])
    return targets[targets <= total]


@st.composite
def _float_histories(draw):
    """A fan-out (131 > 128 exercises numpy's recursive pairwise sum), a capacity, batched writes of priorities
    over many magnitudes (zeros and -0.0 included, sums that round) and sampling fractions."""
    k = draw(st.sampled_from([*FANOUTS, 4, 9, 17, 131]))
    capacity = draw(st.integers(1, 400))
    priority = st.one_of(st.just(0.0), st.just(-0.0), st.floats(1e-300, 1e300), st.floats(0.0, 1.0))
    writes = draw(
        st.lists(
            st.tuples(
                st.lists(st.integers(0, capacity - 1), min_size=1, max_size=60),  # duplicates allowed
                st.lists(priority, min_size=60, max_size=60),
                st.booleans(),  # split into set_leaves + update_ancestors, as the buffers do
            ),
            min_size=1,
            max_size=6,
        )
    )
    fractions = draw(st.lists(st.floats(0, 1), min_size=1, max_size=30))
    return k, capacity, writes, fractions


@needs_numba
@settings(max_examples=150, deadline=None)
@given(_float_histories())
@pytest.mark.slow
def test_numba_backend_is_bit_identical_to_numpy(history):
    k, capacity, writes, fractions = history
    trees = {backend: SumTree(capacity, k, backend=backend) for backend in ("numpy", "numba")}
    for indices, priorities, split in writes:
        indices = np.array(indices)
        priorities = np.array(priorities[: indices.size])
        if split:
            written = {name: tree.set_leaves(indices, priorities) for name, tree in trees.items()}
            np.testing.assert_array_equal(written["numpy"], written["numba"])
            assert written["numba"].dtype == np.int64
            for name, tree in trees.items():
                tree.update_ancestors(written[name])
        else:
            for tree in trees.values():
                tree.set(indices, priorities)
        _assert_trees_bit_identical(trees["numpy"], trees["numba"])
        if trees["numpy"].total() == 0:
            with pytest.raises(ValueError, match="total priority is 0"):
                trees["numba"].sample([0.0])
            continue
        targets = _boundary_targets(trees["numpy"], fractions)
        sampled = {name: tree.sample(targets) for name, tree in trees.items()}
        np.testing.assert_array_equal(sampled["numpy"], sampled["numba"])
        assert sampled["numba"].dtype == np.int64
        assert np.all(trees["numba"].get(sampled["numba"]) > 0)


@needs_numba
@pytest.mark.parametrize("k", [4, 16])
def test_numba_backend_is_bit_identical_to_numpy_on_a_large_tree(k):
    capacity = 20_011  # not a power of K
    rng = np.random.default_rng(7)
    trees = [SumTree(capacity, k, backend=backend) for backend in ("numpy", "numba")]
    priorities = rng.random(capacity) * 10.0 ** rng.uniform(-6, 6, size=capacity) * (rng.random(capacity) > 0.2)
    for tree in trees:
        tree.set(np.arange(capacity), priorities)
    for _ in range(20):
        indices = rng.integers(0, capacity, size=256)
        values = rng.random(256) * 10.0 ** rng.uniform(-6, 6, size=256)
        for tree in trees:
            tree.update_ancestors(tree.set_leaves(indices, values))
        _assert_trees_bit_identical(*trees)
        seed = int(rng.integers(2**31))
        for stratified in (False, True):
            np.testing.assert_array_equal(
                *(tree.sample_proportional(np.random.default_rng(seed), 256, stratified) for tree in trees)
            )
    targets = _boundary_targets(trees[0], rng.random(1000))
    np.testing.assert_array_equal(trees[0].sample(targets), trees[1].sample(targets))
