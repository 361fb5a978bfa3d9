"""PPO on HTS-RL's double-buffered storages (seed 000, Sec. 4.1; Schulman et al. 2017, Eq. (7)).

HTS-RL's PPO (as in the authors' code) reads the storage D^{theta_{j-1}} collected by the behaviour
parameters theta_{j-1} while the current parameters are theta_j. The epochs start from theta_j
(``state.params``); the importance ratio pi_theta / pi_{theta_{j-1}} uses the *stored* behaviour
log-probs, so the clipped surrogate itself corrects for the one-step lag. Advantages come from the
stored behaviour values plus the bootstrap value of ``obs[T]`` under theta_{j-1}.

Data-parallel (as in seed paper 001's synchronous training): with ``axis_name`` set under ``pmap``, each
minibatch gradient is averaged across replicas with ``mean_over_axis`` before its optimizer step.
"""

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import optax

from agents import batching, distributions
from agents.batching import FlatBatch, prepare_batch
from agents.hyperparams import hyperparameter
from agents.losses import ActorCriticLossHyperparameters, check_batch, combined_loss, masked_mean
from agents.parallel import mean_over_axis
from agents.types import Rollout, SequenceObs, TrainState


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOHyperparameters(ActorCriticLossHyperparameters):
    """PPO's hyperparameters (beside the loss's ``gamma``, ``gae_lambda``, ``value_coef``, ``entropy_coef``).

    Attributes:
      clip_eps: ratio clipping epsilon.
      num_epochs: passes over the rollout per update.
      num_minibatches: minibatches per epoch; must divide ``T * B``.
      normalize_advantages: normalise advantages per minibatch (masked mean/std).
      clip_value_loss: CleanRL's value clipping around the behaviour values (``ppo_loss``).
    """

    clip_eps: float = hyperparameter(0.1, "PPO clip range (default: preset).", group="ppo",
                                     search=("categorical", (0.1, 0.2, 0.3)))
    num_epochs: int = hyperparameter(4, "PPO epochs per update (default: preset).", group="ppo",
                                     search=("int", 1, 10))
    num_minibatches: int = hyperparameter(4, "PPO minibatches per epoch (default: preset).", group="ppo",
                                          search=("categorical", (1, 2, 4, 8)))
    normalize_advantages: bool = True
    clip_value_loss: bool = hyperparameter(
        False, "PPO: clip the value loss around the behaviour values (default: preset; MuJoCo on).", group="ppo")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOConfig(PPOHyperparameters):
    """What ``ppo_update`` runs with: PPO's hyperparameters and how its loops are built.

    Attributes:
      unroll_epochs, unroll_minibatches: ``jax.lax.scan``'s ``unroll`` for the epoch and minibatch
        loops (``True``: fully unrolled, ``False``/``1``: a rolled while loop, ``k``: k steps per
        iteration). Rolled loops build in seconds whatever ``num_epochs * num_minibatches`` is; fully
        unrolled ones grow compile time and memory with it (tens of unrolled minibatches take
        minutes and gigabytes to build) but run convolution gradients several times faster on XLA
        CPU. ``systems.common.learner`` picks per network kind (``benchmarks/presets.py`` measures
        both).
    """

    unroll_epochs: bool | int = False
    unroll_minibatches: bool | int = False


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


