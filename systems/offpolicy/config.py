"""The off-policy run config shared by PAL (`systems.pal.system.PALConfig`) and Spreeze
(`systems.spreeze.system.SpreezeConfig`): the run's fields and the hyperparameters of DQN / Double DQN (seed 003's
agents), DDPG, TD3 and SAC (seed 002's), declared beside those algorithms in `agents/` and held here by
inheritance. Each system adds its own process or thread layout."""

from __future__ import annotations

import dataclasses

from agents.ddpg import DDPGHyperparameters
from agents.dqn import DQNHyperparameters
from agents.offpolicy import ReplayLearningHyperparameters
from agents.offpolicy_networks import OffPolicyNetworkHyperparameters
from agents.optim import OffPolicyOptimizerHyperparameters
from systems.common.config import RunConfig

DISCRETE_ALGOS = ("dqn", "ddqn")
CONTINUOUS_ALGOS = ("ddpg", "td3", "sac")
ALGOS = DISCRETE_ALGOS + CONTINUOUS_ALGOS


# Bases in reverse --help order: the "off_policy" group lists the optimizer's flags, the learner's, the networks'
# and DDPG's noise; the "dqn" group DQN's.
@dataclasses.dataclass(frozen=True)
class OffPolicyConfig(DQNHyperparameters, DDPGHyperparameters, OffPolicyNetworkHyperparameters,
                      ReplayLearningHyperparameters, OffPolicyOptimizerHyperparameters, RunConfig):
    """Run fields plus the off-policy algorithm's. `num_envs` is not read: each system's envs follow from its layout."""

    algo: str = "dqn"  # dqn | ddqn | ddpg | td3 | sac
    num_envs: int = 1  # not read (PAL: its plan's, actors x envs per actor; Spreeze: samplers x envs per sampler)
    eval_deterministic: bool = True  # the off-policy systems evaluate the greedy / mean action


_ALGO_COLUMNS = {  # the metrics of agents/dqn.py, ddpg.py and sac.py that progress.csv keeps
    "dqn": ("loss", "q_mean", "td_abs_mean"),
    "ddqn": ("loss", "q_mean", "td_abs_mean"),
    "ddpg": ("critic_loss", "actor_loss", "q_mean", "td_abs_mean"),
    "td3": ("critic_loss", "actor_loss", "q_mean", "td_abs_mean"),
    "sac": ("critic_loss", "actor_loss", "alpha", "entropy", "q_mean", "td_abs_mean"),
}


def metric_columns(algo: str) -> tuple[str, ...]:
    """progress.csv's columns for the off-policy learner `algo` (the system adds its own, e.g. `replay_size`)."""
    return _ALGO_COLUMNS[algo]
