"""Pure JAX/Flax agents for HTS-RL (seed paper 000): networks, losses, updates and optimizers.

``a2c_update`` implements the one-step-delayed gradient of Eq. (6); ``ppo_update`` runs PPO epochs
from the current parameters with ratios against the stored behaviour log-probs. Both take an optional
pmap ``axis_name`` for data-parallel training; ``large_batch_adam`` is Distributed BA3C's Adam (seed
paper 001, Eq. (5)-(6)). Off-policy learners for the PAL system (seed paper 003): DQN / Double DQN, DDPG / TD3
and SAC, each returning new priorities and taking importance weights. No threads, no I/O.
"""

from agents.a2c import A2CConfig, a2c_update
from agents.acting import action_keys, policy_step
from agents.ddpg import DDPGConfig, DDPGState, ddpg_act, ddpg_config, ddpg_init, ddpg_update
from agents.distributions import entropy, log_prob, mode, sample_actions
from agents.dqn import DQNConfig, DQNState, dqn_act, dqn_init, dqn_update
from agents.gae import gae_advantages
from agents.losses import a2c_loss
from agents.networks import ActorCritic, make_network
from agents.optim import (
    LARGE_BATCH_EPS,
    large_batch_adam,
    make_optimizer,
    scale_by_large_batch_adam,
    scale_learning_rate,
)
from agents.parallel import DEVICE_AXIS, LEARNER_AXIS, mean_over_axis
from agents.ppo import PPOConfig, ppo_loss, ppo_update
from agents.sac import SACConfig, SACState, sac_act, sac_init, sac_update
from agents.types import Rollout, TrainState

__all__ = [
    "A2CConfig",
    "ActorCritic",
    "DDPGConfig",
    "DDPGState",
    "DEVICE_AXIS",
    "DQNConfig",
    "DQNState",
    "LEARNER_AXIS",
    "PPOConfig",
    "Rollout",
    "SACConfig",
    "SACState",
    "TrainState",
    "a2c_loss",
    "action_keys",
    "a2c_update",
    "ddpg_act",
    "ddpg_config",
    "ddpg_init",
    "ddpg_update",
    "dqn_act",
    "dqn_init",
    "dqn_update",
    "entropy",
    "gae_advantages",
    "LARGE_BATCH_EPS",
    "large_batch_adam",
    "log_prob",
    "make_network",
    "make_optimizer",
    "mean_over_axis",
    "mode",
    "policy_step",
    "ppo_loss",
    "ppo_update",
    "sac_act",
    "sac_init",
    "sac_update",
    "sample_actions",
    "scale_by_large_batch_adam",
    "scale_learning_rate",
]
