"""DDPG and TD3 learners (seed paper 003, PAL: DDPG, TD3 with prioritized replay).

* DDPG, Lillicrap et al. (2016), "Continuous control with deep RL", Algorithm 1: critic regression onto
  y = r + gamma (1 - done) Q'(s', mu'(s')), actor ascent on Q(s, mu(s)) (deterministic policy gradient), and
  soft target updates theta' <- tau theta + (1 - tau) theta'.
* TD3, Fujimoto, van Hoof and Meger (2018), "Addressing Function Approximation Error in Actor-Critic Methods",
  Algorithm 1: clipped double Q (Eq. 10, y = r + gamma min_{k=1,2} Q'_k(s', a~)), target policy smoothing
  (Eq. 14-15, a~ = clip(mu'(s') + clip(eps, -c, c), low, high), eps ~ N(0, sigma)) and delayed policy updates
  (actor and all targets move only every d critic updates; the actor ascends Q_1 only).

``DDPGConfig(twin=False, policy_noise=0, policy_delay=1)`` is DDPG; the defaults are TD3's. TD3's noise is given
relative to the action half-range (the paper's sigma = 0.2 and c = 0.5 for actions in [-1, 1]) and scaled by it.

With prioritized replay the critic loss is importance-weighted (Schaul et al. 2016) and the new priority of a
sample is max_k |delta_k| over the critics (Fujimoto et al. 2020, "An Equivalence between Loss Functions and
Non-Uniform Sampling in Experience Replay", LAP). ``done`` is termination only: truncated transitions bootstrap.

Parallel learners (seed paper 003, PAL, Sec. V-B: each learner samples its own batch and computes sub-gradients,
the parameter server aggregates them and updates the weights): ``ddpg_update(..., axis_name=AXIS)`` under
``jax.vmap(..., in_axes=(None, 0, 0), out_axes=(None, None, 0), axis_name=AXIS)`` (or ``pmap``) averages the
critic and actor gradients over the learners with ``mean_over_axis`` before each optimizer step.
"""

import dataclasses
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from agents.hyperparams import setting
from agents.offpolicy_networks import box_scale_and_offset
from agents.parallel import mean_over_axis


@dataclasses.dataclass(frozen=True, kw_only=True)
class DDPGHyperparameters:
    """A DDPG / TD3 run's exploration: Gaussian noise on the actor's action (Fujimoto et al. 2018, Sec. 6.1)."""

    action_noise: float = setting(0.1, "DDPG/TD3: Gaussian exploration noise (fraction of half-range).", "off_policy")


@dataclasses.dataclass(frozen=True)
class DDPGConfig:
    """DDPG / TD3 hyperparameters (defaults: TD3, Fujimoto et al. 2018, Table 3).

    Attributes:
      gamma: discount factor.
      tau: Polyak step of the target networks, ``target <- tau * online + (1 - tau) * target``.
      policy_noise: std of the target-policy smoothing noise, relative to the action half-range (0 for DDPG).
      noise_clip: the smoothing noise is clipped to ``[-noise_clip, noise_clip]`` (relative, like ``policy_noise``).
      policy_delay: actor and target networks update on every ``policy_delay``-th update, counting from 1
        (1 for DDPG).
      twin: clipped double Q over two critics (TD3); ``critic_apply`` must then return ``[2, B]``, else ``[B]``.
    """

    gamma: float = 0.99
    tau: float = 0.005
    policy_noise: float = 0.2
    noise_clip: float = 0.5
    policy_delay: int = 2
    twin: bool = True

    def __post_init__(self):
        if self.policy_delay < 1:
            raise ValueError(f"policy_delay must be >= 1, got {self.policy_delay}.")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}.")
        if self.policy_noise < 0.0 or self.noise_clip < 0.0:
            raise ValueError("policy_noise and noise_clip must be >= 0.")


def ddpg_config() -> DDPGConfig:
    """Plain DDPG (Lillicrap et al. 2016): one critic, no smoothing noise, actor updated every step."""
    return DDPGConfig(policy_noise=0.0, noise_clip=0.0, policy_delay=1, twin=False, tau=0.005)


class DDPGState(NamedTuple):
    """DDPG / TD3 learner state.

    Attributes:
      actor_params, critic_params: online networks.
      actor_target_params, critic_target_params: Polyak-averaged target networks.
      actor_opt_state, critic_opt_state: optimizer states.
      step: int32 scalar, number of ``ddpg_update`` calls (critic updates) so far.
      key: PRNG key for the target-policy smoothing noise; each update returns the next one.
    """

    actor_params: Any
    critic_params: Any
    actor_target_params: Any
    critic_target_params: Any
    actor_opt_state: Any
    critic_opt_state: Any
    step: jax.Array
    key: jax.Array


