"""Actor-critic losses: A2C (seed paper 000 Eq. (4)) and the masked statistics both A2C and PPO use.

* ``a2c_loss``: the negated objective whose gradient is Eq. (4) of seed paper 000 (HTS-RL): -log
  pi_theta(a_t|s_t) * (R_t^(n) - V(s_t)) - alpha * H(pi_theta(.|s_t)), plus the critic's squared
  error. HTS-RL's one-step-delayed update (Eq. 6) differentiates this at the *behaviour* parameters;
  see ``agents.a2c``.
* PPO's loss (L^CLIP, Eq. 7 of Schulman et al. 2017, with its value loss and entropy bonus) sits beside its update
  in ``agents.ppo``.

Losses take a flat batch ``[N, ...]`` and a ``valid`` mask ``[N]``; every mean is a masked mean so
rows collected on EnvPool's reset steps contribute nothing.
"""

import dataclasses

import chex
import jax
import jax.numpy as jnp

from agents import distributions
from agents.hyperparams import hyperparameter
from agents.types import Rollout, SequenceObs


@dataclasses.dataclass(frozen=True, kw_only=True)
class ActorCriticLossHyperparameters:
    """The hyperparameters of every actor-critic loss here (A2C's ``a2c_loss``, PPO's ``ppo_loss``): the returns'
    discount and GAE lambda (``agents.gae``), and the weights of the value loss and the entropy bonus."""

    gamma: float = hyperparameter(0.99, "Discount (default: preset).",
                                  search=("categorical", (0.95, 0.98, 0.99, 0.995, 0.999)))
    gae_lambda: float = hyperparameter(0.95, "GAE lambda; 1.0 gives n-step returns (default: preset).",
                                       search=("categorical", (0.8, 0.9, 0.95, 0.98, 1.0)))
    value_coef: float = hyperparameter(
        0.5, "Weight of the value loss 0.5 x (R - V)^2; SB3's vf_coef c is 2c here (default: preset).")
    entropy_coef: float = hyperparameter(0.01, "Entropy bonus coefficient (default: preset).",
                                         search=("float", 1e-5, 0.05, True))

__all__ = ["Rollout", "a2c_loss", "check_batch", "combined_loss", "masked_mean"]


def masked_mean(x: jax.Array, valid: jax.Array) -> jax.Array:
    """Mean of ``x`` over rows where ``valid`` is 1; 0 if no row is valid (avoids 0/0)."""
    chex.assert_equal_shape([x, valid])
    return jnp.sum(x * valid) / jnp.maximum(jnp.sum(valid), 1.0)


def check_batch(obs, actions, valid, *per_row):
    """Shape checks of a flat batch: ``valid`` and each of ``per_row`` are ``[N]``; ``obs`` and ``actions`` have N
    rows."""
    chex.assert_rank(valid, 1)
    n = valid.shape[0]
    if isinstance(obs, SequenceObs):  # a recurrent policy's whole sequences (``agents.recurrent``)
        if obs.rows != n:
            raise AssertionError(f"sequences of {obs.rows} rows for a batch of {n}")
    else:
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
    check_batch(obs, actions, valid, advantages, returns)
    policy_out, values = apply_fn(params, obs)
    chex.assert_equal_shape([values, valid])
    valid = valid.astype(jnp.float32)

    log_probs = distributions.log_prob(policy_out, actions)  # [N]
    policy_loss = masked_mean(-log_probs * jax.lax.stop_gradient(advantages), valid)
    value_loss = masked_mean(0.5 * jnp.square(jax.lax.stop_gradient(returns) - values), valid)
    entropy = masked_mean(distributions.entropy(policy_out), valid)
    return combined_loss(policy_loss, value_loss, entropy, value_coef=value_coef, entropy_coef=entropy_coef)


def combined_loss(policy_loss: jax.Array, value_loss: jax.Array, entropy: jax.Array, *, value_coef: float,
                  entropy_coef: float) -> tuple[jax.Array, dict]:
    """The actor-critic objective both A2C and PPO minimise, ``policy_loss + value_coef * value_loss -
    entropy_coef * entropy``, with its terms as metrics (``value_loss`` unweighted)."""
    total_loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
    return total_loss, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy,
                        "total_loss": total_loss}