def ppo_loss(params, batch: FlatBatch, config: PPOConfig, apply_fn) -> tuple[jax.Array, dict]:
    """PPO's loss on one minibatch (Schulman et al. 2017, Eq. 9 without its sign): ``L^CLIP`` (Eq. 7), the value
    loss weighted by ``config.value_coef`` and the entropy bonus weighted by ``config.entropy_coef``,

        loss = -L^CLIP + value_coef * L^VF - entropy_coef * H.

    ``L^VF`` is ``0.5 * (returns - V)^2``, or with ``config.clip_value_loss`` CleanRL's clipped form around
    ``batch.behaviour_values`` (``_value_loss``); advantages are normalised per minibatch with masked statistics
    when ``config.normalize_advantages``. Rows with ``batch.valid`` 0 change neither the loss nor its gradient.

    Args:
      params: network parameters being optimised.
      batch: the minibatch's ``[N]`` rows (``FlatBatch``: obs, actions, behaviour log-probs, advantages,
        returns, valid mask, behaviour values).
      config: ``PPOConfig`` (``clip_eps``, ``value_coef``, ``entropy_coef``, ``normalize_advantages``,
        ``clip_value_loss`` are read).
      apply_fn: ``apply_fn(params, obs) -> (policy_out, value)``.

    Returns:
      ``(loss, metrics)`` with metrics ``policy_loss``, ``value_loss`` (unweighted), ``entropy``,
      ``total_loss``, ``approx_kl`` (the low-variance ``(r - 1) - log r`` estimator) and
      ``clip_fraction``.
    """
    check_batch(batch.obs, batch.actions, batch.valid, batch.behaviour_log_probs, batch.advantages, batch.returns)
    policy_out, values = apply_fn(params, batch.obs)
    chex.assert_equal_shape([values, batch.valid])
    valid = batch.valid.astype(jnp.float32)

    advantages = jax.lax.stop_gradient(batch.advantages)
    if config.normalize_advantages:
        advantages = _normalized_advantages(advantages, valid)
    log_ratio = distributions.log_prob(policy_out, batch.actions) - batch.behaviour_log_probs  # [N]
    policy_loss, ratio = _clipped_surrogate_loss(log_ratio, advantages, valid, clip_eps=config.clip_eps)
    value_loss = _value_loss(values, batch.returns, valid, behaviour_values=batch.behaviour_values,
                             clip_value_loss=config.clip_value_loss, clip_eps=config.clip_eps)
    entropy = masked_mean(distributions.entropy(policy_out), valid)
    total_loss, metrics = combined_loss(policy_loss, value_loss, entropy, value_coef=config.value_coef,
                                        entropy_coef=config.entropy_coef)
    return total_loss, {**metrics, **_ratio_statistics(log_ratio, ratio, valid, clip_eps=config.clip_eps)}


def _minibatch_size(num_steps: int, num_envs: int, num_minibatches: int) -> int:
    """Rows per minibatch, ``T * B / num_minibatches``; raises ValueError if that is not a whole number."""
    num_rows = num_steps * num_envs
    if num_minibatches < 1 or num_rows % num_minibatches:
        raise ValueError(
            f"T * B = {num_steps} * {num_envs} = {num_rows} rows is not divisible by "
            f"num_minibatches = {num_minibatches}."
        )
    return num_rows // num_minibatches


def _minibatch_step(
    carry,
    minibatch: FlatBatch,
    *,
    apply_fn,
    optimizer: optax.GradientTransformation,
    config: PPOConfig,
    axis_name: str | None,
    ordered_mean: bool,
):
    """One clipped-surrogate optimizer step on ``minibatch``; gradient and metrics averaged over ``axis_name``."""
    params, opt_state = carry
    grads, metrics = jax.grad(ppo_loss, has_aux=True)(params, minibatch, config, apply_fn)
    grads, metrics = mean_over_axis((grads, metrics), axis_name, ordered=ordered_mean)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    metrics = dict(metrics, grad_norm=optax.tree.norm(grads))
    return (params, opt_state), metrics


def _epoch_step(
    carry,
    epoch_key: jax.Array,
    *,
    batch: FlatBatch,
    minibatch_size: int,
    apply_fn,
    optimizer: optax.GradientTransformation,
    config: PPOConfig,
    axis_name: str | None,
    ordered_mean: bool,
):
    """One pass over ``batch``: a fresh row permutation from ``epoch_key``, then a scan of ``_minibatch_step``."""
    recurrent = isinstance(batch.obs, SequenceObs)  # minibatches of whole (chunked) env sequences
    units = batch.obs.first.shape[1] if recurrent else config.num_minibatches * minibatch_size
    permutation = jax.random.permutation(epoch_key, units)
    minibatches = batching.minibatches(batch, permutation, config.num_minibatches)  # each leaf [M, N / M, ...]
    minibatch_step = functools.partial(
        _minibatch_step, apply_fn=apply_fn, optimizer=optimizer, config=config, axis_name=axis_name,
        ordered_mean=ordered_mean,
    )
    return jax.lax.scan(minibatch_step, carry, minibatches, unroll=config.unroll_minibatches)


