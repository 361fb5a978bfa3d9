"""A pool per actor thread (`envs.actor_pools`): each env keeps its seed and its run id whichever pool steps it,
actions, held observations and episodes reach the right pool, an actor waits (rather than spins) while its envs are
all held, and a failing env is named as the shared executor names it."""

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.actor_pools import ActorPools, OwnPoolExecutor, pool_threads, split_envs
from envs.executor import Executor
from envs.factory import make_spec
from envs.pool_api import EnvFailed


@settings(max_examples=60, deadline=None)
@given(num_envs=st.integers(1, 200), data=st.data())
def test_split_envs_deals_every_env_once_as_evenly_as_they_go(num_envs, data):
    parts = data.draw(st.integers(1, num_envs))
    sizes = split_envs(num_envs, parts)
    assert sum(sizes) == num_envs and len(sizes) == parts
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_split_envs_refuses_an_empty_pool_and_threads_are_at_least_one_a_pool():
    with pytest.raises(ValueError, match="cannot split 3 envs over 4 pools"):
        split_envs(3, 4)
    assert pool_threads(6, 4) == [2, 2, 1, 1]
    assert pool_threads(2, 4) == [1, 1, 1, 1]


def _pools(spec, sizes, seed=3, batch=None):
    starts = np.cumsum([0, *sizes[:-1]])
    return ActorPools([OwnPoolExecutor(spec, num_envs=size, batch_size=batch or size, seed=seed + int(start),
                                       num_threads=1) for size, start in zip(sizes, starts, strict=True)])


def _take_all(pools, k, want, timeout=10.0):
    """Rows from pool k until `want` envs are seen: {run env id: obs}."""
    got, deadline = {}, time.time() + timeout
    while len(got) < want and time.time() < deadline:
        results = pools.take_from(k, max_items=64, timeout=0.05)
        if results is not None:
            got.update(zip(results.env_ids.tolist(), results.obs, strict=True))
    return got


def test_each_pool_steps_its_share_of_the_run_envs_as_one_shared_pool_would():
    spec = make_spec("CartPole-v1")
    shared = Executor(spec, num_envs=7, batch_size=7, seed=3, num_threads=1)
    pools = _pools(spec, [3, 2, 2])
    shared.start()
    pools.start()
    try:
        first = shared.take(max_items=7, min_items=7, timeout=10.0)
        by_env = dict(zip(first.env_ids.tolist(), first.obs, strict=True))
        mine = [_take_all(pools, k, size) for k, size in enumerate([3, 2, 2])]
        assert [sorted(got) for got in mine] == [[0, 1, 2], [3, 4], [5, 6]]  # run ids, not the pools' own
        for got in mine:
            for env_id, obs in got.items():
                np.testing.assert_array_equal(obs, by_env[env_id])
        # The same actions to both layouts: the next observations agree too (sent through the run's env ids).
        actions = np.array([0, 1, 1, 0, 1, 0, 1], np.int32)
        shared.send(actions, np.arange(7, dtype=np.int32))
        pools.send(actions[::-1].copy(), np.arange(7, dtype=np.int32)[::-1].copy())
        second = shared.take(max_items=7, min_items=7, timeout=10.0)
        by_env = dict(zip(second.env_ids.tolist(), second.obs, strict=True))
        for k, size in enumerate([3, 2, 2]):
            for env_id, obs in _take_all(pools, k, size).items():
                np.testing.assert_array_equal(obs, by_env[env_id])
    finally:
        shared.close()
        pools.close()


def test_held_observations_go_back_to_their_pools_and_episodes_carry_run_ids():
    spec = make_spec("CartPole-v1")
    pools = _pools(spec, [2, 2], batch=1)  # batch 1 < 2 envs: spare envs keep recv() filled
    pools.start()
    try:
        held = {k: _take_all(pools, k, 2) for k in (0, 1)}
        ids = np.array([3, 0, 2, 1], np.int32)
        pools.hand_back(ids, np.stack([held[int(i) // 2][int(i)] for i in ids]))
        assert sorted(_take_all(pools, 0, 2)) == [0, 1] and sorted(_take_all(pools, 1, 2)) == [2, 3]
        # Step pool 1's envs only, with a fixed action, until an episode ends: it is reported with a run id 2 or 3.
        episodes, deadline = [], time.time() + 20.0
        while not episodes and time.time() < deadline:
            pools.send(np.zeros(2, np.int32), np.array([2, 3], np.int32))
            _take_all(pools, 1, 2)
            episodes = pools.pop_episodes()
        assert episodes and {env_id for env_id, _, _ in episodes} <= {2, 3}
        assert pools.env_steps_received > 4
    finally:
        pools.close()


def test_an_actor_whose_envs_are_all_held_waits_instead_of_spinning():
    spec = make_spec("CartPole-v1")
    pools = _pools(spec, [2])
    pools.start()
    try:
        assert len(_take_all(pools, 0, 2)) == 2  # both envs now held: none in flight
        cpu, wall = time.process_time(), time.perf_counter()
        assert pools.take_from(0, max_items=2, timeout=0.3) is None
        assert time.perf_counter() - wall >= 0.29
        assert time.process_time() - cpu < 0.15  # a wait on the buffer, not a loop of recv() attempts
    finally:
        pools.close()


@pytest.mark.parametrize("error, raised", [(EnvFailed("Walk-v0: env worker 0 exited with status 1"), EnvFailed),
                                           (OSError("lost"), RuntimeError)])
def test_a_failed_receive_is_named_as_the_shared_executor_names_it(error, raised):
    """A user's env that failed (`EnvFailed`) is re-raised as it is by the actor that received it and by every later
    check (the launcher's one line); anything else as the executor's failure, as the receiver thread's would be."""
    pools = _pools(make_spec("CartPole-v1"), [2])
    pools.start()
    try:
        _take_all(pools, 0, 2)
        pools.send(np.zeros(2, np.int32), np.array([0, 1], np.int32))

        def fail():
            raise error

        pools.pools[0]._pool.recv = fail
        with pytest.raises(raised) as first:
            pools.take_from(0, max_items=2, timeout=0.05)
        with pytest.raises(raised) as again:
            pools.raise_if_failed()
        assert error in (first.value, first.value.__cause__) and error in (again.value, again.value.__cause__)
    finally:
        pools.close()
