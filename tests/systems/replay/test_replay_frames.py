"""Tests of the frame-stack replay buffer (each frame stored once, stacks rebuilt by index; seed 003 section IV locks).

The reference model below knows only the documented contract: stream s owns a ring of `seg` rows; an insert with
continues=False writes stack + 1 rows (obs's frames, then next_obs's newest), one with continues=True writes 1 row;
a transition is resident while all stack + 1 rows of its window are among the last `seg` rows its stream wrote."""

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from systems.common.concurrency import ThreadGroup
from systems.replay import FrameStackBuffer

EXTRAS = {"action": ((), np.int32), "reward": ((), np.float32), "done": ((), np.float32)}


class Model:
    """Reference: every inserted transition with its data, and which ones must still be resident."""

    def __init__(self, num_streams, seg, stack):
        self.seg, self.stack = seg, stack
        self.written = np.zeros(num_streams, dtype=np.int64)  # rows written per stream
        self.transitions = {}  # id -> (stream, first window ordinal, data); the latest transition at that id
        self.last_next_obs = {}  # stream -> next_obs of its previous insert

    def insert(self, stream, continues, data):
        stack = self.stack
        if continues:
            first = self.written[stream] - stack  # the previous next_obs's rows, then one new row
            self.written[stream] += 1
        else:
            first = self.written[stream]  # stack rows of obs, then one row for next_obs's newest frame
            self.written[stream] += stack + 1
        transition_id = stream * self.seg + (first + stack - 1) % self.seg
        self.transitions[transition_id] = (stream, first, data)
        self.last_next_obs[stream] = data["next_obs"]
        return transition_id

    def resident(self):
        """Ids of the transitions whose window rows are all among the last seg rows of their stream."""
        return {
            transition_id
            for transition_id, (stream, first, _) in self.transitions.items()
            if first >= self.written[stream] - self.seg
        }


def _random_step(rng, model, buffer, streams, episode_end_probability, frame_shape):
    """One insert call for `streams`: random frames, random episode boundaries. Returns the transition data."""
    stack = buffer.stack
    obs, next_obs, continues = [], [], []
    for stream in streams:
        previous = model.last_next_obs.get(stream)
        cont = previous is not None and rng.random() >= episode_end_probability
        current = previous if cont else rng.integers(0, 256, (stack, *frame_shape), dtype=np.uint8)
        new_frame = rng.integers(0, 256, (1, *frame_shape), dtype=np.uint8)
        obs.append(current)
        next_obs.append(np.concatenate([current[1:], new_frame]))
        continues.append(cont)
    n = len(streams)
    extras = {
        "action": rng.integers(-(2**31), 2**31 - 1, n).astype(np.int32),
        "reward": rng.normal(size=n).astype(np.float32),
        "done": (rng.random(n) < 0.1).astype(np.float32),
    }
    return np.asarray(streams), np.stack(obs), np.stack(next_obs), np.asarray(continues), extras


def _insert(buffer, model, streams, obs, next_obs, continues, extras):
    ids = buffer.insert(streams, obs, next_obs=next_obs, continues=continues, **extras)
    assert ids.shape == (len(streams),) and ids.dtype == np.int64
    for i, stream in enumerate(streams):
        data = {"obs": obs[i], "next_obs": next_obs[i], **{name: value[i] for name, value in extras.items()}}
        assert ids[i] == model.insert(int(stream), bool(continues[i]), data)
    return ids


def _assert_batch_matches(model, indices, batch):
    """Row i of every field of `batch` is transition indices[i] as the model stored it (compared field by field in
    one array comparison; a mismatch names its first transition)."""
    ids = indices.tolist()
    stored = [model.transitions[transition_id][2] for transition_id in ids]
    for name in stored[0] if stored else ():
        expected = np.stack([data[name] for data in stored])
        if not np.array_equal(batch[name], expected):
            for row in range(min(len(batch[name]), len(ids))):
                message = f"{name} of transition {ids[row]}"
                np.testing.assert_array_equal(batch[name][row], expected[row], err_msg=message)
            raise AssertionError(f"{name}: shape {np.shape(batch[name])} against {expected.shape}")


