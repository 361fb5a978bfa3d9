"""`python -m launch.pal --env=LunarLander-v2`: PAL (seed 003), parallel actor and learner threads around a shared
prioritized replay buffer on a K-ary sum tree, with `--algo` one of dqn (default), ddqn, ddpg, td3, sac.

Takes the shared flags of launch.hts that apply to an off-policy run (--game/--env, --seed, --total_steps,
--learning_rate, --gamma, --max_grad_norm, --opt_eps, --num_actors, --logdir, --resume, --eval_every,
--eval_episodes, --checkpoint_every, --time_limit, --target_return, --quiet); the on-policy ones (--num_envs,
--sync_interval, --gae_lambda, ...) are refused with one line. Defaults by task family and algorithm are in
`PRESETS` (sources in the comments); any flag given on the command line wins.
"""

import dataclasses

from absl import app, flags

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from envs.factory import family_of, resolve_env_id  # noqa: E402
from launch import common  # noqa: E402
from systems.pal import system  # noqa: E402

_ENVS_PER_ACTOR = flags.DEFINE_integer("envs_per_actor", None, "Envs of each actor thread's own EnvPool.")
_BATCH = flags.DEFINE_string(
    "batch_size", None, "Batch of one optimizer step (PAL: split over the learners; launch.spreeze: or 'auto')."
)
_UPDATE_INTERVAL = flags.DEFINE_float(
    "update_interval", None, "Env steps collected per optimizer step, held by the system (Alg. 1; 0: free-running)."
)
_REPLAY = flags.DEFINE_enum("replay", "per", list(system.REPLAYS), "Prioritized (PER) or uniform replay.")
_BUFFER = flags.DEFINE_integer("buffer_size", None, "Replay capacity in transitions.")
_LEARNING_STARTS = flags.DEFINE_integer("learning_starts", None, "Env steps collected before the first update.")
_PER_ALPHA = flags.DEFINE_float("per_alpha", 0.6, "PER priority exponent alpha.")
_PER_BETA = flags.DEFINE_float("per_beta", 0.4, "PER importance exponent beta at the start (annealed to 1).")
_TREE_K = flags.DEFINE_integer("tree_k", 16, "Fan-out K of the sum tree (seed 003 section IV-C).")
_CRITIC_LR = flags.DEFINE_float("critic_learning_rate", None, "Critic learning rate (0: --learning_rate).")
_TARGET_PERIOD = flags.DEFINE_integer("target_update_period", None, "DQN: updates between target copies.")
_TAU = flags.DEFINE_float("tau", None, "Polyak rate of the target networks (DQN: 1 = hard copies).")
_EPS_START = flags.DEFINE_float("epsilon_start", 1.0, "DQN: initial exploration rate.")
_EPS_END = flags.DEFINE_float("epsilon_end", None, "DQN: final exploration rate.")
_EXPLORATION = flags.DEFINE_float("exploration_fraction", None, "DQN: fraction of the run to decay epsilon over.")
_NOISE = flags.DEFINE_float("action_noise", 0.1, "DDPG/TD3: Gaussian exploration noise (fraction of half-range).")
_ALLOCATE = flags.DEFINE_enum(
    "allocate", "manual", list(system.ALLOCATIONS),
    "auto: profile actor and learner throughput and pick --num_actors / --num_learners by Eq. 5.",
)
_CORES = flags.DEFINE_integer("cores", 0, "Cores M for --allocate=auto (0: this machine's).")
_PROFILE_SECONDS = flags.DEFINE_float("profile_seconds", 2.0, "Seconds per measured point of --allocate=auto.")
STOP_AT_TARGET = flags.DEFINE_boolean(
    "stop_at_target", False, "End the run at the first evaluation whose mean return reaches --target_return."
)
_CHECKPOINT_BUFFER = flags.DEFINE_boolean(
    "checkpoint_buffer", False, "Save the replay buffer with each checkpoint and restore it on --resume."
)

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
_PAL_FLAGS = {
    "envs_per_actor": _ENVS_PER_ACTOR, "update_interval": _UPDATE_INTERVAL,
    "buffer_size": _BUFFER, "learning_starts": _LEARNING_STARTS, "critic_learning_rate": _CRITIC_LR,
    "target_update_period": _TARGET_PERIOD, "tau": _TAU, "epsilon_end": _EPS_END,
    "exploration_fraction": _EXPLORATION,
}
_SHARED = {"total_steps": "total_steps", "learning_rate": "learning_rate", "gamma": "gamma",
           "max_grad_norm": "max_grad_norm", "opt_eps": "opt_eps"}
