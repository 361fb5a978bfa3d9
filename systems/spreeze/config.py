"""Spreeze's configuration (seed 002, sections 3.1-3.4): the off-policy fields plus its process layout, weight
publishing, transfer ablation and automatic tuning (`SpreezeConfig`), and their checks (`validate`). What the
tuning chooses (`num_samplers=0`, `batch_size=0`) is recorded in the run's `tuning.json`, not in config.json."""

from __future__ import annotations

import dataclasses

from systems.common import config as config_lib
from systems.common import limits
from systems.common.config import hyperparameter, setting
from systems.offpolicy.config import CONTINUOUS_ALGOS, OffPolicyConfig

SYSTEM = "spreeze"
REPLAYS = ("shm", "queue")


@dataclasses.dataclass(frozen=True)
class SpreezeConfig(OffPolicyConfig):
    """A Spreeze run: the off-policy fields plus the process layout (`num_samplers` x `envs_per_sampler` envs)."""

    algo: str = "sac"
    batch_size: int = hyperparameter(  # 0: auto
        256, "Batch of one optimizer step, or 'auto' (section 3.4) (default: preset).", group="off_policy",
        flag_kind="string")
    num_samplers: int = setting(2, "Sampler processes, or 'auto' (section 3.4).", "spreeze",  # 0: auto
                                flag_default="2", flag_kind="string")
    envs_per_sampler: int = setting(1, "Envs of each sampler's own EnvPool.", "spreeze")
    publish_every: int = setting(50, "Learner updates between weight files (they are Spreeze's checkpoints).",
                                 "spreeze")
    transfer: str = setting("shm", "Experience transfer: shared memory or queue.", "spreeze", choices=REPLAYS)
    model_parallel: bool = setting(False, "SAC: actor on one device, critics on another.", "spreeze")
    render: bool = setting(False, "Visualization process: rollout GIFs of the newest policy.", "spreeze")  # renders/
    render_every: float = setting(30.0, "Seconds between rollout GIFs.", "spreeze")
    tune_seconds: float = setting(3.0, "Measuring time per value tried by the auto tuning.", "spreeze")
    eval_every: int = hyperparameter(
        5_000, "Env steps between evaluations (0: only at the end; default: preset).", group="run")
    render_steps: int = 200  # steps per rollout
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