def _assert_matches_model(buffer, model, rng):
    """Live rows == resident transitions, each rebuilt exactly; samples come only from them, with their data."""
    resident = model.resident()
    live = set(np.flatnonzero(buffer.tree.leaf_values() > 0).tolist())
    assert live == resident
    assert len(buffer) == len(resident)
    ids = np.array(sorted(resident), dtype=np.int64)
    batch = buffer._gather(ids)
    assert batch["obs"].dtype == np.uint8 and batch["obs"].shape == (ids.size, buffer.stack, *buffer.frame_shape)
    _assert_batch_matches(model, ids, batch)
    indices, batch, weights = buffer.sample(16, rng)
    assert set(indices.tolist()) <= resident
    _assert_batch_matches(model, indices, batch)
    assert weights.dtype == np.float32 and np.all((weights > 0) & (weights <= 1))


def _run_random_program(seed, num_streams, stack, spare_rows, frame_shape, steps, episode_end_probability):
    rng = np.random.default_rng(seed)
    seg = 2 * stack + 1 + spare_rows
    buffer = FrameStackBuffer(
        seg * num_streams + rng.integers(0, num_streams),  # a remainder that must go unused
        num_streams=num_streams,
        frame_shape=frame_shape,
        stack=stack,
        seed=seed,
    )
    assert buffer.segment_rows == seg and buffer.capacity == seg * num_streams
    model = Model(num_streams, seg, stack)
    for _ in range(steps):
        streams = rng.permutation(num_streams)[: rng.integers(1, num_streams + 1)]
        step = _random_step(rng, model, buffer, streams.tolist(), episode_end_probability, frame_shape)
        _insert(buffer, model, *step)
        _assert_matches_model(buffer, model, rng)
        if rng.random() < 0.3:  # priorities must not affect which transitions are resident
            indices, _, _ = buffer.sample(8, rng)
            buffer.update_priorities(indices, rng.exponential(size=8))
    assert np.all(model.written > 5 * seg)  # many wrap-arounds of every stream
    return buffer, model


@pytest.mark.parametrize(
    "num_streams, stack, spare_rows, frame_shape, episode_end_probability",
    [(1, 4, 0, (6, 5), 0.1), (3, 4, 3, (84, 84), 0.05), (4, 2, 1, (3,), 0.4), (2, 1, 0, (2, 2), 0.2)],
)
def test_rebuilt_stacks_equal_inserted_transitions(
    num_streams, stack, spare_rows, frame_shape, episode_end_probability
):
    _run_random_program(0, num_streams, stack, spare_rows, frame_shape, 300, episode_end_probability)


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    num_streams=st.integers(1, 4),
    stack=st.integers(1, 5),
    spare_rows=st.integers(0, 6),
    episode_end_probability=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
)
@pytest.mark.slow
def test_rebuilt_stacks_equal_inserted_transitions_hypothesis(
    seed, num_streams, stack, spare_rows, episode_end_probability
):
    steps = 12 * (2 * stack + 1 + spare_rows) * num_streams
    _run_random_program(seed, num_streams, stack, spare_rows, (3, 2), steps, episode_end_probability)


def _episode(buffer, stream, length, start_value, model=None):
    """Inserts one episode of `length` transitions into `stream`; frame values are start_value, start_value + 1, ..."""
    stack, ids = buffer.stack, []
    frames = (start_value + np.arange(stack + length)).astype(np.uint8)
    for step in range(length):
        obs = np.broadcast_to(frames[step : step + stack, None], (stack, *buffer.frame_shape))[None].copy()
        next_obs = np.broadcast_to(frames[step + 1 : step + 1 + stack, None], (stack, *buffer.frame_shape))[None]
        extras = {"action": np.array([step], np.int32), "reward": np.zeros(1, np.float32)}
        extras["done"] = np.array([step == length - 1], np.float32)
        continues = np.array([step > 0])
        if model is None:
            ids.append(buffer.insert([stream], obs, next_obs=next_obs.copy(), continues=continues, **extras)[0])
        else:
            ids.append(_insert(buffer, model, [stream], obs, next_obs.copy(), continues, extras)[0])
    return np.array(ids)


