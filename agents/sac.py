"""Soft Actor-Critic with automatic temperature tuning (seed paper 003, PAL: SAC with prioritized replay).

Haarnoja et al. (2018), "Soft Actor-Critic Algorithms and Applications" (arXiv:1812.05905), Algorithm 1:

* critics (Eq. 5-7, with the clipped double Q of Fujimoto et al. 2018): J_Q = E[(Q_k(s, a) - y)^2] with
  y = r + gamma (1 - done) (min_k Q'_k(s', a') - alpha log pi(a'|s')), a' ~ pi(.|s');
* actor (Eq. 7/11, reparameterised): J_pi = E[alpha log pi(f(eps; s)|s) - min_k Q_k(s, f(eps; s))];
* temperature (Eq. 18): J(alpha) = E[-alpha log pi(a|s) - alpha H_target] with H_target = -dim(A); alpha is
  learned as log alpha so it stays positive;
* targets: Polyak averaging every update, Q' <- tau Q + (1 - tau) Q'.

The policy is a tanh-squashed Gaussian scaled to the action box (``agents.offpolicy_networks``, Eq. 21 for the
log-density). With prioritized replay the critic loss is importance-weighted (Schaul et al. 2016) and the new
priorities are max_k |delta_k| (Fujimoto et al. 2020, LAP). ``done`` is termination only: truncations bootstrap.

Parallel learners (seed paper 003, PAL, Sec. V-B: each learner samples its own batch and computes sub-gradients,
the parameter server aggregates them and updates the weights): ``sac_update(..., axis_name=AXIS)`` under
``jax.vmap(..., in_axes=(None, 0, 0), out_axes=(None, None, 0), axis_name=AXIS)`` (or ``pmap``) averages the
critic, actor and temperature gradients over the learners with ``mean_over_axis`` before each optimizer step.
"""

import dataclasses
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from agents.offpolicy_networks import squashed_gaussian_mode, squashed_gaussian_sample
from agents.parallel import mean_over_axis


@dataclasses.dataclass(frozen=True)
class SACConfig:
    """SAC hyperparameters (defaults: Haarnoja et al. 2018, Table 1).

    Attributes:
      gamma: discount factor.
      tau: Polyak step of the target critics, applied every update.
      target_entropy: H_target of Eq. (18); None gives ``-action_dim`` (the paper's heuristic).
      learn_alpha: tune the temperature with Eq. (18); if False, alpha stays at ``exp(state.log_alpha)``.
    """

    gamma: float = 0.99
    tau: float = 0.005
    target_entropy: float | None = None
    learn_alpha: bool = True

    def __post_init__(self):
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}.")


def sac_target_entropy(config: SACConfig, action_dim: int) -> float:
    """H_target: ``config.target_entropy`` or ``-action_dim`` (derived, never written back into the config)."""
    return -float(action_dim) if config.target_entropy is None else float(config.target_entropy)


class SACState(NamedTuple):
    """SAC learner state.

    Attributes:
      actor_params, critic_params: online networks (the critic is a twin, ``[2, B]``).
      critic_target_params: Polyak-averaged target critics (SAC keeps no target actor).
      log_alpha: float32 scalar, log of the temperature.
      actor_opt_state, critic_opt_state, alpha_opt_state: optimizer states.
      step: int32 scalar, number of ``sac_update`` calls so far.
      key: PRNG key for the policy samples; each update returns the next one.
    """

    actor_params: Any
    critic_params: Any
    critic_target_params: Any
    log_alpha: jax.Array
    actor_opt_state: Any
    critic_opt_state: Any
    alpha_opt_state: Any
    step: jax.Array
    key: jax.Array


def sac_init(
    key: jax.Array,
    actor_params,
    critic_params,
    *,
    actor_optimizer: optax.GradientTransformation,
    critic_optimizer: optax.GradientTransformation,
    alpha_optimizer: optax.GradientTransformation,
    initial_alpha: float = 1.0,
) -> SACState:
    """Initial state; the target critics start as copies of the critics."""
    log_alpha = jnp.log(jnp.asarray(initial_alpha, jnp.float32))
    return SACState(
        actor_params=actor_params,
        critic_params=critic_params,
        critic_target_params=jax.tree.map(jnp.array, critic_params),
        log_alpha=log_alpha,
        actor_opt_state=actor_optimizer.init(actor_params),
        critic_opt_state=critic_optimizer.init(critic_params),
        alpha_opt_state=alpha_optimizer.init(log_alpha),
        step=jnp.zeros((), jnp.int32),
        key=key,
    )


