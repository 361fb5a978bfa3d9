"""`--env=jax/<module>:<callable>`: any JAX env with gymnax's interface (`envs.gymnax_env`), here the suite's own
`tests/jax_envs.py`, runs as a gymnax task: its spec, EnvPool's semantics, HTS and Anakin."""

import numpy as np
import pytest

from envs.factory import make_pool, make_spec
from systems.hts import system as hts
from tests.fixtures import tiny_hts

WALK = "jax/tests.jax_envs:make_walk"


def test_the_callables_env_gets_a_spec_with_its_kwargs():
    spec = make_spec(WALK, '{"step_size": 0.5}')
    assert spec.family == "gymnax" and spec.obs_shape == (2,) and spec.action_dim == 2 and not spec.continuous
    assert spec.max_episode_steps == 50


def test_craftaxs_name_of_the_episode_limit_is_read_and_the_truncation_is_ours():
    """At 0.001 a step no walk ends by itself: the episode is truncated (not terminated) at step 30."""
    spec = make_spec("jax/tests.jax_envs:make_walk_timesteps", '{"step_size": 0.001}')
    assert spec.max_episode_steps == 30
    pool = make_pool(spec, num_envs=1, batch_size=1, seed=0)
    pool.reset()
    rows = [pool.step(np.zeros(1, np.int32)) for _ in range(31)]
    ends = [(bool(r[2][0]), bool(r[3][0])) for r in rows]
    assert ends[29] == (False, True) and not any(any(flags) for flags in ends[:29])
    assert int(rows[30][4]["elapsed_step"][0]) == 0


@pytest.mark.parametrize("env_id, message", [
    ("jax/tests.jax_envs", r"give --env=jax/<module>:<callable>"),
    ("jax/tests.no_such_module:make", r"cannot load tests.no_such_module:make: No module named"),
    ("jax/tests.jax_envs:no_such_callable", r"cannot load .*no_such_callable"),
    ("jax/tests.jax_envs:make_nothing", r"must return \(env, env_params\), got NoneType"),
    ("jax/tests.jax_envs:make_failing", r"failed: RuntimeError: no such level"),
])
def test_a_bad_jax_env_is_one_line(env_id, message):
    with pytest.raises(ValueError, match=message) as error:
        make_spec(env_id)
    assert "\n" not in str(error.value)


def test_unknown_kwargs_are_the_callables_error():
    with pytest.raises(ValueError, match=r"failed: TypeError"):
        make_spec(WALK, '{"no_such": 1}')


def test_the_pool_auto_resets_and_truncates_apart():
    """Walking left from a start in [-0.9, 0.9] at 0.1 a step ends within 19 steps (terminated); at 0.001 a step the
    50-step limit comes first (truncated, not terminated); each end is followed by a reset step."""
    for step_size, want in ((0.1, (True, False)), (0.001, (False, True))):
        pool = make_pool(make_spec(WALK, f'{{"step_size": {step_size}}}'), num_envs=2, batch_size=2, seed=3)
        pool.reset()
        rows = [pool.step(np.zeros(2, np.int32)) for _ in range(60)]
        ends = [(bool(r[2][0]), bool(r[3][0])) for r in rows]
        end = next(k for k, flags in enumerate(ends) if any(flags))
        assert ends[end] == want
        assert int(rows[end + 1][4]["elapsed_step"][0]) == 0 and float(rows[end + 1][1][0]) == 0.0


@pytest.mark.slow
def test_hts_on_the_jax_env_is_bit_identical_across_actor_threads(tmp_path):
    prints = set()
    for actors, batch in ((1, 2), (2, 4)):
        summary = hts.run(tiny_hts(tmp_path / f"{actors}-{batch}", env_id=WALK, env_kwargs='{"step_size": 0.2}',
                                   num_envs=4, num_actors=actors, env_batch_size=batch, inference_batch=2,
                                   total_steps=4096, eval_every=4096, eval_episodes=4))
        assert summary["evaluations"] >= 1
        prints.add(summary["param_fingerprint"])
    assert len(prints) == 1


@pytest.mark.slow
def test_anakin_trains_the_jax_env_in_its_program(tmp_path):
    from systems.anakin import system as anakin
    from systems.anakin.config import AnakinConfig

    summary = anakin.run(AnakinConfig(env_id=WALK, num_seeds=2, total_steps=20_000, eval_episodes=4, quiet=True,
                                      logdir=str(tmp_path / "run")))
    # walking right from every start: about 0.9; a uniformly random policy: about -0.12 (simulated)
    assert summary["num_agents"] == 2 and summary["final_metric_min"] > 0.5, summary["final_metrics"]