def test_padding_and_next_obs_rows_are_never_sampled():
    stack, seg = 4, 30
    buffer = FrameStackBuffer(2 * seg, num_streams=2, frame_shape=(2,), stack=stack, seed=0)
    first = _episode(buffer, 0, 5, 0)  # rows 0-2 padding, transitions 3-7, row 8 its last next_obs
    second = _episode(buffer, 0, 3, 100)  # rows 9-11 padding, transitions 12-14, row 15
    third = _episode(buffer, 1, 2, 200)  # stream 1: rows 30-32 padding, transitions 33-34, row 35
    np.testing.assert_array_equal(first, [3, 4, 5, 6, 7])
    np.testing.assert_array_equal(second, [12, 13, 14])
    np.testing.assert_array_equal(third, [33, 34])
    transitions = np.concatenate([first, second, third])
    assert len(buffer) == transitions.size
    leaves = buffer.tree.leaf_values()
    np.testing.assert_array_equal(np.flatnonzero(leaves), transitions)
    padding = np.array([0, 1, 2, 8, 9, 10, 11, 15, 30, 31, 32, 35])
    np.testing.assert_array_equal(buffer.priority(padding), np.zeros(padding.size))
    assert buffer.update_priorities(padding, np.full(padding.size, 5.0)) == 0  # not transitions: skipped
    np.testing.assert_array_equal(buffer.priority(padding), np.zeros(padding.size))
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(200):
        indices, batch, _ = buffer.sample(64, rng)
        seen.update(indices.tolist())
        # the newest obs frame is its own step's frame, so a padding row would show up as a wrong value
        np.testing.assert_array_equal(batch["obs"][:, -1, 0] - batch["obs"][:, 0, 0], np.full(64, 3, np.uint8))
    assert seen == set(transitions.tolist())


def test_overwritten_transitions_lose_priority_before_their_rows_are_reused():
    stack, seg = 2, 7
    buffer = FrameStackBuffer(seg, num_streams=1, frame_shape=(1,), stack=stack, seed=0)
    model = Model(1, seg, stack)
    ids = _episode(buffer, 0, 5, 0, model)  # rows 0 padding, transitions 1-5, row 6 next_obs
    np.testing.assert_array_equal(ids, [1, 2, 3, 4, 5])
    # One more step of the same episode writes row 0 (wraps): transition 1 (window rows 0, 1, 2) is gone.
    obs, next_obs = np.full((1, 2, 1), [[5], [6]], np.uint8), np.full((1, 2, 1), [[6], [7]], np.uint8)
    extras = {"action": np.array([5], np.int32), "reward": np.zeros(1, np.float32), "done": np.zeros(1, np.float32)}
    assert _insert(buffer, model, [0], obs, next_obs, np.array([True]), extras)[0] == 6
    np.testing.assert_array_equal(np.flatnonzero(buffer.tree.leaf_values()), [2, 3, 4, 5, 6])
    assert buffer.update_priorities(np.array([1, 2]), np.array([1.0, 1.0])) == 1  # 1 is stale: skipped
    assert buffer.priority(np.array([1]))[0] == 0
    # A new episode writes rows 1, 2, 3: transitions 2, 3, 4 (windows reaching row 1..3) go, 3 is reserved anew.
    new = _episode(buffer, 0, 1, 50, model)
    np.testing.assert_array_equal(new, [2])
    np.testing.assert_array_equal(np.flatnonzero(buffer.tree.leaf_values()), [2, 5, 6])
    _assert_matches_model(buffer, model, np.random.default_rng(0))


