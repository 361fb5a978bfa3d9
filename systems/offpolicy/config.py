"""The off-policy algorithm's fields, shared by PAL (`systems.pal.system.PALConfig`) and Spreeze
(`systems.spreeze.system.SpreezeConfig`): DQN / Double DQN (seed 003's agents), DDPG, TD3 and SAC (seed 002's), their
networks, optimizers, targets, exploration and replay sizes. Each system adds its own process or thread layout."""

from __future__ import annotations

import dataclasses

import numpy as np

from systems.common.config import RunConfig, hyperparameter, setting

DISCRETE_ALGOS = ("dqn", "ddqn")
CONTINUOUS_ALGOS = ("ddpg", "td3", "sac")
ALGOS = DISCRETE_ALGOS + CONTINUOUS_ALGOS


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig(RunConfig):
    """Run fields plus the off-policy algorithm's. `num_envs` is not read: each system's envs follow from its layout."""

    algo: str = "dqn"  # dqn | ddqn | ddpg | td3 | sac
    num_envs: int = 1  # not read (PAL: its plan's, actors x envs per actor; Spreeze: samplers x envs per sampler)
    learning_rate: float = 2.5e-4
    critic_learning_rate: float = 0.0  # 0: learning_rate
    opt_eps: float = 1e-5
    max_grad_norm: float = 0.5  # global gradient norm clip (0: none; the launchers set 10 for DQN, 0 otherwise)
    gamma: float = 0.99
    hidden_sizes: tuple = (256, 256)
    batch_size: int = 256  # global batch of one optimizer step
    buffer_size: int = 100_000
    learning_starts: int = 1_000  # env steps before the first update
    target_update_period: int = hyperparameter(  # DQN hard target copy period (tau >= 1)
        500, "DQN: updates between target copies (default: preset).", group="dqn")
    tau: float = 1.0  # Polyak rate; DQN: >= 1 means hard copies every target_update_period updates
    # DQN exploration: linear decay from epsilon_start to epsilon_end over exploration_fraction of the run.
    epsilon_start: float = setting(1.0, "DQN: initial exploration rate.", "dqn")
    epsilon_end: float = hyperparameter(0.05, "DQN: final exploration rate (default: preset).", group="dqn")
    exploration_fraction: float = hyperparameter(
        0.5, "DQN: fraction of the run to decay epsilon over (default: preset).", group="dqn")
    action_noise: float = 0.1  # DDPG / TD3 Gaussian exploration noise (fraction of the action half-range)
    stop_at_target: bool = False  # end the run at the first evaluation whose mean return reaches target_return
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


def reached_target(evaluations: list, config: OffPolicyConfig) -> bool:
    """With `stop_at_target`: the newest evaluation's mean return is at least `target_return`."""
    if not config.stop_at_target or config.target_return is None or not evaluations:
        return False
    return float(np.mean(evaluations[-1].returns)) >= config.target_return
