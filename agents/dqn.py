"""DQN and Double DQN learners with prioritized-replay outputs (seed paper 003, PAL: DQN + PER).

* DQN, Mnih et al. (2015), "Human-level control through deep RL", Algorithm 1: the TD target
  y = r + gamma (1 - done) max_a Q_target(s', a), a Huber loss on y - Q(s, a) and a target network copied
  every C updates.
* Double DQN, van Hasselt, Guez and Silver (2016), "Deep RL with Double Q-learning", Eq. (4):
  y = r + gamma (1 - done) Q_target(s', argmax_a Q_online(s', a)).
* Prioritized experience replay, Schaul et al. (2016), Sec. 3.3-3.4: the loss is the mean of the importance
  weights w_i times the per-sample loss, and the new priorities are |delta_i| (the replay buffer adds its own
  epsilon and exponent alpha).

``done`` is *termination only*. A time-limit truncation is not an absorbing state, so its target must still
bootstrap from Q(s', .): pass ``done = 0`` for truncated transitions (Pardo et al. 2018, "Time Limits in RL").

Parallel learners (seed paper 003, PAL, Sec. V-B: each learner samples its own batch and computes sub-gradients,
the parameter server aggregates them and updates the weights): ``dqn_update(..., axis_name=AXIS)`` under
``jax.vmap(..., in_axes=(None, 0, 0), out_axes=(None, None, 0), axis_name=AXIS)`` (or ``pmap``) averages the
gradients over the learners with ``mean_over_axis`` before one optimizer step.
"""

import dataclasses
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from agents.hyperparams import hyperparameter, setting
from agents.parallel import mean_over_axis

DQN_LOSSES = ("huber", "mse")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DQNHyperparameters:
    """A DQN run's own flags: the hard target copies' period (Mnih et al. 2015) and the epsilon-greedy exploration,
    decayed linearly from ``epsilon_start`` to ``epsilon_end`` over ``exploration_fraction`` of the run."""

    target_update_period: int = hyperparameter(
        500, "DQN: updates between target copies (default: preset).", group="dqn", search=("int", 100, 10_000, True))
    epsilon_start: float = setting(1.0, "DQN: initial exploration rate.", "dqn")
    epsilon_end: float = hyperparameter(0.05, "DQN: final exploration rate (default: preset).", group="dqn",
                                        search=("float", 0.01, 0.1))
    exploration_fraction: float = hyperparameter(
        0.5, "DQN: fraction of the run to decay epsilon over (default: preset).", group="dqn",
        search=("float", 0.05, 0.5))


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """DQN / Double DQN hyperparameters.

    Attributes:
      gamma: discount factor.
      double: Double DQN target (van Hasselt et al. 2016, Eq. 4) if True, the max of the target network otherwise.
      loss: ``"huber"`` (Mnih et al. 2015, error clipping) or ``"mse"`` (``0.5 delta^2``).
      huber_delta: the Huber loss is quadratic for ``|delta| <= huber_delta`` and linear beyond.
      target_update_period: copy the online parameters into the target network after every
        ``target_update_period``-th update (counting updates from 1); used when ``tau`` is None.
      tau: if set, Polyak-average the target network every update instead:
        ``target <- tau * online + (1 - tau) * target``.
    """

    gamma: float = 0.99
    double: bool = True
    loss: str = "huber"
    huber_delta: float = 1.0
    target_update_period: int = 1000
    tau: float | None = None

    def __post_init__(self):
        if self.loss not in DQN_LOSSES:
            raise ValueError(f"Unknown loss {self.loss!r}; expected one of {DQN_LOSSES}.")
        if self.target_update_period < 1:
            raise ValueError(f"target_update_period must be >= 1, got {self.target_update_period}.")
        if self.tau is not None and not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}.")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}.")