def ddpg_init(
    key: jax.Array,
    actor_params,
    critic_params,
    *,
    actor_optimizer: optax.GradientTransformation,
    critic_optimizer: optax.GradientTransformation,
) -> DDPGState:
    """Initial state; targets start as copies of the online networks."""
    return DDPGState(
        actor_params=actor_params,
        critic_params=critic_params,
        actor_target_params=jax.tree.map(jnp.array, actor_params),
        critic_target_params=jax.tree.map(jnp.array, critic_params),
        actor_opt_state=actor_optimizer.init(actor_params),
        critic_opt_state=critic_optimizer.init(critic_params),
        step=jnp.zeros((), jnp.int32),
        key=key,
    )


def _as_critics(q: jax.Array, twin: bool) -> jax.Array:
    """Critic output as ``[K, B]``: ``[2, B]`` for twin critics, ``[1, B]`` for a single one."""
    if twin:
        chex.assert_rank(q, 2)
        chex.assert_axis_dimension(q, 0, 2)
        return q
    chex.assert_rank(q, 1)
    return q[None]


def td3_target(
    actor_target_params,
    critic_target_params,
    batch: dict,
    key: jax.Array,
    *,
    actor_apply,
    critic_apply,
    config: DDPGConfig,
    action_low,
    action_high,
) -> jax.Array:
    """Critic target y ``[B]`` (TD3 Eq. 10 and 15; DDPG's when ``twin=False`` and ``policy_noise=0``).

    Args:
      actor_target_params, critic_target_params: target networks.
      batch: ``reward [B]``, ``next_obs [B, D]``, ``done [B]`` (termination only).
      key: PRNG key for the smoothing noise.
      actor_apply: ``actor_apply(params, obs) -> action [B, A]``.
      critic_apply: ``critic_apply(params, obs, action) -> [2, B]`` (twin) or ``[B]``.
      config: ``DDPGConfig``.
      action_low, action_high: ``[A]`` box bounds.
    """
    reward, done = batch["reward"], batch["done"]
    chex.assert_rank([reward, done], 1)
    scale, _ = box_scale_and_offset(action_low, action_high)
    next_action = actor_apply(actor_target_params, batch["next_obs"])  # [B, A]
    if config.policy_noise > 0.0:
        noise = config.policy_noise * jax.random.normal(key, next_action.shape, next_action.dtype)
        next_action = next_action + jnp.clip(noise, -config.noise_clip, config.noise_clip) * scale
    next_action = jnp.clip(next_action, jnp.asarray(action_low), jnp.asarray(action_high))
    q_next = _as_critics(critic_apply(critic_target_params, batch["next_obs"], next_action), config.twin)  # [K, B]
    chex.assert_axis_dimension(q_next, 1, reward.shape[0])
    # Clipped double Q: the min over critics counters overestimation (TD3 Sec. 4.1); with one critic it is Q'.
    q_next = jnp.min(q_next, axis=0)  # [B]
    return reward.astype(jnp.float32) + config.gamma * (1.0 - done.astype(jnp.float32)) * q_next


def critic_loss(critic_params, batch: dict, target: jax.Array, weights: jax.Array, *, critic_apply, twin: bool):
    """``sum_k mean_i w_i (Q_k(s_i, a_i) - y_i)^2`` (MSE per critic, summed as in TD3's reference code).

    Returns:
      ``(loss, (q [K, B], td [K, B]))`` with ``td = y - Q``.
    """
    q = _as_critics(critic_apply(critic_params, batch["obs"], batch["action"]), twin)  # [K, B]
    chex.assert_equal_shape([target, weights, q[0]])
    td = jax.lax.stop_gradient(target)[None] - q  # [K, B]
    loss = jnp.sum(jnp.mean(jax.lax.stop_gradient(weights)[None] * jnp.square(td), axis=1))
    return loss, (q, td)


def deterministic_actor_loss(actor_params, critic_params, obs: jax.Array, *, actor_apply, critic_apply, twin: bool):
    """``-mean_i Q_1(s_i, mu(s_i))`` (deterministic policy gradient, Silver et al. 2014; TD3 uses Q_1 only)."""
    q = _as_critics(critic_apply(critic_params, obs, actor_apply(actor_params, obs)), twin)  # [K, B]
    return -jnp.mean(q[0])


