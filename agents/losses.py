"""Actor-critic losses: A2C (seed paper 000 Eq. (4)) and PPO's clipped surrogate.

* ``a2c_loss``: the negated objective whose gradient is Eq. (4) of seed paper 000 (HTS-RL): -log
  pi_theta(a_t|s_t) * (R_t^(n) - V(s_t)) - alpha * H(pi_theta(.|s_t)), plus the critic's squared
  error. HTS-RL's one-step-delayed update (Eq. 6) differentiates this at the *behaviour* parameters;
  see ``agents.a2c``.
* ``ppo_loss``: Schulman et al. (2017), "Proximal Policy Optimization Algorithms", Eq. (7) (L^CLIP),
  with a value loss and entropy bonus (Eq. 9), as in CleanRL's PPO.

Both take a flat batch ``[N, ...]`` and a ``valid`` mask ``[N]``; every mean is a masked mean so
rows collected on EnvPool's reset steps contribute nothing.
"""

import chex
import jax
import jax.numpy as jnp

from agents import distributions
from agents.types import Rollout

__all__ = ["Rollout", "a2c_loss", "masked_mean", "ppo_loss"]


def masked_mean(x: jax.Array, valid: jax.Array) -> jax.Array:
    """Mean of ``x`` over rows where ``valid`` is 1; 0 if no row is valid (avoids 0/0)."""
    chex.assert_equal_shape([x, valid])
    return jnp.sum(x * valid) / jnp.maximum(jnp.sum(valid), 1.0)


def _check_batch(obs, actions, valid, *per_row):
    chex.assert_rank(valid, 1)
    n = valid.shape[0]
    chex.assert_axis_dimension(obs, 0, n)
    chex.assert_axis_dimension(actions, 0, n)
    chex.assert_shape(list(per_row), (n,))


def a2c_loss(
    params,
    apply_fn,
    obs: jax.Array,
    actions: jax.Array,
    advantages: jax.Array,
    returns: jax.Array,
    valid: jax.Array,
    *,
    value_coef: float,
    entropy_coef: float,
) -> tuple[jax.Array, dict]:
    """Advantage actor-critic loss.

    Args:
      params: network parameters at which the loss (and its gradient) is evaluated.
      apply_fn: ``apply_fn(params, obs) -> (policy_out, value)``.
      obs: ``[N, ...]`` observations.
      actions: ``[N]`` int or ``[N, A]`` float.
      advantages: ``[N]`` (treated as constants: stop-gradient).
      returns: ``[N]`` value targets.
      valid: ``[N]`` float mask.
      value_coef: weight of the value loss ``0.5 * (returns - V)^2``.
      entropy_coef: weight of the entropy bonus.

    Returns:
      ``(loss, metrics)`` with metrics ``policy_loss``, ``value_loss`` (unweighted), ``entropy``,
      ``total_loss``.
    """
    _check_batch(obs, actions, valid, advantages, returns)
    policy_out, values = apply_fn(params, obs)
    chex.assert_equal_shape([values, valid])
    valid = valid.astype(jnp.float32)

    log_probs = distributions.log_prob(policy_out, actions)  # [N]
    policy_loss = masked_mean(-log_probs * jax.lax.stop_gradient(advantages), valid)
    value_loss = masked_mean(0.5 * jnp.square(jax.lax.stop_gradient(returns) - values), valid)
    entropy = masked_mean(distributions.entropy(policy_out), valid)
    total_loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
    metrics = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "total_loss": total_loss,
    }
    return total_loss, metrics


def _normalized_advantages(advantages: jax.Array, valid: jax.Array) -> jax.Array:
    """``(A - mean) / (std + 1e-8)`` with masked statistics, so invalid rows neither shift nor scale the valid ones."""
    adv_mean = masked_mean(advantages, valid)
    adv_std = jnp.sqrt(masked_mean(jnp.square(advantages - adv_mean), valid))
    return (advantages - adv_mean) / (adv_std + 1e-8)


def _clipped_surrogate_loss(
    log_ratio: jax.Array, advantages: jax.Array, valid: jax.Array, *, clip_eps: float
) -> tuple[jax.Array, jax.Array]:
    """Negated L^CLIP (Schulman et al. 2017, Eq. 7): ``-mean(min(r A, clip(r, 1 - eps, 1 + eps) A))``.

    Returns:
      ``(policy_loss, ratio [N])`` with ``r = exp(log_ratio)``.
    """
    ratio = jnp.exp(log_ratio)
    surrogate = ratio * advantages
    clipped_surrogate = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    return masked_mean(-jnp.minimum(surrogate, clipped_surrogate), valid), ratio