def test_sampling_frequencies_follow_priorities():
    alpha, eps = 0.7, 1e-6
    buffer = FrameStackBuffer(40, num_streams=1, frame_shape=(2,), stack=3, alpha=alpha, eps=eps, seed=0)
    ids = _episode(buffer, 0, 8, 0)
    raw = np.array([0.0, 1.0, 2.0, 4.0, 0.5, 3.0, 10.0, 0.2])
    assert buffer.update_priorities(ids, raw) == 8
    stored = (raw + eps) ** alpha
    np.testing.assert_allclose(buffer.priority(ids), stored, rtol=1e-12)
    draws = 100_000
    indices, _, _ = buffer.sample(draws, np.random.default_rng(1))
    assert set(indices.tolist()) <= set(ids.tolist())
    counts = np.array([(indices == i).sum() for i in ids])
    expected = draws * stored / stored.sum()
    seen = expected > 5  # the eps-only transition (raw 0) has P ~ 1e-4: too few draws to test
    observed = np.append(counts[seen], counts[~seen].sum())
    expected = np.append(expected[seen], expected[~seen].sum())
    statistic, p_value = stats.chisquare(observed, expected)
    assert p_value > 1e-4, (statistic, counts, expected)


def test_importance_weights_and_max_priority_match_prioritized_buffer():
    alpha, beta, eps = 0.5, 0.7, 1e-6
    buffer = FrameStackBuffer(30, num_streams=1, frame_shape=(2,), stack=2, alpha=alpha, beta=beta, eps=eps, seed=0)
    ids = _episode(buffer, 0, 4, 0)
    np.testing.assert_array_equal(buffer.priority(ids), np.ones(4))  # the initial max priority is 1
    raw = np.array([1.0, 2.0, 3.0, 4.0])
    buffer.update_priorities(ids, raw)
    stored = (raw + eps) ** alpha
    probabilities = dict(zip(ids.tolist(), stored / stored.sum(), strict=True))
    for sample_beta in [None, 0.3, 1.0]:
        indices, batch, weights = buffer.sample(32, np.random.default_rng(5), beta=sample_beta)
        b = beta if sample_beta is None else sample_beta
        expected = (4 * np.array([probabilities[i] for i in indices.tolist()])) ** -b  # N = len(buffer) = 4
        expected /= expected.max()
        np.testing.assert_allclose(weights, expected, rtol=1e-6)
        assert weights.dtype == np.float32 and weights.max() == 1.0
        np.testing.assert_array_equal(batch["action"], indices - ids[0])
    # New transitions get the running max priority, which does not drop when priorities fall.
    assert buffer.max_priority == pytest.approx(stored.max(), rel=1e-12)
    buffer.update_priorities(ids, np.full(4, 0.1))
    new = _episode(buffer, 0, 1, 100)
    assert buffer.priority(new)[0] == pytest.approx(stored.max(), rel=1e-12)
    # Same seed, same draws.
    a = FrameStackBuffer(30, num_streams=1, frame_shape=(2,), stack=2, seed=7)
    b = FrameStackBuffer(30, num_streams=1, frame_shape=(2,), stack=2, seed=7)
    for buf in (a, b):
        _episode(buf, 0, 10, 0)
    np.testing.assert_array_equal(a.sample(32).indices, b.sample(32).indices)


def test_uniform_option():
    buffer = FrameStackBuffer(40, num_streams=1, frame_shape=(2,), stack=3, seed=0, prioritized=False)
    ids = _episode(buffer, 0, 4, 0)
    assert buffer.update_priorities(ids, np.array([100.0, 0.0, 0.0, 0.0])) == 0  # checked no-op
    np.testing.assert_array_equal(buffer.priority(ids), np.ones(4))
    with pytest.raises(ValueError):
        buffer.update_priorities(ids, np.array([np.nan, 1.0, 1.0, 1.0]))
    indices, _, weights = buffer.sample(40_000, np.random.default_rng(0), beta=1.0)
    np.testing.assert_array_equal(weights, np.ones(40_000))
    counts = np.array([(indices == i).sum() for i in ids])
    assert counts.sum() == 40_000 and np.all(np.abs(counts - 10_000) < 400)  # 4 sd of binomial(40000, 1/4)


def _snapshot(buffer):
    arrays = [buffer._frames, buffer._state, buffer._generation, buffer._head, buffer._pending, buffer._has_pending]
    arrays += [buffer._busy, buffer._inserts, buffer.tree.leaf_values(), *buffer._extras.values()]
    return len(buffer), buffer.max_priority, [a.copy() for a in arrays]