def _sample(actor_params, obs, key, *, actor_apply, action_low, action_high):
    mean, log_std = actor_apply(actor_params, obs)
    return squashed_gaussian_sample(mean, log_std, key, action_low=action_low, action_high=action_high)


def sac_critic_target(
    actor_params,
    critic_target_params,
    alpha: jax.Array,
    batch: dict,
    key: jax.Array,
    *,
    actor_apply,
    critic_apply,
    gamma: float,
    action_low,
    action_high,
) -> jax.Array:
    """Soft TD target y ``[B]`` = r + gamma (1 - done) (min_k Q'_k(s', a') - alpha log pi(a'|s')), a' ~ pi(.|s')."""
    reward, done = batch["reward"], batch["done"]
    chex.assert_rank([reward, done], 1)
    next_action, next_log_prob = _sample(
        actor_params, batch["next_obs"], key, actor_apply=actor_apply, action_low=action_low, action_high=action_high
    )
    q_next = critic_apply(critic_target_params, batch["next_obs"], next_action)  # [2, B]
    chex.assert_shape(q_next, (2, reward.shape[0]))
    soft_value = jnp.min(q_next, axis=0) - alpha * next_log_prob  # [B]
    target = reward.astype(jnp.float32) + gamma * (1.0 - done.astype(jnp.float32)) * soft_value
    return jax.lax.stop_gradient(target)


def temperature_loss(log_alpha: jax.Array, log_prob: jax.Array, *, target_entropy: float) -> jax.Array:
    """Eq. (18): ``mean(alpha * (-log pi - H_target))``; alpha falls while the entropy exceeds its target."""
    chex.assert_rank(log_alpha, 0)
    return jnp.mean(jnp.exp(log_alpha) * jax.lax.stop_gradient(-log_prob - target_entropy))


class _StepOutput(NamedTuple):
    """What one gradient step reports: its loss, the loss's auxiliary output and the gradient it applied.

    Attributes:
      loss: the loss before the step.
      aux: the loss's auxiliary output (``(q, td)`` for the critics, ``log_prob`` for the actor).
      grads: the gradient averaged over ``axis_name`` (the one the optimizer applied).
    """

    loss: jax.Array
    aux: Any
    grads: Any


