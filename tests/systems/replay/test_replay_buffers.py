"""Tests of the replay buffers (seed 003, section IV-D: lazy writing, two locks, Algorithm 3), with real threads."""

import json
import os
import random
import threading
import time

import numpy as np
import pytest

from systems.common.concurrency import ThreadGroup
from systems.replay import PrioritizedBuffer, ReplayBuffer, UniformBuffer

EXAMPLE = {
    "obs": np.zeros((4, 3), np.uint8),
    "action": np.zeros((), np.int32),
    "reward": np.zeros((), np.float32),
}
BOTH = [UniformBuffer, PrioritizedBuffer]


def _transitions(ids):
    """Transitions whose every field encodes its id, so a sampled row can be checked against its slot."""
    ids = np.asarray(ids)
    return {
        "obs": np.broadcast_to((ids % 256).astype(np.uint8)[:, None, None], (ids.size, 4, 3)).copy(),
        "action": ids.astype(np.int32),
        "reward": (ids * 0.5).astype(np.float32),
    }


def _assert_rows_consistent(batch):
    ids = batch["action"]
    np.testing.assert_array_equal(batch["obs"], _transitions(ids)["obs"])
    np.testing.assert_array_equal(batch["reward"], _transitions(ids)["reward"])


def _snapshot(buffer):
    return (
        len(buffer),
        buffer.max_priority,
        buffer.tree.leaf_values(),
        {name: storage.copy() for name, storage in buffer._storage.items()},
    )


def _assert_unchanged(buffer, snapshot):
    size, max_priority, leaves, storage = snapshot
    assert len(buffer) == size and buffer.max_priority == max_priority
    np.testing.assert_array_equal(buffer.tree.leaf_values(), leaves)
    for name, saved in storage.items():
        np.testing.assert_array_equal(buffer._storage[name], saved)


@pytest.mark.parametrize("single_lock", [False, True])
@pytest.mark.parametrize("cls", BOTH)
def test_insert_sample_round_trip(cls, single_lock):
    buffer = cls(8, EXAMPLE, seed=0, single_lock=single_lock)
    assert len(buffer) == 0
    np.testing.assert_array_equal(buffer.insert(_transitions([10, 11, 12])), [0, 1, 2])
    assert len(buffer) == 3
    indices, batch, weights = buffer.sample(64, np.random.default_rng(1))
    assert indices.shape == (64,) and indices.dtype == np.int64
    assert set(indices.tolist()) == {0, 1, 2}  # 64 draws over 3 equally likely slots
    assert {name: (v.shape, v.dtype) for name, v in batch.items()} == {
        "obs": ((64, 4, 3), np.uint8),
        "action": ((64,), np.int32),
        "reward": ((64,), np.float32),
    }
    np.testing.assert_array_equal(batch["action"], indices + 10)
    _assert_rows_consistent(batch)
    assert weights.dtype == np.float32
    np.testing.assert_array_equal(weights, np.ones(64))  # equal priorities: every weight is the batch max


@pytest.mark.parametrize("cls", BOTH)
def test_wrap_around_overwrites_oldest(cls):
    buffer = cls(5, EXAMPLE, seed=0)
    np.testing.assert_array_equal(buffer.insert(_transitions([0, 1, 2])), [0, 1, 2])
    np.testing.assert_array_equal(buffer.insert(_transitions([3, 4, 5, 6])), [3, 4, 0, 1])  # wraps mid-batch
    assert len(buffer) == 5
    np.testing.assert_array_equal(buffer._storage["action"], [5, 6, 2, 3, 4])
    _, batch, _ = buffer.sample(200, np.random.default_rng(0))
    assert set(batch["action"].tolist()) == {2, 3, 4, 5, 6}
    _assert_rows_consistent(batch)
    np.testing.assert_array_equal(buffer.insert(_transitions([7, 8, 9, 10, 11])), [2, 3, 4, 0, 1])  # B = capacity
    np.testing.assert_array_equal(buffer._storage["action"], [10, 11, 7, 8, 9])


def test_new_items_get_running_max_priority():
    buffer = PrioritizedBuffer(8, EXAMPLE, alpha=0.6, eps=1e-6, seed=0)
    buffer.insert(_transitions([0, 1]))
    np.testing.assert_array_equal(buffer.priority(np.array([0, 1])), [1.0, 1.0])  # initial max is 1
    assert buffer.update_priorities(np.array([0, 1]), np.array([3.0, 0.5])) == 2
    high = (3.0 + 1e-6) ** 0.6
    np.testing.assert_allclose(buffer.priority(np.array([0, 1])), [high, (0.5 + 1e-6) ** 0.6], rtol=1e-12)
    assert buffer.max_priority == pytest.approx(high, rel=1e-12)
    buffer.insert(_transitions([2]))
    assert buffer.priority(np.array([2]))[0] == pytest.approx(high, rel=1e-12)
    buffer.update_priorities(np.array([0, 2]), np.array([0.1, 0.1]))  # the max is running: it does not drop
    buffer.insert(_transitions([3]))
    assert buffer.priority(np.array([3]))[0] == pytest.approx(high, rel=1e-12)
    np.testing.assert_allclose(buffer.tree.total(), buffer.priority(np.arange(4)).sum(), rtol=1e-12)


