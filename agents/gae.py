"""Generalized advantage estimation on EnvPool's time-major layout.

Schulman et al. (2016), "High-Dimensional Continuous Control Using Generalized Advantage
Estimation", Eq. (16); used for the n-step return R_t^(n) - V(s_t) in seed paper 000 (HTS-RL) Eq.
(4)-(6) (A2C is the special case lambda = 1 over the storage of alpha steps).

Layout: ``obs[t + 1]`` is the observation after action ``t``. If step ``t`` ended an episode then
``obs[t + 1]`` is that episode's final observation and step ``t + 1`` is EnvPool's reset step. Then

    delta_t = r_t + gamma * (1 - term_t) * V(obs[t+1]) - V(obs[t])
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},   done_t = term_t or trunc_t
    returns = A + V

so a truncation bootstraps from the final observation but cuts the trace, and a termination does
both (no bootstrap, trace cut).
"""

import chex
import jax
import jax.numpy as jnp


def gae_advantages(
    rewards: jax.Array,
    values: jax.Array,
    bootstrap_value: jax.Array,
    terminations: jax.Array,
    truncations: jax.Array,
    *,
    gamma: float,
    gae_lambda: float,
) -> tuple[jax.Array, jax.Array]:
    """Returns ``(advantages, returns)``, both float32 ``[T, B]``.

    Args:
      rewards: ``[T, B]`` reward of step t.
      values: ``[T, B]`` V(obs[t]).
      bootstrap_value: ``[B]`` V(obs[T]).
      terminations: ``[T, B]`` 1.0 where step t terminated the episode.
      truncations: ``[T, B]`` 1.0 where step t truncated the episode (time limit).
      gamma: discount.
      gae_lambda: GAE mixing parameter.
    """
    import rlax  # here, not at the top: rlax imports distrax and TensorFlow Probability, a second or more per process

    chex.assert_rank([rewards, values, terminations, truncations, bootstrap_value], [2, 2, 2, 2, 1])
    chex.assert_equal_shape([rewards, values, terminations, truncations])
    chex.assert_shape(bootstrap_value, (rewards.shape[1],))

    rewards = rewards.astype(jnp.float32)
    terminations = terminations.astype(jnp.float32)
    truncations = truncations.astype(jnp.float32)
    values_ext = jnp.concatenate(
        [values.astype(jnp.float32), bootstrap_value.astype(jnp.float32)[None]], axis=0
    )  # [T + 1, B]

    # rlax computes delta_t = r_t + discount_t * v_{t+1} - v_t and
    # A_t = delta_t + discount_t * lambda_t * A_{t+1}. With discount_t = gamma (1 - term_t) the
    # bootstrap is dropped on termination; lambda_t = lambda (1 - trunc_t) additionally cuts the
    # trace on truncation, so discount_t * lambda_t = gamma * lambda * (1 - done_t) as required.
    discount_t = gamma * (1.0 - terminations)  # [T, B]
    lambda_t = gae_lambda * (1.0 - truncations)  # [T, B]
    batched_gae = jax.vmap(rlax.truncated_generalized_advantage_estimation, in_axes=1, out_axes=1)
    advantages = batched_gae(rewards, discount_t, lambda_t, values_ext)  # [T, B]
    returns = advantages + values_ext[:-1]  # [T, B]
    return advantages, returns
