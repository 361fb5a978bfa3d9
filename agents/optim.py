"""Optimizers for the actor-critic learners.

Seed paper 000 (HTS-RL) Eq. (6), theta_{j+1} = theta_j + eta * grad: the step size eta and its
schedule come from here. Choices follow the reference implementations: RMSprop with PyTorch
semantics for A2C (HTS-RL / GALA Atari, alpha 0.99) and Adam for PPO (CleanRL, eps 1e-5), both
behind a global gradient-norm clip and an optional linear learning-rate decay to 0.

Seed paper 001 (Adamski et al. 2018, "Distributed Deep Reinforcement Learning: Learn how to play
Atari games in 21 minutes", Distributed BA3C), Sec. 2.4: the TensorFlow form of Adam, Eq. (5)-(6),

    eta_t   = eta * sqrt(1 - b2^t) / (1 - b1^t)                         (5)
    theta_t = theta_{t-1} - eta_t * m_t / sqrt(v_t + eps_hat)            (6)

with eps_hat *inside* the square root and b1 = 0.8, b2 = 0.75, eps_hat = 1e-8 (Table 1; Sec. 2.4 lowered
the default from 1e-3 and used 1e-8 in all its experiments but Pong), and found that the linear
learning-rate scaling rule did not work for Adam (``scale_learning_rate`` offers "none", "linear" and
"sqrt" so that choice is explicit).
"""

import dataclasses
import math
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from agents.hyperparams import hyperparameter

OPTIMIZERS = ("adam", "rmsprop", "adam_large_batch")


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerHyperparameters:
    """The on-policy learner's optimizer (``make_optimizer``): rmsprop is PyTorch's (eps outside the square root),
    adam_large_batch is Distributed BA3C's Eq. (5)-(6) (seed paper 001)."""

    learning_rate: float = hyperparameter(2.5e-4, "Learning rate (default: preset).",
                                          search=("float", 1e-5, 3e-3, True))
    anneal_lr: bool = hyperparameter(True, "Linearly decay the learning rate to 0 (default: preset).")
    optimizer: str = hyperparameter("adam", "Optimizer (default: preset).", choices=OPTIMIZERS)
    opt_eps: float = hyperparameter(1e-5, "Optimizer epsilon (default: preset).")
    max_grad_norm: float = hyperparameter(0.5, "Global gradient norm clip (0: none; default: preset).")

    def optimizer_settings(self, total_updates: int) -> dict:
        """``make_optimizer``'s arguments for a run of ``total_updates`` optimizer steps (the decay horizon)."""
        return dict(name=self.optimizer, learning_rate=self.learning_rate, total_updates=total_updates,
                    anneal_lr=self.anneal_lr, max_grad_norm=self.max_grad_norm, eps=self.opt_eps)


@dataclasses.dataclass(frozen=True, kw_only=True)
class OffPolicyOptimizerHyperparameters:
    """The off-policy learners' Adam (``make_optimizer``, no annealing): one learning rate for the Q network or the
    actor, one for the critics and SAC's temperature."""

    learning_rate: float = hyperparameter(2.5e-4, "Learning rate (default: preset).", group="off_policy",
                                          search=("float", 1e-5, 3e-3, True))
    critic_learning_rate: float = hyperparameter(
        0.0, "Critic learning rate (0: --learning_rate; default: preset).", group="off_policy")
    max_grad_norm: float = hyperparameter(
        0.5, "Global gradient norm clip (0: none; default: 10 for DQN, else 0).", group="off_policy")
    opt_eps: float = hyperparameter(1e-5, "Optimizer epsilon (default: 1e-5 for DQN, else 1e-8).", group="off_policy")
LR_SCALING_RULES = ("none", "linear", "sqrt")

# Seed paper 001, Table 1 and Sec. 2.4.
LARGE_BATCH_B1 = 0.8
LARGE_BATCH_B2 = 0.75
LARGE_BATCH_EPS = 1e-8
_ADAM_DEFAULT_BETAS = (0.9, 0.999)


class ScaleByLargeBatchAdamState(NamedTuple):
    """State of ``scale_by_large_batch_adam``.

    Attributes:
      count: int32 scalar, number of updates applied so far (t - 1 before the next update).
      mu: first moment m_t, Eq. (2).
      nu: second moment v_t, Eq. (3).
    """

    count: chex.Array
    mu: optax.Updates
    nu: optax.Updates


def scale_by_large_batch_adam(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """TF-style Adam direction of seed paper 001, Eq. (5)-(6), without the learning rate.

    m_t = b1 m_{t-1} + (1 - b1) g_t  (Eq. 2);  v_t = b2 v_{t-1} + (1 - b2) g_t^2  (Eq. 3);
    returns ``sqrt(1 - b2^t) / (1 - b1^t) * m_t / sqrt(v_t + eps)`` with t counting from 1. The bias
    correction is folded into the step (Eq. 5) and eps sits *inside* the square root (Eq. 6), so this
    differs from ``optax.scale_by_adam`` (eps outside the root, added after bias correction) whenever eps
    is not negligible, e.g. the paper's eps_hat = 1e-3. The output is the positive direction (optax
    convention); ``optax.scale_by_learning_rate`` applies ``-eta``.

    Args:
      b1: decay rate of the first moment (paper: 0.8).
      b2: decay rate of the second moment (paper: 0.75).
      eps: eps_hat of Eq. (6), added to v_t inside the square root (paper: 1e-8 or 1e-3).
    """

    def init_fn(params):
        return ScaleByLargeBatchAdamState(
            count=jnp.zeros([], jnp.int32),
            mu=optax.tree.zeros_like(params),
            nu=optax.tree.zeros_like(params),
        )

    def update_fn(updates, state, params=None):
        del params
        mu = optax.tree.update_moment(updates, state.mu, b1, 1)  # Eq. (2)
        nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)  # Eq. (3)
        count = optax.safe_increment(state.count)
        t = count.astype(jnp.float32)
        step_scale = jnp.sqrt(1.0 - jnp.float32(b2) ** t) / (1.0 - jnp.float32(b1) ** t)  # Eq. (5) / eta
        direction = jax.tree.map(
            lambda m, v: (step_scale * m / jnp.sqrt(v + eps)).astype(m.dtype), mu, nu
        )  # Eq. (6) / eta
        return direction, ScaleByLargeBatchAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init_fn, update_fn)


