"""The configuration shared by the on-policy systems (HTS-RL and the synchronous baseline) and the derived sizes
(computed, never written back); their presets are `systems.common.presets`."""

from __future__ import annotations

import dataclasses
import math

from agents.hyperparams import hyperparameter, setting
from agents.networks import NetworkHyperparameters
from agents.normalization import NormalizationHyperparameters
from agents.optim import OPTIMIZERS, OptimizerHyperparameters
from agents.ppo import PPOHyperparameters
from agents.recurrent import RECURRENT_CHOICES, RecurrentHyperparameters
from envs.step_time import parse_step_time

CONV_PLAN_CHOICES = ("auto", "table", "xla")  # --conv_plan (`systems.common.conv_tuning.plan_for`)


class ConfigError(ValueError):
    """A user mistake found while starting a run (bad flag value, missing checkpoint): one line, exit 2."""


def first_line(error: BaseException) -> str:
    """The first line of an error's text (its type's name if it has none): what a one-line message quotes of a
    library's multi-line error (JAX's, W&B's, imageio's)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def hyperparameters(config_cls: type, group: str) -> tuple[str, ...]:
    """The names of `config_cls`'s `hyperparameter` fields of `group`, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(config_cls) if f.metadata.get("group") == group)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The fields every system's run has: what it trains on, its seed and length, where it writes, how it is
    evaluated and checkpointed (the launchers' "run" flag group). Each system's config adds its algorithm's and its
    own layout's fields (`TrainConfig` for the on-policy systems, `systems.offpolicy.config.OffPolicyConfig` for PAL
    and Spreeze)."""

    env_id: str  # EnvPool task id, e.g. "Breakout-v5" (the flags --game / --env)
    algo: str = "ppo"  # the system's algorithm (each config narrows the choice and sets its default)
    env_kwargs: str = setting(
        "", 'Keyword arguments of the env for --env=gymnasium/<id> (gymnasium.make\'s) or gymnax/<id> (EnvParams '
        'fields or the constructor\'s), as JSON, e.g. \'{"size": 8}\'.', "run")
    frame_stack: int = setting(
        0, "Image frames stacked on the channel axis (the last N, oldest first; reset at an episode's start) for "
        "--env=gymnasium/, gymnax/ and jax/ image tasks and EnvPool's Atari (its stack_num). 0: the task's own "
        "(Atari: 4, others: none); 1: no stack (a single frame, e.g. for --recurrent).", "run")
    seed: int = setting(1, "Seed of envs, initial parameters, action keys and minibatch order.", "run")
    total_steps: int = hyperparameter(10_000_000, "Env steps to train (agent steps; default: preset).", group="run")
    logdir: str = setting("", "Run directory (default: runs/<system>-<env>-s<seed>-<time>).", "run")
    resume: bool = setting(False, "Continue from the newest checkpoint in --logdir.", "run")
    eval_every: int = hyperparameter(
        0, "Env steps between evaluations (0: only at the end; default: total_steps / 20).", group="run")
    eval_episodes: int = setting(10, "Episodes per evaluation (0: no evaluation).", "run")
    eval_deterministic: bool = False  # greedy (mode) evaluation instead of sampling
    checkpoint_every: int = hyperparameter(
        0, "Env steps between checkpoints (0: only at the end; default: total_steps / 10).", group="run")
    time_limit: float = setting(0.0, "Stop training after this many seconds (final time metric).", "run")
    target_return: float | None = setting(None, "Evaluation return for the required time metric.", "run")
    stop_at_target: bool = setting(
        False, "End the run at the first evaluation whose mean return reaches --target_return.", "run")
    quiet: bool = setting(False, "No progress line on the terminal.", "run")
    capture_video: bool = setting(
        False, "Film one evaluation episode at each evaluation: <run dir>/videos/*.mp4 (real frames where the "
        "simulator gives them; GIF without the video extra), also to TensorBoard and W&B.", "run")
    track: bool = setting(False, 'Log to Weights & Biases (needs: pip install -e ".[wandb]"; WANDB_MODE=offline: no '
                          "account or network).", "run")
    wandb_project: str = setting("htsrl", "W&B project of --track.", "run")
    wandb_entity: str = setting("", "W&B entity (team or user) of --track (default: the account's).", "run")
    wandb_group: str = setting("", "W&B group of --track, e.g. one per sweep.", "run")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiHostConfig:
    """The fields of a run over several hosts with `jax.distributed` (HTS, BA3C, GALA pmap, Anakin; the launchers'
    "multi_host" flags), mixed into their configs: `class HTSConfig(TrainConfig, MultiHostConfig)`."""

    coordinator_address: str = setting(
        "", "host:port of process 0 for jax.distributed (multi-host runs only).", "multi_host")
    num_processes: int = setting(1, "Processes (hosts) in the job; 1 runs on this host only.", "multi_host")
    process_id: int = setting(0, "This process's index in [0, num_processes).", "multi_host")
    startup_timeout: int = setting(
        120, "Seconds a multi-host process waits for every process to join; then it exits 69 with one line.",
        "multi_host")


@dataclasses.dataclass(frozen=True)
class TrainConfig(RecurrentHyperparameters, NetworkHyperparameters, NormalizationHyperparameters, PPOHyperparameters,
                  OptimizerHyperparameters, RunConfig):
    """An on-policy run (the synchronous baseline; HTS-RL, the data-parallel and gossip systems extend it with their
    own layout): the env and round sizes here, and the hyperparameters each algorithm declares beside its code in
    `agents/` (the optimizer's, PPO's and A2C's losses, the normalizations, the network), held by inheritance so
    each keeps its flat name (`--clip_eps`, `config.clip_eps`). Sizes are per run, not per device. The
    `hyperparameter` fields are their launchers' flags (help text in the field; default: the preset)."""

    num_envs: int = hyperparameter(8, "Number of training envs (default: preset).", group="envs")
    sync_interval: int = hyperparameter(
        128, "alpha: steps per env in one round (= rollout length per update; default: preset).")
    # total_steps (RunConfig) is rounded up to whole rounds.
    clip_actions: bool = hyperparameter(
        True, "Clip continuous actions to the action bounds before the env steps (default: on).")
    conv_plan: str = setting(
        "auto", "How the learner computes an image task's convolutions on a CPU: auto = time the candidate plans "
        "once per machine and keep the fastest (cached); table = the fixed per-layer table; xla = XLA's own "
        "convolution. Accelerators use XLA's under auto. summary.json's hardware card records the choice.",
        "on_policy", choices=CONV_PLAN_CHOICES)
    step_time: str = "none"  # simulated env step time: none | const:S | exp:MEAN | gamma:SHAPE:MEAN
    preset: str = ""  # the preset that filled the hyperparameters no flag gave (`preset_values`), for config.json


def _validate_recurrent(config: TrainConfig) -> None:
    """A recurrent policy's checks (`agents.recurrent`): a positive width."""
    if config.rnn_size < 1:
        raise ConfigError(f"--rnn_size must be positive, got {config.rnn_size}")


NORMALIZATION_SINGLE_LEARNER = (
    "--normalize_obs and --normalize_reward apply to launch.hts and launch.sync (one learner): the running "
    "statistics are not kept in lock step over data-parallel or gossip replicas"
)


def steps_per_round(config: TrainConfig) -> int:
    return config.num_envs * config.sync_interval


def rounds(total_steps: int, steps_per_round: int) -> int:
    """Rounds (updates) a run of `total_steps` takes: at least one, the last one completed."""
    return max(1, math.ceil(total_steps / steps_per_round))


def total_rounds(config: TrainConfig) -> int:
    return rounds(config.total_steps, steps_per_round(config))


def recorded_config(raw: dict, path: str) -> dict:
    """A run's config.json (`raw`, read from `path`) if this version reads it: one that records the version that
    wrote it (`VERSION_KEY`). ConfigError for one written by 0.2.0 or earlier, which that version reads
    (CHANGELOG.md)."""
    if VERSION_KEY not in raw:
        raise ConfigError(f"{path} was written by version 0.2.0 or earlier (it records no version), which version "
                          f"{VERSION} does not read: resume or evaluate that run with version 0.2.0")
    if raw.get("recurrent", "none") != "none" and "rnn_input" not in raw:
        raw = dict(raw, rnn_input="torso")  # recorded before --rnn_input: its core read the torso's features
    return raw


VERSION = "0.3.0"  # this project's version (pyproject.toml's), recorded in every run's config.json
VERSION_KEY = "version"  # config.json: the version that wrote it
PLAN_KEY = "plan"  # config.json: what a system derived from the config (devices, scaled learning rate), beside it
SYSTEM_KEY = "system"  # config.json: the system that made the run; only its launcher (launch.<system>) resumes it
MAX_ENVS = 65_536  # EnvPool allocates every env up front (--num_envs=100000000 died in std::bad_alloc)
MAX_OPTIMIZER_STEPS = 2**31 - 1  # the update counters and optax's schedules count in int32


def require_finite_numbers(config) -> None:
    """Every float field of a config dataclass is a finite number (`--learning_rate=nan` trained a NaN policy that
    the evaluation then waited on forever; `--time_limit=inf` means nothing a 0 does not say)."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"--{field.name} must be a finite number, got {value}")


# EnvPool seeds env i with seed + i as an int32, evaluation envs from seed + 10,000 (`learner.build`): the seeds
# below this leave room for the most envs of a run and of an evaluation.
MAX_SEED = 2**31 - 1 - 2**20
MAX_EVAL_EPISODES = 10_000  # an evaluation steps one env per episode, all of them in one EnvPool


def _check_env(env_id: str, env_kwargs: str, frame_stack: int = 0) -> None:
    """A `gymnasium/`, `gymnax/` or `brax/` task is made once here, with its `--env_kwargs` and `--frame_stack`, so
    a bad keyword or space is one line before the run starts; `make_spec` refuses either flag for an EnvPool task."""
    from envs import factory, gymnasium_pool, jax_pool

    own_env = gymnasium_pool.is_gymnasium(env_id) or jax_pool.is_jax_env(env_id)
    if not own_env and not env_kwargs and frame_stack == 0:
        return  # an EnvPool task: its spec is read when the run starts
    try:
        spec = factory.make_spec(env_id, env_kwargs, frame_stack)
    except ValueError as error:
        raise ConfigError(first_line(error)) from None
    if len(spec.obs_shape) == 3 or spec.obs_image_shape:
        from agents import networks

        try:
            networks.make_network(spec.obs_shape, spec.action_dim, spec.continuous, action_nvec=spec.action_nvec,
                                  image_shape=spec.obs_image_shape)  # a network that reads it
        except ValueError as error:
            raise ConfigError(f"{env_id}: {first_line(error)}") from None


def validate_run_fields(config) -> None:
    """The checks every system's config shares: finite numbers, a seed EnvPool takes (-1 and 10^14 were tracebacks
    after the run directory was written) and evaluation envs EnvPool can allocate (10^9 hung before it)."""
    require_finite_numbers(config)
    _check_env(config.env_id, config.env_kwargs, config.frame_stack)
    if not 0 <= config.seed <= MAX_SEED:
        raise ConfigError(f"--seed must be in [0, {MAX_SEED:,}], got {config.seed:,}")
    if config.stop_at_target and (config.target_return is None or config.eval_episodes == 0):
        raise ConfigError("--stop_at_target stops at an evaluation reaching --target_return: give --target_return "
                          "and keep --eval_episodes above 0")
    if config.capture_video and config.eval_episodes == 0:
        raise ConfigError("--capture_video films an evaluation episode, and --eval_episodes=0 turns evaluation off")
    if config.eval_episodes > MAX_EVAL_EPISODES:
        raise ConfigError(f"--eval_episodes={config.eval_episodes:,} is above the limit of {MAX_EVAL_EPISODES:,} (an "
                          "evaluation steps one env per episode, all at once)")


def validate(config: TrainConfig) -> None:
    """Raises ValueError with one clear line for the first bad value."""
    validate_run_fields(config)
    positive = ("num_envs", "sync_interval", "total_steps", "num_epochs", "num_minibatches")
    for name in positive:
        if getattr(config, name) <= 0:
            raise ConfigError(f"--{name} must be positive, got {getattr(config, name)}")
    for name in ("eval_every", "eval_episodes", "checkpoint_every"):
        if getattr(config, name) < 0:
            raise ConfigError(f"--{name} must be non-negative, got {getattr(config, name)}")
    if config.algo not in ("ppo", "a2c"):
        raise ConfigError(f"--algo must be 'ppo' or 'a2c', got '{config.algo}'")
    if config.sde_sample_freq != -1 and not config.use_sde:
        raise ConfigError(f"--sde_sample_freq={config.sde_sample_freq} paces gSDE's exploration matrices: add "
                          "--use_sde, or leave it at -1")
    if config.optimizer not in OPTIMIZERS:
        raise ConfigError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got '{config.optimizer}'")
    if config.num_envs > MAX_ENVS:
        raise ConfigError(f"--num_envs={config.num_envs:,} is above the limit of {MAX_ENVS:,} envs per run")
    if config.total_steps < steps_per_round(config):
        raise ConfigError(
            f"--total_steps={config.total_steps:,} is less than one round (num_envs x sync_interval = "
            f"{steps_per_round(config):,} env steps), the smallest unit a run trains"
        )
    updates = total_rounds(config) * (config.num_epochs * config.num_minibatches if config.algo == "ppo" else 1)
    if updates > MAX_OPTIMIZER_STEPS:
        raise ConfigError(
            f"--total_steps={config.total_steps:,} needs {updates:,} optimizer steps, more than the int32 step "
            f"counters hold ({MAX_OPTIMIZER_STEPS:,}): fewer steps or longer rounds"
        )
    if config.learning_rate <= 0:
        raise ConfigError(f"--learning_rate must be positive, got {config.learning_rate}")
    if not 0 < config.gamma <= 1 or not 0 <= config.gae_lambda <= 1:
        raise ConfigError("--gamma must be in (0, 1] and --gae_lambda in [0, 1]")
    if config.algo == "ppo" and config.clip_eps <= 0:
        raise ConfigError(f"--clip_eps must be positive, got {config.clip_eps}")
    if config.max_grad_norm < 0:
        raise ConfigError(f"--max_grad_norm must be non-negative (0: no clipping), got {config.max_grad_norm}")
    for name in ("opt_eps", "value_coef", "entropy_coef"):
        if getattr(config, name) < 0:
            raise ConfigError(f"--{name} must be non-negative, got {getattr(config, name)}")
    if config.recurrent not in RECURRENT_CHOICES:
        raise ConfigError(f"--recurrent must be one of {', '.join(RECURRENT_CHOICES)}, got '{config.recurrent}'")
    if config.recurrent != "none":
        _validate_recurrent(config)
    if config.algo == "ppo" and steps_per_round(config) % config.num_minibatches:
        batch = steps_per_round(config)
        nearest = max(d for d in range(1, min(config.num_minibatches, batch) + 1) if batch % d == 0)
        raise ConfigError(
            f"--num_minibatches={config.num_minibatches} does not divide the batch "
            f"num_envs x sync_interval = {batch}: e.g. --num_minibatches={nearest}, or more --num_envs"
        )
    if config.time_limit < 0:
        raise ConfigError(f"--time_limit must be non-negative, got {config.time_limit}")
    if not config.hidden_sizes or min(config.hidden_sizes) < 1:
        raise ConfigError(f"--hidden_sizes must be positive widths, got {','.join(map(str, config.hidden_sizes))}")
    if config.conv_plan not in CONV_PLAN_CHOICES:
        raise ConfigError(f"--conv_plan must be one of {', '.join(CONV_PLAN_CHOICES)}, got '{config.conv_plan}'")
    if config.activation not in ("tanh", "relu"):
        raise ConfigError(f"--activation must be tanh or relu, got '{config.activation}'")
    for name in ("obs_clip", "reward_clip"):
        if not getattr(config, name) >= 0:
            raise ConfigError(f"--{name} must be non-negative (0: no clipping), got {getattr(config, name)}")
    try:
        parse_step_time(config.step_time)
    except ValueError as error:
        raise ConfigError(str(error)) from None