def _critic_step(
    state: DDPGState,
    batch: dict,
    weights: jax.Array,
    noise_key: jax.Array,
    action_low,
    action_high,
    *,
    optimizer: optax.GradientTransformation,
    config: DDPGConfig,
    axis_name: str | None,
    actor_apply,
    critic_apply,
) -> tuple[DDPGState, jax.Array, tuple[jax.Array, jax.Array], Any]:
    """Critic regression onto the target networks' TD3 / DDPG target, then one averaged-gradient critic step.

    Returns:
      ``(state with new critic_params and critic_opt_state, loss, (q [K, B], td [K, B]), averaged gradient)``,
      with ``q`` and ``td`` from the pre-update critics.
    """
    target = td3_target(
        state.actor_target_params,
        state.critic_target_params,
        batch,
        noise_key,
        actor_apply=actor_apply,
        critic_apply=critic_apply,
        config=config,
        action_low=action_low,
        action_high=action_high,
    )
    grads, (q, td) = jax.grad(critic_loss, has_aux=True)(
        state.critic_params, batch, target, weights, critic_apply=critic_apply, twin=config.twin
    )
    loss = jnp.sum(jnp.mean(weights[None] * jnp.square(td), axis=1))
    # The parameter server's aggregation (PAL Sec. V-B): one averaged gradient, one update on every learner.
    grads = mean_over_axis(grads, axis_name)
    updates, opt_state = optimizer.update(grads, state.critic_opt_state, state.critic_params)
    params = optax.apply_updates(state.critic_params, updates)
    return state._replace(critic_params=params, critic_opt_state=opt_state), loss, (q, td), grads


def _delayed_actor_step(
    state: DDPGState,
    obs: jax.Array,
    *,
    optimizer: optax.GradientTransformation,
    config: DDPGConfig,
    axis_name: str | None,
    actor_apply,
    critic_apply,
):
    """TD3's delayed policy update: one actor step up the critic in ``state``, then Polyak-average both targets.

    Returns:
      ``(actor_params, actor_opt_state, actor_target_params, critic_target_params, actor_loss)``, the loss at the
      pre-step actor.
    """
    actor_loss, actor_grads = jax.value_and_grad(deterministic_actor_loss)(
        state.actor_params,
        state.critic_params,
        obs,
        actor_apply=actor_apply,
        critic_apply=critic_apply,
        twin=config.twin,
    )
    actor_grads = mean_over_axis(actor_grads, axis_name)
    actor_updates, actor_opt_state = optimizer.update(actor_grads, state.actor_opt_state, state.actor_params)
    actor_params = optax.apply_updates(state.actor_params, actor_updates)
    actor_target = optax.incremental_update(actor_params, state.actor_target_params, config.tau)
    critic_target = optax.incremental_update(state.critic_params, state.critic_target_params, config.tau)
    return actor_params, actor_opt_state, actor_target, critic_target, actor_loss


def _skipped_actor_step(state: DDPGState, obs: jax.Array, *, config: DDPGConfig, actor_apply, critic_apply):
    """The other branch of ``_delayed_actor_step``: everything unchanged, the actor loss still reported."""
    actor_loss = deterministic_actor_loss(
        state.actor_params,
        state.critic_params,
        obs,
        actor_apply=actor_apply,
        critic_apply=critic_apply,
        twin=config.twin,
    )
    return state.actor_params, state.actor_opt_state, state.actor_target_params, state.critic_target_params, actor_loss


def _actor_and_target_step(
    state: DDPGState,
    obs: jax.Array,
    actor_updated: jax.Array,
    *,
    optimizer: optax.GradientTransformation,
    config: DDPGConfig,
    axis_name: str | None,
    actor_apply,
    critic_apply,
) -> tuple[DDPGState, jax.Array]:
    """``_delayed_actor_step`` where ``actor_updated``, else ``_skipped_actor_step``, as one ``jax.lax.cond``.

    The ``cond`` lets the function trace once; the skipped actor optimizer state does not advance.

    Returns:
      ``(state with new actor, actor optimizer state and targets, actor_loss)``.
    """
    networks = dict(config=config, actor_apply=actor_apply, critic_apply=critic_apply)
    actor_params, actor_opt_state, actor_target, critic_target, actor_loss = jax.lax.cond(
        actor_updated,
        lambda _: _delayed_actor_step(state, obs, optimizer=optimizer, axis_name=axis_name, **networks),
        lambda _: _skipped_actor_step(state, obs, **networks),
        None,
    )
    state = state._replace(
        actor_params=actor_params,
        actor_opt_state=actor_opt_state,
        actor_target_params=actor_target,
        critic_target_params=critic_target,
    )
    return state, actor_loss