class DQNState(NamedTuple):
    """DQN learner state.

    Attributes:
      params: online Q-network parameters.
      target_params: target Q-network parameters.
      opt_state: optimizer state for ``params``.
      step: int32 scalar, number of ``dqn_update`` calls applied so far.
    """

    params: Any
    target_params: Any
    opt_state: Any
    step: jax.Array


def dqn_init(params, *, optimizer: optax.GradientTransformation) -> DQNState:
    """Initial state: the target network starts as a copy of ``params``."""
    return DQNState(
        params=params,
        target_params=jax.tree.map(jnp.array, params),
        opt_state=optimizer.init(params),
        step=jnp.zeros((), jnp.int32),
    )


def dqn_td_errors(params, target_params, batch: dict, *, apply_fn, config: DQNConfig) -> tuple[jax.Array, jax.Array]:
    """TD errors ``delta = y - Q(s, a)`` ``[B]`` and Q(s, a) ``[B]``; y carries no gradient.

    Args:
      params: online parameters (Q(s, a) and, for Double DQN, the argmax at s').
      target_params: target-network parameters (the value of s').
      batch: ``obs [B, ...]``, ``action [B]`` int, ``reward [B]``, ``next_obs [B, ...]``, ``done [B]``
        (termination only; truncations must be 0 so they bootstrap).
      apply_fn: ``apply_fn(params, obs) -> Q [B, A]``.
      config: ``DQNConfig``.
    """
    import rlax  # here, not at the top: rlax imports distrax and TensorFlow Probability, a second or more per process

    action, reward, done = batch["action"], batch["reward"], batch["done"]
    chex.assert_rank([action, reward, done], 1)
    chex.assert_equal_shape([action, reward, done])
    chex.assert_type(action, int)
    q_tm1 = apply_fn(params, batch["obs"])  # [B, A]
    q_t_target = apply_fn(target_params, batch["next_obs"])  # [B, A]
    chex.assert_rank(q_tm1, 2)
    chex.assert_equal_shape([q_tm1, q_t_target])
    discount_t = config.gamma * (1.0 - done.astype(jnp.float32))  # [B]
    reward = reward.astype(jnp.float32)
    if config.double:
        q_t_selector = apply_fn(params, batch["next_obs"])  # [B, A]
        td = jax.vmap(rlax.double_q_learning)(q_tm1, action, reward, discount_t, q_t_target, q_t_selector)
    else:
        td = jax.vmap(rlax.q_learning)(q_tm1, action, reward, discount_t, q_t_target)
    q_taken = jnp.take_along_axis(q_tm1, action[:, None], axis=1)[:, 0]  # [B]
    return td, q_taken


def dqn_loss(
    params, target_params, batch: dict, weights: jax.Array, *, apply_fn, config: DQNConfig
) -> tuple[jax.Array, tuple[dict, jax.Array]]:
    """Importance-weighted TD loss ``mean_i w_i l(delta_i)`` (Schaul et al. 2016, Algorithm 1 line 12).

    Returns:
      ``(loss, (metrics, td [B]))``.
    """
    import rlax  # as in dqn_td_errors

    td, q_taken = dqn_td_errors(params, target_params, batch, apply_fn=apply_fn, config=config)
    chex.assert_equal_shape([td, weights])
    if config.loss == "huber":
        per_sample = rlax.huber_loss(td, config.huber_delta)  # 0.5 x^2 inside, delta (|x| - delta / 2) outside
    else:
        per_sample = 0.5 * jnp.square(td)
    loss = jnp.mean(jax.lax.stop_gradient(weights.astype(jnp.float32)) * per_sample)
    metrics = {"loss": loss, "q_mean": jnp.mean(q_taken), "td_abs_mean": jnp.mean(jnp.abs(td))}
    return loss, (metrics, td)


