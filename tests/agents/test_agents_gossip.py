"""Tests for agents.gossip (GALA, seed paper 004): topologies, mixing, consensus metrics and the Proposition 1 bound."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from agents.gossip import (
    ConsensusBound,
    Topology,
    augmented_mixing_matrix,
    consensus_distance,
    make_topology,
    mix,
    pairwise_cosine,
)

# ---------------------------------------------------------------------------------------------------------------------
# Topologies.


def test_ring_shifts_and_peers_hand_values():
    ring = make_topology("ring", 5, 2)
    assert ring.shifts(0) == (1, 2)
    assert ring.shifts(7) == (1, 2)
    assert ring.period == 1
    assert ring.out_peers(4, 0) == (0, 1)
    assert ring.in_peers(0, 0) == (4, 3)
    assert ring.in_peers(3, 11) == (2, 1)


def test_exponential_shifts_hand_values_and_cycle():
    graph = make_topology("exponential", 8, 2)
    assert graph.period == 3
    assert graph.shifts(0) == (1, 2)
    assert graph.shifts(1) == (2, 4)
    assert graph.shifts(2) == (4, 1)
    assert graph.out_peers(6, 1) == (0, 2)
    assert graph.in_peers(1, 2) == (5, 0)
    for iteration in range(-3, 12):
        assert graph.shifts(iteration) == graph.shifts(iteration + graph.period)
    single = make_topology("exponential", 16, 1)
    assert [single.shifts(k) for k in range(5)] == [(1,), (2,), (4,), (8,), (1,)]


@pytest.mark.parametrize("kind,n,p", [("ring", 4, 1), ("ring", 6, 3), ("exponential", 8, 1), ("exponential", 8, 3)])
def test_in_and_out_peers_are_consistent_with_shifts(kind, n, p):
    topology = make_topology(kind, n, p)
    for iteration in range(2 * topology.period):
        shifts = topology.shifts(iteration)
        assert len(set(shifts)) == p
        for i in range(n):
            assert topology.out_peers(i, iteration) == tuple((i + s) % n for s in shifts)
            assert i not in topology.in_peers(i, iteration)
            for j in topology.out_peers(i, iteration):
                assert i in topology.in_peers(j, iteration)
            for j in topology.in_peers(i, iteration):
                assert i in topology.out_peers(j, iteration)


@pytest.mark.parametrize("kind,n,p", [("ring", 4, 1), ("ring", 5, 2), ("exponential", 8, 1), ("exponential", 8, 2)])
def test_mixing_matrices_are_doubly_stochastic_with_paper_weights(kind, n, p):
    topology = make_topology(kind, n, p)
    for iteration in range(2 * topology.period):
        matrix = topology.mixing_matrix(iteration)
        chex.assert_shape(matrix, (n, n))
        np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-12)
        np.testing.assert_allclose(matrix.sum(axis=0), 1.0, atol=1e-12)
        for i in range(n):
            support = {i, *topology.in_peers(i, iteration)}
            for j in range(n):
                expected = 1.0 / (1 + p) if j in support else 0.0
                assert matrix[i, j] == pytest.approx(expected, abs=1e-15)


def test_single_learner():
    single = make_topology("ring", 1, 0)
    assert single.shifts(3) == ()
    assert single.in_peers(0, 0) == () and single.out_peers(0, 0) == ()
    np.testing.assert_array_equal(single.mixing_matrix(0), [[1.0]])
    for delay in (0, 1):
        bound = ConsensusBound(single, delay)
        assert bound.add(5.0) == 0.0
        assert bound.add(0.5) == 0.0
        assert bound.one_step_beta() == 0.0


@pytest.mark.parametrize(
    "kind,n,p,message",
    [
        ("star", 4, 1, "Unknown topology kind"),
        ("ring", 0, 0, "num_learners"),
        ("ring", 4, 0, r"\[1, 3\]"),
        ("ring", 4, 4, r"\[1, 3\]"),
        ("ring", 1, 1, "single learner"),
        ("exponential", 6, 1, "power of two"),
        ("exponential", 1, 0, "power of two"),
        ("exponential", 8, 4, "log2"),
    ],
)
def test_bad_topologies_raise(kind, n, p, message):
    with pytest.raises(ValueError, match=message):
        make_topology(kind, n, p)
    with pytest.raises(ValueError, match=message):
        Topology(kind=kind, num_learners=n, num_peers=p)


def test_peer_queries_reject_unknown_learner():
    with pytest.raises(ValueError, match="learner"):
        make_topology("ring", 4, 1).in_peers(4, 0)


# ---------------------------------------------------------------------------------------------------------------------
# Repeated gossip converges to the average.


@pytest.mark.parametrize("kind,n", [("ring", 4), ("exponential", 8)])
def test_repeated_mixing_converges_to_preserved_average(kind, n):
    topology = make_topology(kind, n, 1)
    values = np.random.default_rng(0).normal(size=(n, 7))  # [n, d]
    average = values.mean(axis=0)
    for iteration in range(200):
        values = topology.mixing_matrix(iteration) @ values
        np.testing.assert_allclose(values.mean(axis=0), average, atol=1e-12)
    np.testing.assert_allclose(values, np.broadcast_to(average, values.shape), atol=1e-6)


@pytest.mark.parametrize("kind,n", [("ring", 4), ("exponential", 8)])
def test_mix_on_pytrees_follows_the_mixing_matrix(kind, n):
    topology = make_topology(kind, n, 1)
    rng = np.random.default_rng(1)
    learners = [
        {"w": rng.normal(size=(3, 2)).astype(np.float32), "b": rng.normal(size=(2,)).astype(np.float32)}
        for _ in range(n)
    ]
    average = jax.tree.map(lambda *leaves: np.mean(leaves, axis=0), *learners)
    reference = np.stack([learner["w"] for learner in learners]).astype(np.float64)  # [n, 3, 2]
    mix_jit = jax.jit(mix)
    for iteration in range(60):
        learners = [mix_jit(learners[i], [learners[j] for j in topology.in_peers(i, iteration)]) for i in range(n)]
        reference = np.einsum("ij,j...->i...", topology.mixing_matrix(iteration), reference)
        np.testing.assert_allclose(np.stack([learner["w"] for learner in learners]), reference, atol=1e-5)
    for learner in learners:
        chex.assert_trees_all_close(learner, average, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# mix, consensus_distance, pairwise_cosine.


class MixTest(parameterized.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_hand_computed(self):
        own = {"w": jnp.array([1.0, 2.0]), "b": jnp.array(3.0)}
        first = {"w": jnp.array([4.0, -2.0]), "b": jnp.array(0.0)}
        second = {"w": jnp.array([1.0, 9.0]), "b": jnp.array(-6.0)}
        mixed = self.variant(mix)(own, [first, second])
        chex.assert_trees_all_close(mixed, {"w": jnp.array([2.0, 3.0]), "b": jnp.array(-1.0)}, atol=1e-7)
        chex.assert_trees_all_equal_dtypes(mixed, own)
        single = self.variant(mix)(own, [first])
        chex.assert_trees_all_close(single, {"w": jnp.array([2.5, 0.0]), "b": jnp.array(1.5)}, atol=1e-7)

    @chex.variants(with_jit=True, without_jit=True)
    def test_float32_sum_in_fixed_order(self):
        rng = np.random.default_rng(2)
        own, *messages = [rng.normal(size=(64,)).astype(np.float32) * 10.0**e for e in (0, 6, -3, 2)]
        expected = ((own + messages[0]) + messages[1]) + messages[2]  # float32, left to right
        expected = expected / np.float32(4.0)
        mixed = self.variant(mix)(own, messages)
        np.testing.assert_array_equal(np.asarray(mixed), expected)

    def test_no_messages_and_dtype(self):
        own = {"w": jnp.array([1.5, -2.0], jnp.bfloat16)}
        chex.assert_trees_all_equal(mix(own, []), own)
        mixed = mix(own, [{"w": jnp.array([0.5, 4.0], jnp.float32)}])
        chex.assert_trees_all_equal(mixed, {"w": jnp.array([1.0, 1.0], jnp.bfloat16)})

    def test_mismatched_structure_raises(self):
        with pytest.raises(ValueError):
            mix({"w": jnp.zeros(2)}, [{"v": jnp.zeros(2)}])


def _random_stacked(rng, n):
    return {
        "conv": rng.normal(size=(n, 3, 2)).astype(np.float32),
        "dense": {
            "kernel": rng.normal(size=(n, 5)).astype(np.float32),
            "bias": rng.normal(size=(n,)).astype(np.float32),
        },
    }


def _flatten_numpy(stacked, n):
    return np.concatenate([np.asarray(leaf, np.float64).reshape(n, -1) for leaf in jax.tree.leaves(stacked)], axis=1)


class ConsensusMetricsTest(parameterized.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_consensus_distance_matches_numpy(self):
        n = 4
        stacked = _random_stacked(np.random.default_rng(3), n)
        matrix = _flatten_numpy(stacked, n)  # [n, d]
        expected = np.linalg.norm(matrix - matrix.mean(axis=0, keepdims=True))
        distance = self.variant(consensus_distance)(stacked)
        chex.assert_shape(distance, ())
        np.testing.assert_allclose(distance, expected, rtol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_consensus_distance_is_zero_at_consensus(self):
        row = np.arange(6.0, dtype=np.float32)
        stacked = {"w": np.stack([row] * 3)}
        np.testing.assert_allclose(self.variant(consensus_distance)(stacked), 0.0, atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_pairwise_cosine_matches_numpy(self):
        n = 5
        stacked = _random_stacked(np.random.default_rng(4), n)
        matrix = _flatten_numpy(stacked, n)  # [n, d]
        unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
        cosine = self.variant(pairwise_cosine)(stacked)
        chex.assert_shape(cosine, (n, n))
        np.testing.assert_allclose(cosine, unit @ unit.T, atol=1e-6)
        np.testing.assert_allclose(np.diag(cosine), 1.0, atol=1e-6)

    def test_pairwise_cosine_hand_values_and_zero_vector(self):
        stacked = {"g": np.array([[1.0, 0.0], [1.0, 1.0], [-2.0, 0.0], [0.0, 0.0]], np.float32)}
        cosine = np.asarray(pairwise_cosine(stacked))
        s = np.sqrt(0.5)
        expected = np.array([[1.0, s, -1.0, 0.0], [s, 1.0, -s, 0.0], [-1.0, -s, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
        np.testing.assert_allclose(cosine, expected, atol=1e-6)

    def test_leaves_must_share_the_learner_axis(self):
        with pytest.raises(AssertionError):
            consensus_distance({"a": np.zeros((3, 2)), "b": np.zeros((4, 2))})
        with pytest.raises(ValueError, match="leading learner axis"):
            consensus_distance({"a": np.float32(1.0)})


# ---------------------------------------------------------------------------------------------------------------------
# Proposition 1 bound.


def _distance(values):
    return float(np.linalg.norm(values - values.mean(axis=0, keepdims=True)))


def _simulate(topology, delay, num_iterations, dim, seed):
    """Exact float64 lock-step gossip from equal parameters. Returns (true distances, bounds, update norms)."""
    n = topology.num_learners
    rng = np.random.default_rng(seed)
    params = np.broadcast_to(rng.normal(size=dim), (n, dim)).copy()  # X^0, all learners equal
    sent = params.copy()  # Y^(-1): messages in transit at k = 0 are the initial parameters
    bound = ConsensusBound(topology, delay)
    distances, bounds, norms = [], [], []
    for k in range(num_iterations):
        scale = np.exp(rng.uniform(-3.0, 2.0))  # update sizes over five orders of magnitude
        updates = scale * rng.normal(size=(n, dim))  # U^k
        fresh = params + updates  # Y^k
        messages = fresh if delay == 0 else sent
        params = np.stack(
            [
                (fresh[i] + sum(messages[j] for j in topology.in_peers(i, k - delay)))
                / (1 + len(topology.in_peers(i, k - delay)))
                for i in range(n)
            ]
        )
        sent = fresh
        norms.append(np.linalg.norm(updates))
        bounds.append(bound.add(norms[-1]))
        distances.append(_distance(params))
    return np.array(distances), np.array(bounds), np.array(norms)


@pytest.mark.parametrize("delay", [0, 1])
@pytest.mark.parametrize("kind,n,p", [("ring", 4, 1), ("ring", 4, 2), ("exponential", 8, 1), ("exponential", 8, 2)])
def test_bound_holds_on_exact_simulation(kind, n, p, delay):
    distances, bounds, norms = _simulate(make_topology(kind, n, p), delay, num_iterations=300, dim=50, seed=5)
    assert np.all(np.isfinite(bounds))
    assert np.all(distances <= bounds * (1.0 + 1e-9) + 1e-12), np.max(distances / bounds)
    # Not vacuous: far below the running sum of update norms once past the transient, and within a modest
    # factor of the truth for random updates.
    transient = 50
    assert np.all(bounds[transient:] < 0.5 * np.cumsum(norms)[transient:])
    assert np.median(bounds[transient:] / distances[transient:]) < 10.0


def test_bound_holds_when_truncated_by_max_terms():
    topology = make_topology("ring", 4, 1)
    rng = np.random.default_rng(6)
    for delay in (0, 1):
        truncated = ConsensusBound(topology, delay, max_terms=3)
        full = ConsensusBound(topology, delay)
        assert truncated.num_terms == 3
        params = np.zeros((4, 10))
        sent = params.copy()
        for _ in range(400):
            updates = rng.normal(size=(4, 10))
            fresh = params + updates
            messages = fresh if delay == 0 else sent
            params = (fresh + messages[[(i - 1) % 4 for i in range(4)]]) / 2.0
            sent = fresh
            norm = np.linalg.norm(updates)
            truncated_bound, full_bound = truncated.add(norm), full.add(norm)
            assert _distance(params) <= full_bound * (1 + 1e-9) <= truncated_bound * (1 + 1e-9) + 1e-12
        # The tail decays geometrically, so with bounded updates the bound stays bounded instead of growing.
        for _ in range(2000):
            steady = truncated.add(1.0)
        assert steady < 1.1 * truncated.add(1.0) and steady < 100.0


def _projected_product_norm(topology, delay, start, length):
    """c(start, length) = ||(I - J) P~^(start+length-1) ... P~^(start) (I - J)||_2 = ||Q P~ ... P~ Q^T||_2."""
    size = topology.num_learners * (1 + delay)
    projector = np.eye(size) - np.full((size, size), 1.0 / size)
    product = np.eye(size)
    for k in range(start, start + length):
        product = augmented_mixing_matrix(topology, delay, k) @ product
    return np.linalg.norm(projector @ product @ projector, 2)


@pytest.mark.parametrize("delay", [0, 1])
def test_coefficients_and_add_match_direct_product_norms(delay):
    topology = make_topology("exponential", 8, 1)
    bound = ConsensusBound(topology, delay)
    for phase in range(topology.period):
        coefficients = bound.coefficients(phase)
        np.testing.assert_array_equal(coefficients, bound.coefficients(phase + topology.period))
        for length in range(1, min(6, bound.num_terms) + 1):
            expected = _projected_product_norm(topology, delay, phase, length)
            assert coefficients[length - 1] == pytest.approx(expected, rel=1e-9, abs=1e-13)
    norms = np.random.default_rng(7).uniform(0.0, 2.0, size=12)
    for k, norm in enumerate(norms):
        got = bound.add(norm)
        expected = sum(_projected_product_norm(topology, delay, s, k + 1 - s) * norms[s] for s in range(k + 1))
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_truncation_point_and_one_step_norms():
    for kind, n, p in [("ring", 4, 1), ("exponential", 8, 2)]:
        topology = make_topology(kind, n, p)
        for delay in (0, 1):
            bound = ConsensusBound(topology, delay)
            table = np.stack([bound.coefficients(phase) for phase in range(topology.period)])  # [period, M]
            assert np.all(table[:, -1] <= 1e-9 * table[:, 0])
            assert np.any(table[:, -2] > 1e-9 * table[:, 0])
    # Delay 0, ring of 4: P = (I + S) / 2 is normal with eigenvalues (1 + e^{2 pi i k / 4}) / 2, so the largest
    # modulus off the consensus direction is |cos(pi / 4)|.
    assert ConsensusBound(make_topology("ring", 4, 1), 0).one_step_beta() == pytest.approx(np.cos(np.pi / 4), abs=1e-9)
    # Delay 1: the one-step norm exceeds 1 (so beta^m would not be a bound), but products contract.
    delayed = ConsensusBound(make_topology("ring", 4, 1), 1)
    assert delayed.one_step_beta() > 1.1
    assert delayed.coefficients(0)[20] < 1.0


def test_bound_is_attained_by_the_worst_first_update():
    # Delay 0: a single update along the top singular direction of (I - J) P^(0) (I - J) meets the bound.
    topology = make_topology("ring", 6, 1)
    projector = np.eye(6) - np.full((6, 6), 1.0 / 6)
    _, _, right = np.linalg.svd(projector @ topology.mixing_matrix(0) @ projector)
    update = right[0][:, None]  # [n, 1]
    bound = ConsensusBound(topology, 0).add(np.linalg.norm(update))
    assert _distance(topology.mixing_matrix(0) @ update) == pytest.approx(bound, rel=1e-9)


def test_delay_one_recurrence_matches_augmented_matrices():
    topology = make_topology("exponential", 8, 2)
    rng = np.random.default_rng(8)
    params = np.broadcast_to(rng.normal(size=3), (8, 3)).copy()
    state = np.concatenate([params, params])  # Z^0 = [X^0; M^0], M^0 = X^0
    sent = params.copy()
    for k in range(7):
        updates = rng.normal(size=(8, 3))
        fresh = params + updates
        params = np.stack([(fresh[i] + sent[list(topology.in_peers(i, k - 1))].sum(0)) / 3.0 for i in range(8)])
        sent = fresh
        augmented = augmented_mixing_matrix(topology, 1, k)
        np.testing.assert_allclose(augmented.sum(axis=1), 1.0, atol=1e-12)
        state = augmented @ (state + np.concatenate([updates, np.zeros_like(updates)]))
        np.testing.assert_allclose(state, np.concatenate([params, sent]), atol=1e-12)


def test_bound_rejects_bad_arguments():
    ring = make_topology("ring", 4, 1)
    with pytest.raises(ValueError, match="delay"):
        ConsensusBound(ring, 2)
    with pytest.raises(ValueError, match="update_norm"):
        ConsensusBound(ring, 0).add(-1.0)
    with pytest.raises(ValueError, match="update_norm"):
        ConsensusBound(ring, 0).add(float("nan"))