_ON_POLICY_ONLY = ("num_envs", "sync_interval", "gae_lambda", "value_coef", "entropy_coef", "clip_eps", "num_epochs",
                   "num_minibatches", "anneal_lr", "optimizer", "env_batch_size", "inference_batch",
                   "eval_deterministic", "step_time", "clip_value_loss", "normalize_obs", "obs_clip",
                   "normalize_reward", "reward_clip", "clip_actions")


def parse_count(text: str, name: str, *, auto: bool) -> int:
    """A positive integer flag given as text; 'auto' (0) where the launcher tunes it."""
    if auto and text == "auto":
        return 0
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"--{name} must be a positive integer{' or auto' if auto else ''}, got '{text}'")
    return value


def make_config() -> system.PALConfig:
    for name in _ON_POLICY_ONLY:
        if common.flag_given(name):
            raise ValueError(f"--{name} does not apply to launch.pal (off-policy actors and learners)")
    f = flags.FLAGS
    env_id = resolve_env_id(f.game, f.env)
    algo = f.algo or "dqn"
    if algo not in system.ALGOS:
        raise ValueError(f"launch.pal trains {', '.join(system.ALGOS)}; got --algo={algo}")
    family = family_of(env_id)
    kind = "discrete" if algo in system.DISCRETE_ALGOS else "continuous"
    if family not in PRESETS or kind not in PRESETS[family]:
        raise ValueError(f"launch.pal has no {kind}-action setup for {family} tasks such as {env_id}")
    values = dict(PRESETS[family][kind])
    for name, flag in _SHARED.items():
        if getattr(f, flag) is not None:
            values[name] = getattr(f, flag)
    values.setdefault("max_grad_norm", 10.0 if kind == "discrete" else 0.0)
    values.setdefault("opt_eps", 1e-8 if kind == "continuous" else 1e-5)
    for name, holder in _PAL_FLAGS.items():
        if holder.value is not None:
            values[name] = holder.value
    if _BATCH.value is not None:
        values["batch_size"] = parse_count(_BATCH.value, "batch_size", auto=False)
    if common.HIDDEN_SIZES.value is not None:
        values["hidden_sizes"] = cli.int_list("hidden_sizes", common.HIDDEN_SIZES.value)
    if values.get("critic_learning_rate") is None:
        values["critic_learning_rate"] = 0.0
    total_steps = values["total_steps"]
    num_actors = f.num_actors or 1
    config = system.PALConfig(
        env_id=env_id, algo=algo, seed=f.seed, num_actors=num_actors,
        num_envs=num_actors * values["envs_per_actor"], num_learners=common.num_learners(1), replay=_REPLAY.value,
        per_alpha=_PER_ALPHA.value, per_beta=_PER_BETA.value, tree_k=_TREE_K.value, epsilon_start=_EPS_START.value,
        action_noise=_NOISE.value, allocate=_ALLOCATE.value, cores=_CORES.value,
        profile_seconds=_PROFILE_SECONDS.value, checkpoint_buffer=_CHECKPOINT_BUFFER.value, logdir=f.logdir,
        stop_at_target=STOP_AT_TARGET.value,
        resume=f.resume, eval_every=f.eval_every if f.eval_every is not None else max(total_steps // 20, 1),
        eval_episodes=f.eval_episodes,
        checkpoint_every=f.checkpoint_every if f.checkpoint_every is not None else max(total_steps // 10, 1),
        time_limit=f.time_limit, target_return=f.target_return, quiet=f.quiet, **values,
    )
    system.validate(config)
    return dataclasses.replace(config, num_envs=config.num_actors * config.envs_per_actor)


def main(argv):
    del argv
    common.run_main(system.run, make_config)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