def test_importance_weights_match_hand_computation():
    alpha, beta, eps = 0.5, 0.7, 1e-6
    buffer = PrioritizedBuffer(6, EXAMPLE, alpha=alpha, beta=beta, eps=eps, seed=0)
    buffer.insert(_transitions(np.arange(4)))
    raw = np.array([1.0, 2.0, 3.0, 4.0])
    buffer.update_priorities(np.arange(4), raw)
    stored = (raw + eps) ** alpha
    probabilities = stored / stored.sum()
    for sample_beta in [None, 0.3, 1.0]:
        indices, batch, weights = buffer.sample(32, np.random.default_rng(5), beta=sample_beta)
        b = beta if sample_beta is None else sample_beta
        expected = (4 * probabilities[indices]) ** -b  # N = len(buffer) = 4
        expected /= expected.max()
        np.testing.assert_allclose(weights, expected, rtol=1e-6)
        assert weights.max() == 1.0
        np.testing.assert_array_equal(batch["action"], indices)
    _, _, weights = buffer.sample(32, np.random.default_rng(5), beta=0.0)
    np.testing.assert_array_equal(weights, np.ones(32))


def test_sampling_follows_updated_priorities():
    buffer = PrioritizedBuffer(4, EXAMPLE, alpha=1.0, eps=1e-12, seed=0)
    buffer.insert(_transitions(np.arange(4)))
    buffer.update_priorities(np.arange(4), np.array([0.0, 3.0, 0.0, 1.0]))
    indices, _, _ = buffer.sample(4000, np.random.default_rng(0))
    counts = np.bincount(indices, minlength=4)
    assert counts[0] == 0 and counts[2] == 0  # p = 1e-12 each: P about 2.5e-13 per draw
    assert abs(counts[1] / 4000 - 0.75) < 0.03


def test_uniform_buffer():
    buffer = UniformBuffer(4, EXAMPLE, seed=0)
    buffer.insert(_transitions(np.arange(4)))
    assert buffer.update_priorities(np.arange(4), np.array([100.0, 0.0, 0.0, 0.0])) == 0  # checked no-op
    np.testing.assert_array_equal(buffer.priority(np.arange(4)), np.ones(4))
    assert buffer.max_priority == 1.0
    indices, _, weights = buffer.sample(40_000, np.random.default_rng(0), beta=1.0)
    np.testing.assert_array_equal(weights, np.ones(40_000))
    counts = np.bincount(indices, minlength=4)
    assert np.all(np.abs(counts - 10_000) < 400)  # 4 standard deviations of a binomial(40000, 1/4)
    with pytest.raises(ValueError):
        buffer.update_priorities(np.arange(2), np.array([np.nan, 1.0]))
    with pytest.raises(IndexError):
        buffer.update_priorities(np.array([4]), np.array([1.0]))


@pytest.mark.parametrize("cls", BOTH)
def test_seed_makes_sampling_reproducible(cls):
    draws = []
    for _ in range(2):
        buffer = cls(16, EXAMPLE, seed=7)
        buffer.insert(_transitions(np.arange(16)))
        draws.append(buffer.sample(32).indices)  # no rng: the buffer's own, seeded generator
    np.testing.assert_array_equal(draws[0], draws[1])


