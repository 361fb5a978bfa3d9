"""Anakin's configuration (Podracer, Hessel et al. 2021, arXiv 2104.06272, section 3.1): the on-policy fields plus how
many independent agents one program trains (`num_seeds`), how many rounds one call of it runs (`chunk_rounds`), the
local devices its envs and gradients are split over (`num_devices`) and the hosts of a `jax.distributed` job
(`MultiHostConfig`, the flags of launch.hts)."""

from __future__ import annotations

import dataclasses
import resource

from envs import jax_pool
from systems.common import config as config_lib
from systems.common import layout_rule
from systems.common.config import setting

SYSTEM = "anakin"


@dataclasses.dataclass(frozen=True)
class AnakinConfig(config_lib.TrainConfig, config_lib.MultiHostConfig):
    """An Anakin run: `TrainConfig`'s fields (PPO / A2C, envs, rounds, run) on a JAX env (`gymnax/<id>`)."""

    num_seeds: int = setting(
        1, "Independent agents trained in the one program (vmapped): seeds seed, seed+1, ..., each with its own "
        "parameters, optimizer, envs, outputs (<logdir>/seed_<s> when above 1) and evaluations.", "anakin")
    chunk_rounds: int = setting(
        0, "Rounds (updates) one call of the jitted program runs before the host logs, evaluates and checkpoints "
        "(0: as many as fit in min(--eval_every, --checkpoint_every) env steps, at most 64, and in about 5 s).",
        "anakin")
    num_devices: int = setting(
        0, "Local devices the envs and the gradients are split over (pmap; 0: all of them).", "anakin")
    layout: str = setting(
        "preset", "auto: on an accelerator, fit --num_envs and --sync_interval when neither is given (128 envs, the "
        "preset's env steps per update kept); preset: the literal preset (always on a CPU).", "anakin",
        choices=layout_rule.CHOICES, flag_default="auto")
    learning_rates: str = setting(
        "", "Comma-separated learning rates swept in the one program, --num_seeds agents each (vmapped; each agent's "
        "optimizer state carries its rate, --anneal_lr scales them all); agent dirs <logdir>/lr_<rate>_seed_<s>. "
        "Replaces --learning_rate.", "anakin")
    entropy_coefs: str = setting(
        "", "Comma-separated entropy coefficients swept in the one program, --num_seeds agents each (vmapped; with "
        "--learning_rates, every pair); agent dirs <logdir>/[lr_<rate>_]ent_<coef>_seed_<s>. Replaces "
        "--entropy_coef.", "anakin")
    delayed_update: bool = setting(
        False, "HTS-RL's one-step-delayed update (seed 000, Eq. 6): round k acts with the parameters before the "
        "last update, so Anakin trains HTS's algorithm (default: the synchronous baseline's). A resumed run's first "
        "round acts with the checkpoint's parameters.", "anakin")


# A resumed job may move to other hosts (another coordinator's address); the devices' count must stay (the envs'
# split and the gradients' mean over them).
MAY_CHANGE_ON_RESUME = frozenset({"coordinator_address"})


def validate(config: AnakinConfig) -> None:
    """The on-policy checks (`config.validate`) and Anakin's own; ConfigError with one clear line for the first."""
    config_lib.validate(config)
    if not jax_pool.is_jax_env(config.env_id):
        raise config_lib.ConfigError(
            f"launch.anakin steps its envs inside the jitted program: it needs a JAX env (--env=gymnax/<id>, e.g. "
            f"gymnax/CartPole-v1, brax/<name> or jax/<module>:<callable>), not {config.env_id}")
    for name in ("num_seeds", "chunk_rounds", "num_devices"):
        minimum = 1 if name == "num_seeds" else 0
        if getattr(config, name) < minimum:
            raise config_lib.ConfigError(f"--{name} must be >= {minimum}, got {getattr(config, name)}")
    rates(config)  # a malformed --learning_rates or --entropy_coefs is one line
    entropy_coefs(config)
    _check_open_files(config)
    if config.num_processes < 1:
        raise config_lib.ConfigError(f"--num_processes must be >= 1, got {config.num_processes}")
    if config.num_processes > 1 and (config.time_limit or config.stop_at_target):
        raise config_lib.ConfigError(
            "--time_limit and --stop_at_target would stop the processes of a multi-host job at different rounds "
            "(their programs must run the same rounds): set --total_steps instead")
    if config.step_time != "none":
        raise config_lib.ConfigError("--step_time simulates slow EnvPool envs; launch.anakin's envs are JAX programs")


FILES_PER_AGENT = 4  # an agent's run directory keeps open its lock, progress.csv, evaluations.csv, a TensorBoard file
FILES_RESERVED = 256  # the program's own: libraries, the JAX runtime, a checkpoint or video being written


def num_agents(config: AnakinConfig) -> int:
    """Agents one program trains: `num_seeds` for each swept learning rate and entropy coefficient."""
    return config.num_seeds * max(1, len(rates(config))) * max(1, len(entropy_coefs(config)))


def files_needed(config: AnakinConfig) -> int:
    """Open files a run keeps (its agents' outputs and the program's own)."""
    return FILES_PER_AGENT * num_agents(config) + FILES_RESERVED


def _check_open_files(config: AnakinConfig) -> None:
    """ConfigError before anything is written when the agents' outputs would exceed the open files this process may
    have (the hard RLIMIT_NOFILE; the run raises its soft limit up to it)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = files_needed(config)
    if hard != resource.RLIM_INFINITY and needed > hard:
        most = max(1, (hard - FILES_RESERVED) // FILES_PER_AGENT)
        raise config_lib.ConfigError(
            f"{num_agents(config):,} agents (--num_seeds and the swept values) would keep {needed:,} files open, "
            f"above this process's limit of {hard:,} (ulimit -Hn): at most {most:,} agents a run")


def raise_open_files_limit(config: AnakinConfig) -> None:
    """Raises this process's soft limit on open files to what the run needs (at most the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = files_needed(config)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed if hard == resource.RLIM_INFINITY else min(needed, hard),
                                                    hard))


def rates(config: AnakinConfig) -> list[float]:
    """The swept learning rates (`--learning_rates`), [] without a sweep; ConfigError for a malformed list."""
    return _swept("learning_rates", config.learning_rates, positive=True)


def entropy_coefs(config: AnakinConfig) -> list[float]:
    """The swept entropy coefficients (`--entropy_coefs`), [] without a sweep; ConfigError for a malformed list."""
    return _swept("entropy_coefs", config.entropy_coefs, positive=False)


def _swept(flag: str, text: str, positive: bool) -> list[float]:
    if not text:
        return []
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        values = []
    low_ok = (lambda v: v > 0.0) if positive else (lambda v: v >= 0.0)
    if not values or not all(low_ok(v) and v < float("inf") for v in values) or len(set(values)) != len(values):
        kind = "positive" if positive else "non-negative"
        raise config_lib.ConfigError(f"--{flag} must be distinct {kind} numbers separated by commas, got '{text}'")
    return values


def steps_per_round(config: AnakinConfig) -> int:
    """Env steps of one round of one agent."""
    return config.num_envs * config.sync_interval


def chunk_rounds(config: AnakinConfig) -> int:
    """Rounds per call of the program: `--chunk_rounds`, or those in min(eval_every, checkpoint_every) env steps."""
    if config.chunk_rounds:
        return config.chunk_rounds
    every = min(config.eval_every if config.eval_episodes > 0 else config.checkpoint_every, config.checkpoint_every)
    return max(1, min(64, every // steps_per_round(config)))