def _value_loss(
    values: jax.Array,
    returns: jax.Array,
    valid: jax.Array,
    *,
    behaviour_values: jax.Array | None,
    clip_value_loss: bool,
    clip_eps: float,
) -> jax.Array:
    """PPO's value loss (unweighted), a masked mean over the ``[N]`` rows.

    ``0.5 * (returns - V)^2``, or with ``clip_value_loss`` CleanRL's clipped form
    ``0.5 * max((returns - V)^2, (returns - V_clip)^2)`` with ``V_clip = V_b + clip(V - V_b, -eps, eps)``
    around the behaviour values ``V_b`` (the same ``clip_eps`` as the ratio, as CleanRL's ``clip_vloss``).
    """
    returns = jax.lax.stop_gradient(returns)
    value_error = jnp.square(returns - values)
    if clip_value_loss:
        if behaviour_values is None:
            raise ValueError("clip_value_loss needs behaviour_values")
        chex.assert_equal_shape([behaviour_values, values])
        behaviour_values = jax.lax.stop_gradient(behaviour_values)
        clipped_values = behaviour_values + jnp.clip(values - behaviour_values, -clip_eps, clip_eps)
        value_error = jnp.maximum(value_error, jnp.square(returns - clipped_values))
    return masked_mean(0.5 * value_error, valid)


def _ratio_statistics(log_ratio: jax.Array, ratio: jax.Array, valid: jax.Array, *, clip_eps: float) -> dict:
    """Diagnostics, without gradient: ``approx_kl`` (the low-variance ``(r - 1) - log r``) and ``clip_fraction``."""
    log_ratio = jax.lax.stop_gradient(log_ratio)
    ratio = jax.lax.stop_gradient(ratio)
    return {
        "approx_kl": masked_mean((ratio - 1.0) - log_ratio, valid),
        "clip_fraction": masked_mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32), valid),
    }


def ppo_loss(
    params,
    apply_fn,
    obs: jax.Array,
    actions: jax.Array,
    behaviour_log_probs: jax.Array,
    advantages: jax.Array,
    returns: jax.Array,
    valid: jax.Array,
    *,
    clip_eps: float,
    value_coef: float,
    entropy_coef: float,
    normalize_advantages: bool = True,
    behaviour_values: jax.Array | None = None,
    clip_value_loss: bool = False,
) -> tuple[jax.Array, dict]:
    """PPO clipped-surrogate loss on one minibatch.

    The value loss is ``0.5 * (returns - V)^2``, or with ``clip_value_loss`` CleanRL's clipped form around the
    behaviour values (see ``_value_loss``).

    Args:
      params: network parameters being optimised.
      apply_fn: ``apply_fn(params, obs) -> (policy_out, value)``.
      obs: ``[N, ...]``.
      actions: ``[N]`` int or ``[N, A]`` float.
      behaviour_log_probs: ``[N]`` log-probs of ``actions`` under the behaviour policy.
      advantages: ``[N]``; normalised here with a masked mean/std if ``normalize_advantages``.
      returns: ``[N]`` value targets.
      valid: ``[N]`` float mask.
      clip_eps: ratio clipping epsilon.
      value_coef: weight of the value loss.
      entropy_coef: weight of the entropy bonus.
      normalize_advantages: normalise advantages per minibatch.
      behaviour_values: ``[N]`` values of the behaviour policy; required by ``clip_value_loss``.
      clip_value_loss: clip the value update around ``behaviour_values``.

    Returns:
      ``(loss, metrics)`` with metrics ``policy_loss``, ``value_loss`` (unweighted), ``entropy``,
      ``total_loss``, ``approx_kl`` (the low-variance ``(r - 1) - log r`` estimator) and
      ``clip_fraction``.
    """
    _check_batch(obs, actions, valid, behaviour_log_probs, advantages, returns)
    policy_out, values = apply_fn(params, obs)
    chex.assert_equal_shape([values, valid])
    valid = valid.astype(jnp.float32)

    advantages = jax.lax.stop_gradient(advantages)
    if normalize_advantages:
        advantages = _normalized_advantages(advantages, valid)
    log_probs = distributions.log_prob(policy_out, actions)  # [N]
    log_ratio = log_probs - behaviour_log_probs
    policy_loss, ratio = _clipped_surrogate_loss(log_ratio, advantages, valid, clip_eps=clip_eps)
    value_loss = _value_loss(
        values, returns, valid, behaviour_values=behaviour_values, clip_value_loss=clip_value_loss, clip_eps=clip_eps
    )
    entropy = masked_mean(distributions.entropy(policy_out), valid)
    total_loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
    metrics = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "total_loss": total_loss,
        **_ratio_statistics(log_ratio, ratio, valid, clip_eps=clip_eps),
    }
    return total_loss, metrics
