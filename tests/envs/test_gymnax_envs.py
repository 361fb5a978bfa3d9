"""`--env=gymnax/<id>`: JAX envs behind EnvPool's interface (`envs.jax_pool`), with its semantics (reset steps,
truncation kept apart from termination, env i seeded from seed + i), a trajectory that depends on the env's own
actions only, bit-identical HTS runs across actor threads and batch sizes, MinAtar's images to MinAtar's CNN, and
one line for a bad id or keyword."""

import numpy as np
import pytest

from envs.factory import make_pool, make_spec
from systems.common.config import ConfigError
from systems.hts import system as hts
from tests.fixtures import tiny_hts

CARTPOLE = "gymnax/CartPole-v1"


def test_spec_reads_the_spaces_the_time_limit_and_picks_minatars_cnn():
    import agents

    spec = make_spec(CARTPOLE)
    assert spec.family == "gymnax" and spec.obs_shape == (4,) and spec.obs_dtype == np.float32
    assert spec.action_dim == 2 and not spec.continuous and spec.max_episode_steps == 500
    pendulum = make_spec("gymnax/Pendulum-v1")
    assert pendulum.continuous and pendulum.action_dim == 1 and pendulum.action_high[0] == 2.0
    breakout = make_spec("gymnax/Breakout-MinAtar")
    assert breakout.obs_shape == (10, 10, 4) and breakout.action_dim == 3
    assert agents.make_network(breakout.obs_shape, breakout.action_dim, False).torso == "minatar_cnn"
    assert make_spec(CARTPOLE, '{"max_steps_in_episode": 7}').max_episode_steps == 7


def test_a_bad_id_or_keyword_is_one_line():
    for env_id, kwargs, message in (("gymnax/NoSuch-v0", "", "unknown gymnax environment 'NoSuch-v0'"),
                                    (CARTPOLE, '{"no_such_argument": 1}', "gymnax.make failed"),
                                    (CARTPOLE, "[1]", "must be a JSON object")):
        with pytest.raises(ValueError, match=message) as error:
            make_spec(env_id, kwargs)
        assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="unknown gymnax environment"):
        hts.validate(tiny_hts("unused", env_id="gymnax/NoSuch-v0"))


@pytest.mark.slow
def test_the_pool_keeps_envpool_semantics_and_seeds_env_i_with_seed_plus_i():
    spec = make_spec(CARTPOLE, '{"max_steps_in_episode": 5}')
    pool = make_pool(spec, num_envs=3, batch_size=3, seed=5)
    obs, info = pool.reset()
    assert list(info["env_id"]) == [0, 1, 2] and list(info["elapsed_step"]) == [0, 0, 0]
    solo_obs, _ = make_pool(spec, num_envs=1, batch_size=1, seed=6).reset()  # env 1 of the pool, alone
    np.testing.assert_array_equal(obs[1], solo_obs[0])
    rows = [pool.step(np.zeros(3, np.int32)) for _ in range(7)]
    elapsed = [int(row[4]["elapsed_step"][2]) for row in rows]
    ends = [(bool(row[2][2]), bool(row[3][2])) for row in rows]
    # pushing left from the start, env 2 either falls (terminated) or lasts 5 steps (truncated, not terminated);
    # either way its next step is a reset step: reward 0, elapsed_step 0
    end = next(k for k, flags in enumerate(ends) if any(flags))
    assert ends[end] != (True, True) and (ends[end][1] == (elapsed[end] == 5))
    assert elapsed[end + 1] == 0 and rows[end + 1][1][2] == 0.0 and elapsed[:end + 1] == list(range(1, end + 2))


@pytest.mark.slow
def test_an_envs_trajectory_depends_on_its_own_actions_only():
    """Env 0 steps alone in one pool and beside others (in other batches and orders) in another: the same
    observations, rewards and ends, as HTS's determinism across actor threads and batch sizes needs."""
    spec = make_spec("gymnax/Breakout-MinAtar")
    actions = np.random.default_rng(0).integers(0, 3, 60)
    alone = make_pool(spec, num_envs=1, batch_size=1, seed=9)
    crowd = make_pool(spec, num_envs=4, batch_size=2, seed=9)
    alone.reset()
    crowd.async_reset()
    crowd.recv(4)
    seen_alone, seen_crowd = [], []
    for t, action in enumerate(actions):
        obs, reward, terminated, truncated, _ = alone.step(np.asarray([action]), np.asarray([0]))
        seen_alone.append((obs[0].tobytes(), float(reward[0]), bool(terminated[0]), bool(truncated[0])))
        others = np.asarray([3, 1] if t % 2 else [2], np.int32)
        crowd.send(np.zeros(len(others), np.int32), others)
        crowd.send(np.asarray([action]), np.asarray([0], np.int32))
        obs, reward, terminated, truncated, info = crowd.recv(len(others) + 1)
        k = int(np.flatnonzero(info["env_id"] == 0)[0])
        seen_crowd.append((obs[k].tobytes(), float(reward[k]), bool(terminated[k]), bool(truncated[k])))
    assert seen_alone == seen_crowd
    assert any(end for *_, end, _ in seen_alone) or any(reward for _, reward, _, _ in seen_alone)


