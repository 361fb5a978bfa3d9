"""The host-path benchmark measures both layouts the actors could have: one pool shared through the receiver thread
(HTS's), and a pool per actor thread that receives from it itself, whose envs keep their global seeds; pinned
EnvPool threads are dealt out one pool after another."""

import numpy as np
import pytest

from benchmarks import host_path


@pytest.mark.parametrize("pools,affinity_offset", [("shared", -1), ("per_actor", 0)])
def test_each_layout_steps_every_env_through_the_round_collector(pools, affinity_offset):
    result = host_path.measure_host_path("CartPole-v1", envs=8, sync_interval=4, actors=2, batch=4, threads=1,
                                         inference_batch=8, seconds=0.5, pools=pools, warm_up_s=0.2,
                                         affinity_offset=affinity_offset)
    assert result["sps"] > 0 and result["python_us"] > 0 and result["chunks_per_take"] > 0
    # Only the shared pool has a receiver thread; an actor that owns its pool receives in its own thread.
    assert (result["receiver_us"] > 0) == (pools == "shared")


def test_own_pools_pin_their_threads_one_after_another():
    counts = host_path.pool_threads(6, 4)
    assert counts == [2, 2, 1, 1]
    assert [host_path._pool_offset(4, counts, k) for k in range(4)] == [4, 6, 8, 9]
    assert [host_path._pool_offset(-1, counts, k) for k in range(4)] == [-1] * 4
    row = dict(threads=6, actors=4, batch=64, affinity_offset=4)
    assert host_path._threads_and_batch(row, per_actor=True) == "6 (1-2 a pool) pinned from core 4, 64 (16 a pool)"
    assert host_path._threads_and_batch(dict(row, affinity_offset=-1), per_actor=False) == "6, 64"


def test_an_actors_own_pool_seeds_its_envs_as_the_shared_pool_does():
    from envs.executor import Executor
    from envs.factory import make_spec

    spec = make_spec("CartPole-v1")
    shared = Executor(spec, num_envs=8, batch_size=8, seed=3, num_threads=1)
    own = host_path._own_pool_executor()(spec, num_envs=4, batch_size=4, seed=3 + 4, num_threads=1)
    shared.start()
    own.start()
    try:
        first = shared.take(max_items=8, min_items=8, timeout=10.0)
        mine = own.take(max_items=4)
    finally:
        shared.close()
        own.close()
    by_env = dict(zip(first.env_ids.tolist(), first.obs, strict=True))
    assert sorted(mine.env_ids.tolist()) == [0, 1, 2, 3]
    for env_id, obs in zip(mine.env_ids.tolist(), mine.obs, strict=True):
        np.testing.assert_array_equal(obs, by_env[4 + env_id])


@pytest.mark.parametrize("argv,message", [
    (["--pools=both"], "--pools takes shared, per_actor or both"),
    (["--pools=per_actor", "--envs=10", "--actors=4"], "splits --envs=10 evenly over --actors=4"),
    (["--affinity_offsets=-2"], "--affinity_offsets are -1 (no pinning) or a core number"),
    (["--affinity_offsets=first"], "take comma-separated integers"),
])
def test_bad_layouts_are_one_error_line(argv, message):
    with pytest.raises(SystemExit) as stop:
        host_path.main(argv)
    assert str(stop.value).startswith("error: ") and message in str(stop.value)