def dqn_update(
    state: DQNState,
    batch: dict,
    weights: jax.Array,
    *,
    apply_fn,
    optimizer: optax.GradientTransformation,
    config: DQNConfig,
    axis_name: str | None = None,
) -> tuple[DQNState, dict, jax.Array]:
    """One (Double) DQN gradient step and target-network update.

    Args:
      state: learner state.
      batch: see ``dqn_td_errors``; rows ``[B]``.
      weights: ``[B]`` importance-sampling weights (ones for uniform replay).
      apply_fn: ``apply_fn(params, obs) -> Q [B, A]`` (static under jit).
      optimizer: optax transformation whose state is ``state.opt_state`` (static under jit).
      config: ``DQNConfig`` (static under jit).
      axis_name: named axis of parallel learners (seed 003, PAL, Sec. V-B) bound by ``vmap``/``pmap`` with the
        state replicated and ``batch``/``weights`` split per learner; the gradients and the metrics are averaged
        over it with ``mean_over_axis`` before the optimizer step, so every learner applies the same update and
        the new state is replicated. Each learner's loss is a mean over its own ``B`` rows, so with equal ``B``
        this equals one step on the concatenated batches. None (default) for a single learner.

    Returns:
      ``(new_state, metrics, new_priorities [B])``: ``new_priorities = |delta|`` computed with the parameters
      *before* this step (the errors the sample was judged on; per learner, its own rows, under ``axis_name``).
      The target network is a hard copy of the new online parameters when
      ``new_state.step % target_update_period == 0`` (or Polyak-averaged every step if ``tau`` is set).
      Metrics (averaged over ``axis_name``): ``loss``, ``q_mean``, ``td_abs_mean``, ``grad_norm`` (of the
      averaged gradient), ``target_updated``.
    """
    chex.assert_rank(weights, 1)
    grads, (metrics, td) = jax.grad(dqn_loss, has_aux=True)(
        state.params, state.target_params, batch, weights, apply_fn=apply_fn, config=config
    )
    # The parameter server's aggregation (PAL Sec. V-B): one averaged gradient, one update on every learner.
    grads, metrics = mean_over_axis((grads, metrics), axis_name)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    step = state.step + 1
    if config.tau is None:
        target_updated = step % config.target_update_period == 0
        target_params = optax.periodic_update(params, state.target_params, step, config.target_update_period)
    else:
        target_updated = jnp.asarray(True)
        target_params = optax.incremental_update(params, state.target_params, config.tau)
    metrics = dict(metrics, grad_norm=optax.tree.norm(grads), target_updated=target_updated.astype(jnp.float32))
    new_state = DQNState(params=params, target_params=target_params, opt_state=opt_state, step=step)
    return new_state, metrics, jnp.abs(jax.lax.stop_gradient(td))


def dqn_act(params, obs: jax.Array, key: jax.Array, epsilon, *, apply_fn) -> jax.Array:
    """Epsilon-greedy actions ``[B]`` int32 (Mnih et al. 2015).

    Args:
      params: behaviour parameters.
      obs: ``[B, ...]`` observations.
      key: one PRNG key, or ``[B]`` keys (one per row, so a row's action does not depend on its batch-mates).
        The caller splits its own key; nothing is returned for it.
      epsilon: scalar or ``[B]`` exploration rate (Ape-X gives each actor its own).
      apply_fn: ``apply_fn(params, obs) -> Q [B, A]``.
    """
    q = apply_fn(params, obs)  # [B, A]
    chex.assert_rank(q, 2)
    batch_size, num_actions = q.shape
    keys = jax.random.split(key, batch_size) if key.ndim == 0 else key
    chex.assert_shape(keys, (batch_size,))

    def row(q_row, row_key, eps):
        explore_key, action_key = jax.random.split(row_key)
        random_action = jax.random.randint(action_key, (), 0, num_actions)
        explore = jax.random.uniform(explore_key) < eps
        return jnp.where(explore, random_action, jnp.argmax(q_row)).astype(jnp.int32)

    epsilon = jnp.broadcast_to(jnp.asarray(epsilon, jnp.float32), (batch_size,))
    return jax.vmap(row)(q, keys, epsilon)