@pytest.mark.slow
def test_hts_is_bit_identical_across_actor_threads_and_batch_sizes_on_a_gymnax_env(tmp_path):
    prints = set()
    for actors, batch in ((1, 2), (2, 4)):
        summary = hts.run(tiny_hts(tmp_path / f"{actors}-{batch}", env_id="gymnax/Breakout-MinAtar", num_envs=4,
                                   num_actors=actors, env_batch_size=batch, inference_batch=2, eval_episodes=2))
        assert summary["updates"] == 6 and summary["evaluations"] >= 1
        prints.add(summary["param_fingerprint"])
    assert len(prints) == 1


def test_a_minatar_episode_is_filmed_from_its_planes(tmp_path):
    from systems.common import video

    spec = make_spec("gymnax/Breakout-MinAtar")
    film = video.record_episode(spec, lambda params, obs, key: np.ones(len(obs), np.int32), None, seed=2,
                                path=str(tmp_path / "breakout.gif"))
    assert not film.real_frames and film.complete and "matplotlib" in film.note, film.note
    assert film.frames >= 2 and (tmp_path / "breakout.gif").stat().st_size > 0


def test_pal_refuses_minatar_images_with_one_line():
    from systems.pal.config import check_env
    from tests.fixtures import tiny_pal

    with pytest.raises(ConfigError, match="Nature CNN for Atari frames; gymnax/Breakout-MinAtar has 10x10x4 images"):
        check_env(tiny_pal("unused", env_id="gymnax/Breakout-MinAtar"), make_spec("gymnax/Breakout-MinAtar"))


@pytest.mark.slow
def test_the_jitted_evaluation_plays_the_pooled_evaluations_episodes():
    """On gymnax tasks the Evaluator runs its episodes in one jitted loop: the same returns as the pooled loop, over
    two evaluations in a row (the env and action keys carry over), sampled and greedy, discrete and continuous.
    Compared under XLA's default fusion emitters (`multidevice.run_with_fusion_emitters`): Pendulum's returns
    follow the last bits of its fused physics."""
    from tests.multidevice import run_with_fusion_emitters

    run_with_fusion_emitters(check_the_jitted_evaluation_plays_the_pooled_evaluations_episodes)


def check_the_jitted_evaluation_plays_the_pooled_evaluations_episodes():
    import jax

    import agents
    from systems.common.evaluation import Evaluator

    for env_id, deterministic in ((CARTPOLE, False), (CARTPOLE, True), ("gymnax/Pendulum-v1", False)):
        spec = make_spec(env_id)
        network = agents.make_network(spec.obs_shape, spec.action_dim, spec.continuous)
        params = network.init(jax.random.PRNGKey(3), np.zeros((1, *spec.obs_shape), np.float32))
        jitted, pooled = (Evaluator(spec, network.apply, episodes=4, seed=11, deterministic=deterministic,
                                    jitted=flag) for flag in (True, False))
        assert jitted._jitted is not None and pooled._jitted is None  # the two loops, not one loop twice
        for _ in range(2):
            np.testing.assert_allclose(jitted.run(params), pooled.run(params), rtol=1e-5,
                                       err_msg=f"{env_id} deterministic={deterministic}")


def test_agents_evaluated_together_play_their_own_evaluators_episodes():
    """Anakin's agents are evaluated in one vmapped call: agent k's returns are those of its own pooled Evaluator,
    evaluation after evaluation, and one offer of parameters serves one evaluation per agent."""
    import jax

    import agents
    from systems.common.evaluation import AgentsEvaluator, Evaluator, policy_act_fn

    spec = make_spec(CARTPOLE)
    network = agents.make_network(spec.obs_shape, spec.action_dim, spec.continuous)
    params = [network.init(jax.random.PRNGKey(k), np.zeros((1, *spec.obs_shape), np.float32)) for k in (1, 2)]
    act = policy_act_fn(network.apply, deterministic=False)
    together = AgentsEvaluator(spec, act, episodes=3, seeds=[5, 9])
    alone = [Evaluator(spec, None, episodes=3, seed=seed, deterministic=False, act_fn=act, jitted=False)
             for seed in (5, 9)]
    for _ in range(2):
        together.offer(jax.tree.map(lambda *xs: np.stack(xs), *params))
        for k in (1, 0):  # in any order
            np.testing.assert_array_equal(together.agent(k).run(params[k]), alone[k].run(params[k]))
    with pytest.raises(RuntimeError, match="offer the agents' new parameters"):
        together.agent(0).run(params[0])
