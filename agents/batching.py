"""Turns a time-major ``Rollout`` into the flat learner batch with GAE advantages.

Seed paper 000 (HTS-RL) Sec. 4.1: the learner reads the storage filled by the behaviour policy
theta_{j-1}. Advantages use the *stored* behaviour values V_{theta_{j-1}}(obs[t]) and the bootstrap
value V_{theta_{j-1}}(obs[T]) under the same behaviour parameters, so the whole target is a function
of (theta_{j-1}, D^{theta_{j-1}}) as Eq. (6) requires.
"""

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from agents.gae import gae_advantages
from agents.losses import masked_mean
from agents.types import Rollout


class FlatBatch(NamedTuple):
    """The rollout flattened to ``N = T * B`` rows (row index ``t * B + b``)."""

    obs: jax.Array  # [N, ...]
    actions: jax.Array  # [N] or [N, A]
    behaviour_log_probs: jax.Array  # [N]
    advantages: jax.Array  # [N]
    returns: jax.Array  # [N]
    valid: jax.Array  # [N]
    behaviour_values: jax.Array  # [N] (PPO's value clipping)


def check_rollout(rollout: Rollout) -> tuple[int, int]:
    """Shape checks on a ``Rollout``; returns ``(T, B)``."""
    chex.assert_rank(rollout.rewards, 2)
    num_steps, num_envs = rollout.rewards.shape
    chex.assert_shape(
        [
            rollout.terminations,
            rollout.truncations,
            rollout.valid,
            rollout.behaviour_log_probs,
            rollout.behaviour_values,
        ],
        (num_steps, num_envs),
    )
    chex.assert_shape(rollout.obs, (num_steps + 1, num_envs, ...))
    chex.assert_shape(rollout.actions, (num_steps, num_envs, ...))
    return num_steps, num_envs


def _flatten(x: jax.Array) -> jax.Array:
    return x.reshape((x.shape[0] * x.shape[1], *x.shape[2:]))


def prepare_batch(
    behaviour_params, rollout: Rollout, *, apply_fn, gamma: float, gae_lambda: float
) -> tuple[FlatBatch, jax.Array]:
    """GAE from the behaviour values, then flatten ``[T, B] -> [T * B]``.

    Returns:
      ``(batch, advantage_mean)``; ``advantage_mean`` is the masked mean raw advantage (a metric).
    """
    check_rollout(rollout)
    _, bootstrap_value = apply_fn(behaviour_params, rollout.obs[-1])  # [B]
    advantages, returns = gae_advantages(
        rollout.rewards,
        rollout.behaviour_values,
        bootstrap_value,
        rollout.terminations,
        rollout.truncations,
        gamma=gamma,
        gae_lambda=gae_lambda,
    )  # [T, B] each
    valid = rollout.valid.astype(jnp.float32)
    batch = FlatBatch(
        obs=_flatten(rollout.obs[:-1]),
        actions=_flatten(rollout.actions),
        behaviour_log_probs=_flatten(rollout.behaviour_log_probs.astype(jnp.float32)),
        advantages=_flatten(advantages),
        returns=_flatten(returns),
        valid=_flatten(valid),
        behaviour_values=_flatten(rollout.behaviour_values.astype(jnp.float32)),
    )
    return batch, masked_mean(advantages, valid)
