"""How HTS lays EnvPool out on a process's envs (`systems.hts.config.env_plan`), over every env count, actor count,
pool layout, thread count, pinning and process split the validator accepts: every env in exactly one pool, actor k's
share at k, each pool's batch and threads within its envs, the threads asked for (default: the usable cores) used
and dealt out as evenly as they go, and pinned pools on cores one after another."""

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systems.common.config import ConfigError
from systems.hts.config import HTSConfig, env_plan, local_envs, validate


@st.composite
def _configs(draw):
    processes = draw(st.integers(1, 3))
    num_envs = processes * draw(st.integers(1, 24))
    pools = draw(st.sampled_from(["shared", "per_actor"]))
    num_actors = draw(st.integers(1, 6))
    return HTSConfig(env_id=draw(st.sampled_from(["CartPole-v1", "Breakout-v5"])), num_envs=num_envs,
                     num_processes=processes, num_actors=num_actors, env_pools=pools,
                     env_threads=draw(st.integers(0, 40)), env_thread_affinity=draw(st.integers(-1, 8)),
                     env_batch_size=draw(st.integers(0, 8)), sync_interval=8)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(config=_configs(), cores=st.integers(1, 64))
def test_every_env_is_in_one_pool_with_its_threads_and_cores(config, cores):
    try:
        validate(config)
    except ConfigError:
        return  # refused with one line (`test_reliability`): no plan to check
    with mock.patch("systems.hts.config.usable_cores", lambda: cores):
        plan = env_plan(config)
    envs = local_envs(config)
    assert sum(plan.envs) == envs and min(plan.envs) >= 1
    assert len(plan.envs) == (1 if config.env_pools == "shared" else config.num_actors)
    assert max(plan.envs) - min(plan.envs) <= 1 and plan.envs == sorted(plan.envs, reverse=True)
    for size, batch, threads in zip(plan.envs, plan.batches, plan.threads, strict=True):
        assert 1 <= batch <= size and 1 <= threads <= size
    wanted = min(config.env_threads or cores, envs)
    if config.env_pools == "shared":
        assert plan.threads == [wanted] and plan.pinned_from == [config.env_thread_affinity]
    else:
        # At least one a pool; otherwise the threads asked for, dealt as evenly as the pools' envs allow.
        assert sum(plan.threads) >= min(wanted, envs) and max(plan.threads) <= max(1, -(-wanted // len(plan.envs)))
        if config.env_thread_affinity < 0:
            assert plan.pinned_from == [-1] * len(plan.envs)
        else:
            assert plan.pinned_from[0] == config.env_thread_affinity
            for k in range(1, len(plan.envs)):
                assert plan.pinned_from[k] == plan.pinned_from[k - 1] + plan.threads[k - 1]


@pytest.mark.parametrize("changes, envs, batches, threads", [
    (dict(), [8], [4], [2]),  # the Breakout preset's 8 envs on a 2-core CPU: today's shared pool
    (dict(env_pools="per_actor", num_actors=4, num_envs=128), [32] * 4, [16] * 4, [1] * 4),
    (dict(env_pools="per_actor", num_actors=4, num_envs=128, env_threads=12), [32] * 4, [16] * 4, [3] * 4),
    (dict(env_pools="per_actor", num_actors=3, num_envs=10, env_batch_size=2), [4, 3, 3], [2, 2, 2], [1, 1, 1]),
])
def test_hand_picked_layouts(monkeypatch, changes, envs, batches, threads):
    monkeypatch.setattr("systems.hts.config.usable_cores", lambda: 2)
    plan = env_plan(HTSConfig(**{**dict(env_id="Breakout-v5", num_envs=8), **changes}))
    assert (plan.envs, plan.batches, plan.threads) == (envs, batches, threads)
