"""absl flags shared by `launch.hts` and `launch.sync`, and their conversion into a `TrainConfig`.

Hyperparameter flags default to None, meaning "the preset of this env family and algorithm" (Atari: CleanRL PPO /
HTS-RL A2C; GFootball: the HTS-RL scripts; classic control: CleanRL; see `systems.common.config.PRESETS`)."""

from __future__ import annotations

import os
import signal
import sys
import warnings
from collections.abc import Callable

from absl import flags, logging

from envs.factory import family_of, resolve_env_id
from launch import cli
from systems.common import config as config_lib
from systems.common.xla_flags import prefer_memory_saving_cpu_schedule

prefer_memory_saving_cpu_schedule()  # before any launcher computes: XLA reads its flags when the backend starts

_GAME = flags.DEFINE_string("game", None, "Atari game name, e.g. Breakout (EnvPool id Breakout-v5).")
_ENV = flags.DEFINE_string(
    "env", None, "EnvPool task id instead of --game, e.g. CartPole-v1, gfootball/academy_empty_goal_close-v1."
)
_ALGO = flags.DEFINE_enum(
    "algo", None, ["ppo", "a2c", "dqn", "ddqn", "ddpg", "td3", "sac"],
    "Algorithm. launch.hts / launch.sync: ppo (default) or a2c; launch.ba3c and launch.gala train a2c; "
    "launch.pal: dqn (default), ddqn, ddpg, td3 or sac.",
)
_SEED = flags.DEFINE_integer("seed", 1, "Seed of envs, initial parameters, action keys and minibatch order.")
_NUM_ENVS = flags.DEFINE_integer("num_envs", None, "Number of training envs (default: preset).")
_NUM_ACTORS = flags.DEFINE_integer("num_actors", None, "HTS / PAL actor threads (default: preset or 1).")
NUM_LEARNERS = flags.DEFINE_integer(
    "num_learners", None, "launch.gala: A2C learners (default 4); launch.pal: learner threads (default 1)."
)
_ENV_BATCH = flags.DEFINE_integer("env_batch_size", 0, "EnvPool async batch size for HTS (0: num_envs // 2).")
_INFER_BATCH = flags.DEFINE_integer(
    "inference_batch", 0, "Fixed actor forward-pass batch (0: num_envs // 2). Changing it changes results' bits."
)
_SYNC_INTERVAL = flags.DEFINE_integer(
    "sync_interval", None, "alpha: steps per env in one round (= rollout length per update; default: preset)."
)
_TOTAL_STEPS = flags.DEFINE_integer("total_steps", None, "Env steps to train (agent steps; default: preset).")
_LR = flags.DEFINE_float("learning_rate", None, "Learning rate (default: preset).")
_ANNEAL = flags.DEFINE_boolean("anneal_lr", None, "Linearly decay the learning rate to 0 (default: preset).")
_OPTIMIZER = flags.DEFINE_enum(
    "optimizer", None, ["adam", "rmsprop", "adam_large_batch"],
    "Optimizer (default: preset; launch.ba3c: adam_large_batch, the BA3C paper's eps-in-sqrt Adam).",
)
_OPT_EPS = flags.DEFINE_float("opt_eps", None, "Optimizer epsilon (default: preset).")
_GRAD_NORM = flags.DEFINE_float("max_grad_norm", None, "Global gradient norm clip (0: none; default: preset).")
_GAMMA = flags.DEFINE_float("gamma", None, "Discount (default: preset).")
_LAMBDA = flags.DEFINE_float("gae_lambda", None, "GAE lambda; 1.0 gives n-step returns (default: preset).")
_VALUE_COEF = flags.DEFINE_float("value_coef", None, "Value loss coefficient (default: preset).")
_ENTROPY_COEF = flags.DEFINE_float("entropy_coef", None, "Entropy bonus coefficient (default: preset).")
_CLIP = flags.DEFINE_float("clip_eps", None, "PPO clip range (default: preset).")
_EPOCHS = flags.DEFINE_integer("num_epochs", None, "PPO epochs per update (default: preset).")
_MINIBATCHES = flags.DEFINE_integer("num_minibatches", None, "PPO minibatches per epoch (default: preset).")
_CLIP_VLOSS = flags.DEFINE_boolean(
    "clip_value_loss", None, "PPO: clip the value loss around the behaviour values (default: preset; MuJoCo on)."
)
_NORM_OBS = flags.DEFINE_boolean(
    "normalize_obs", None,
    "Normalize vector observations by their running mean/std over all training envs (default: preset; MuJoCo on).",
)
_OBS_CLIP = flags.DEFINE_float("obs_clip", None, "Clip normalized observations to [-v, v] (default 10; 0: no clip).")
_NORM_REWARD = flags.DEFINE_boolean(
    "normalize_reward", None,
    "Divide rewards by the running std of the discounted return (default: preset; MuJoCo on).",
)
_REWARD_CLIP = flags.DEFINE_float("reward_clip", None, "Clip scaled rewards to [-v, v] (default 10; 0: no clip).")
_CLIP_ACTIONS = flags.DEFINE_boolean(
    "clip_actions", None, "Clip continuous actions to the action bounds before the env steps (default: on)."
)
HIDDEN_SIZES = flags.DEFINE_list(
    "hidden_sizes", None,
    "MLP hidden sizes of vector-observation tasks, e.g. 256,256 (default: preset; launch.hts/sync 64,64).",
)
_ACTIVATION = flags.DEFINE_enum("activation", None, ["tanh", "relu"], "On-policy MLP nonlinearity (default tanh).")
_ORTHO_INIT = flags.DEFINE_boolean(
    "orthogonal_init", None,
    "On-policy MLP: orthogonal init (CleanRL; default) or PyTorch's default (SB3 ortho_init=False).",
)
_LOG_STD_INIT = flags.DEFINE_float("log_std_init", None, "Initial log-std of a continuous policy (default 0).")
_LOGDIR = flags.DEFINE_string("logdir", "", "Run directory (default: runs/<system>-<env>-s<seed>-<time>).")
_RESUME = flags.DEFINE_boolean("resume", False, "Continue from the newest checkpoint in --logdir.")
_EVAL_EVERY = flags.DEFINE_integer("eval_every", None, "Env steps between evaluations (0: only at the end).")
_EVAL_EPISODES = flags.DEFINE_integer("eval_episodes", 10, "Episodes per evaluation (0: no evaluation).")
_EVAL_DET = flags.DEFINE_boolean("eval_deterministic", False, "Evaluate the greedy policy instead of sampling.")
_CKPT_EVERY = flags.DEFINE_integer("checkpoint_every", None, "Env steps between checkpoints (0: only at the end).")
_TIME_LIMIT = flags.DEFINE_float("time_limit", 0.0, "Stop training after this many seconds (final time metric).")
_TARGET = flags.DEFINE_float("target_return", None, "Evaluation return for the required time metric.")
_STEP_TIME = flags.DEFINE_string(
    "step_time", "none", "Simulated env step time: none, const:SECONDS, exp:MEAN or gamma:SHAPE:MEAN (seconds)."
)
_QUIET = flags.DEFINE_boolean("quiet", False, "No progress line on the terminal.")

