"""PAL's configuration (seed 003, section V): its fields beyond the off-policy ones, and their checks."""

from __future__ import annotations

import dataclasses
import math

from envs.factory import EnvSpec
from systems.common import config as config_lib
from systems.common import limits
from systems.common.config import hyperparameter, setting
from systems.offpolicy.config import ALGOS, CONTINUOUS_ALGOS, DISCRETE_ALGOS, OffPolicyConfig

REPLAYS = ("per", "uniform")
ALLOCATIONS = ("manual", "auto")
SUPPORTED_FAMILIES = ("classic", "box2d", "mujoco", "atari", "gymnasium", "gymnax", "brax")


@dataclasses.dataclass(frozen=True)
class PALConfig(OffPolicyConfig):
    """A PAL run: the off-policy fields plus actor and learner threads and the prioritized replay. `num_envs` is
    derived (actors x envs per actor)."""

    num_actors: int = hyperparameter(1, "Actor threads, each with its own EnvPool (default 1).", group="pal")
    envs_per_actor: int = hyperparameter(4, "Envs of each actor thread's own EnvPool (default: preset).", group="pal")
    num_learners: int = hyperparameter(
        1, "Learner threads; each samples batch_size / num_learners (default 1).", group="pal")
    update_interval: float = hyperparameter(
        1.0, "Env steps collected per optimizer step, held by the system (Alg. 1; 0: free-running; default: preset).",
        group="pal")
    replay: str = setting("per", "Prioritized (PER) or uniform replay.", "pal", choices=REPLAYS)
    per_alpha: float = setting(0.6, "PER priority exponent alpha.", "pal")
    per_beta: float = setting(0.4, "PER importance exponent beta at the start (annealed to 1).", "pal")
    priority_eps: float = 1e-6
    tree_k: int = setting(16, "Fan-out K of the sum tree (seed 003 section IV-C).", "pal")
    # --help lists the DQN exploration flags (`OffPolicyConfig`) between the groups "pal" and "pal_run".
    allocate: str = setting(
        "manual", "auto: profile actor and learner throughput and pick --num_actors / --num_learners by Eq. 5.",
        "pal_run", choices=ALLOCATIONS)
    cores: int = setting(0, "Cores M for --allocate=auto (0: the cores this process may use).", "pal_run")
    profile_seconds: float = setting(2.0, "Seconds per measured point of --allocate=auto.", "pal_run")
    checkpoint_buffer: bool = setting(
        False, "Save the replay buffer with each checkpoint and restore it on --resume.", "pal_run")