@pytest.mark.parametrize("cls", BOTH)
def test_bad_input_raises_and_writes_nothing(cls):
    buffer = cls(6, EXAMPLE, seed=0)
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(4, np.random.default_rng(0))
    with pytest.raises(IndexError):
        buffer.update_priorities(np.array([0]), np.array([1.0]))
    buffer.insert(_transitions([0, 1, 2]))
    if cls is PrioritizedBuffer:
        buffer.update_priorities(np.array([1]), np.array([2.0]))
    snapshot = _snapshot(buffer)
    good = _transitions([7, 8])
    bad_batches = [
        {k: v for k, v in good.items() if k != "reward"},  # missing field
        {**good, "extra": np.zeros(2)},  # extra field
        {**good, "obs": np.zeros((2, 3, 4), np.uint8)},  # wrong shape
        {**good, "obs": np.zeros((2, 4, 3), np.float32)},  # wrong dtype (no silent cast)
        {**good, "reward": good["reward"].astype(np.float64)},
        {**good, "action": good["action"][:1]},  # inconsistent B
        _transitions(np.arange(0)),  # B = 0
        _transitions(np.arange(7)),  # B > capacity
        [good],  # not a dict
    ]
    for batch in bad_batches:
        with pytest.raises(ValueError):
            buffer.insert(batch)
        _assert_unchanged(buffer, snapshot)
    for indices, priorities, error in [
        (np.array([0, 1]), np.array([np.nan, 1.0]), ValueError),
        (np.array([0, 1]), np.array([1.0, -0.5]), ValueError),
        (np.array([0, 1]), np.array([1.0, np.inf]), ValueError),
        (np.array([0, 1]), np.array([1.0]), ValueError),
        (np.array([0, 3]), np.array([1.0, 1.0]), IndexError),  # slot 3 never written (len 3)
        (np.array([0, 6]), np.array([1.0, 1.0]), IndexError),
        (np.array([-1, 0]), np.array([1.0, 1.0]), IndexError),
        (np.array([0.0, 1.0]), np.array([1.0, 1.0]), IndexError),
    ]:
        with pytest.raises(error):
            buffer.update_priorities(indices, priorities)
        _assert_unchanged(buffer, snapshot)
    with pytest.raises(IndexError):
        buffer.priority(np.array([3]))
    with pytest.raises(ValueError, match="batch_size"):
        buffer.sample(0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="beta"):
        buffer.sample(2, np.random.default_rng(0), beta=-1.0)
    np.testing.assert_array_equal(buffer.insert(good), [3, 4])  # the cursor did not move either


def test_bad_construction():
    with pytest.raises(ValueError):
        PrioritizedBuffer(0, EXAMPLE)
    with pytest.raises(ValueError):
        PrioritizedBuffer(4, {})
    with pytest.raises(ValueError):
        PrioritizedBuffer(4, EXAMPLE, alpha=-1.0)
    with pytest.raises(ValueError):
        PrioritizedBuffer(4, EXAMPLE, eps=0.0)
    with pytest.raises(ValueError):
        PrioritizedBuffer(4, EXAMPLE, k=1)
    with pytest.raises(TypeError):
        ReplayBuffer(4, EXAMPLE, alpha=0.6, beta=0.4, k=16, eps=1e-6, seed=0, single_lock=False)


