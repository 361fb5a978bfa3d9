"""The host-path benchmark measures both of HTS's pool layouts: one pool shared through the receiver thread, and a
pool per actor thread that receives from it itself (`envs.actor_pools`, whose own tests check the envs keep their
seeds); pinned EnvPool threads are dealt out one pool after another."""

import pytest

from benchmarks import host_path
from envs.actor_pools import pool_offsets, pool_threads


@pytest.mark.parametrize("pools,affinity_offset", [("shared", -1), ("per_actor", 0)])
def test_each_layout_steps_every_env_through_the_round_collector(pools, affinity_offset):
    result = host_path.measure_host_path("CartPole-v1", envs=8, sync_interval=4, actors=2, batch=4, threads=1,
                                         inference_batch=8, seconds=0.5, pools=pools, warm_up_s=0.2,
                                         affinity_offset=affinity_offset)
    assert result["sps"] > 0 and result["python_us"] > 0 and result["chunks_per_take"] > 0
    # Only the shared pool has a receiver thread; an actor that owns its pool receives in its own thread.
    assert (result["receiver_us"] > 0) == (pools == "shared")


def test_own_pools_pin_their_threads_one_after_another():
    counts = pool_threads(6, 4)
    assert counts == [2, 2, 1, 1]
    assert pool_offsets(4, counts) == [4, 6, 8, 9]
    assert pool_offsets(-1, counts) == [-1] * 4
    row = dict(threads=6, actors=4, batch=64, affinity_offset=4)
    assert host_path._threads_and_batch(row, per_actor=True) == "6 (1-2 a pool) pinned from core 4, 64 (16 a pool)"
    assert host_path._threads_and_batch(dict(row, affinity_offset=-1), per_actor=False) == "6, 64"


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