def ppo_update(
    state: TrainState,
    behaviour_params,
    rollout: Rollout,
    *,
    apply_fn,
    optimizer: optax.GradientTransformation,
    config: PPOConfig,
    axis_name: str | None = None,
    ordered_mean: bool = False,
    entropy_coef: jax.Array | None = None,
) -> tuple[TrainState, dict]:
    """``num_epochs x num_minibatches`` clipped-surrogate steps starting from ``state.params``.

    Args:
      state: learner state; ``state.params`` (theta_j) is where optimisation starts and
        ``state.key`` seeds the per-epoch minibatch permutations.
      behaviour_params: theta_{j-1}, used only for the bootstrap value of ``rollout.obs[T]``.
      rollout: time-major batch ``[T, B]`` collected by ``behaviour_params``.
      apply_fn: ``apply_fn(params, obs) -> (policy_out, value)`` (static under jit).
      optimizer: optax transformation whose state is ``state.opt_state`` (static under jit); it is
        called ``num_epochs * num_minibatches`` times.
      config: ``PPOConfig`` (static under jit).
      axis_name: pmap axis to average each minibatch gradient (and the metrics) over before its
        optimizer step (data-parallel); None for a single replica. Every replica draws its minibatch
        permutation from the same ``state.key`` over its own rows, and advantage normalisation stays
        per replica minibatch, so this is a data-parallel PPO, not a bit-exact copy of one device's.
      ordered_mean: average over ``axis_name`` in a fixed replica order (``mean_over_axis(ordered=True)``):
        bit-identical however the replicas are split over processes.
      entropy_coef: a traced coefficient in place of ``config.entropy_coef`` (one vmapped program training
        several coefficients: Anakin's sweep); None: the config's.

    Returns:
      ``(new_state, metrics)`` with the next key and ``update_step + 1``. Metrics are means over all
      minibatch steps: ``policy_loss``, ``value_loss``, ``entropy``, ``total_loss``, ``approx_kl``,
      ``clip_fraction``, ``grad_norm``; plus ``advantage_mean`` (raw, masked) of the rollout.

    Raises:
      ValueError: if ``T * B`` is not divisible by ``num_minibatches``.
    """
    if entropy_coef is not None:
        config = dataclasses.replace(config, entropy_coef=entropy_coef)
    num_steps, num_envs = rollout.rewards.shape
    minibatch_size = _minibatch_size(num_steps, num_envs, config.num_minibatches)
    batch, advantage_mean = prepare_batch(
        behaviour_params,
        rollout,
        apply_fn=apply_fn,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
        num_chunks=batching.sequence_chunks(num_envs, config.num_minibatches),  # a recurrent policy's
    )
    epoch_step = functools.partial(
        _epoch_step,
        batch=batch,
        minibatch_size=minibatch_size,
        config=config,
        apply_fn=apply_fn,
        optimizer=optimizer,
        axis_name=axis_name,
        ordered_mean=ordered_mean,
    )
    # Loop forms: see ``PPOConfig.unroll_epochs`` (convolutions want unrolled loops on XLA CPU, MLPs
    # with many minibatches must stay rolled or the program grows with every step).
    next_key, permutation_key = jax.random.split(state.key)
    epoch_keys = jax.random.split(permutation_key, config.num_epochs)
    (params, opt_state), metrics = jax.lax.scan(
        epoch_step, (state.params, state.opt_state), epoch_keys, unroll=config.unroll_epochs
    )  # metrics leaves [E, M]
    metrics = jax.tree.map(jnp.mean, metrics)
    metrics["advantage_mean"] = mean_over_axis(advantage_mean, axis_name, ordered=ordered_mean)
    new_state = TrainState(
        params=params,
        opt_state=opt_state,
        key=next_key,
        update_step=state.update_step + 1,
    )
    return new_state, metrics