class _PausingBuffer(PrioritizedBuffer):
    """Blocks inside the data copy (lazy writing step ii) until released, so a test can look at a slot mid-write."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pause = threading.Event()
        self.release = threading.Event()

    def _write(self, indices, batch):
        if not self.release.is_set():
            self.pause.set()
            assert self.release.wait(10)
        super()._write(indices, batch)


def _in_thread(target):
    errors = []

    def body():
        try:
            target()
        except BaseException as error:  # re-raised in the test thread
            errors.append(error)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, errors


def test_slot_mid_write_has_priority_zero_and_is_never_sampled():
    buffer = _PausingBuffer(4, EXAMPLE, seed=0)
    buffer.release.set()
    buffer.insert(_transitions([0, 1, 2]))
    buffer.update_priorities(np.array([0]), np.array([5.0]))
    buffer.release.clear()
    thread, errors = _in_thread(lambda: buffer.insert(_transitions([30, 31])))  # slots 3 and 0
    assert buffer.pause.wait(10)
    np.testing.assert_array_equal(buffer.priority(np.array([3, 0])), [0.0, 0.0])
    indices, _, _ = buffer.sample(500, np.random.default_rng(0))
    assert set(indices.tolist()) == {1, 2}
    assert buffer.update_priorities(np.array([0, 1]), np.array([9.0, 1.0])) == 1  # slot 0 is mid-write: skipped
    np.testing.assert_array_equal(buffer.priority(np.array([0])), [0.0])
    buffer.release.set()
    thread.join(10)
    assert not thread.is_alive() and not errors
    np.testing.assert_allclose(buffer.priority(np.array([3, 0])), [buffer.max_priority] * 2)
    _, batch, _ = buffer.sample(500, np.random.default_rng(0))
    assert set(batch["action"].tolist()) == {1, 2, 30, 31}
    _assert_rows_consistent(batch)


def test_sampler_waits_while_every_slot_is_mid_write():
    buffer = _PausingBuffer(2, EXAMPLE, seed=0)
    inserter, insert_errors = _in_thread(lambda: buffer.insert(_transitions([5, 6])))
    assert buffer.pause.wait(10)
    assert len(buffer) == 2
    samples = []
    sampler, sample_errors = _in_thread(lambda: samples.append(buffer.sample(4, np.random.default_rng(0))))
    time.sleep(0.2)
    assert sampler.is_alive() and not samples  # nothing is complete yet: it waits rather than read a partial slot
    buffer.release.set()
    inserter.join(10)
    sampler.join(10)
    assert not insert_errors and not sample_errors
    assert set(samples[0].batch["action"].tolist()) <= {5, 6}
    _assert_rows_consistent(samples[0].batch)


def test_inserter_waits_for_a_slot_still_being_written():
    """More inserts in flight than the capacity: the second writer of a slot waits for the first."""
    buffer = _PausingBuffer(2, EXAMPLE, seed=0)
    first, first_errors = _in_thread(lambda: buffer.insert(_transitions([0, 1])))
    assert buffer.pause.wait(10)
    # The second insert reserves the same two slots; it must not start writing them while the first one does.
    second, second_errors = _in_thread(lambda: buffer.insert(_transitions([2, 3])))
    time.sleep(0.2)
    assert second.is_alive()
    np.testing.assert_array_equal(buffer._storage["action"], [0, 0])  # neither has written yet
    buffer.release.set()
    first.join(10)
    second.join(10)
    assert not first_errors and not second_errors
    np.testing.assert_array_equal(buffer._storage["action"], [2, 3])
    assert np.all(buffer.priority(np.array([0, 1])) > 0)


class _OverwritingBuffer(PrioritizedBuffer):
    """Overwrites every slot during the sampler's lock-free copies, as a concurrent inserter could."""

    def __init__(self, *args, overwrite_calls, **kwargs):
        super().__init__(*args, **kwargs)
        self.overwrite_calls = overwrite_calls
        self.gathers = 0
        self.next_id = 100

    def _gather(self, indices):
        copied = super()._gather(indices)
        self.gathers += 1
        if self.gathers <= self.overwrite_calls:
            ids = np.arange(self.next_id, self.next_id + self.capacity)
            self.next_id += self.capacity
            self.insert(_transitions(ids))  # the copy above is now stale
        return copied


@pytest.mark.parametrize("overwrite_calls, gathers", [(1, 2), (3, 4)])
def test_sampler_redraws_slots_overwritten_during_its_copy(overwrite_calls, gathers):
    buffer = _OverwritingBuffer(4, EXAMPLE, seed=0, overwrite_calls=overwrite_calls)
    buffer.insert(_transitions(np.arange(4)))
    indices, batch, _ = buffer.sample(8, np.random.default_rng(0))
    # Every copy but the last was invalidated; the last (after 3 optimistic tries: under the tree lock) is current.
    assert buffer.gathers == gathers
    np.testing.assert_array_equal(batch["action"], buffer._storage["action"][indices])
    assert np.all(batch["action"] >= 100)
    _assert_rows_consistent(batch)


@pytest.mark.parametrize("single_lock", [False, True])
def test_concurrent_inserters_and_samplers_never_see_a_torn_slot(single_lock):
    """3 inserter threads and 2 sampler/updater threads (seed 003, section IV-D). Each transition's `obs` is filled
    with its id and `check` holds the id, written after `obs`: a sampled slot whose two disagree was read mid-write."""
    capacity = 48  # small, so slots are overwritten constantly and inserts in flight can exceed the capacity
    example = {"obs": np.zeros((64, 64), np.int64), "check": np.zeros((), np.int64)}
    buffer = PrioritizedBuffer(capacity, example, k=4, seed=0, single_lock=single_lock)
    buffer.insert({"obs": np.zeros((1, 64, 64), np.int64), "check": np.zeros(1, np.int64)})
    group = ThreadGroup()
    counts = {"inserted": 0, "sampled": 0}
    counts_lock = threading.Lock()

    def inserter(worker):
        def body():
            rng = random.Random(worker)
            next_id = 1 + worker * 10**9
            while not group.stopping.is_set():
                n = rng.randint(1, 20)
                ids = np.arange(next_id, next_id + n)
                next_id += n
                buffer.insert({"obs": np.broadcast_to(ids[:, None, None], (n, 64, 64)).copy(), "check": ids})
                with counts_lock:
                    counts["inserted"] += n

        return body

    def sampler(worker):
        def body():
            rng = np.random.default_rng(worker)
            while not group.stopping.is_set():
                indices, batch, weights = buffer.sample(16, rng)
                torn = np.any(batch["obs"] != batch["check"][:, None, None], axis=(1, 2))
                assert not torn.any(), f"slots {indices[torn]} were sampled mid-write"
                assert np.all((weights > 0) & (weights <= 1))
                buffer.update_priorities(indices, rng.exponential(size=16))
                assert np.all(buffer.priority(indices) >= 0)
                with counts_lock:
                    counts["sampled"] += 16

        return body

    for worker in range(3):
        group.spawn(f"inserter-{worker}", inserter(worker))
    for worker in range(2):
        group.spawn(f"sampler-{worker}", sampler(worker))
    # Run until the ring has wrapped 10 times and samplers have sampled (work, not wall time, so a loaded machine
    # cannot fail it); 60 s is only a guard against a stalled thread.
    def enough():
        with counts_lock:
            return counts["inserted"] > 10 * capacity and counts["sampled"] > 100

    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline and not group.stopping.is_set() and not enough():
        time.sleep(0.05)
    group.stop()
    group.check()
    assert not group.running()
    assert counts["inserted"] > 10 * capacity and counts["sampled"] > 100, counts

    assert len(buffer) == capacity and not buffer._writing.any()
    leaves = buffer.tree.leaf_values()
    assert np.all(leaves > 0)  # every written slot was published at a positive priority
    np.testing.assert_allclose(buffer.tree.total(), leaves.sum(), rtol=1e-12)
    for h in range(1, buffer.tree.height):
        levels = buffer.tree.levels
        sums = levels[h][:, : buffer.tree.k].sum(axis=1)
        np.testing.assert_allclose(levels[h - 1][:, : buffer.tree.k].reshape(-1)[: sums.size], sums, rtol=1e-12)
    np.testing.assert_array_equal(
        buffer._storage["obs"], np.broadcast_to(buffer._storage["check"][:, None, None], (capacity, 64, 64))
    )