def ddpg_update(
    state: DDPGState,
    batch: dict,
    weights: jax.Array,
    *,
    actor_apply,
    critic_apply,
    actor_optimizer: optax.GradientTransformation,
    critic_optimizer: optax.GradientTransformation,
    config: DDPGConfig,
    action_low,
    action_high,
    axis_name: str | None = None,
) -> tuple[DDPGState, dict, jax.Array]:
    """One critic step and, every ``policy_delay``-th call, one actor step plus Polyak target updates.

    The delayed branch is a ``jax.lax.cond``, so the function traces once and the skipped actor optimizer state
    does not advance. The actor ascends the *updated* critic, as in TD3's reference code.

    Args:
      state: learner state.
      batch: ``obs [B, D]``, ``action [B, A]``, ``reward [B]``, ``next_obs [B, D]``, ``done [B]``
        (termination only; truncations must be 0 so they bootstrap).
      weights: ``[B]`` importance-sampling weights (ones for uniform replay).
      actor_apply, critic_apply, actor_optimizer, critic_optimizer, config: static under jit; see ``td3_target``.
      action_low, action_high: ``[A]`` box bounds (clip the smoothed target action).
      axis_name: named axis of parallel learners (seed 003, PAL, Sec. V-B) bound by ``vmap``/``pmap`` with the
        state replicated and ``batch``/``weights`` split per learner. The critic gradients and (on delayed steps)
        the actor gradients are averaged over it with ``mean_over_axis`` before their optimizer steps, so every
        learner applies the same updates and the new state (``key`` included) is replicated; the smoothing-noise
        key is folded with the learner index so the learners draw distinct noise. Each learner's losses are means
        over its own ``B`` rows, so with equal ``B`` (and no smoothing noise) this equals one update on the
        concatenated batches. None (default) for a single learner.

    Returns:
      ``(new_state, metrics, new_priorities [B])`` with priorities ``max_k |delta_k|`` from the pre-update critics
      (per learner, its own rows, under ``axis_name``).
      Metrics (averaged over ``axis_name``): ``critic_loss``, ``actor_loss`` (at the pre-step actor, also on skipped
      steps), ``q_mean``, ``td_abs_mean``, ``critic_grad_norm`` (of the averaged gradient), ``actor_updated``
      (1.0 on delayed-update steps).
    """
    chex.assert_rank(weights, 1)
    key, noise_key = jax.random.split(state.key)
    if axis_name is not None:
        # Distinct smoothing noise per learner; ``key`` (stored in the state) stays identical on every learner.
        noise_key = jax.random.fold_in(noise_key, jax.lax.axis_index(axis_name))
    common = dict(config=config, axis_name=axis_name, actor_apply=actor_apply, critic_apply=critic_apply)
    new_state, critic_loss_value, (q, td), critic_grads = _critic_step(
        state, batch, weights, noise_key, action_low, action_high, optimizer=critic_optimizer, **common
    )
    step = state.step + 1
    actor_updated = step % config.policy_delay == 0
    # The actor ascends the *updated* critic (TD3's reference code): ``new_state`` already holds it.
    new_state, actor_loss = _actor_and_target_step(
        new_state, batch["obs"], actor_updated, optimizer=actor_optimizer, **common
    )
    metrics = {
        "critic_loss": critic_loss_value,
        "actor_loss": actor_loss,
        "q_mean": jnp.mean(q),
        "td_abs_mean": jnp.mean(jnp.abs(td)),
    }
    metrics = dict(
        mean_over_axis(metrics, axis_name),
        critic_grad_norm=optax.tree.norm(critic_grads),
        actor_updated=actor_updated.astype(jnp.float32),
    )
    new_state = new_state._replace(step=step, key=key)
    return new_state, metrics, jnp.max(jnp.abs(jax.lax.stop_gradient(td)), axis=0)


def ddpg_act(
    actor_params, obs: jax.Array, key: jax.Array, noise_std, *, actor_apply, action_low, action_high
) -> jax.Array:
    """Exploration action ``clip(mu(s) + N(0, noise_std * half-range), low, high)``, ``[B, A]`` (TD3 Alg. 1).

    ``noise_std`` is relative to the action half-range (TD3: 0.1); 0 gives the deterministic evaluation action.
    The caller splits its own key; nothing is returned for it.
    """
    action = actor_apply(actor_params, obs)  # [B, A]
    chex.assert_rank(action, 2)
    scale, _ = box_scale_and_offset(action_low, action_high)
    action = action + noise_std * scale * jax.random.normal(key, action.shape, action.dtype)
    return jnp.clip(action, jnp.asarray(action_low), jnp.asarray(action_high))
