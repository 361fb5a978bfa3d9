"""Every factored Gymnasium action space reaches the policies as a 1-D MultiDiscrete counted from 0
(`envs.actions`), and the env gets back an action of its own space; the on-policy launchers train it and the
off-policy ones refuse it with one line."""

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.actions import FlatMultiDiscrete, adapted_actions
from envs.factory import make_spec
from systems.common import config as config_lib
from systems.hts import system as hts
from tests.fixtures import run_launcher, tiny_hts

DIALS = "gymnasium/tests.gym_envs:Dials-v0"


class _Acts(gymnasium.Env):
    """An env that keeps the last action it was given."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, action_space):
        self.action_space, self.last = action_space, None

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.last = action
        return np.zeros(2, np.float32), 0.0, False, False, {}


_SHAPES = st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple)
_FACTORED = st.one_of(
    st.tuples(_SHAPES, st.integers(-3, 3)).flatmap(lambda shape_start: st.lists(
        st.integers(1, 4), min_size=int(np.prod(shape_start[0])), max_size=int(np.prod(shape_start[0]))).map(
        lambda counts: spaces.MultiDiscrete(np.reshape(counts, shape_start[0]),
                                            start=np.full(shape_start[0], shape_start[1])))),
    _SHAPES.map(spaces.MultiBinary),
)


@settings(max_examples=60, deadline=None)
@given(space=_FACTORED, seed=st.integers(0, 2**16))
def test_a_flat_action_counted_from_zero_reaches_the_env_as_an_action_of_its_own_space(space, seed):
    env = adapted_actions(_Acts(space))
    flat = env.action_space
    assert isinstance(flat, spaces.MultiDiscrete) and flat.nvec.ndim == 1 and not np.any(flat.start)
    assert len(flat.nvec) == int(np.prod(space.shape))
    flat.seed(seed)
    action = flat.sample()
    env.step(action.astype(np.int32))  # the policies' actions are int32
    given_action = env.unwrapped.last
    assert space.contains(given_action), (space, given_action)
    np.testing.assert_array_equal(np.reshape(given_action, -1) - np.reshape(getattr(space, "start", 0), -1)
                                  * np.ones(len(flat.nvec), np.int64), action)


def test_a_flat_multidiscrete_from_zero_and_the_other_spaces_are_left_as_they_are():
    for space in (spaces.MultiDiscrete([3, 2]), spaces.Discrete(4), spaces.Box(-1, 1, (2,))):
        env = _Acts(space)
        assert adapted_actions(env) is env
    assert isinstance(adapted_actions(_Acts(spaces.MultiDiscrete([3, 2], start=[1, 1]))), FlatMultiDiscrete)


def test_the_spec_reads_a_factored_action_and_refuses_an_action_it_cannot_take(tmp_path, capsys):
    spec = make_spec(DIALS)
    assert spec.factored and spec.action_nvec == (3, 2, 4, 3) and spec.action_dim == 4 and not spec.continuous
    bits = make_spec(DIALS, '{"space": "multibinary"}')
    assert bits.action_nvec == (2,) * 6
    assert not make_spec("CartPole-v1").factored
    with pytest.raises(SystemExit) as exit_info:
        run_launcher(__import__("launch.pal", fromlist=["main"]).main, env=DIALS, total_steps=2000,
                     logdir=str(tmp_path / "pal"), quiet=True)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --algo=dqn takes one Discrete or Box action; {DIALS}'s action has 4 components "
        "(MultiDiscrete / MultiBinary: use launch.hts, sync, ba3c or gala)")


def test_hts_is_bit_identical_across_actor_threads_on_a_factored_action(tmp_path):
    prints = set()
    for actors, batch in ((1, 2), (2, 4)):
        summary = hts.run(tiny_hts(tmp_path / f"{actors}-{batch}", env_id=DIALS, env_kwargs='{"start": 2}',
                                   num_envs=4, num_actors=actors, env_batch_size=batch, inference_batch=2,
                                   total_steps=3 * 64))
        assert summary["updates"] == 3
        prints.add(summary["param_fingerprint"])
    assert len(prints) == 1


@pytest.mark.slow
@pytest.mark.parametrize("system, space, algo", [("hts", "multidiscrete", "ppo"), ("sync", "multibinary", "a2c")])
def test_the_on_policy_launchers_learn_to_set_every_dial(tmp_path, system, space, algo):
    """A random policy sets 35% of the MultiDiscrete dials (7 a 20-step episode) and half the MultiBinary ones
    (10); the reward depends on this step's action only, so a short horizon (gamma 0.5) learns it quickly. The
    MultiDiscrete dials read finer steps of the observation (thirds), so they take longer. The run stops at its
    first evaluation that reaches the bar (`stop_at_target`)."""
    import importlib
    import json

    run_dir, target = tmp_path / "run", (15.0 if space == "multidiscrete" else 18.0)
    run_launcher(importlib.import_module(f"launch.{system}").main, env=DIALS, env_kwargs=json.dumps({"space": space}),
                 algo=algo, num_envs=8, total_steps=60_000, learning_rate=1e-3, gamma=0.5, eval_episodes=10,
                 eval_every=6_000, target_return=target, stop_at_target=True, seed=1, logdir=str(run_dir), quiet=True)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["last_eval_return"] >= target, summary["last_eval_return"]


def test_an_off_policy_config_check_names_the_factored_action():
    from systems.pal.config import PALConfig, check_env

    with pytest.raises(config_lib.ConfigError, match="4 components"):
        check_env(PALConfig(env_id=DIALS, algo="ddqn"), make_spec(DIALS))