@pytest.mark.parametrize("single_lock", [False, True])
def test_direct_kernel_path_matches_the_checked_tree_methods(single_lock):
    """With the numba backend the buffer calls the tree's kernels directly (no re-checks); going through
    `SumTree.set_leaves` / `update_ancestors` instead must give a bit-identical tree."""
    buffers = [PrioritizedBuffer(37, EXAMPLE, k=4, seed=0, single_lock=single_lock) for _ in range(2)]
    if buffers[0].tree.backend != "numba":
        pytest.skip("numba backend not available")
    assert buffers[0]._tree_kernels is not None
    buffers[1]._tree_kernels = None  # the checked public methods
    for buffer in buffers:
        rng = np.random.default_rng(3)
        next_id = 0
        for _ in range(40):
            n = int(rng.integers(1, 12))
            buffer.insert(_transitions(np.arange(next_id, next_id + n)))  # wraps around several times
            next_id += n
            buffer.update_priorities(rng.integers(0, len(buffer), 16), rng.exponential(size=16) * 3)
        buffer.update_priorities(np.array([], np.int64), np.array([]))
    np.testing.assert_array_equal(buffers[0].tree._array, buffers[1].tree._array)
    assert buffers[0].max_priority == buffers[1].max_priority
    np.testing.assert_array_equal(buffers[0].sample(64).indices, buffers[1].sample(64).indices)


# ----------------------------------------------------------------------------------------------- save / load


def _filled(cls, capacity=50, seed=0, **kwargs):
    """A buffer that wrapped around once, with random data and (prioritized) some updated priorities."""
    buffer = cls(capacity, EXAMPLE, seed=seed, **kwargs)
    rng = np.random.default_rng(seed)
    next_id = 0
    for n in rng.integers(1, 20, 6):  # 6 batches of 1-19: usually past the capacity
        buffer.insert(_transitions(np.arange(next_id, next_id + n)))
        next_id += n
    buffer.update_priorities(rng.integers(0, len(buffer), 10), rng.exponential(size=10))
    return buffer


def _state(buffer):
    return {
        "len": len(buffer),
        "cursor": buffer._cursor,
        "max_priority": buffer.max_priority,
        "leaves": buffer.tree.leaf_values(),
        "storage": {name: storage.copy() for name, storage in buffer._storage.items()},
        "rng": buffer._rng.bit_generator.state,
        "hyper": (buffer.alpha, buffer.beta, buffer.eps),
    }


def _assert_same_state(a, b):
    assert (a["len"], a["cursor"], a["max_priority"], a["rng"], a["hyper"]) == (
        b["len"],
        b["cursor"],
        b["max_priority"],
        b["rng"],
        b["hyper"],
    )
    np.testing.assert_array_equal(a["leaves"], b["leaves"])
    assert a["storage"].keys() == b["storage"].keys()
    for name in a["storage"]:
        np.testing.assert_array_equal(a["storage"][name], b["storage"][name])


