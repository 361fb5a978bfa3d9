"""GALA's configuration (seed 004, Table 2): learners, graph, gossip mode and staleness bound, their checks, and the
run's `plan` (total envs, the learning rate scaled over the learners, iterations), recorded beside the config in
config.json and never written back into it."""

from __future__ import annotations

import dataclasses

from agents import scale_learning_rate
from agents.gossip import make_topology
from agents.optim import LR_SCALING_RULES
from systems.common import config as config_lib
from systems.common.config import hyperparameter, setting

SYSTEM = "gala"
MODES = ("async", "pmap")
TOPOLOGIES = ("ring", "exponential")


@dataclasses.dataclass(frozen=True)
class GALAConfig(config_lib.TrainConfig, config_lib.MultiHostConfig):
    """A GALA run as the user asked for it. The envs are `envs_per_learner` per learner (`Plan.num_envs` in all);
    `num_envs` is not read (the launcher records 0). `learning_rate` is the rate before `--lr_scaling`."""

    algo: str = "a2c"
    num_learners: int = hyperparameter(4, "A2C learners (default 4).", group="gala")
    envs_per_learner: int = hyperparameter(
        16, "Training envs of each learner (0: the preset, 16 as in seed 004; GFootball 4).", group="gala",
        flag_default=0)
    topology: str = setting("ring", "Peer graph: directed ring, or time-varying exponential (pmap).", "gala",
                            choices=TOPOLOGIES)
    num_peers: int = setting(1, "Out-peers of each learner (paper: 1).", "gala")
    gossip: str = setting("async", "Execution: learner threads, or lock-step pmap.", "gala", choices=MODES)
    max_staleness: int = setting(
        -1, "tau: wait when the newest in-peer message is more than tau local iterations old (-1: never).", "gala")
    lr_scaling: str = hyperparameter(
        "sqrt", "Scale the learning rate by the batch multiplier (learners): none, linear or sqrt (default: the "
        "task's preset, linear on CartPole-v1; else sqrt, as the GALA paper).", choices=LR_SCALING_RULES,
        group="scale_out")
    log_grad_cosine: bool = setting(False, "Log the learners' pairwise gradient cosine similarity.", "gala")


def validate(config: GALAConfig) -> None:
    config_lib.require_finite_numbers(config)
    if config.normalize_obs or config.normalize_reward:
        raise config_lib.ConfigError(config_lib.NORMALIZATION_SINGLE_LEARNER)
    bad = config_lib.ConfigError
    if config.num_learners < 1:
        raise bad(f"--num_learners must be positive, got {config.num_learners}")
    if config.envs_per_learner < 1:
        raise bad(f"--envs_per_learner must be positive, got {config.envs_per_learner}")
    if config.gossip not in MODES:
        raise bad(f"--gossip must be async or pmap, got '{config.gossip}'")
    if config.topology not in TOPOLOGIES:
        raise bad(f"--topology must be ring or exponential, got '{config.topology}'")
    if config.topology == "exponential" and config.gossip == "async":
        raise bad("--topology=exponential is time-varying and needs lock-step iterations: use --gossip=pmap")
    if config.max_staleness < -1:
        raise bad(f"--max_staleness must be -1 (no bound) or >= 0, got {config.max_staleness}")
    if config.lr_scaling not in LR_SCALING_RULES:
        raise bad(f"--lr_scaling must be none, linear or sqrt, got '{config.lr_scaling}'")
    if config.algo != "a2c":
        raise bad("launch.gala trains A2C learners; --algo must be a2c")
    if config.gossip == "async" and config.num_processes > 1:
        raise bad("--gossip=async runs on one host; use --gossip=pmap with --num_processes > 1")
    try:
        make_topology(config.topology, config.num_learners, config.num_peers)
    except ValueError as error:
        raise bad(str(error)) from None
    config_lib.validate(dataclasses.replace(config, num_envs=config.num_learners * config.envs_per_learner))


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a GALA run derives from its config: every learner's envs, the learning rate scaled by `--lr_scaling`
    over the learners (seed 004 scales by the square root), and each learner's local iterations over the run (the
    learning-rate decay horizon; in lock-step, the rounds)."""

    num_envs: int
    learning_rate: float
    iterations: int


def plan(config: GALAConfig) -> Plan:
    num_envs = config.num_learners * config.envs_per_learner
    return Plan(
        num_envs=num_envs,
        learning_rate=scale_learning_rate(config.learning_rate, config.num_learners, config.lr_scaling),
        iterations=config_lib.rounds(config.total_steps, num_envs * config.sync_interval),
    )