def _assert_unchanged(buffer, snapshot):
    size, max_priority, arrays = snapshot
    now = _snapshot(buffer)
    assert now[0] == size and now[1] == max_priority
    for saved, current in zip(arrays, now[2], strict=True):
        np.testing.assert_array_equal(current, saved)


def test_bad_input_raises_and_writes_nothing():
    stack, shape = 2, (3,)
    buffer = FrameStackBuffer(20, num_streams=2, frame_shape=shape, stack=stack, seed=0)
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(4, np.random.default_rng(0))
    ids = _episode(buffer, 0, 3, 0)  # stream 1 has nothing yet
    buffer.update_priorities(ids[:1], np.array([2.0]))
    snapshot = _snapshot(buffer)

    obs = np.broadcast_to(np.array([3, 4], np.uint8)[None, :, None], (2, stack, *shape)).copy()  # stream 0's last
    next_obs = np.concatenate([obs[:, 1:], np.full((2, 1, *shape), 5, np.uint8)], axis=1)  # next_obs was [3, 4]
    extras = {"action": np.zeros(2, np.int32), "reward": np.zeros(2, np.float32), "done": np.zeros(2, np.float32)}
    good = dict(streams=np.array([0, 1]), obs=obs, next_obs=next_obs, continues=np.array([True, False]), **extras)
    broken_next = next_obs.copy()
    broken_next[1, 0] += 1
    other_obs = obs.copy()
    other_obs[0, 0] = 9
    stale_obs = np.concatenate([other_obs[:, 1:], next_obs[:, -1:]], axis=1)
    empty = dict(streams=np.array([], np.int64), obs=obs[:0], next_obs=next_obs[:0], continues=np.zeros(0, bool))
    bad_calls = [
        (dict(good, streams=np.array([0, 0])), "each stream once"),
        (dict(good, streams=np.array([0, 2])), "stream ids must lie"),
        (dict(good, streams=np.array([-1, 1])), "stream ids must lie"),
        (dict(good, streams=np.array([0.0, 1.0])), "streams must be integers"),
        (dict(good, streams=np.array([True, False])), "streams must be integers"),
        (dict(good, streams=np.zeros((1, 2), np.int64)), "1-D"),
        (dict(good, obs=obs.astype(np.float32)), "obs has dtype"),  # no silent casts
        (dict(good, obs=obs[:, :1]), "obs has shape"),  # wrong stack
        (dict(good, obs=obs[:1]), "obs has shape"),  # wrong S
        (dict(good, next_obs=next_obs.reshape(2, stack, 1, 3)), "next_obs has shape"),
        (dict(good, next_obs=broken_next), "shifted by one frame"),  # next_obs[:, :-1] != obs[:, 1:]
        (dict(good, continues=np.array([1, 0])), "continues must be bool"),
        (dict(good, continues=np.array([True])), "continues must be bool"),
        (dict(good, obs=other_obs, next_obs=stale_obs), "differs from the stored next_obs"),
        ({k: v for k, v in good.items() if k != "done"}, r"missing \['done'\]"),
        (dict(good, extra=np.zeros(2)), r"unexpected \['extra'\]"),
        (dict(good, reward=np.zeros(2, np.float64)), "reward has dtype"),
        (dict(good, action=np.zeros((2, 1), np.int32)), "action has shape"),
        (dict(good, **empty), "non-empty"),
        (dict(good, continues=np.array([True, True])), "no previous transition"),  # stream 1 has nothing yet
    ]
    for call, message in bad_calls:
        call = dict(call)
        streams, obs_ = call.pop("streams"), call.pop("obs")
        with pytest.raises(ValueError, match=message):
            buffer.insert(streams, obs_, **call)
        _assert_unchanged(buffer, snapshot)
    for indices, priorities, error in [
        (ids[:2], np.array([np.nan, 1.0]), ValueError),
        (ids[:2], np.array([1.0, -0.5]), ValueError),
        (ids[:2], np.array([1.0, np.inf]), ValueError),
        (ids[:2], np.array([1.0]), ValueError),
        (np.array([0, 20]), np.array([1.0, 1.0]), IndexError),  # past capacity
        (np.array([-1, 0]), np.array([1.0, 1.0]), IndexError),
        (ids[:2].astype(np.float64), np.array([1.0, 1.0]), IndexError),
        (ids[:2].reshape(1, 2), np.array([[1.0, 1.0]]), IndexError),
    ]:
        with pytest.raises(error):
            buffer.update_priorities(indices, priorities)
        _assert_unchanged(buffer, snapshot)
    with pytest.raises(IndexError):
        buffer.priority(np.array([20]))
    with pytest.raises(ValueError, match="batch_size"):
        buffer.sample(0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="beta"):
        buffer.sample(2, np.random.default_rng(0), beta=-1.0)
    _assert_unchanged(buffer, snapshot)
    good_streams, good_obs = good.pop("streams"), good.pop("obs")
    np.testing.assert_array_equal(buffer.insert(good_streams, good_obs, **good), [4, 11])  # nothing moved before


