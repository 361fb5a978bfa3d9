"""Actor-critic model parallelism for SAC (seed paper 002, Spreeze, Sec. 3.2.2 and Fig. 3).

The paper puts the policy network on GPU0 and the twin critics Q1, Q2 with their target network on GPU1, "with as
little data transmission as possible"; reward and done go only to GPU1. ``ModelParallelSAC`` does the same for
``agents.sac.sac_update`` and computes exactly what it computes (same order, same PRNG splits; the tests compare
three consecutive updates to float tolerance):

* the SAC state is split (``place``): ``ActorSide`` (actor params and optimizer state, ``log_alpha`` and its
  optimizer state, ``step``, ``key``) lives on ``actor_device``; ``CriticSide`` (critic params, target critics,
  critic optimizer state) on ``critic_device``. The temperature stays with the actor: its loss needs only
  ``log pi(a|s)`` of fresh actor samples, and the critic side needs alpha only through ``alpha * log pi(a'|s2)``,
  which the actor side sends already multiplied. ``gather`` reassembles a ``SACState`` on one device (checkpoints,
  evaluation, the plain ``sac_update``).
* one update is three jitted pieces, each run on the device its committed inputs live on:

  1. ``actor_sample`` (actor device, inputs ``s``, ``s2`` only): splits the key as ``sac_update`` does, samples
     ``a' ~ pi(.|s2)`` for the target and (``actor_grad="vjp"``) ``a ~ pi(.|s)`` for the actor loss, and takes the
     temperature step (Eq. 18 depends only on the old ``log_alpha`` and ``log pi(a|s)``, so it can run first);
  2. ``critic_step`` (critic device, inputs ``s, a, r, s2, d`` and the IS weights): soft target from the target
     critics, importance-weighted critic step, priorities, Polyak targets, and what the actor loss needs from the
     *updated* critics (below);
  3. ``actor_step_vjp`` / ``actor_step_params`` (actor device, inputs ``s`` only): the reparameterised actor step.

  Reward, done, the batch action and the IS weights are never put on the actor device: the actor-side functions do
  not take them.
* the actor loss ``mean(alpha log pi(f(eps; s)|s) - min_k Q_k(s, f(eps; s)))`` needs the gradient of the updated
  critics with respect to the sampled action. Two exact ways (``actor_grad``):

  - ``"vjp"`` (default, the paper's split of the computation: every critic forward/backward on the critic device):
    the actor side sends its sample ``a = f(eps; s)``; the critic side returns ``q_pi = min_k Q_k(s, a)`` and the
    cotangent ``dL/da = -(1/B) d q_pi / d a``; the actor side back-propagates it (with ``alpha/B`` on the
    log-prob) through its own sampler (one extra actor forward pass on ``s``, recomputed rather than stored).
  - ``"critic_params"``: the critic side sends the updated critic parameters; the actor side evaluates the actor
    loss exactly as ``sac_update`` does (the critic forward/backward on ``s`` runs on the actor device).

Device-to-device traffic per update (float32, batch ``B``, action dim ``A``, ``P`` critic parameters of both
critics together; ``transfer_bytes`` returns these numbers; scalar metrics are not counted, they stay where they are
computed until read):

==================  =========================================  =========================================
``actor_grad``      actor -> critic                            critic -> actor
==================  =========================================  =========================================
``"vjp"``           ``a'`` [B, A], ``alpha log pi'`` [B],      ``q_pi`` [B], ``dL/da`` [B, A]:
                    ``a`` [B, A]: ``4 B (2A + 1)`` bytes        ``4 B (A + 1)`` bytes
``"critic_params"`` ``a'`` [B, A], ``alpha log pi'`` [B]:       updated critic params: ``4 P`` bytes
                    ``4 B (A + 1)`` bytes
==================  =========================================  =========================================

So ``"vjp"`` moves ``4 B (3A + 2)`` bytes and ``"critic_params"`` ``4 (B (A + 1) + P)``: the VJP round trip is
cheaper while ``B (2A + 1) < P`` (e.g. Walker2d, D = 17, A = 6, 256x256 twin critics, P = 144,386: up to
B ~ 11,000). The batch itself comes from the host: ``s``, ``s2`` (``2 B D`` floats) to the actor device and
``s, a, r, s2, d`` plus the weights (``B (2D + A + 3)``) to the critic device. The paper's text sends ``s, a, s2``
to GPU0 and ``r, d`` to GPU1, but the critic losses need ``Q(s, a)`` and ``Q'(s2, a')``, so ``s, a, s2`` must reach
the critic device too, and the actor device never needs ``a``; here they go host -> device directly rather than
through the actor device.

Exactness forces a serial chain: target sample (actor) -> critic step -> actor step (on the updated critics) ->
next update's target sample (on the updated actor). Only the temperature step (with piece 1, before the critic
step) and the Polyak update (fused into the critic step) are off that chain; the devices do not update
"independently" in the sense of running at the same time. JAX dispatch is asynchronous, so ``update`` returns before
the pieces finish.

With ``actor_device == critic_device`` (e.g. one device) ``update`` falls back to the plain jitted ``sac_update``
with the same interface (the split state is reassembled inside the jitted function).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from agents.sac import SACConfig, SACState, _sample, sac_target_entropy, sac_update, temperature_loss

ACTOR_GRAD_MODES = ("vjp", "critic_params")
ACTOR_BATCH_KEYS = ("obs", "next_obs")
CRITIC_BATCH_KEYS = ("obs", "action", "reward", "next_obs", "done")
METRIC_KEYS = (
    "critic_loss",
    "actor_loss",
    "alpha_loss",
    "alpha",
    "entropy",
    "q_mean",
    "td_abs_mean",
    "critic_grad_norm",
    "actor_grad_norm",
)


class ActorSide(NamedTuple):
    """The part of ``SACState`` on the actor device (policy, temperature, step counter, PRNG key)."""

    actor_params: Any
    actor_opt_state: Any
    log_alpha: jax.Array
    alpha_opt_state: Any
    step: jax.Array
    key: jax.Array


class CriticSide(NamedTuple):
    """The part of ``SACState`` on the critic device (twin critics, their targets and optimizer state)."""

    critic_params: Any
    critic_target_params: Any
    critic_opt_state: Any


class SplitSACState(NamedTuple):
    actor: ActorSide
    critic: CriticSide


def split_state(state: SACState) -> SplitSACState:
    """Regroups a ``SACState`` (no copies, no placement)."""
    return SplitSACState(
        actor=ActorSide(
            actor_params=state.actor_params,
            actor_opt_state=state.actor_opt_state,
            log_alpha=state.log_alpha,
            alpha_opt_state=state.alpha_opt_state,
            step=state.step,
            key=state.key,
        ),
        critic=CriticSide(
            critic_params=state.critic_params,
            critic_target_params=state.critic_target_params,
            critic_opt_state=state.critic_opt_state,
        ),
    )


def join_state(split: SplitSACState) -> SACState:
    """Inverse of ``split_state`` (no copies, no placement)."""
    a, c = split.actor, split.critic
    return SACState(
        actor_params=a.actor_params,
        critic_params=c.critic_params,
        critic_target_params=c.critic_target_params,
        log_alpha=a.log_alpha,
        actor_opt_state=a.actor_opt_state,
        critic_opt_state=c.critic_opt_state,
        alpha_opt_state=a.alpha_opt_state,
        step=a.step,
        key=a.key,
    )


def _temperature(log_alpha, alpha_opt_state, log_prob, action_dim: int, *, alpha_optimizer, config: SACConfig):
    """Eq. (18) step exactly as in ``sac_update``: ``(log_alpha, alpha_opt_state, alpha_loss)``."""
    target_entropy = sac_target_entropy(config, action_dim)
    alpha_loss, alpha_grad = jax.value_and_grad(temperature_loss)(log_alpha, log_prob, target_entropy=target_entropy)
    if config.learn_alpha:
        updates, alpha_opt_state = alpha_optimizer.update(alpha_grad, alpha_opt_state, log_alpha)
        log_alpha = optax.apply_updates(log_alpha, updates)
    return log_alpha, alpha_opt_state, alpha_loss


def actor_sample(
    actor: ActorSide,
    obs: jax.Array,
    next_obs: jax.Array,
    *,
    actor_apply,
    alpha_optimizer,
    config: SACConfig,
    action_low,
    action_high,
    actor_grad: str,
):
    """Piece 1 (actor device): key split, target sample at ``s2``, policy sample at ``s`` and temperature step.

    Returns ``(actor, to_critic, local)``: the actor side with its new key and step (and, for ``"vjp"``, the new
    temperature), what goes to the critic device (``next_action [B, A]``, ``alpha_next_log_prob [B]`` and, for
    ``"vjp"``, ``policy_action [B, A]``), and what the actor step needs later (``alpha``, ``actor_key``, ...).
    """
    key, target_key, actor_key = jax.random.split(actor.key, 3)
    alpha = jnp.exp(actor.log_alpha)
    sample = functools.partial(_sample, actor_apply=actor_apply, action_low=action_low, action_high=action_high)
    next_action, next_log_prob = sample(actor.actor_params, next_obs, target_key)
    to_critic = {"next_action": next_action, "alpha_next_log_prob": alpha * next_log_prob}
    local = {"alpha": alpha, "actor_key": actor_key}
    actor = actor._replace(key=key, step=actor.step + 1)
    if actor_grad == "vjp":
        # The sample the actor loss differentiates; its log-prob also drives the temperature (Eq. 18), which
        # depends on nothing else, so it is updated here, before the critic step, as sac_update's values.
        action, log_prob = sample(actor.actor_params, obs, actor_key)
        to_critic["policy_action"] = action
        log_alpha, alpha_opt_state, alpha_loss = _temperature(
            actor.log_alpha, actor.alpha_opt_state, log_prob, action.shape[-1],
            alpha_optimizer=alpha_optimizer, config=config,
        )
        actor = actor._replace(log_alpha=log_alpha, alpha_opt_state=alpha_opt_state)
        local.update(alpha_loss=alpha_loss, entropy=-jnp.mean(log_prob))
    return actor, to_critic, local


def critic_step(
    critic: CriticSide,
    obs: jax.Array,
    action: jax.Array,
    reward: jax.Array,
    next_obs: jax.Array,
    done: jax.Array,
    weights: jax.Array,
    next_action: jax.Array,
    alpha_next_log_prob: jax.Array,
    policy_action: jax.Array | None = None,
    *,
    critic_apply,
    critic_optimizer,
    config: SACConfig,
):
    """Piece 2 (critic device): critic step on the soft target, priorities, Polyak targets, actor-loss terms.

    Returns ``(critic, metrics, priorities [B], to_actor)``; ``to_actor`` holds ``q_pi [B]`` and ``action_cotangent
    [B, A]`` (``dL_actor/da`` at ``policy_action``) when ``policy_action`` is given, else the updated critic params.
    """
    chex.assert_rank([reward, done, weights, alpha_next_log_prob], 1)
    q_next = critic_apply(critic.critic_target_params, next_obs, next_action)  # [2, B]
    chex.assert_shape(q_next, (2, reward.shape[0]))
    # As sac_critic_target, with alpha * log pi(a'|s2) computed on the actor device.
    soft_value = jnp.min(q_next, axis=0) - alpha_next_log_prob
    target = reward.astype(jnp.float32) + config.gamma * (1.0 - done.astype(jnp.float32)) * soft_value
    target = jax.lax.stop_gradient(target)
    chex.assert_equal_shape([target, weights])
    weights = jax.lax.stop_gradient(weights.astype(jnp.float32))

    def critic_loss_fn(critic_params):
        q = critic_apply(critic_params, obs, action)  # [2, B]
        chex.assert_shape(q, (2, target.shape[0]))
        td = target[None] - q
        return jnp.sum(jnp.mean(weights[None] * jnp.square(td), axis=1)), (q, td)

    (critic_loss, (q, td)), critic_grads = jax.value_and_grad(critic_loss_fn, has_aux=True)(critic.critic_params)
    updates, critic_opt_state = critic_optimizer.update(critic_grads, critic.critic_opt_state, critic.critic_params)
    critic_params = optax.apply_updates(critic.critic_params, updates)
    critic_target_params = optax.incremental_update(critic_params, critic.critic_target_params, config.tau)

    if policy_action is None:
        to_actor = {"critic_params": critic_params}
    else:

        def neg_mean_q(a):
            q_pi = jnp.min(critic_apply(critic_params, obs, a), axis=0)  # [B]
            return -jnp.mean(q_pi), q_pi

        # The cotangent sac_update's backward pass sends into the sampled action: -(1/B) d min_k Q_k / da.
        (_, q_pi), action_cotangent = jax.value_and_grad(neg_mean_q, has_aux=True)(policy_action)
        to_actor = {"q_pi": q_pi, "action_cotangent": action_cotangent}

    metrics = {
        "critic_loss": critic_loss,
        "q_mean": jnp.mean(q),
        "td_abs_mean": jnp.mean(jnp.abs(td)),
        "critic_grad_norm": optax.tree.norm(critic_grads),
    }
    new_critic = CriticSide(critic_params, critic_target_params, critic_opt_state)
    return new_critic, metrics, jnp.max(jnp.abs(jax.lax.stop_gradient(td)), axis=0), to_actor


def _apply_actor_grads(actor: ActorSide, actor_grads, *, actor_optimizer):
    updates, actor_opt_state = actor_optimizer.update(actor_grads, actor.actor_opt_state, actor.actor_params)
    actor_params = optax.apply_updates(actor.actor_params, updates)
    return actor._replace(actor_params=actor_params, actor_opt_state=actor_opt_state)


def actor_step_vjp(
    actor: ActorSide,
    alpha: jax.Array,
    actor_key: jax.Array,
    obs: jax.Array,
    q_pi: jax.Array,
    action_cotangent: jax.Array,
    *,
    actor_apply,
    actor_optimizer,
    action_low,
    action_high,
):
    """Piece 3, ``"vjp"`` (actor device): back-propagates the critic's action cotangent through the sampler.

    ``actor.actor_params`` are still the parameters piece 1 sampled with; the sample at ``s`` is recomputed (same
    key) to get its VJP. Returns ``(actor, metrics)``.
    """

    def sample(params):
        return _sample(params, obs, actor_key, actor_apply=actor_apply, action_low=action_low, action_high=action_high)

    (action, log_prob), sample_vjp = jax.vjp(sample, actor.actor_params)
    chex.assert_equal_shape([action, action_cotangent])
    actor_loss, log_prob_cotangent = jax.value_and_grad(lambda lp: jnp.mean(alpha * lp - q_pi))(log_prob)
    (actor_grads,) = sample_vjp((action_cotangent, log_prob_cotangent))
    actor = _apply_actor_grads(actor, actor_grads, actor_optimizer=actor_optimizer)
    return actor, {"actor_loss": actor_loss, "actor_grad_norm": optax.tree.norm(actor_grads)}


def actor_step_params(
    actor: ActorSide,
    alpha: jax.Array,
    actor_key: jax.Array,
    obs: jax.Array,
    critic_params,
    *,
    actor_apply,
    critic_apply,
    actor_optimizer,
    alpha_optimizer,
    config: SACConfig,
    action_low,
    action_high,
):
    """Piece 3, ``"critic_params"`` (actor device): ``sac_update``'s actor and temperature steps on a copy of the
    updated critics. Returns ``(actor, metrics)``."""

    def actor_loss_fn(actor_params):
        action, log_prob = _sample(
            actor_params, obs, actor_key, actor_apply=actor_apply, action_low=action_low, action_high=action_high
        )
        q_pi = jnp.min(critic_apply(critic_params, obs, action), axis=0)  # [B]
        return jnp.mean(alpha * log_prob - q_pi), (log_prob, action.shape[-1])

    (actor_loss, (log_prob, action_dim)), actor_grads = jax.value_and_grad(actor_loss_fn, has_aux=True)(
        actor.actor_params
    )
    log_alpha, alpha_opt_state, alpha_loss = _temperature(
        actor.log_alpha, actor.alpha_opt_state, log_prob, action_dim, alpha_optimizer=alpha_optimizer, config=config
    )
    actor = _apply_actor_grads(actor, actor_grads, actor_optimizer=actor_optimizer)
    actor = actor._replace(log_alpha=log_alpha, alpha_opt_state=alpha_opt_state)
    metrics = {
        "actor_loss": actor_loss,
        "alpha_loss": alpha_loss,
        "entropy": -jnp.mean(log_prob),
        "actor_grad_norm": optax.tree.norm(actor_grads),
    }
    return actor, metrics


def _param_count(tree) -> int:
    return sum(int(x.size) for x in jax.tree.leaves(tree))


class ModelParallelSAC:
    """SAC's update with the actor on ``actor_device`` and the twin critics on ``critic_device`` (Spreeze 3.2.2).

    Args:
      actor_apply, critic_apply, actor_optimizer, critic_optimizer, alpha_optimizer, config, action_low,
        action_high: as for ``agents.sac.sac_update``.
      actor_device, critic_device: ``jax.Device``; default the first two local devices (one device: both the same,
        which falls back to the plain jitted ``sac_update``).
      actor_grad: ``"vjp"`` or ``"critic_params"``, how the actor loss gets the updated critics (module docstring).

    Use ``split = mp.place(state)``, then ``split, metrics, priorities = mp.update(split, batch, weights)`` with the
    batch and weights of ``sac_update`` (host arrays, or arrays already on the right devices); ``mp.gather(split)``
    gives a ``SACState`` on one device. Metrics live on the device that computed them, priorities on the critic
    device.
    """

    def __init__(
        self,
        *,
        actor_apply,
        critic_apply,
        actor_optimizer: optax.GradientTransformation,
        critic_optimizer: optax.GradientTransformation,
        alpha_optimizer: optax.GradientTransformation,
        config: SACConfig,
        action_low,
        action_high,
        actor_device: jax.Device | None = None,
        critic_device: jax.Device | None = None,
        actor_grad: str = "vjp",
    ):
        if actor_grad not in ACTOR_GRAD_MODES:
            raise ValueError(f"actor_grad must be one of {ACTOR_GRAD_MODES}, got {actor_grad!r}.")
        devices = jax.local_devices()
        self.actor_device = actor_device if actor_device is not None else devices[0]
        self.critic_device = critic_device if critic_device is not None else devices[min(1, len(devices) - 1)]
        self.actor_grad = actor_grad
        self.model_parallel = self.actor_device != self.critic_device
        bounds = dict(action_low=action_low, action_high=action_high)
        self._fused = jax.jit(
            functools.partial(
                _fused_update,
                update=functools.partial(
                    sac_update,
                    actor_apply=actor_apply,
                    critic_apply=critic_apply,
                    actor_optimizer=actor_optimizer,
                    critic_optimizer=critic_optimizer,
                    alpha_optimizer=alpha_optimizer,
                    config=config,
                    **bounds,
                ),
            )
        )
        self._actor_sample = jax.jit(
            functools.partial(
                actor_sample,
                actor_apply=actor_apply,
                alpha_optimizer=alpha_optimizer,
                config=config,
                actor_grad=actor_grad,
                **bounds,
            )
        )
        self._critic_step = jax.jit(
            functools.partial(critic_step, critic_apply=critic_apply, critic_optimizer=critic_optimizer, config=config)
        )
        if actor_grad == "vjp":
            self._actor_step = jax.jit(
                functools.partial(actor_step_vjp, actor_apply=actor_apply, actor_optimizer=actor_optimizer, **bounds)
            )
        else:
            self._actor_step = jax.jit(
                functools.partial(
                    actor_step_params,
                    actor_apply=actor_apply,
                    critic_apply=critic_apply,
                    actor_optimizer=actor_optimizer,
                    alpha_optimizer=alpha_optimizer,
                    config=config,
                    **bounds,
                )
            )

    def place(self, state: SACState) -> SplitSACState:
        """Splits ``state`` and commits the actor side to ``actor_device``, the critic side to ``critic_device``."""
        split = split_state(state)
        return SplitSACState(
            actor=jax.device_put(split.actor, self.actor_device),
            critic=jax.device_put(split.critic, self.critic_device),
        )

    def gather(self, split: SplitSACState, device: jax.Device | None = None) -> SACState:
        """The ``SACState`` on ``device`` (default ``actor_device``): for checkpoints, evaluation, ``sac_update``."""
        return jax.device_put(join_state(split), device if device is not None else self.actor_device)

    def place_batch(self, batch: dict, weights) -> tuple[dict, dict]:
        """``(actor_inputs, critic_inputs)``: ``s, s2`` on the actor device; ``s, a, r, s2, d, weights`` on the critic
        device. Reward, done, action and weights are never put on the actor device."""
        actor_inputs = jax.device_put({k: batch[k] for k in ACTOR_BATCH_KEYS}, self.actor_device)
        critic_inputs = {k: batch[k] for k in CRITIC_BATCH_KEYS}
        critic_inputs["weights"] = weights
        return actor_inputs, jax.device_put(critic_inputs, self.critic_device)

    def update(self, split: SplitSACState, batch: dict, weights) -> tuple[SplitSACState, dict, jax.Array]:
        """One SAC update (``sac_update``'s semantics): ``(split, metrics, priorities [B])``."""
        if not self.model_parallel:
            batch, weights = jax.device_put((batch, weights), self.actor_device)
            return self._fused(split, batch, weights)
        actor_inputs, critic_inputs = self.place_batch(batch, weights)
        actor, to_critic, local = self._actor_sample(split.actor, actor_inputs["obs"], actor_inputs["next_obs"])
        to_critic = jax.device_put(to_critic, self.critic_device)  # actor -> critic
        critic, critic_metrics, priorities, to_actor = self._critic_step(split.critic, **critic_inputs, **to_critic)
        to_actor = jax.device_put(to_actor, self.actor_device)  # critic -> actor
        if self.actor_grad == "vjp":
            actor, actor_metrics = self._actor_step(
                actor, local["alpha"], local["actor_key"], actor_inputs["obs"],
                to_actor["q_pi"], to_actor["action_cotangent"],
            )
            actor_metrics.update(alpha_loss=local["alpha_loss"], entropy=local["entropy"])
        else:
            actor, actor_metrics = self._actor_step(
                actor, local["alpha"], local["actor_key"], actor_inputs["obs"], to_actor["critic_params"]
            )
        metrics = {**critic_metrics, **actor_metrics, "alpha": local["alpha"]}
        return SplitSACState(actor, critic), {k: metrics[k] for k in METRIC_KEYS}, priorities

    def transfer_bytes(self, batch_size: int, action_dim: int, critic_params=None) -> dict:
        """Device-to-device bytes per update (float32): ``{"actor_to_critic": ..., "critic_to_actor": ...}``.

        ``critic_params`` (a params tree) is needed for ``"critic_params"``. Zero without model parallelism.
        """
        if not self.model_parallel:
            return {"actor_to_critic": 0, "critic_to_actor": 0}
        b, a = int(batch_size), int(action_dim)
        if self.actor_grad == "vjp":
            return {"actor_to_critic": 4 * b * (2 * a + 1), "critic_to_actor": 4 * b * (a + 1)}
        if critic_params is None:
            raise ValueError("transfer_bytes needs critic_params with actor_grad='critic_params'.")
        return {"actor_to_critic": 4 * b * (a + 1), "critic_to_actor": 4 * _param_count(critic_params)}


def _fused_update(split: SplitSACState, batch: dict, weights: jax.Array, *, update):
    state, metrics, priorities = update(join_state(split), batch, weights)
    return split_state(state), metrics, priorities