@pytest.mark.parametrize("single_lock", [False, True])
@pytest.mark.parametrize("cls", BOTH)
def test_save_load_round_trip(cls, single_lock, tmp_path):
    saved = _filled(cls, single_lock=single_lock)
    if cls is PrioritizedBuffer:
        saved.beta = 0.7  # annealed since construction: the checkpoint carries it
    path = tmp_path / "replay.npz"
    assert saved.save(path) == str(path)
    assert os.listdir(tmp_path) == ["replay.npz"]
    with np.load(path) as archive:  # a plain .npz; storage rows in ring order from the cursor
        assert set(archive.files) == {"meta", "leaves", "storage.obs", "storage.action", "storage.reward"}
        np.testing.assert_array_equal(archive["storage.action"], np.roll(saved._storage["action"], -saved._cursor))
        np.testing.assert_array_equal(archive["leaves"], saved.tree.leaf_values())
    loaded = cls(50, EXAMPLE, seed=123, single_lock=not single_lock)  # other seed and lock mode
    loaded.load(path)
    _assert_same_state(_state(saved), _state(loaded))
    np.testing.assert_allclose(loaded.tree.total(), loaded.tree.leaf_values().sum(), rtol=1e-12)
    for _ in range(3):  # the buffer's own generator continues where the saved one was
        a, b = saved.sample(32), loaded.sample(32)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.weights, b.weights)
        for name in a.batch:
            np.testing.assert_array_equal(a.batch[name], b.batch[name])
    a, b = saved.sample(32, np.random.default_rng(9)), loaded.sample(32, np.random.default_rng(9))
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(saved.insert(_transitions([900, 901])), loaded.insert(_transitions([900, 901])))
    np.testing.assert_array_equal(saved.priority(np.arange(50)), loaded.priority(np.arange(50)))
    assert not loaded._writing.any()


def test_save_load_partly_filled_buffer(tmp_path):
    saved = PrioritizedBuffer(40, EXAMPLE, seed=0)
    saved.insert(_transitions(np.arange(7)))
    saved.update_priorities(np.array([2, 5]), np.array([4.0, 0.0]))
    loaded = PrioritizedBuffer(40, EXAMPLE, seed=1)
    loaded.load(saved.save(tmp_path / "replay.npz"))
    _assert_same_state(_state(saved), _state(loaded))
    assert len(loaded) == 7
    np.testing.assert_array_equal(loaded.insert(_transitions([7])), [7])
    with pytest.raises(IndexError):
        loaded.priority(np.array([8]))


def _load_error(buffer, path):
    before = _state(buffer)
    with pytest.raises(ValueError) as error:
        buffer.load(path)
    _assert_same_state(before, _state(buffer))  # nothing modified
    message = str(error.value)
    assert "\n" not in message and str(path) in message
    return message