def test_bad_construction():
    def make(capacity=20, **kwargs):
        return FrameStackBuffer(capacity, **{"num_streams": 2, "frame_shape": (3,), "stack": 2, **kwargs})

    make(capacity=10)  # 2 streams x (2 * 2 + 1) rows: the minimum
    for kwargs in [
        {"capacity": 9},  # 4 rows per stream < 2 * stack + 1
        {"capacity": 0},
        {"num_streams": 0},
        {"stack": 0},
        {"frame_shape": (0, 3)},
        {"alpha": -1.0},
        {"eps": 0.0},
        {"k": 1},
        {"extras": {"obs": ((), np.int32)}},  # reserved name
        {"extras": {"action": "int32"}},
    ]:
        with pytest.raises(ValueError):
            make(**kwargs)


class _PausingBuffer(FrameStackBuffer):
    """Blocks inside the frame write (lazy writing step ii) until released."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pause = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def _write(self, *args):
        if not self.release.is_set():
            self.pause.set()
            assert self.release.wait(10)
        super()._write(*args)


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


def test_invalidation_and_reservation_happen_before_the_write():
    stack, seg = 2, 7
    buffer = _PausingBuffer(2 * seg, num_streams=2, frame_shape=(4,), stack=stack, seed=0)
    first = _episode(buffer, 0, 5, 0)  # stream 0: transitions 1-5, rows 0 and 6 not sampleable
    other = _episode(buffer, 1, 2, 100)  # stream 1: transitions 8, 9
    buffer.update_priorities(first, np.arange(1.0, 6.0))
    buffer.release.clear()
    # A new episode on stream 0 writes rows 0, 1, 2: transitions 1, 2, 3 lose their data; 1 is the new transition.
    thread, errors = _in_thread(lambda: _episode(buffer, 0, 1, 50))
    assert buffer.pause.wait(10)
    np.testing.assert_array_equal(buffer.priority(np.array([1, 2, 3])), np.zeros(3))
    assert np.all(buffer.priority(np.array([4, 5, 8, 9])) > 0)
    assert len(buffer) == 2 + 3  # 4, 5 and the reserved 1 of stream 0; 8, 9 of stream 1
    indices, batch, _ = buffer.sample(500, np.random.default_rng(0))
    assert set(indices.tolist()) == {4, 5, 8, 9}
    assert buffer.update_priorities(np.array([1, 2, 4]), np.array([9.0, 9.0, 1.0])) == 1  # 1 mid-write, 2 stale
    np.testing.assert_array_equal(buffer.priority(np.array([1, 2])), [0.0, 0.0])
    with pytest.raises(ValueError, match="another thread"):  # the stream's insert is still in flight
        _episode(buffer, 0, 1, 70)
    buffer.release.set()
    thread.join(10)
    assert not thread.is_alive() and not errors
    assert buffer.priority(np.array([1]))[0] == buffer.max_priority
    np.testing.assert_array_equal(np.flatnonzero(buffer.tree.leaf_values()), [1, 4, 5, 8, 9])
    indices, batch, _ = buffer.sample(100, np.random.default_rng(0))
    assert np.all(batch["obs"][indices == 1] == [[50], [51]])
    np.testing.assert_array_equal(other, [8, 9])


def test_sampler_waits_while_every_transition_is_mid_write():
    buffer = _PausingBuffer(10, num_streams=1, frame_shape=(2,), stack=2, seed=0)
    buffer.release.clear()
    inserter, insert_errors = _in_thread(lambda: _episode(buffer, 0, 1, 7))
    assert buffer.pause.wait(10)
    samples = []
    sampler, sample_errors = _in_thread(lambda: samples.append(buffer.sample(4, np.random.default_rng(0))))
    time.sleep(0.2)
    assert sampler.is_alive() and not samples
    buffer.release.set()
    inserter.join(10)
    sampler.join(10)
    assert not insert_errors and not sample_errors
    np.testing.assert_array_equal(samples[0].batch["obs"], np.full((4, 2, 2), [[7], [8]], np.uint8))


class _OverwritingBuffer(FrameStackBuffer):
    """Rewrites the whole ring during the sampler's lock-free copies, as an actor thread could."""

    def __init__(self, *args, overwrite_calls, **kwargs):
        super().__init__(*args, **kwargs)
        self.overwrite_calls = overwrite_calls
        self.gathers = 0
        self.next_value = 100

    def _gather(self, transitions):
        copied = super()._gather(transitions)
        self.gathers += 1
        if self.gathers <= self.overwrite_calls:
            _episode(self, 0, self.segment_rows - self.stack, self.next_value)  # every row rewritten
            self.next_value += 20
        return copied


