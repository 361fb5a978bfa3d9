"""Distributed BA3C's configuration (seed 001, Table 1 and Sec. 2.2-2.5): what the user asks for (`BA3CConfig`), its
checks (`validate`), and what a run derives from it on its devices (`plan`: total envs, effective batch, the scaled
learning rate, the optimizer's epsilon). `config.json` records both, the plan under "plan"; the plan is never
written back into the config."""

from __future__ import annotations

import dataclasses

from agents import LARGE_BATCH_EPS, scale_learning_rate
from agents.optim import LR_SCALING_RULES
from systems.common import config as config_lib
from systems.common import layout_rule
from systems.common.config import hyperparameter, setting

SYSTEM = "ba3c"


@dataclasses.dataclass(frozen=True)
class BA3CConfig(config_lib.TrainConfig, config_lib.MultiHostConfig):
    """A data-parallel run as the user asked for it. The envs are `local_batch / sync_interval` per device
    (`Plan.num_envs` in all); `num_envs` is not read (the launcher records 0). `learning_rate` is the rate
    before `--lr_scaling`."""

    algo: str = "a2c"
    optimizer: str = "adam_large_batch"
    learning_rate: float = 1e-3  # before --lr_scaling
    anneal_lr: bool = False
    opt_eps: float | None = None  # None: the plan's (1e-8 for adam_large_batch, Table 1; else 1e-5)
    num_devices: int = setting(0, "Devices per process on the pmap axis (0: all local ones).", "ba3c")
    local_batch: int = hyperparameter(
        80, "Data points per device per update = envs per device x sync_interval (default: the preset's 16 envs x 5).",
        group="ba3c")
    layout: str = setting(
        "preset", "auto: fit the envs per device to this machine when no size is given (an accelerator: 128; a CPU "
        "of more cores than the presets' 2: scaled with the cores), the rollout kept, so the local batch grows "
        "(effective batch at most 2,048, seed 001's largest); preset: the literal preset.", "ba3c",
        choices=layout_rule.CHOICES, flag_default="auto")
    # 128 is the paper's final width (Table 2).
    hidden: int = setting(256, "Width of the BA3C fully connected layer (Atari; Table 2).", "ba3c")
    adam_b1: float = setting(0.8, "Adam beta1 (paper: 0.8).", "ba3c")
    adam_b2: float = setting(0.75, "Adam beta2 (paper: 0.75).", "ba3c")
    lr_scaling: str = hyperparameter(
        "none", "Scale the learning rate by the batch multiplier (devices): none, linear or sqrt (default: none, as "
        "the BA3C paper).", choices=LR_SCALING_RULES, group="scale_out")
    debug: bool = setting(False, "Check after every update that all replicas are bit-identical.", "ba3c")


def envs_per_device(config: BA3CConfig) -> int:
    return config.local_batch // config.sync_interval


def validate(config: BA3CConfig) -> None:
    """One clear line (ConfigError) for the first bad value: the data-parallel ones, then the shared ones with one
    device's envs (a checked copy; the config is not changed)."""
    config_lib.require_finite_numbers(config)
    if config.normalize_obs or config.normalize_reward:
        raise config_lib.ConfigError(config_lib.NORMALIZATION_SINGLE_LEARNER)
    if config.num_devices < 0:
        raise config_lib.ConfigError(f"--num_devices must be non-negative, got {config.num_devices}")
    if config.sync_interval <= 0:
        raise config_lib.ConfigError(f"--sync_interval must be positive, got {config.sync_interval}")
    if config.local_batch <= 0 or config.local_batch % config.sync_interval:
        raise config_lib.ConfigError(
            f"--local_batch={config.local_batch} must be a positive multiple of --sync_interval="
            f"{config.sync_interval} (envs per device = local_batch / sync_interval)"
        )
    if config.hidden <= 0:
        raise config_lib.ConfigError(f"--hidden must be positive, got {config.hidden}")
    if config.lr_scaling not in LR_SCALING_RULES:
        raise config_lib.ConfigError(f"--lr_scaling must be one of {', '.join(LR_SCALING_RULES)}, got "
                                     f"'{config.lr_scaling}'")
    if config.algo != "a2c":
        raise config_lib.ConfigError("launch.ba3c trains A2C (BA3C); --algo must be a2c")
    if not (0 <= config.adam_b1 < 1 and 0 <= config.adam_b2 < 1):
        raise config_lib.ConfigError("--adam_b1 and --adam_b2 must be in [0, 1)")
    if config.opt_eps is not None and config.opt_eps <= 0:
        raise config_lib.ConfigError(f"--opt_eps must be positive, got {config.opt_eps}")
    if config.num_processes < 1:
        raise config_lib.ConfigError(f"--num_processes must be >= 1, got {config.num_processes}")
    one_device = dataclasses.replace(config, num_envs=envs_per_device(config), opt_eps=config.opt_eps or 0.0)
    config_lib.validate(one_device)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a BA3C run derives from its config and devices. `learning_rate` is the config's scaled by `--lr_scaling`
    over the devices; `opt_eps` is `--opt_eps`, else 1e-8 for large-batch Adam (Table 1) and 1e-5 otherwise."""

    devices: int  # on the pmap axis, over every process
    envs_per_device: int
    num_envs: int
    effective_batch: int  # data points per update over every device
    learning_rate: float
    opt_eps: float
    total_rounds: int  # updates of the whole run


def plan(config: BA3CConfig, num_global_devices: int) -> Plan:
    """The run's derived values over `num_global_devices` devices (every process's); ConfigError (one line) when
    they do not fit: more envs than a run may have, or fewer steps than one round."""
    effective_batch = num_global_devices * config.local_batch
    num_envs = num_global_devices * envs_per_device(config)
    if num_envs > config_lib.MAX_ENVS:
        raise config_lib.ConfigError(f"{num_global_devices} devices x {envs_per_device(config)} envs = {num_envs:,}, "
                                     f"above the limit of {config_lib.MAX_ENVS:,} envs per run")
    if config.total_steps < effective_batch:
        raise config_lib.ConfigError(
            f"--total_steps={config.total_steps:,} is less than one round (the effective batch, {num_global_devices}"
            f" devices x --local_batch={config.local_batch}), the smallest unit a run trains")
    eps = config.opt_eps
    if eps is None:
        eps = LARGE_BATCH_EPS if config.optimizer == "adam_large_batch" else 1e-5
    return Plan(
        devices=num_global_devices, envs_per_device=envs_per_device(config), num_envs=num_envs,
        effective_batch=effective_batch,
        learning_rate=scale_learning_rate(config.learning_rate, num_global_devices, config.lr_scaling),
        opt_eps=eps, total_rounds=config_lib.rounds(config.total_steps, effective_batch),
    )