def test_load_mismatch_raises_and_changes_nothing(tmp_path):
    path = _filled(PrioritizedBuffer).save(tmp_path / "replay.npz")
    assert "capacity is 50 in the file, 51" in _load_error(_filled(PrioritizedBuffer, capacity=51), path)
    assert "kind is 'prioritized' in the file, 'uniform'" in _load_error(_filled(UniformBuffer), path)
    assert "k is 16 in the file, 4" in _load_error(_filled(PrioritizedBuffer, k=4), path)
    for example, expected in [
        ({**EXAMPLE, "extra": np.zeros(2)}, "missing from the file ['extra']"),
        ({k: v for k, v in EXAMPLE.items() if k != "reward"}, "not in this buffer ['reward']"),
        ({**EXAMPLE, "obs": np.zeros((3, 4), np.uint8)}, "field 'obs' is uint8[50, 4, 3] in the file"),
        ({**EXAMPLE, "reward": np.zeros((), np.float64)}, "field 'reward' is float32[50]"),
    ]:
        other = PrioritizedBuffer(50, example, seed=0)
        assert expected in _load_error(other, path)
    target = _filled(PrioritizedBuffer, seed=5)
    assert "no such file" in _load_error(target, tmp_path / "missing.npz")
    (tmp_path / "text.npz").write_text("not an archive")
    assert "not an .npz archive" in _load_error(target, tmp_path / "text.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    assert "no meta or leaves" in _load_error(target, tmp_path / "other.npz")
    data = bytearray((tmp_path / "replay.npz").read_bytes())
    (tmp_path / "truncated.npz").write_bytes(data[: len(data) // 2])
    assert "corrupt" in _load_error(target, tmp_path / "truncated.npz")
    data[len(data) // 3] ^= 0xFF  # inside the stored obs bytes: the CRC catches it
    (tmp_path / "flipped.npz").write_bytes(data)
    assert "corrupt" in _load_error(target, tmp_path / "flipped.npz")


def test_save_is_atomic(tmp_path, monkeypatch):
    buffer = _filled(PrioritizedBuffer)
    path = buffer.save(tmp_path / "replay.npz")
    first = _state(buffer)
    buffer.insert(_transitions([500, 501, 502]))
    real_write_array = np.lib.format.write_array
    calls = []

    def failing_write_array(fp, array, **kwargs):
        calls.append(array.shape)
        raise OSError("disk full")  # the leaves, after the storage entries are in the temporary file

    monkeypatch.setattr(np.lib.format, "write_array", failing_write_array)
    with pytest.raises(OSError, match="disk full"):
        buffer.save(path)
    monkeypatch.setattr(np.lib.format, "write_array", real_write_array)
    assert os.listdir(tmp_path) == ["replay.npz"]  # no temporary file left

    def failing_replace(src, dst):
        raise OSError("replace failed")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="replace failed"):
        buffer.save(path)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["replay.npz"]
    restored = PrioritizedBuffer(50, EXAMPLE, seed=1)
    restored.load(path)  # still the first checkpoint, intact
    _assert_same_state(first, _state(restored))


def test_save_while_a_slot_is_mid_write(tmp_path):
    """A slot reserved but not yet published is saved at priority 0 (what the tree holds), and `load` refuses to
    run while an insert is in flight."""
    buffer = _PausingBuffer(8, EXAMPLE, seed=0)
    buffer.release.set()
    buffer.insert(_transitions(np.arange(8)))
    buffer.release.clear()
    thread, errors = _in_thread(lambda: buffer.insert(_transitions([80, 81])))  # slots 0 and 1
    assert buffer.pause.wait(10)
    path = buffer.save(tmp_path / "replay.npz")
    with pytest.raises(RuntimeError, match="in flight"):
        buffer.load(path)
    buffer.release.set()
    thread.join(10)
    assert not thread.is_alive() and not errors
    loaded = PrioritizedBuffer(8, EXAMPLE, seed=0)
    loaded.load(path)
    assert len(loaded) == 8 and not loaded._writing.any()
    np.testing.assert_array_equal(loaded.priority(np.arange(8)), [0, 0, 1, 1, 1, 1, 1, 1])
    assert loaded.update_priorities(np.array([0, 1, 2]), np.array([5.0, 5.0, 5.0])) == 1  # 0 and 1 stay dead
    np.testing.assert_array_equal(loaded.priority(np.array([0, 1])), [0, 0])
    _, batch, _ = loaded.sample(200, np.random.default_rng(0))
    assert set(batch["action"].tolist()) == set(range(2, 8))
    np.testing.assert_array_equal(loaded.insert(_transitions([90])), [2])  # the cursor was past the reservation


@pytest.mark.parametrize("race_at", ["first_field", "last_field", "after_storage"])
@pytest.mark.parametrize("stream", [False, True])
def test_save_zeroes_slots_overwritten_while_the_storage_is_written(stream, race_at, tmp_path, monkeypatch):
    """Streaming (storage over `save_copy_limit_bytes`): an insert that starts after the snapshot, before the last
    copy of its slots, may leave old, new or torn bytes in the file: those slots are saved unsampleable (priority
    0), everything else as at the snapshot; an insert after the storage is copied loses nothing. A small buffer's
    storage is copied under the lock with the rest of the snapshot: an insert during the write loses nothing."""
    buffer = PrioritizedBuffer(8, EXAMPLE, seed=0)
    if stream:
        buffer.save_copy_limit_bytes = 0
    buffer.insert(_transitions(np.arange(8)))
    buffer.update_priorities(np.arange(8), np.arange(8.0))
    snapshot = _state(buffer)
    inserted = []
    headers = []

    def insert_once():
        if not inserted:
            inserted.append(buffer.insert(_transitions([70, 71])))  # slots 0 and 1, from the lock-free part

    def header_hook(real):
        def write_header(fp, header):
            headers.append(header["shape"])
            # Fields go smallest first: action and reward ([8]), then obs ([8, 4, 3]).
            if (race_at == "first_field" and len(headers) == 1) or (race_at == "last_field" and len(headers) == 3):
                insert_once()
            real(fp, header)

        return write_header

    monkeypatch.setattr(np.lib.format, "write_array_header_1_0", header_hook(np.lib.format.write_array_header_1_0))
    real_write_array = np.lib.format.write_array

    def write_array(fp, array, **kwargs):
        if race_at == "after_storage":
            insert_once()
        real_write_array(fp, array, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", write_array)
    path = buffer.save(tmp_path / "replay.npz")
    monkeypatch.undo()
    assert headers == [(8,), (8,), (8, 4, 3)]
    np.testing.assert_array_equal(inserted[0], [0, 1])
    loaded = PrioritizedBuffer(8, EXAMPLE, seed=0)
    loaded.load(path)
    expected = snapshot["leaves"].copy()
    lost = stream and race_at != "after_storage"
    if lost:
        expected[:2] = 0
    np.testing.assert_array_equal(loaded.tree.leaf_values(), expected)
    assert loaded._cursor == snapshot["cursor"] == 0 and loaded.max_priority == snapshot["max_priority"]
    for name, saved in snapshot["storage"].items():
        np.testing.assert_array_equal(loaded._storage[name][2:], saved[2:])
        if not lost:
            np.testing.assert_array_equal(loaded._storage[name], saved)
    with np.load(path) as archive:
        assert json.loads(str(archive["meta"][()]))["moved_during_save"] == (2 if lost else 0)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("single_lock", [False, True])
def test_save_while_inserters_and_samplers_run(single_lock, stream, tmp_path):
    """Checkpoints taken while 2 inserters and 1 sampler/updater run: every slot with a positive priority in the
    file holds a whole transition (obs filled with the id in `check`), and the tree is consistent. Copied under
    the lock, only the slots mid-write (at most 2 x 20) are lost; streamed, inserters this fast (memory speed,
    no env) can overwrite any number of slots during the save, which are then lost too."""
    capacity = 48
    example = {"obs": np.zeros((64, 64), np.int64), "check": np.zeros((), np.int64)}
    buffer = PrioritizedBuffer(capacity, example, k=4, seed=0, single_lock=single_lock)
    if stream:
        buffer.save_copy_limit_bytes = 0
    buffer.insert({"obs": np.zeros((1, 64, 64), np.int64), "check": np.zeros(1, np.int64)})
    group = ThreadGroup()

    def inserter(worker):
        def body():
            rng = random.Random(worker)
            next_id = 1 + worker * 10**9
            while not group.stopping.is_set():
                n = rng.randint(1, 20)
                ids = np.arange(next_id, next_id + n)
                next_id += n
                buffer.insert({"obs": np.broadcast_to(ids[:, None, None], (n, 64, 64)).copy(), "check": ids})

        return body

    def sampler():
        rng = np.random.default_rng(0)
        while not group.stopping.is_set():
            indices, _, _ = buffer.sample(16, rng)
            buffer.update_priorities(indices, rng.exponential(size=16))

    for worker in range(2):
        group.spawn(f"inserter-{worker}", inserter(worker))
    group.spawn("sampler", sampler)
    paths = []
    try:
        for i in range(5):
            time.sleep(0.05)
            paths.append(buffer.save(tmp_path / f"replay-{i}.npz"))
    finally:
        group.stop()
    group.check()
    for path in paths:
        loaded = PrioritizedBuffer(capacity, example, k=4, seed=0)
        loaded.load(path)
        leaves = loaded.tree.leaf_values()
        live = leaves > 0
        if not stream:
            assert live.sum() >= capacity - 40
        obs, check = loaded._storage["obs"][live], loaded._storage["check"][live]
        np.testing.assert_array_equal(obs, np.broadcast_to(check[:, None, None], obs.shape))
        np.testing.assert_allclose(loaded.tree.total(), leaves.sum(), rtol=1e-12)
        if live.any():
            _, batch, _ = loaded.sample(64, np.random.default_rng(0))
            np.testing.assert_array_equal(batch["obs"], np.broadcast_to(batch["check"][:, None, None], (64, 64, 64)))


def test_priorities_whose_sum_would_overflow_are_refused_and_sampling_keeps_working():
    """Priorities of 1e308 were each finite, so they were accepted; their sum (the root) was inf and every later
    `sample()` failed. Now they are refused like any bad value and nothing is written."""
    buffer = PrioritizedBuffer(4, EXAMPLE, alpha=1.0, seed=0)
    buffer.insert(_transitions(np.arange(4)))
    with pytest.raises(ValueError, match="must stay below"):
        buffer.update_priorities(np.array([0, 1]), np.array([1e308, 1e308]))
    assert np.isfinite(buffer.tree.total())
    indices, _, weights = buffer.sample(8, np.random.default_rng(0))
    assert indices.shape == (8,) and np.all(np.isfinite(weights))
    biggest = buffer.tree.max_leaf - buffer.eps  # the largest priority accepted: the total stays finite at capacity
    assert buffer.update_priorities(np.arange(4), np.full(4, biggest)) == 4
    assert np.isfinite(buffer.tree.total())
