"""The async EnvPool executor: no deadlock when the actors hold envs at a round boundary (spare envs), the
step-time injector delays results, and the state buffer hands results out in order of readiness."""

import threading
import time

import numpy as np
import pytest

from envs.executor import Executor, StateBuffer
from envs.factory import make_spec
from envs.step_time import parse_step_time


def _drain(executor, want, timeout=10.0):
    got, deadline = [], time.time() + timeout
    while len(got) < want and time.time() < deadline:
        results = executor.take(max_items=16, timeout=0.05)
        if results is not None:
            got.extend(results.env_ids.tolist())
    return got


def test_holding_envs_below_batch_size_does_not_deadlock():
    spec = make_spec("CartPole-v1")
    executor = Executor(spec, num_envs=4, batch_size=3, seed=0)
    executor.start()
    try:
        first = _drain(executor, 4)
        assert sorted(first) == [0, 1, 2, 3]
        # Hold envs 0-2 (as at the end of a round) and keep stepping env 3 alone: EnvPool's batch of 3 can only be
        # filled by the spare envs, which must not leak out as results.
        for _ in range(20):
            executor.send(np.zeros(1, np.int32), np.array([3], np.int32))
            got = _drain(executor, 1)
            assert got == [3]
        executor.send(np.zeros(3, np.int32), np.array([0, 1, 2], np.int32))
        assert sorted(_drain(executor, 3)) == [0, 1, 2]
    finally:
        executor.close()


def test_step_time_delays_every_step():
    spec = make_spec("CartPole-v1")
    executor = Executor(spec, num_envs=4, batch_size=4, seed=0, step_time=parse_step_time("const:0.02"))
    executor.start()
    try:
        assert len(_drain(executor, 4)) == 4
        start = time.perf_counter()
        for _ in range(5):
            executor.send(np.zeros(4, np.int32), np.arange(4, dtype=np.int32))
            results = executor.take(max_items=4, min_items=4, timeout=5.0)
            assert results is not None and len(results) == 4
        # Each lock-step step waits at least the simulated 20 ms.
        assert time.perf_counter() - start >= 5 * 0.02
    finally:
        executor.close()


def test_state_buffer_releases_in_ready_order_and_not_before():
    buffer = StateBuffer()
    now = time.perf_counter()
    obs = np.arange(3, dtype=np.float32)[:, None]
    zeros = np.zeros(3, np.float32)
    buffer.put_rows(np.array([now + 0.15, now + 0.05, now + 10.0]), np.array([0, 1, 2]), obs, zeros, zeros, zeros)
    assert buffer.take(max_items=3, timeout=0.0) is None  # nothing is ready yet
    first = buffer.take(max_items=3, timeout=1.0)
    assert first.env_ids.tolist() == [1] and time.perf_counter() >= now + 0.05
    second = buffer.take(max_items=3, timeout=1.0)
    assert second.env_ids.tolist() == [0] and time.perf_counter() >= now + 0.15
    assert buffer.take(max_items=3, timeout=0.05) is None  # env 2 is still 10 s away


def test_state_buffer_min_items_wakes_when_the_last_needed_row_is_ready():
    """Waiting for several rows wakes at the moment the last of them is ready, not at the timeout."""
    buffer = StateBuffer()
    now = time.perf_counter()
    obs = np.zeros((4, 1), np.float32)
    zeros = np.zeros(4, np.float32)
    buffer.put_rows(now + np.array([0.01, 0.02, 0.03, 0.04]), np.arange(4), obs, zeros, zeros, zeros)
    results = buffer.take(max_items=4, min_items=4, timeout=5.0)
    assert results is not None and results.env_ids.tolist() == [0, 1, 2, 3]
    assert time.perf_counter() - now < 2.0  # the bug waited for the full 5 s timeout


def test_state_buffer_hands_out_rows_in_insertion_order_across_batches_and_splits():
    """Rows ready at once come out in the order they were put, whatever batches they came in and however many an
    actor takes at a time (a batch split by `max_items` keeps its place), with their own columns."""
    buffer = StateBuffer()
    now = time.perf_counter()
    for first, n in [(0, 3), (3, 4), (7, 1)]:
        ids = np.arange(first, first + n)
        buffer.put_rows(np.full(n, now), ids, ids[:, None] * 10.0, ids * 1.0, ids % 2, ids % 3 == 0)
    taken = [buffer.take(max_items=k, timeout=0.0) for k in (2, 3, 5)]
    assert [t.env_ids.tolist() for t in taken] == [[0, 1], [2, 3, 4], [5, 6, 7]]
    for t in taken:
        assert t.env_ids.dtype == np.int32 and t.rewards.dtype == np.float32
        np.testing.assert_array_equal(t.obs[:, 0], t.env_ids * 10.0)
        np.testing.assert_array_equal(t.rewards, t.env_ids)
        np.testing.assert_array_equal(t.terminations, t.env_ids % 2)
        np.testing.assert_array_equal(t.truncations, t.env_ids % 3 == 0)
    assert buffer.take(max_items=8, timeout=0.0) is None


@pytest.mark.parametrize("delays", [[0.0] * 4, [0.0, 0.0, 0.01, 0.01]], ids=["one ready time", "two ready times"])
def test_waiting_takers_get_every_row_without_waiting_out_their_timeout(delays):
    """A put wakes one waiting actor when its rows are ready together (it takes them all) and every actor otherwise;
    an actor that can take only some (`max_items`) passes the wake-up on, so no ready row waits for a timeout."""
    buffer = StateBuffer()
    got, takers = [], []

    def taker():
        results = buffer.take(max_items=2, timeout=5.0)
        got.append((time.perf_counter(), [] if results is None else results.env_ids.tolist()))

    for _ in range(2):
        takers.append(threading.Thread(target=taker))
        takers[-1].start()
    time.sleep(0.2)  # both wait on the buffer
    now = time.perf_counter()
    zeros = np.zeros(4, np.float32)
    buffer.put_rows(now + np.asarray(delays), np.arange(4), np.zeros((4, 1), np.float32), zeros, zeros, zeros)
    for thread in takers:
        thread.join(timeout=10.0)
    assert sorted(env for _, ids in got for env in ids) == [0, 1, 2, 3]
    assert max(when for when, _ in got) - now < 2.0  # a lost wake-up waited out the 5 s timeout


@pytest.mark.parametrize("env_id", ["CartPole-v1", "gymnasium/tests.gym_envs:Walk-v0", "gymnax/CartPole-v1"])
def test_handed_out_observations_survive_later_steps(env_id):
    """The executor hands out the pool's own arrays without a copy: each pool kind's recv() must return memory no
    later recv() overwrites, or stored observations would change under the actors."""
    executor = Executor(make_spec(env_id), num_envs=4, batch_size=2, seed=0)
    executor.start()
    try:
        kept = []
        for _ in range(30):
            results = executor.take(max_items=4, timeout=5.0)
            assert results is not None
            kept.append((results.obs, results.obs.copy()))
            executor.send(np.ones(len(results), np.int32), results.env_ids)
        assert all(np.array_equal(obs, snapshot) for obs, snapshot in kept)
    finally:
        executor.close()
