"""Spreeze's configuration (seed 002, sections 3.1-3.4): the off-policy fields plus its process layout, weight
publishing, transfer ablation and automatic tuning (`SpreezeConfig`), and their checks (`validate`). What the
tuning chooses (`num_samplers=0`, `batch_size=0`) is recorded in the run's `tuning.json`, not in config.json."""

from __future__ import annotations

import dataclasses

from systems.common import config as config_lib
from systems.common import limits
from systems.offpolicy.config import CONTINUOUS_ALGOS, OffPolicyConfig

SYSTEM = "spreeze"
REPLAYS = ("shm", "queue")


@dataclasses.dataclass(frozen=True)
class SpreezeConfig(OffPolicyConfig):
    """A Spreeze run: the off-policy fields plus the process layout (`num_samplers` x `envs_per_sampler` envs)."""

    algo: str = "sac"
    num_samplers: int = 2  # sampler processes (0: auto)
    envs_per_sampler: int = 1
    batch_size: int = 256  # learner batch (0: auto)
    publish_every: int = 50  # updates between weight files
    transfer: str = "shm"  # shm | queue (ablation)
    model_parallel: bool = False
    eval_every: int = 5_000
    render: bool = False  # a visualization process saving rollout GIFs of the newest policy (renders/)
    render_every: float = 30.0  # seconds between GIFs
    render_steps: int = 200  # steps per rollout
    tune_seconds: float = 3.0  # measuring time per value tried by the automatic tuning
    max_batch_size: int = 65_536  # the largest batch --batch_size=auto may try


def validate(config: SpreezeConfig) -> None:
    error = config_lib.ConfigError
    config_lib.validate_run_fields(config)
    if config.algo not in CONTINUOUS_ALGOS:
        raise error(f"--algo must be one of {', '.join(CONTINUOUS_ALGOS)} for launch.spreeze, got '{config.algo}'")
    for name in ("envs_per_sampler", "publish_every", "buffer_size", "total_steps"):
        if getattr(config, name) <= 0:
            raise error(f"--{name} must be positive, got {getattr(config, name)}")
    if config.learning_starts >= config.total_steps:
        raise error(f"--learning_starts={config.learning_starts:,} leaves no updates within --total_steps="
                    f"{config.total_steps:,}")
    for name in ("num_samplers", "batch_size", "learning_starts", "eval_every", "eval_episodes"):
        if getattr(config, name) < 0:
            raise error(f"--{name} must be non-negative, got {getattr(config, name)}")
    limits.require_processes(config.num_samplers, "num_samplers")
    if config.num_samplers * config.envs_per_sampler > config_lib.MAX_ENVS:
        raise error(f"--num_samplers x --envs_per_sampler = {config.num_samplers * config.envs_per_sampler:,} envs "
                    f"is above the limit of {config_lib.MAX_ENVS:,} envs per run")
    if config.transfer not in REPLAYS:
        raise error(f"--transfer must be one of {', '.join(REPLAYS)}, got '{config.transfer}'")
    if config.learning_rate <= 0 or not 0 < config.tau <= 1 or not 0 < config.gamma <= 1:
        raise error("need --learning_rate > 0, --tau in (0, 1] and --gamma in (0, 1]")
    if config.time_limit < 0:
        raise error(f"--time_limit must be non-negative, got {config.time_limit}")