def _learner_keys(key: jax.Array, axis_name: str | None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(next_key, target_key, actor_key)`` split from the state's key.

    Under ``axis_name`` the two sample keys are folded with the learner index; ``next_key`` is not.
    """
    key, target_key, actor_key = jax.random.split(key, 3)
    if axis_name is not None:
        # Distinct policy samples per learner; ``key`` (stored in the state) stays identical on every learner.
        learner = jax.lax.axis_index(axis_name)
        target_key = jax.random.fold_in(target_key, learner)
        actor_key = jax.random.fold_in(actor_key, learner)
    return key, target_key, actor_key


def _apply_averaged_gradient(optimizer: optax.GradientTransformation, grads, opt_state, params, axis_name):
    """Average ``grads`` over ``axis_name``, then one optimizer step; returns ``(grads, params, opt_state)``.

    The parameter server's aggregation (PAL Sec. V-B): one averaged gradient, one update on every learner.
    """
    grads = mean_over_axis(grads, axis_name)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return grads, optax.apply_updates(params, updates), opt_state


def _critic_loss(critic_params, batch: dict, target: jax.Array, weights: jax.Array, *, critic_apply):
    """Eq. (5)-(7), importance-weighted: ``sum_k mean_i w_i (y_i - Q_k(s_i, a_i))^2``.

    Returns:
      ``(loss, (q [2, B], td [2, B]))`` with ``td = y - Q``.
    """
    q = critic_apply(critic_params, batch["obs"], batch["action"])  # [2, B]
    chex.assert_shape(q, (2, target.shape[0]))
    td = target[None] - q  # [2, B]
    return jnp.sum(jnp.mean(weights[None] * jnp.square(td), axis=1)), (q, td)


def _actor_loss(actor_params, critic_params, obs, key, alpha, *, actor_apply, critic_apply, action_low, action_high):
    """Eq. (7)/(11), reparameterised: ``mean(alpha log pi(a|s) - min_k Q_k(s, a))``, a ~ pi(.|s).

    Returns:
      ``(loss, log_prob [B])`` of the fresh samples ``a``.
    """
    action, log_prob = _sample(
        actor_params,
        obs,
        key,
        actor_apply=actor_apply,
        action_low=action_low,
        action_high=action_high,
    )
    q_pi = jnp.min(critic_apply(critic_params, obs, action), axis=0)  # [B]
    return jnp.mean(alpha * log_prob - q_pi), log_prob


def _critic_step(
    state: SACState,
    batch: dict,
    weights: jax.Array,
    alpha: jax.Array,
    target_key: jax.Array,
    *,
    optimizer: optax.GradientTransformation,
    config: SACConfig,
    axis_name: str | None,
    actor_apply,
    critic_apply,
    action_low,
    action_high,
) -> tuple[SACState, _StepOutput]:
    """Critic step: both critics regress onto the soft TD target of the target critics (Eq. 5-7).

    Returns:
      ``state`` with new ``critic_params`` and ``critic_opt_state``, and the step's ``_StepOutput`` with
      ``aux = (q [2, B], td [2, B])`` from the pre-update critics.
    """
    target = sac_critic_target(
        state.actor_params,
        state.critic_target_params,
        alpha,
        batch,
        target_key,
        actor_apply=actor_apply,
        critic_apply=critic_apply,
        gamma=config.gamma,
        action_low=action_low,
        action_high=action_high,
    )
    chex.assert_equal_shape([target, weights])
    weights = jax.lax.stop_gradient(weights.astype(jnp.float32))
    (loss, q_and_td), grads = jax.value_and_grad(_critic_loss, has_aux=True)(
        state.critic_params, batch, target, weights, critic_apply=critic_apply
    )
    grads, params, opt_state = _apply_averaged_gradient(
        optimizer, grads, state.critic_opt_state, state.critic_params, axis_name
    )
    return state._replace(critic_params=params, critic_opt_state=opt_state), _StepOutput(loss, q_and_td, grads)


def _actor_step(
    state: SACState,
    obs: jax.Array,
    alpha: jax.Array,
    actor_key: jax.Array,
    *,
    optimizer: optax.GradientTransformation,
    axis_name: str | None,
    actor_apply,
    critic_apply,
    action_low,
    action_high,
) -> tuple[SACState, _StepOutput]:
    """Actor step (Eq. 7/11) against the critics in ``state`` (already updated by ``_critic_step``).

    Returns:
      ``state`` with new ``actor_params`` and ``actor_opt_state``, and the step's ``_StepOutput`` with
      ``aux = log_prob [B]`` of the actor's samples at ``obs``.
    """
    (loss, log_prob), grads = jax.value_and_grad(_actor_loss, has_aux=True)(
        state.actor_params,
        state.critic_params,
        obs,
        actor_key,
        alpha,
        actor_apply=actor_apply,
        critic_apply=critic_apply,
        action_low=action_low,
        action_high=action_high,
    )
    grads, params, opt_state = _apply_averaged_gradient(
        optimizer, grads, state.actor_opt_state, state.actor_params, axis_name
    )
    return state._replace(actor_params=params, actor_opt_state=opt_state), _StepOutput(loss, log_prob, grads)


def _temperature_step(
    state: SACState,
    log_prob: jax.Array,
    action_dim: int,
    *,
    config: SACConfig,
    optimizer: optax.GradientTransformation,
    axis_name: str | None,
) -> tuple[SACState, jax.Array]:
    """Temperature step (Eq. 18) on log alpha; ``state`` is returned unchanged unless ``config.learn_alpha``.

    Returns:
      ``(state with new log_alpha and alpha_opt_state, alpha_loss)``; the loss is reported in both cases.
    """
    target_entropy = sac_target_entropy(config, action_dim)
    alpha_loss, alpha_grad = jax.value_and_grad(temperature_loss)(
        state.log_alpha, log_prob, target_entropy=target_entropy
    )
    if config.learn_alpha:
        _, log_alpha, alpha_opt_state = _apply_averaged_gradient(
            optimizer, alpha_grad, state.alpha_opt_state, state.log_alpha, axis_name
        )
        state = state._replace(log_alpha=log_alpha, alpha_opt_state=alpha_opt_state)
    return state, alpha_loss


def _sac_metrics(
    critic: _StepOutput, actor: _StepOutput, alpha_loss: jax.Array, alpha: jax.Array, axis_name: str | None
) -> dict:
    """``sac_update``'s metrics; per-learner statistics averaged over ``axis_name``."""
    q, td = critic.aux
    metrics = {
        "critic_loss": critic.loss,
        "actor_loss": actor.loss,
        "alpha_loss": alpha_loss,
        "alpha": alpha,
        "entropy": -jnp.mean(actor.aux),
        "q_mean": jnp.mean(q),
        "td_abs_mean": jnp.mean(jnp.abs(td)),
        "critic_grad_norm": optax.tree.norm(critic.grads),
        "actor_grad_norm": optax.tree.norm(actor.grads),
    }
    # Per-learner statistics are averaged; alpha and the norms of the averaged gradients are already replicated.
    replicated = ("alpha", "critic_grad_norm", "actor_grad_norm")
    metrics.update(mean_over_axis({k: v for k, v in metrics.items() if k not in replicated}, axis_name))
    return metrics


def sac_update(
    state: SACState,
    batch: dict,
    weights: jax.Array,
    *,
    actor_apply,
    critic_apply,
    actor_optimizer: optax.GradientTransformation,
    critic_optimizer: optax.GradientTransformation,
    alpha_optimizer: optax.GradientTransformation,
    config: SACConfig,
    action_low,
    action_high,
    axis_name: str | None = None,
) -> tuple[SACState, dict, jax.Array]:
    """One SAC step: critics, then actor (on the updated critics), then temperature, then Polyak targets.

    Args:
      state: learner state.
      batch: ``obs [B, D]``, ``action [B, A]``, ``reward [B]``, ``next_obs [B, D]``, ``done [B]``
        (termination only; truncations must be 0 so they bootstrap).
      weights: ``[B]`` importance-sampling weights for the critic loss (ones for uniform replay).
      actor_apply: ``actor_apply(params, obs) -> (mean [B, A], log_std [B, A])`` (e.g. ``GaussianActor``).
      critic_apply: ``critic_apply(params, obs, action) -> [2, B]`` (e.g. ``TwinQ``).
      actor_optimizer, critic_optimizer, alpha_optimizer: optax transformations (alpha's acts on log alpha).
      config: ``SACConfig``.
      action_low, action_high: ``[A]`` box bounds.
      axis_name: named axis of parallel learners (seed 003, PAL, Sec. V-B) bound by ``vmap``/``pmap`` with the
        state replicated and ``batch``/``weights`` split per learner. The critic, actor and temperature (log alpha)
        gradients are averaged over it with ``mean_over_axis`` before their optimizer steps, so every learner
        applies the same updates and the new state (``key`` included) is replicated; the keys of the policy
        samples (target and actor) are folded with the learner index so the learners draw distinct samples.
        Each learner's losses are means over its own ``B`` rows, so with equal ``B`` the averaged gradient is
        that of the concatenated batches. None (default) for a single learner.

    Returns:
      ``(new_state, metrics, new_priorities [B])``, priorities ``max_k |delta_k|`` from the pre-update critics
      (per learner, its own rows, under ``axis_name``).
      Metrics (averaged over ``axis_name``): ``critic_loss``, ``actor_loss``, ``alpha_loss``, ``alpha`` (used in
      this step), ``entropy`` (``-mean log pi`` of fresh samples at s), ``q_mean``, ``td_abs_mean``,
      ``critic_grad_norm``, ``actor_grad_norm`` (norms of the averaged gradients).
    """
    chex.assert_rank(weights, 1)
    key, target_key, actor_key = _learner_keys(state.key, axis_name)
    alpha = jnp.exp(state.log_alpha)
    nets = dict(actor_apply=actor_apply, critic_apply=critic_apply, action_low=action_low, action_high=action_high)
    # Each step returns the state with its own fields updated, so the actor ascends the updated critics.
    new_state, critic = _critic_step(
        state, batch, weights, alpha, target_key, optimizer=critic_optimizer, config=config, axis_name=axis_name, **nets
    )
    new_state, actor = _actor_step(
        new_state, batch["obs"], alpha, actor_key, optimizer=actor_optimizer, axis_name=axis_name, **nets
    )
    new_state, alpha_loss = _temperature_step(
        new_state, actor.aux, batch["action"].shape[-1], config=config, optimizer=alpha_optimizer, axis_name=axis_name
    )
    critic_target_params = optax.incremental_update(new_state.critic_params, state.critic_target_params, config.tau)
    metrics = _sac_metrics(critic, actor, alpha_loss, alpha, axis_name)
    new_state = new_state._replace(critic_target_params=critic_target_params, step=state.step + 1, key=key)
    _, td = critic.aux
    return new_state, metrics, jnp.max(jnp.abs(jax.lax.stop_gradient(td)), axis=0)


def sac_act(
    actor_params, obs: jax.Array, key: jax.Array, deterministic: bool, *, actor_apply, action_low, action_high
) -> jax.Array:
    """Action ``[B, A]``: a squashed-Gaussian sample, or ``offset + scale * tanh(mean)`` if ``deterministic``.

    ``deterministic`` is a Python bool (static under jit). The caller splits its own key.
    """
    mean, log_std = actor_apply(actor_params, obs)
    if deterministic:
        return squashed_gaussian_mode(mean, action_low=action_low, action_high=action_high)
    action, _ = squashed_gaussian_sample(mean, log_std, key, action_low=action_low, action_high=action_high)
    return action