def large_batch_adam(
    learning_rate: optax.ScalarOrSchedule,
    b1: float = LARGE_BATCH_B1,
    b2: float = LARGE_BATCH_B2,
    eps: float = LARGE_BATCH_EPS,
) -> optax.GradientTransformation:
    """Distributed BA3C's Adam (seed paper 001, Eq. (5)-(6), Table 1 defaults b1 0.8, b2 0.75, eps 1e-8).

    Args:
      learning_rate: eta, a float or an optax schedule of the update count.
      b1, b2, eps: see ``scale_by_large_batch_adam``.
    """
    return optax.chain(
        scale_by_large_batch_adam(b1, b2, eps), optax.scale_by_learning_rate(learning_rate)
    )


def scale_learning_rate(base: float, factor: float, rule: str) -> float:
    """Learning rate for a batch ``factor`` times larger than the one ``base`` was tuned for.

    ``"none"`` -> base (seed paper 001 kept eta = 1e-3: with Adam, linear scaling was unstable, Fig. 4);
    ``"linear"`` -> base * factor (Goyal et al. 2017, the paper's [15]); ``"sqrt"`` -> base * sqrt(factor).

    Args:
      base: learning rate tuned for one device / one learner.
      factor: batch multiplier, e.g. the number of devices (data-parallel) or learners (GALA).
      rule: one of ``LR_SCALING_RULES``.
    """
    if rule not in LR_SCALING_RULES:
        raise ValueError(f"Unknown learning-rate scaling rule {rule!r}; expected one of {LR_SCALING_RULES}.")
    if not factor > 0:
        raise ValueError(f"factor must be > 0, got {factor}.")
    if rule == "linear":
        return base * factor
    if rule == "sqrt":
        return base * math.sqrt(factor)
    return base


def make_optimizer(
    *,
    name: str,
    learning_rate: float,
    total_updates: int,
    anneal_lr: bool,
    max_grad_norm: float,
    eps: float,
    rmsprop_decay: float = 0.99,
    b1: float | None = None,
    b2: float | None = None,
) -> optax.GradientTransformation:
    """Builds ``clip_by_global_norm -> adam | rmsprop | adam_large_batch`` with a constant or linearly decaying step.

    Args:
      name: ``"adam"``, ``"rmsprop"`` or ``"adam_large_batch"`` (seed paper 001, Eq. (5)-(6)).
      learning_rate: initial learning rate.
      total_updates: number of ``optimizer.update`` calls over the run, i.e. the decay horizon. Note
        PPO calls it ``num_epochs * num_minibatches`` times per ``ppo_update``.
      anneal_lr: decay the learning rate linearly from ``learning_rate`` to 0 over
      ``total_updates``.
      max_grad_norm: global gradient-norm clip; ``<= 0`` or ``inf`` means no clipping (the clip is
        then replaced by ``optax.identity()`` so the optimizer state keeps the same structure).
      eps: Adam epsilon (outside the square root), RMSprop epsilon added *outside* the square root
        (PyTorch semantics), or eps_hat *inside* the square root for ``"adam_large_batch"``.
      rmsprop_decay: RMSprop smoothing constant (PyTorch ``alpha``).
      b1, b2: Adam decay rates; ``None`` gives 0.9 / 0.999 for ``"adam"`` and 0.8 / 0.75 for
        ``"adam_large_batch"`` (seed paper 001, Table 1). Ignored by ``"rmsprop"``.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"Unknown optimizer {name!r}; expected one of {OPTIMIZERS}.")
    if anneal_lr and total_updates < 1:
        raise ValueError(f"total_updates must be >= 1 when anneal_lr, got {total_updates}.")
    if math.isnan(max_grad_norm):
        raise ValueError("max_grad_norm must not be NaN.")
    schedule = (
        optax.linear_schedule(learning_rate, 0.0, total_updates) if anneal_lr else learning_rate
    )
    if name == "adam":
        default_b1, default_b2 = _ADAM_DEFAULT_BETAS
        base = optax.adam(
            schedule,
            b1=default_b1 if b1 is None else b1,
            b2=default_b2 if b2 is None else b2,
            eps=eps,
        )
    elif name == "adam_large_batch":
        base = large_batch_adam(
            schedule,
            b1=LARGE_BATCH_B1 if b1 is None else b1,
            b2=LARGE_BATCH_B2 if b2 is None else b2,
            eps=eps,
        )
    else:
        # PyTorch RMSprop: v = alpha v + (1 - alpha) g^2, step = g / (sqrt(v) + eps), v starts at 0.
        # optax's default puts eps inside the sqrt, which behaves very differently for eps = 1e-5.
        base = optax.rmsprop(schedule, decay=rmsprop_decay, eps=eps, eps_in_sqrt=False)
    clip_enabled = 0.0 < max_grad_norm < math.inf
    clip = optax.clip_by_global_norm(max_grad_norm) if clip_enabled else optax.identity()
    return optax.chain(clip, base)