_PRESET_FLAGS = {
    "num_envs": _NUM_ENVS, "num_actors": _NUM_ACTORS, "sync_interval": _SYNC_INTERVAL, "total_steps": _TOTAL_STEPS,
    "learning_rate": _LR, "anneal_lr": _ANNEAL, "optimizer": _OPTIMIZER, "opt_eps": _OPT_EPS,
    "max_grad_norm": _GRAD_NORM, "gamma": _GAMMA, "gae_lambda": _LAMBDA, "value_coef": _VALUE_COEF,
    "entropy_coef": _ENTROPY_COEF, "clip_eps": _CLIP, "num_epochs": _EPOCHS, "num_minibatches": _MINIBATCHES,
    "clip_value_loss": _CLIP_VLOSS, "normalize_obs": _NORM_OBS, "obs_clip": _OBS_CLIP,
    "normalize_reward": _NORM_REWARD, "reward_clip": _REWARD_CLIP, "clip_actions": _CLIP_ACTIONS,
    "activation": _ACTIVATION, "orthogonal_init": _ORTHO_INIT, "log_std_init": _LOG_STD_INIT,
}
# Flags of the normalizing PPO / A2C of launch.hts and launch.sync that the lock-step data-parallel systems refuse.
NORMALIZATION_FLAGS = ("normalize_obs", "normalize_reward", "obs_clip", "reward_clip")
NO_NORMALIZATION = dict(normalize_obs=False, normalize_reward=False)