@pytest.mark.parametrize("overwrite_calls, gathers", [(1, 2), (3, 4)])
def test_sampler_redraws_transitions_overwritten_during_its_copy(overwrite_calls, gathers):
    buffer = _OverwritingBuffer(9, num_streams=1, frame_shape=(1,), stack=2, seed=0, overwrite_calls=overwrite_calls)
    _episode(buffer, 0, 7, 0)
    indices, batch, _ = buffer.sample(8, np.random.default_rng(0))
    assert buffer.gathers == gathers  # every copy but the last was invalidated
    np.testing.assert_array_equal(batch["obs"], buffer._gather(indices)["obs"])
    assert np.all(batch["obs"] >= 100)  # data of the current episode only
    np.testing.assert_array_equal(batch["next_obs"][:, 0], batch["obs"][:, 1])
    np.testing.assert_array_equal(batch["obs"][:, 1, 0] - batch["obs"][:, 0, 0], np.ones(8, np.uint8))


def _frame(stream, step, start, shape):
    """The frame of `stream` at env step `step` of the episode that began at `start`: its header holds the three
    numbers and every other byte a value derived from them, so any mix of frames is detected."""
    frame = np.full(shape, (stream * 97 + step * 31 + start * 7) % 251, np.uint8).reshape(-1)
    frame[:12] = np.array([stream, step, start], "<i4").view(np.uint8)
    return frame.reshape(shape)


def _expected_stacks(stream, step, start, stack, shape):
    frames = [_frame(stream, m, start, shape) for m in range(step - stack + 1, step + 2)]
    return np.stack(frames[:-1]), np.stack(frames[1:])


