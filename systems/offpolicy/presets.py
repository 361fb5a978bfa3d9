"""The off-policy systems' presets by env family and algorithm: PAL's (seed 003: DQN and its variants, DDPG, TD3,
SAC) and Spreeze's (seed 002: SAC, TD3, DDPG). One precedence rule, as the on-policy presets'
(`systems.common.presets`): a flag given > the algorithm's preset > the family's preset > the fallbacks below."""

from __future__ import annotations

from systems.offpolicy.config import DISCRETE_ALGOS

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
PAL_PRESETS = {
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
PAL_PRESETS["brax"] = PAL_PRESETS["mujoco"]  # Brax's tasks are MuJoCo's, as JAX envs
# Where CleanRL's MuJoCo scripts differ by algorithm: ddpg_continuous_action.py acts at random for 25k steps,
# sac_continuous_action.py for 5k and trains its critics (and temperature) at q_lr = 1e-3. TD3 starts from PyTorch's
# initialisation (CleanRL's and SB3's): from Flax's its tanh actor saturated on Hopper (`benchmarks/learning.py`).
# TD3 keeps 5k random steps, not CleanRL's td3_continuous_action.py's 25k: on Hopper-v4 at 300k steps 5k ended
# higher in every seed compared. DDPG's 25k is CleanRL's, untested against other values.
_MUJOCO_ALGO_PRESETS = {"td3": dict(learning_starts=5_000, network_init="torch"),
                        "ddpg": dict(learning_starts=25_000), "sac": dict(critic_learning_rate=1e-3)}
PAL_ALGO_PRESETS = {(family, algo): values for family in ("mujoco", "brax")
                for algo, values in _MUJOCO_ALGO_PRESETS.items()}
# Values neither a preset nor a flag set, for PAL and Spreeze alike: gradient clipping for the discrete algorithms
# (CleanRL's DQN: 10) and none for the continuous ones, Adam's epsilon (SB3's continuous 1e-8, discrete 1e-5), the
# critics at the actor's rate.
CONTINUOUS_FALLBACKS = dict(max_grad_norm=0.0, opt_eps=1e-8, critic_learning_rate=0.0)
_PAL_FALLBACKS = {"discrete": dict(max_grad_norm=10.0, opt_eps=1e-5, critic_learning_rate=0.0),
                  "continuous": CONTINUOUS_FALLBACKS}


def pal_preset(env_id: str, family: str, algo: str, replay: str) -> tuple[dict, dict]:
    """(preset, fallbacks) of a PAL run: the family's values for the action kind with the algorithm's over them
    (prioritized DQN at `PER_STEP_SIZE_FACTOR` of the step size), and the values flags and preset left unset take.
    Raises ValueError when the family has no preset for the algorithm's action kind."""
    kind = "discrete" if algo in DISCRETE_ALGOS else "continuous"
    if family not in PAL_PRESETS or kind not in PAL_PRESETS[family]:
        raise ValueError(f"launch.pal has no {kind}-action setup for {family} tasks such as {env_id}")
    values = dict(PAL_PRESETS[family][kind], **PAL_ALGO_PRESETS.get((family, algo), {}))
    if kind == "discrete" and replay == "per":
        values["learning_rate"] *= PER_STEP_SIZE_FACTOR
    return values, dict(_PAL_FALLBACKS[kind])


# Pendulum-v1 (SB3 rl-zoo SAC, but 64x64 networks), MuJoCo (CleanRL sac_continuous_action.py).
# Classic control takes 64x64 networks, not rl-zoo's 256x256: Spreeze's samplers run free, so the learner's speed sets
# the updates per env step. On a small CPU machine a 256x256 SAC update is slow enough that Pendulum needs about four
# times the env steps and the time of 64x64 networks to reach -200 (`benchmarks/spreeze.py`).
SPREEZE_PRESETS = {
    "classic": dict(total_steps=20_000, learning_rate=1e-3, batch_size=256, buffer_size=100_000,
                    learning_starts=1_000, tau=0.005, hidden_sizes=(64, 64), gamma=0.99, eval_every=2_000),
    "mujoco": dict(total_steps=1_000_000, learning_rate=3e-4, critic_learning_rate=1e-3, batch_size=256,
                   buffer_size=1_000_000, learning_starts=5_000, tau=0.005, hidden_sizes=(256, 256), gamma=0.99,
                   eval_every=10_000),
}
SPREEZE_PRESETS["brax"] = SPREEZE_PRESETS["mujoco"]  # Brax's tasks are MuJoCo's, as JAX envs


def spreeze_preset(family: str) -> dict:
    """Spreeze's preset of `family` (classic control's for a family without its own)."""
    return dict(SPREEZE_PRESETS.get(family, SPREEZE_PRESETS["classic"]))