def reject_normalization(launcher: str) -> None:
    """The data-parallel and gossip systems keep per-replica state in lock step; running statistics would diverge."""
    for name in NORMALIZATION_FLAGS:
        if flag_given(name):
            raise ValueError(f"--{name} applies to launch.hts and launch.sync, not {launcher}")


def config_from_flags(
    config_cls: type = config_lib.TrainConfig,
    *,
    defaults: dict | None = None,
    extra: dict | None = None,
    validate: bool = True,
    algo: str | None = None,
):
    """Flags -> validated config. Raises ValueError with one clear line on a bad value.

    Precedence: a flag given on the command line, then the system's `defaults` (e.g. BA3C's optimizer), then the
    preset of the env family and algorithm. `extra` holds the system's own fields (already read from its flags).
    """
    env_id = resolve_env_id(_GAME.value, _ENV.value)
    algo = algo or _ALGO.value or "ppo"
    if algo not in ("ppo", "a2c"):
        raise ValueError(f"--algo={algo} is off-policy: train it with python -m launch.pal")
    values = config_lib.preset(family_of(env_id), algo)
    values.update(defaults or {})
    for name, holder in _PRESET_FLAGS.items():
        if holder.value is not None:
            values[name] = holder.value
    if HIDDEN_SIZES.value is not None:
        from launch import cli  # noqa: PLC0415 - launch.cli imports nothing of ours

        values["hidden_sizes"] = cli.int_list("hidden_sizes", HIDDEN_SIZES.value)
    total_steps = values.get("total_steps", config_lib.TrainConfig.total_steps)
    if _EVAL_EVERY.value is not None:
        values["eval_every"] = _EVAL_EVERY.value
    else:  # about 20 evaluations per run, so the final metric has its last ten policies
        values["eval_every"] = max(total_steps // 20, 1)
    values["checkpoint_every"] = (
        _CKPT_EVERY.value if _CKPT_EVERY.value is not None else max(total_steps // 10, 1)
    )
    config = config_cls(
        env_id=env_id, algo=algo, seed=_SEED.value, env_batch_size=_ENV_BATCH.value,
        inference_batch=_INFER_BATCH.value, logdir=_LOGDIR.value, resume=_RESUME.value,
        eval_episodes=_EVAL_EPISODES.value, eval_deterministic=_EVAL_DET.value, time_limit=_TIME_LIMIT.value,
        target_return=_TARGET.value, step_time=_STEP_TIME.value, quiet=_QUIET.value, **values, **(extra or {}),
    )
    if validate:
        config_lib.validate(config)
    return config


def num_learners(default: int) -> int:
    """--num_learners, or the launcher's own default when it is not given (it is shared by launch.gala and pal)."""
    return default if NUM_LEARNERS.value is None else NUM_LEARNERS.value


def flag_given(name: str) -> bool:
    """True when `--name` was set on the command line (or by a test's flagsaver), not left at its default."""
    return flags.FLAGS[name].present > 0 or flags.FLAGS[name].value != flags.FLAGS[name].default


class Terminated(KeyboardInterrupt):
    """SIGTERM (what schedulers and `kill` send), raised in the main thread where Ctrl-C's KeyboardInterrupt would be,
    so every system's Ctrl-C path runs: newest checkpoint, summary, children stopped. Exit status 143."""


def _raise_terminated(signum, frame):  # noqa: ARG001 - a signal handler's signature
    raise Terminated


# Exit statuses of every launcher (README, "Stopping a run"); the others live in launch.cli.
EXIT_NON_FINITE = 3
EXIT_IO_ERROR = 74  # sysexits.h EX_IOERR: a write failed (full disk, read-only file system, file-size limit)
EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED = cli.EXIT_BAD_INPUT, cli.EXIT_INTERRUPTED, cli.EXIT_TERMINATED


def run_main(
    run: Callable[[config_lib.TrainConfig], dict],
    make_config: Callable[[], config_lib.TrainConfig] = config_from_flags,
) -> dict:
    """Builds the config (bad values: one line on stderr, exit 2) and runs. Ctrl-C exits 130 and SIGTERM 143, each
    after a checkpoint of the newest parameters; a non-finite loss or parameter exits 3 with one line; a failed
    write (full disk, read-only file system) exits 74 with one line."""
    # Start-up noise a user cannot act on: JAX's INFO line about a missing TPU runtime and gymnasium's warning
    # about casting float64 space bounds of classic-control tasks to float32.
    logging.set_verbosity(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
    # A shell starts background jobs (`nohup python -m launch.hts ... &` in a script) with SIGINT ignored, and Python
    # then never raises KeyboardInterrupt: `kill -INT` must still checkpoint and exit 130.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        config = make_config()
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    from systems.common.finite import NonFiniteError  # noqa: PLC0415 - JAX starts after the XLA flags

    try:
        return run(config)
    except config_lib.ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except NonFiniteError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_NON_FINITE)
    except OSError as error:  # the run's directory became unwritable: earlier checkpoints are whole (atomic writes)
        what = f"cannot write {error.filename}: " if error.filename else ""
        print(f"error: {what}{error.strerror or error}; the run stopped (any checkpoint it wrote before is whole)",
              file=sys.stderr)
        sys.exit(EXIT_IO_ERROR)
    except KeyboardInterrupt as stop:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the exit below must not be interrupted in turn
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        name = "terminated (SIGTERM)" if isinstance(stop, Terminated) else "interrupted"
        checkpoint = getattr(stop, "checkpoint", None)  # set by Monitor.saved once the run has saved
        if checkpoint:
            print(f"{name}; the newest parameters are saved in {checkpoint} (continue with --resume "
                  f"--logdir={stop.run_dir})", file=sys.stderr)
        else:
            print(f"{name} before the run could save anything", file=sys.stderr)
        from systems.common.learner import compiles_in_progress  # noqa: PLC0415 - JAX starts after the XLA flags

        if compiles_in_progress():
            print("waiting for the update's compile to finish before exiting (XLA cannot stop one midway)",
                  file=sys.stderr)
        status = EXIT_TERMINATED if isinstance(stop, Terminated) else EXIT_INTERRUPTED
        if checkpoint:  # the run stopped cleanly: a normal exit runs multiprocessing's finalizers (Spreeze)
            sys.exit(status)
        _exit_without_finalizing(status)


def _exit_without_finalizing(status: int) -> None:
    """Exits once every background compile is done, skipping the interpreter's finalization: after a Ctrl-C that
    interrupted a compile in the main thread (the network's initializer, seconds into start-up), XLA segfaulted
    while Python tore it down (exit -11 instead of 130). Used only for a stop before the run could save anything,
    so nothing is lost; EnvPool's own threads, if any, end with the process."""
    from systems.common.learner import wait_for_compiles  # noqa: PLC0415 - JAX starts after the XLA flags

    wait_for_compiles()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)

