"""`--env=brax/<name>`: Brax's tasks as JAX envs (`envs.brax_env`) behind EnvPool's interface (`envs.jax_pool`):
their spaces, truncation at `episode_length` kept apart from termination, reset steps, env i seeded from seed + i,
one line for a bad name or keyword, and Anakin's jitted rounds on a Brax task."""

import importlib.util

import numpy as np
import pytest

from envs.factory import make_pool, make_spec
from systems.common.config import ConfigError
from systems.hts import system as hts
from tests.fixtures import tiny_hts

# An optional dependency (`.[brax]`), installed by `.[test]`; looked up, not imported: `envs.brax_env` imports it once
# MuJoCo's OpenGL backend is chosen (importing it here first broke a later test's MuJoCo frames in this process).
if importlib.util.find_spec("brax") is None:
    pytest.skip("Brax is not installed", allow_module_level=True)

PENDULUM = "brax/inverted_pendulum"


def test_spec_reads_the_spaces_and_the_episode_length():
    spec = make_spec(PENDULUM)
    assert spec.family == "brax" and spec.obs_shape == (4,) and spec.obs_dtype == np.float32
    assert spec.continuous and spec.action_dim == 1 and (spec.action_low[0], spec.action_high[0]) == (-1.0, 1.0)
    assert spec.max_episode_steps == 1000  # Brax's training wrapper's default
    assert make_spec(PENDULUM, '{"episode_length": 7}').max_episode_steps == 7


def test_a_bad_name_or_keyword_is_one_line():
    for kwargs, env_id, message in (("", "brax/no_such_env", "unknown Brax environment 'no_such_env'; Brax knows ant"),
                                    ('{"episode_length": 0}', PENDULUM, "episode_length must be a positive integer"),
                                    ('{"no_such_argument": 1}', PENDULUM, "brax.envs.get_environment failed")):
        with pytest.raises(ValueError, match=message) as error:
            make_spec(env_id, kwargs)
        assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="unknown Brax environment"):
        hts.validate(tiny_hts("unused", env_id="brax/no_such_env"))


@pytest.mark.slow
def test_the_pool_truncates_at_the_episode_length_terminates_a_fall_and_seeds_env_i_with_seed_plus_i():
    spec = make_spec(PENDULUM, '{"episode_length": 5}')
    pool = make_pool(spec, num_envs=2, batch_size=2, seed=5)
    obs, info = pool.reset()
    assert list(info["env_id"]) == [0, 1] and list(info["elapsed_step"]) == [0, 0]
    shifted, _ = make_pool(spec, num_envs=2, batch_size=2, seed=6).reset()  # same shapes: the programs compiled
    np.testing.assert_array_equal(obs[1], shifted[0])  # env 1 of seed 5 is env 0 of seed 6
    assert not np.array_equal(obs[0], obs[1])
    rows = [pool.step(np.array([[0.0], [1.0]], np.float32)) for _ in range(7)]
    elapsed, rewards = ([r[4]["elapsed_step"][i] for r in rows] for i in (0, 1)), [r[1] for r in rows]
    ends = [[(bool(r[2][i]), bool(r[3][i])) for r in rows] for i in (0, 1)]
    unpushed, pushed = elapsed
    # Env 0, unpushed, stands (it falls after about 20 steps): truncated, not terminated, at the fifth step; then
    # a reset step (reward 0, elapsed_step 0) and a real step again.
    assert list(unpushed) == [1, 2, 3, 4, 5, 0, 1] and [float(r[0]) for r in rewards] == [1, 1, 1, 1, 1, 0, 1]
    assert ends[0] == [(False, False)] * 4 + [(False, True)] + [(False, False)] * 2
    # Env 1, pushed hard, falls at its second step: terminated, not truncated; then a reset step.
    assert list(pushed)[:4] == [1, 2, 0, 1] and ends[1][:3] == [(False, False), (True, False), (False, False)]


@pytest.mark.slow
def test_anakin_trains_a_brax_task_with_normalized_observations(tmp_path):
    """Brax's steps inside Anakin's jitted rounds (and its jitted evaluation): the rounds run, the observations'
    statistics count the round's real steps, the evaluation returns a finite mean. (The pool under HTS: the
    gymnax tests; Brax's programs take seconds each to compile on a CPU.)"""
    from systems.anakin import system as anakin
    from systems.anakin.config import AnakinConfig

    ours = anakin.run(AnakinConfig(env_id=PENDULUM, num_envs=4, sync_interval=16, total_steps=2 * 64, num_epochs=1,
                                   num_minibatches=2, eval_every=128, eval_episodes=2, normalize_obs=True,
                                   quiet=True, logdir=str(tmp_path / "anakin")))
    assert ours["updates"] == 2 and np.isfinite(ours["last_eval_return"])
    assert 64 < ours["last_metrics"]["obs_norm_count"] <= 2 * 64  # reset steps do not count
