"""The off-policy algorithm's fields, shared by PAL (`systems.pal.system.PALConfig`) and Spreeze
(`systems.spreeze.system.SpreezeConfig`): DQN / Double DQN (seed 003's agents), DDPG, TD3 and SAC (seed 002's), their
networks, optimizers, targets, exploration and replay sizes. Each system adds its own process or thread layout."""

from __future__ import annotations

import dataclasses

from agents.offpolicy_networks import INITS
from systems.common.config import RunConfig, hyperparameter, setting

DISCRETE_ALGOS = ("dqn", "ddqn")
CONTINUOUS_ALGOS = ("ddpg", "td3", "sac")
ALGOS = DISCRETE_ALGOS + CONTINUOUS_ALGOS


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig(RunConfig):
    """Run fields plus the off-policy algorithm's. `num_envs` is not read: each system's envs follow from its layout."""

    algo: str = "dqn"  # dqn | ddqn | ddpg | td3 | sac
    num_envs: int = 1  # not read (PAL: its plan's, actors x envs per actor; Spreeze: samplers x envs per sampler)
    # The "off_policy" group: the flags launch.pal and launch.spreeze share, in --help order.
    learning_rate: float = hyperparameter(2.5e-4, "Learning rate (default: preset).", group="off_policy",
                                          search=("float", 1e-5, 3e-3, True))
    critic_learning_rate: float = hyperparameter(
        0.0, "Critic learning rate (0: --learning_rate; default: preset).", group="off_policy")
    gamma: float = hyperparameter(0.99, "Discount (default: preset).", group="off_policy",
                                  search=("categorical", (0.95, 0.98, 0.99, 0.995)))
    max_grad_norm: float = hyperparameter(
        0.5, "Global gradient norm clip (0: none; default: 10 for DQN, else 0).", group="off_policy")
    opt_eps: float = hyperparameter(1e-5, "Optimizer epsilon (default: 1e-5 for DQN, else 1e-8).", group="off_policy")
    hidden_sizes: tuple = hyperparameter((256, 256), "MLP hidden sizes, e.g. 256,256 (default: preset).",
                                         group="off_policy", search=("categorical", ("64,64", "256,256", "400,300")))
    batch_size: int = hyperparameter(256, "Batch of one optimizer step (default: preset).", group="off_policy",
                                     flag_kind="string", search=("categorical", (64, 128, 256, 512)))
    buffer_size: int = hyperparameter(100_000, "Replay capacity in transitions (default: preset).", group="off_policy")
    learning_starts: int = hyperparameter(
        1_000, "Env steps collected before the first update (default: preset).", group="off_policy")
    tau: float = hyperparameter(
        1.0, "Polyak rate of the target networks (DQN: 1 = hard copies; default: preset).", group="off_policy")
    network_init: str = hyperparameter(
        "flax", "Dense initialisation of the MLPs: flax (LeCun normal, zero bias; CleanRL's JAX scripts) or torch "
        "(PyTorch's uniform +-1/sqrt(fan_in); SB3's and CleanRL's PyTorch scripts) (default: preset; flax but for "
        "PAL's TD3 on MuJoCo / Brax).", choices=INITS, group="off_policy")
    action_noise: float = setting(0.1, "DDPG/TD3: Gaussian exploration noise (fraction of half-range).", "off_policy")
    target_update_period: int = hyperparameter(  # DQN hard target copy period (tau >= 1)
        500, "DQN: updates between target copies (default: preset).", group="dqn", search=("int", 100, 10_000, True))
    # DQN exploration: linear decay from epsilon_start to epsilon_end over exploration_fraction of the run.
    epsilon_start: float = setting(1.0, "DQN: initial exploration rate.", "dqn")
    epsilon_end: float = hyperparameter(0.05, "DQN: final exploration rate (default: preset).", group="dqn",
                                        search=("float", 0.01, 0.1))
    exploration_fraction: float = hyperparameter(
        0.5, "DQN: fraction of the run to decay epsilon over (default: preset).", group="dqn",
        search=("float", 0.05, 0.5))
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

