"""Pure JAX/Flax agents for HTS-RL (seed paper 000): networks, losses, updates and optimizers.

``a2c_update`` implements the one-step-delayed gradient of Eq. (6); ``ppo_update`` runs PPO epochs
from the current parameters with ratios against the stored behaviour log-probs. Both take an optional
pmap ``axis_name`` for data-parallel training; ``large_batch_adam`` is Distributed BA3C's Adam (seed
paper 001, Eq. (5)-(6)). No threads, no I/O.
"""

from agents.a2c import A2CConfig, a2c_update
from agents.acting import policy_step
from agents.distributions import entropy, log_prob, mode, sample_actions
from agents.gae import gae_advantages
from agents.losses import a2c_loss, ppo_loss
from agents.networks import ActorCritic, make_network
from agents.optim import (
    large_batch_adam,
    large_batch_eps,
    make_optimizer,
    scale_by_large_batch_adam,
    scale_learning_rate,
)
from agents.parallel import DEVICE_AXIS, LEARNER_AXIS, mean_over_axis
from agents.ppo import PPOConfig, ppo_update
from agents.types import Rollout, TrainState

__all__ = [
    "DEVICE_AXIS",
    "LEARNER_AXIS",
    "A2CConfig",
    "ActorCritic",
    "PPOConfig",
    "Rollout",
    "TrainState",
    "a2c_loss",
    "a2c_update",
    "entropy",
    "gae_advantages",
    "large_batch_adam",
    "large_batch_eps",
    "log_prob",
    "make_network",
    "make_optimizer",
    "mean_over_axis",
    "mode",
    "policy_step",
    "ppo_loss",
    "ppo_update",
    "sample_actions",
    "scale_by_large_batch_adam",
    "scale_learning_rate",
]