def validate(config: PALConfig) -> None:
    """Raises ConfigError with one clear line for the first bad value."""
    error = config_lib.ConfigError
    config_lib.validate_run_fields(config)
    if config.algo not in ALGOS:
        raise error(f"--algo must be one of {', '.join(ALGOS)} for launch.pal, got '{config.algo}'")
    for name in ("num_actors", "envs_per_actor", "num_learners", "batch_size", "buffer_size", "total_steps",
                 "target_update_period", "tree_k"):
        if getattr(config, name) <= 0:
            raise error(f"--{name} must be positive, got {getattr(config, name)}")
    for name in ("learning_starts", "eval_every", "eval_episodes", "checkpoint_every", "cores"):
        if getattr(config, name) < 0:
            raise error(f"--{name} must be non-negative, got {getattr(config, name)}")
    limits.require_threads(config.num_actors, "num_actors")
    limits.require_threads(config.num_learners, "num_learners")
    if config.num_actors * config.envs_per_actor > config_lib.MAX_ENVS:
        raise error(f"--num_actors x --envs_per_actor = {config.num_actors * config.envs_per_actor:,} envs is above "
                    f"the limit of {config_lib.MAX_ENVS:,} envs per run")
    if config.learning_starts >= config.total_steps:
        raise error(f"--learning_starts={config.learning_starts:,} leaves no updates within --total_steps="
                    f"{config.total_steps:,}")
    if config.tree_k < 2:
        raise error(f"--tree_k must be at least 2, got {config.tree_k}")
    if config.batch_size % config.num_learners:
        raise error(f"--num_learners={config.num_learners} must divide --batch_size={config.batch_size}")
    if config.replay not in REPLAYS:
        raise error(f"--replay must be one of {', '.join(REPLAYS)}, got '{config.replay}'")
    if config.allocate not in ALLOCATIONS:
        raise error(f"--allocate must be one of {', '.join(ALLOCATIONS)}, got '{config.allocate}'")
    if not (math.isfinite(config.update_interval) and config.update_interval >= 0):
        raise error(f"--update_interval must be finite and >= 0, got {config.update_interval}")
    if config.allocate == "auto" and config.update_interval == 0:
        raise error("--allocate=auto balances actors against learners by --update_interval, which must be > 0")
    if config.learning_rate <= 0 or config.critic_learning_rate < 0:
        raise error("--learning_rate must be positive and --critic_learning_rate non-negative")
    if not 0 < config.gamma <= 1:
        raise error(f"--gamma must be in (0, 1], got {config.gamma}")
    if not 0 < config.tau <= 1 and not (config.algo in DISCRETE_ALGOS and config.tau >= 1):
        raise error(f"--tau must be in (0, 1], got {config.tau}")
    if config.per_alpha < 0 or config.per_beta < 0 or config.priority_eps <= 0:
        raise error("--per_alpha and --per_beta must be >= 0 and --priority_eps > 0")
    if not (0 <= config.epsilon_end <= config.epsilon_start <= 1) or not 0 <= config.exploration_fraction <= 1:
        raise error("need 0 <= --epsilon_end <= --epsilon_start <= 1 and --exploration_fraction in [0, 1]")
    if config.action_noise < 0:
        raise error(f"--action_noise must be >= 0, got {config.action_noise}")
    if not config.hidden_sizes or any(h <= 0 for h in config.hidden_sizes):
        raise error(f"--hidden_sizes must be positive integers, got {config.hidden_sizes}")
    if config.profile_seconds <= 0:
        raise error(f"--profile_seconds must be positive, got {config.profile_seconds}")
    if config.time_limit < 0:
        raise error(f"--time_limit must be non-negative, got {config.time_limit}")


def check_env(config: PALConfig, spec: EnvSpec) -> None:
    """Algorithm and task must fit: one discrete action for DQN, continuous vectors for DDPG / TD3 / SAC."""
    if spec.family not in SUPPORTED_FAMILIES:
        raise config_lib.ConfigError(
            f"launch.pal supports {', '.join(SUPPORTED_FAMILIES)} tasks; {spec.env_id} is {spec.family}"
        )
    if spec.factored:
        raise config_lib.ConfigError(
            f"--algo={config.algo} takes one Discrete or Box action; {spec.env_id}'s action has "
            f"{spec.action_dim} components (MultiDiscrete / MultiBinary: use launch.hts, sync, ba3c or gala)"
        )
    if config.algo in DISCRETE_ALGOS and spec.continuous:
        raise config_lib.ConfigError(
            f"--algo={config.algo} needs discrete actions; {spec.env_id} is continuous (use ddpg, td3 or sac)"
        )
    if config.algo in CONTINUOUS_ALGOS and not spec.continuous:
        raise config_lib.ConfigError(
            f"--algo={config.algo} needs continuous actions; {spec.env_id} is discrete (use dqn or ddqn)"
        )
    if config.algo in CONTINUOUS_ALGOS and len(spec.obs_shape) != 1:
        raise config_lib.ConfigError(f"--algo={config.algo} needs vector observations, {spec.env_id} has images")
    if len(spec.obs_shape) == 3 and spec.family != "atari":
        raise config_lib.ConfigError(f"launch.pal's image network is the Nature CNN for Atari frames; {spec.env_id} "
                                     f"has {'x'.join(map(str, spec.obs_shape))} images (launch.hts, launch.sync and "
                                     "launch.anakin train other image shapes)")


@dataclasses.dataclass(frozen=True)
class Plan:
    """The threads a PAL run uses: `--num_actors` / `--num_learners` as asked, or Eq. 5's choice with
    `--allocate=auto` (section V-D), recorded beside the config in config.json."""

    num_actors: int
    num_learners: int
    num_envs: int  # actors x envs per actor


def plan(config: PALConfig, num_actors: int | None = None, num_learners: int | None = None) -> Plan:
    actors = config.num_actors if num_actors is None else num_actors
    return Plan(num_actors=actors, num_learners=config.num_learners if num_learners is None else num_learners,
                num_envs=actors * config.envs_per_actor)
