"""Actor-side inference: one forward pass plus per-row sampling.

Seed paper 000 (HTS-RL), Sec. 4.1 ("Asynchronous actors and executors"): every observation arrives
with its own pseudo-random seed owned by the executor (here: one PRNG key per row), and each row's
action, log-prob and value depend only on that row's observation and key. Together with a fixed
batch shape (XLA CPU results are bit-identical per row at a fixed shape, but not across shapes) this
makes actions independent of how observations were grouped into actor batches, hence fully
deterministic.
"""

import chex
import jax
import jax.numpy as jnp

from agents import distributions


def action_keys(run_key: jax.Array, env_ids: jax.Array, env_steps: jax.Array, hold: int = 1) -> jax.Array:
    """The ``[B]`` PRNG keys of env ``env_ids[i]`` at its step ``env_steps[i]`` (a scalar: the same step for all):
    ``fold_in(fold_in(run_key, env), step // hold)``. A row's key is owned by its (env, step), as Sec. 4.1 gives
    every observation its own seed, so an action never depends on which actor, chunk, device or process computed it.
    ``hold`` > 1 gives an env's ``hold`` consecutive steps one key: gSDE's exploration matrix, drawn from the key,
    lasts that many steps (``NetworkHyperparameters.key_hold``)."""
    env_steps = jnp.broadcast_to(env_steps, jnp.shape(env_ids)) // hold
    return jax.vmap(lambda env, step: jax.random.fold_in(jax.random.fold_in(run_key, env), step))(env_ids, env_steps)


def policy_step(params, obs: jax.Array, keys: jax.Array, *, apply_fn):
    """Returns ``(actions, log_probs [B], values [B])`` for a batch of observations.

    Args:
      params: behaviour parameters.
      obs: ``[B, ...]`` observations.
      keys: ``[B]`` PRNG keys, one per row.
      apply_fn: ``apply_fn(params, obs) -> (policy_out, value)``.
    """
    chex.assert_axis_dimension(keys, 0, obs.shape[0])
    policy_out, values = apply_fn(params, obs)
    actions = distributions.sample_actions(policy_out, keys)
    log_probs = distributions.log_prob(policy_out, actions)
    return actions, log_probs, values


def recurrent_policy_step(params, obs: jax.Array, carry: jax.Array, first: jax.Array, keys: jax.Array, *, apply_fn):
    """``policy_step`` of a recurrent actor-critic (``agents.recurrent``): ``(actions, log_probs [B], values [B],
    carry' [B, S])``, each env's state ``carry`` zeroed where ``first`` before the step.

    Args:
      apply_fn: ``apply_fn(params, obs, carry, first) -> (policy_out, value, carry')``.
    """
    chex.assert_axis_dimension(keys, 0, obs.shape[0])
    policy_out, values, carry = apply_fn(params, obs, carry, first)
    actions = distributions.sample_actions(policy_out, keys)
    log_probs = distributions.log_prob(policy_out, actions)
    return actions, log_probs, values, carry
