"""A2C with HTS-RL's one-step-delayed gradient (seed paper 000, Sec. 4.1, Eq. (6)).

    theta_{j+1} = theta_j + eta * grad_{theta_{j-1}} J(theta_{j-1}, D^{theta_{j-1}})

The storage read in round j was filled by the behaviour parameters theta_{j-1}, so the gradient is
taken *at* theta_{j-1} (policy log-probs, values and entropy all recomputed there), which keeps the
estimate on-policy and avoids the stale-policy term of Eq. (5). It is then applied, through the
optimizer, to the current parameters theta_j. With ``behaviour_params is state.params`` this is
plain synchronous A2C.

Data-parallel (seed paper 001, Distributed BA3C, Sec. 2.2-2.3, synchronous training): under
``jax.pmap(..., axis_name=DEVICE_AXIS)`` with ``axis_name=DEVICE_AXIS`` each replica computes the gradient
on its shard of the environments, the gradients are averaged with ``mean_over_axis`` and every replica
applies the same optimizer step, so replicas that start equal stay bit-identical.
"""

import dataclasses
from typing import Any

import jax
import optax

from agents.batching import FlatBatch, prepare_batch
from agents.losses import ActorCriticLossHyperparameters, a2c_loss
from agents.parallel import mean_over_axis
from agents.types import Rollout, TrainState


@dataclasses.dataclass(frozen=True, kw_only=True)
class A2CConfig(ActorCriticLossHyperparameters):
    """A2C's hyperparameters: the loss's (``gamma``, ``value_coef``, ``entropy_coef``: alpha in Eq. (4)), with
    ``gae_lambda`` 1.0 by default, the n-step return of Eq. (4) over the storage."""

    gae_lambda: float = dataclasses.field(
        default=1.0, metadata=ActorCriticLossHyperparameters.__dataclass_fields__["gae_lambda"].metadata)


def _delayed_gradient(behaviour_params, batch: FlatBatch, *, apply_fn, config: A2CConfig) -> tuple[Any, dict]:
    """grad_{theta_{j-1}} J(theta_{j-1}, D^{theta_{j-1}}) of Eq. (6), with ``a2c_loss``'s metrics.

    The gradient is evaluated at the behaviour parameters, not at ``state.params``: this is the "one-step delay"
    that keeps the estimator on-policy for the data it uses.
    """
    return jax.grad(a2c_loss, has_aux=True)(
        behaviour_params,
        apply_fn,
        batch.obs,
        batch.actions,
        batch.advantages,
        batch.returns,
        batch.valid,
        value_coef=config.value_coef,
        entropy_coef=config.entropy_coef,
    )


def a2c_update(
    state: TrainState,
    behaviour_params,
    rollout: Rollout,
    *,
    apply_fn,
    optimizer: optax.GradientTransformation,
    config: A2CConfig,
    axis_name: str | None = None,
    return_grads: bool = False,
    ordered_mean: bool = False,
    entropy_coef: jax.Array | None = None,
) -> tuple[TrainState, dict]:
    """One delayed-gradient A2C update (Eq. 6).

    Args:
      state: learner state holding the current parameters theta_j.
      behaviour_params: theta_{j-1}, the parameters that collected ``rollout``.
      rollout: time-major batch ``[T, B]`` collected by ``behaviour_params``.
      apply_fn: ``apply_fn(params, obs) -> (policy_out, value)`` (static under jit).
      optimizer: optax transformation whose state is ``state.opt_state`` (static under jit).
      config: ``A2CConfig`` (static under jit).
      axis_name: pmap axis to average gradients and metrics over before the optimizer step
        (data-parallel); None for a single replica. Each replica's loss is a masked mean over its own
        rows, so replicas are weighted equally: this equals the single-device update on the
        concatenated rollout when every replica has the same number of valid rows.
      return_grads: also return the (averaged) gradient pytree as ``metrics["grads"]`` (GALA's
        gradient-similarity log, seed 004 Fig. 2b).
      ordered_mean: average over ``axis_name`` in a fixed replica order (``mean_over_axis(ordered=True)``):
        bit-identical however the replicas are split over processes.
      entropy_coef: a traced coefficient in place of ``config.entropy_coef`` (one vmapped program training
        several coefficients: Anakin's sweep); None: the config's.

    Returns:
      ``(new_state, metrics)``; ``new_state.params = theta_j + optimizer(grad at theta_{j-1})``,
      ``update_step`` incremented, ``key`` passed through unchanged (A2C draws no randomness).
      Metrics (averaged over ``axis_name``): ``policy_loss``, ``value_loss``, ``entropy``,
      ``total_loss``, ``advantage_mean``; ``grad_norm``, the global norm of the (averaged) gradient;
      ``update_norm``, the global norm of the optimizer update actually added to the parameters
      (after clipping and the learning rate).
    """
    if entropy_coef is not None:
        config = dataclasses.replace(config, entropy_coef=entropy_coef)
    batch, advantage_mean = prepare_batch(
        behaviour_params,
        rollout,
        apply_fn=apply_fn,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
    )
    grads, metrics = _delayed_gradient(behaviour_params, batch, apply_fn=apply_fn, config=config)
    # The one cross-replica reduction: identical averaged gradients give identical updates everywhere.
    grads, metrics, advantage_mean = mean_over_axis((grads, metrics, advantage_mean), axis_name, ordered=ordered_mean)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = dict(
        metrics,
        grad_norm=optax.tree.norm(grads),
        update_norm=optax.tree.norm(updates),
        advantage_mean=advantage_mean,
    )
    if return_grads:
        metrics["grads"] = grads
    new_state = TrainState(
        params=params,
        opt_state=opt_state,
        key=state.key,
        update_step=state.update_step + 1,
    )
    return new_state, metrics