def test_concurrent_actors_and_learners_never_see_torn_or_stale_transitions():
    """2 actor threads on disjoint streams and 2 learner threads (sample, check, update, read priorities) on a ring
    small enough that every stream wraps constantly, until 20 rings' worth of inserts. Frames encode (stream, step,
    episode start)."""
    stack, shape, num_streams, seg = 4, (24, 24), 6, 2 * 4 + 1 + 4
    buffer = FrameStackBuffer(num_streams * seg, num_streams=num_streams, frame_shape=shape, stack=stack, k=4, seed=0)
    group = ThreadGroup()
    counts = {"inserted": 0, "sampled": 0, "updated": 0}
    counts_lock = threading.Lock()
    models = {}

    def actor(worker, streams):
        def body():
            rng = np.random.default_rng(worker)
            model = Model(num_streams, seg, stack)
            models[worker] = model
            step = {s: 0 for s in streams}
            start = {s: None for s in streams}  # None: the next insert begins an episode
            while not group.stopping.is_set():
                chosen = rng.permutation(streams)[: rng.integers(1, len(streams) + 1)]
                obs, next_obs, continues, actions, rewards, dones = [], [], [], [], [], []
                for s in chosen.tolist():
                    if start[s] is None:
                        start[s] = step[s] = int(rng.integers(0, 10**6))
                    o, n = _expected_stacks(s, step[s], start[s], stack, shape)
                    obs.append(o)
                    next_obs.append(n)
                    continues.append(step[s] != start[s])
                    actions.append(step[s])
                    rewards.append(s)
                    done = rng.random() < 0.05
                    dones.append(done)
                    step[s] += 1
                    if done:
                        start[s] = None
                extras = {
                    "action": np.array(actions, np.int32),
                    "reward": np.array(rewards, np.float32),
                    "done": np.array(dones, np.float32),
                }
                args = np.stack(obs), np.stack(next_obs), np.array(continues), extras
                ids = buffer.insert(chosen, args[0], next_obs=args[1], continues=args[2], **extras)
                for i, s in enumerate(chosen.tolist()):
                    assert ids[i] == model.insert(s, continues[i], {"obs": None, "next_obs": next_obs[i]})
                with counts_lock:
                    counts["inserted"] += len(chosen)

        return body

    def learner(worker):
        def body():
            rng = np.random.default_rng(100 + worker)
            while len(buffer) == 0 and not group.stopping.is_set():
                time.sleep(0.001)
            while not group.stopping.is_set():
                indices, batch, weights = buffer.sample(32, rng)
                for i in range(32):
                    stream, step, start = batch["obs"][i, -1].reshape(-1)[:12].view("<i4")
                    obs, next_obs = _expected_stacks(stream, step, start, stack, shape)
                    assert np.array_equal(batch["obs"][i], obs), f"transition {indices[i]}: torn or stale obs"
                    assert np.array_equal(batch["next_obs"][i], next_obs), f"transition {indices[i]}: next_obs"
                    assert batch["action"][i] == step and batch["reward"][i] == stream
                    assert indices[i] // seg == stream
                assert np.all((weights > 0) & (weights <= 1))
                updated = buffer.update_priorities(indices, rng.exponential(size=32))
                assert np.all(buffer.priority(indices) >= 0)
                with counts_lock:
                    counts["sampled"] += 32
                    counts["updated"] += updated

        return body

    group.spawn("actor-0", actor(0, [0, 1, 2]))
    group.spawn("actor-1", actor(1, [3, 4, 5]))
    group.spawn("learner-0", learner(0))
    group.spawn("learner-1", learner(1))
    # Run until every stream has wrapped many times and learners have sampled a lot (work, not wall time: a loaded CI
    # machine inserted only 1,439 transitions in a fixed 2 s); 60 s is only a guard against a stalled thread.
    def enough():
        with counts_lock:
            return counts["inserted"] > 20 * buffer.capacity and counts["sampled"] > 200 and counts["updated"] > 0

    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline and not group.stopping.is_set() and not enough():
        time.sleep(0.05)
    group.stop()
    group.check()
    assert not group.running()
    assert counts["inserted"] > 20 * buffer.capacity and counts["sampled"] > 200 and counts["updated"] > 0, counts

    resident = models[0].resident() | models[1].resident()
    leaves = buffer.tree.leaf_values()
    assert set(np.flatnonzero(leaves > 0).tolist()) == resident
    assert len(buffer) == len(resident) and not buffer._busy.any() and buffer._reserved == 0
    np.testing.assert_allclose(buffer.tree.total(), leaves.sum(), rtol=1e-12)


def test_memory_for_one_million_atari_transitions():
    """The 1M-transition Atari buffer: frames stored once as uint8 (7.056 GB) plus extras, tree and bookkeeping. The
    storage is np.zeros, mapped lazily; nothing here touches it."""
    buffer = FrameStackBuffer(1_000_000, num_streams=64, frame_shape=(84, 84), stack=4)
    assert buffer.capacity == 64 * (1_000_000 // 64)
    assert buffer._frames.dtype == np.uint8
    frames = buffer.capacity * 84 * 84
    assert frames <= buffer.memory_bytes < 8 * 10**9
    assert buffer.memory_bytes - frames < 40 * 10**6  # extras (12 B/row), tree (8.5 MB), bookkeeping (9 B/row)
