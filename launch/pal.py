"""`python -m launch.pal --env=LunarLander-v2`: PAL (seed 003), parallel actor and learner threads around a shared
prioritized replay buffer on a K-ary sum tree, with `--algo` one of dqn (default), ddqn, ddpg, td3, sac.

Flags (`--help` lists them with their defaults): the run group, the off-policy group shared with launch.spreeze,
and PAL's actors, learners and replay (`launch.flagsets`); an on-policy flag (--num_envs, --sync_interval, ...) is
refused with one line. Defaults by task family and algorithm are in `PRESETS` (sources in the comments); any flag
given on the command line wins.
"""

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from envs.factory import family_of, resolve_env_id  # noqa: E402
from launch import common, flagsets  # noqa: E402
from systems.offpolicy.config import DISCRETE_ALGOS  # noqa: E402
from systems.pal import system  # noqa: E402

FLAGS = flagsets.flag_values("pal")

# Sources: Stable-Baselines3 rl-zoo hyperparameters (CartPole / LunarLander DQN, Pendulum SAC / TD3), CleanRL
# (dqn_atari.py, sac_continuous_action.py, td3_continuous_action.py for MuJoCo). update_interval = env steps per
# optimizer step (SB3: train_freq / gradient_steps).
_DISCRETE_CLASSIC = dict(
    total_steps=100_000, learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=1_000,
    update_interval=1.0, target_update_period=250, tau=1.0, epsilon_end=0.05, exploration_fraction=0.2,
    hidden_sizes=(256, 256), envs_per_actor=4, gamma=0.99,
)
_CONTINUOUS_CLASSIC = dict(
    total_steps=20_000, learning_rate=1e-3, batch_size=256, buffer_size=100_000, learning_starts=1_000,
    update_interval=1.0, target_update_period=1, tau=0.005, hidden_sizes=(256, 256), envs_per_actor=1, gamma=0.99,
)
PRESETS = {
    "classic": {"discrete": _DISCRETE_CLASSIC, "continuous": _CONTINUOUS_CLASSIC},
    "gymnasium": {"discrete": _DISCRETE_CLASSIC, "continuous": _CONTINUOUS_CLASSIC},  # a user's env: classic's
    "gymnax": {"discrete": _DISCRETE_CLASSIC, "continuous": _CONTINUOUS_CLASSIC},  # JAX classic control: classic's
    "box2d": {"discrete": dict(_DISCRETE_CLASSIC, total_steps=200_000, exploration_fraction=0.12, epsilon_end=0.1),
              "continuous": dict(_CONTINUOUS_CLASSIC, total_steps=300_000, learning_rate=3e-4)},
    "mujoco": {"continuous": dict(_CONTINUOUS_CLASSIC, total_steps=1_000_000, learning_rate=3e-4,
                                  buffer_size=1_000_000, learning_starts=5_000)},
    "atari": {"discrete": dict(
        total_steps=10_000_000, learning_rate=1e-4, batch_size=32, buffer_size=100_000, learning_starts=80_000,
        update_interval=4.0, target_update_period=1_000, tau=1.0, epsilon_end=0.01, exploration_fraction=0.1,
        hidden_sizes=(512,), envs_per_actor=8, gamma=0.99,
    )},
}
# Prioritized replay's step size for DQN: a quarter of uniform replay's (Schaul et al. 2016, the paper PAL's replay
# follows, section 4: the step size of their Double DQN setup divided by 4). At the shared rate PER fell below uniform
# replay on LunarLander-v2 (`benchmarks/learning.py`); a --learning_rate flag is taken as given.
PER_STEP_SIZE_FACTOR = 0.25
PRESETS["brax"] = PRESETS["mujoco"]  # Brax's tasks are MuJoCo's, as JAX envs
# Where CleanRL's MuJoCo scripts differ by algorithm: ddpg_continuous_action.py acts at random for 25k steps,
# sac_continuous_action.py for 5k and trains its critics (and temperature) at q_lr = 1e-3. TD3 starts from PyTorch's
# initialisation (CleanRL's and SB3's): from Flax's its tanh actor saturated on Hopper (`benchmarks/learning.py`).
# TD3 keeps 5k random steps, not CleanRL's td3_continuous_action.py's 25k: on Hopper-v4 at 300k steps 5k ended
# higher in every seed compared. DDPG's 25k is CleanRL's, untested against other values.
_MUJOCO_ALGO_PRESETS = {"td3": dict(learning_starts=5_000, network_init="torch"),
                        "ddpg": dict(learning_starts=25_000), "sac": dict(critic_learning_rate=1e-3)}
ALGO_PRESETS = {(family, algo): values for family in ("mujoco", "brax")
                for algo, values in _MUJOCO_ALGO_PRESETS.items()}
# PAL's own preset fields beyond the off-policy and DQN groups, set from their flags when given.
_PAL_PRESET_FIELDS = ("total_steps", "envs_per_actor", "update_interval")


def make_config() -> system.PALConfig:
    f = FLAGS
    env_id = resolve_env_id(f.game, f.env)
    algo = f.algo or "dqn"
    family = family_of(env_id)
    kind = "discrete" if algo in DISCRETE_ALGOS else "continuous"
    if family not in PRESETS or kind not in PRESETS[family]:
        raise ValueError(f"launch.pal has no {kind}-action setup for {family} tasks such as {env_id}")
    values = dict(PRESETS[family][kind], **ALGO_PRESETS.get((family, algo), {}))
    if kind == "discrete" and f.replay == "per":
        values["learning_rate"] *= PER_STEP_SIZE_FACTOR
    values.update(common.preset_overrides(f, system.PALConfig, ("off_policy", "dqn")))
    values.update({name: f[name].value for name in _PAL_PRESET_FIELDS if f[name].value is not None})
    values.setdefault("max_grad_norm", 10.0 if kind == "discrete" else 0.0)
    values.setdefault("opt_eps", 1e-8 if kind == "continuous" else 1e-5)
    values.setdefault("critic_learning_rate", 0.0)
    values.update(common.run_schedule(f, values["total_steps"]))
    num_actors = f.num_actors or 1
    config = system.PALConfig(
        env_id=env_id, algo=algo, num_actors=num_actors, **common.settings_from_flags(f, system.PALConfig, "run"),
        num_envs=0, num_learners=1 if f.num_learners is None else f.num_learners,  # num_envs: the plan's
        **common.settings_from_flags(f, system.PALConfig, "pal"),
        **common.settings_from_flags(f, system.PALConfig, "dqn"),
        **common.settings_from_flags(f, system.PALConfig, "pal_run"),
        **common.settings_from_flags(f, system.PALConfig, "off_policy"), **values,
    )
    system.validate(config)
    return config


def main(argv):
    del argv
    common.run_main(system.run, make_config)


if __name__ == "__main__":
    common.launch("pal", FLAGS, main, __doc__)
