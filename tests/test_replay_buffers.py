"""Tests of the replay buffers (seed 003, section IV-D: lazy writing, two locks, Algorithm 3), with real threads."""

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
        except BaseException as error:  # noqa: BLE001 - re-raised in the test thread
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
    deadline = time.monotonic() + (1.5 if not single_lock else 0.5)
    while time.monotonic() < deadline and not group.stopping.is_set():
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
