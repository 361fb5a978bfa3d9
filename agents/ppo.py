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

import jax
import jax.numpy as jnp
import optax

from agents.batching import FlatBatch, prepare_batch
from agents.losses import ppo_loss
from agents.parallel import mean_over_axis
from agents.types import Rollout, TrainState


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO hyperparameters.

    Attributes:
      gamma: discount factor.
      gae_lambda: GAE lambda.
      clip_eps: ratio clipping epsilon.
      value_coef: weight of the value loss ``0.5 * (R - V)^2``.
      entropy_coef: weight of the entropy bonus.
      num_epochs: passes over the rollout per update.
      num_minibatches: minibatches per epoch; must divide ``T * B``.
      normalize_advantages: normalise advantages per minibatch (masked mean/std).
      clip_value_loss: CleanRL's value clipping around the behaviour values (``agents.losses.ppo_loss``).
      unroll_epochs, unroll_minibatches: ``jax.lax.scan``'s ``unroll`` for the epoch and minibatch
        loops (``True``: fully unrolled, ``False``/``1``: a rolled while loop, ``k``: k steps per
        iteration). Rolled loops build in seconds whatever ``num_epochs * num_minibatches`` is; fully
        unrolled ones grow compile time and memory with it (tens of unrolled minibatches take
        minutes and gigabytes to build) but run convolution gradients several times faster on XLA
        CPU. ``systems.common.learner`` picks per network kind (``benchmarks/presets.py`` measures
        both).
    """

    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.1
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    num_epochs: int = 4
    num_minibatches: int = 4
    normalize_advantages: bool = True
    clip_value_loss: bool = False
    unroll_epochs: bool | int = False
    unroll_minibatches: bool | int = False


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
    grads, metrics = jax.grad(ppo_loss, has_aux=True)(
        params,
        apply_fn,
        minibatch.obs,
        minibatch.actions,
        minibatch.behaviour_log_probs,
        minibatch.advantages,
        minibatch.returns,
        minibatch.valid,
        clip_eps=config.clip_eps,
        value_coef=config.value_coef,
        entropy_coef=config.entropy_coef,
        normalize_advantages=config.normalize_advantages,
        behaviour_values=minibatch.behaviour_values,
        clip_value_loss=config.clip_value_loss,
    )
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
    num_rows = config.num_minibatches * minibatch_size
    permutation = jax.random.permutation(epoch_key, num_rows)
    minibatches = jax.tree.map(
        lambda x: x[permutation].reshape((config.num_minibatches, minibatch_size, *x.shape[1:])),
        batch,
    )  # each leaf [M, N / M, ...]
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
