"""Flax networks for the off-policy learners (seed paper 003, PAL: DQN, DDQN, DDPG, TD3, SAC).

* ``QNetwork``: Mnih et al. (2015), "Human-level control through deep RL": Q(s, .) for discrete actions, an MLP
  on vector observations or the Nature CNN torso (``agents.networks.NatureCNN``) on EnvPool Atari frames.
* ``DeterministicActor``: Lillicrap et al. (2016), "Continuous control with deep RL" (DDPG) / Fujimoto et al.
  (2018), "Addressing Function Approximation Error in Actor-Critic Methods" (TD3): mu(s) = tanh squashed and
  affinely scaled to the action box.
* ``ContinuousQ`` / ``TwinQ``: Q(s, a) on the concatenation [s, a]; ``TwinQ`` stacks the two critics of TD3
  (Sec. 4.1, clipped double Q) and SAC.
* ``GaussianActor`` and ``squashed_gaussian_*``: Haarnoja et al. (2018), "Soft Actor-Critic", Appendix C: u ~
  N(mean, std), a = tanh(u) scaled to the box, and Eq. (21), the change of variables
  log pi(a|s) = log N(u) - sum_i log(scale_i (1 - tanh^2(u_i))).

All MLPs are ReLU. Their Dense layers start from Flax's default initialisation (``dense_init="flax"``: LeCun
normal kernels, zero biases), as in CleanRL's JAX scripts (``dqn_jax.py``, ``td3_continuous_action_jax.py``), or
from PyTorch's (``dense_init="torch"``: kernels and biases uniform in +-1/sqrt(fan_in), a third of the kernel
variance), as in Stable-Baselines3 and CleanRL's PyTorch scripts. Action bounds are module attributes as tuples of
floats so that a module (and its bound ``apply``) stays hashable and can be a static argument of ``jax.jit``.
"""

import dataclasses
from collections.abc import Sequence

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from agents.hyperparams import hyperparameter
from agents.networks import NATURE_CNN_OBS_SHAPE, TORCH_LINEAR_INIT, NatureCNN

# SAC reference implementations (Haarnoja's softlearning, CleanRL) keep log std in [-5, 2]: below, the
# log-prob explodes; above, tanh saturates and the policy is effectively uniform on the box.
LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0
Q_TORSOS = ("mlp", "nature_cnn")


INITS = ("flax", "torch")


@dataclasses.dataclass(frozen=True, kw_only=True)
class OffPolicyNetworkHyperparameters:
    """The off-policy networks' shape: the MLPs' hidden sizes and their Dense initialisation (``dense``)."""

    hidden_sizes: tuple = hyperparameter((256, 256), "MLP hidden sizes, e.g. 256,256 (default: preset).",
                                         group="off_policy", search=("categorical", ("64,64", "256,256", "400,300")))
    network_init: str = hyperparameter(
        "flax", "Dense initialisation of the MLPs: flax (LeCun normal, zero bias; CleanRL's JAX scripts) or torch "
        "(PyTorch's uniform +-1/sqrt(fan_in); SB3's and CleanRL's PyTorch scripts) (default: preset; flax but for "
        "PAL's TD3 on MuJoCo / Brax).", choices=INITS, group="off_policy")


def dense(features: int, x: jax.Array, init: str = "flax", name: str | None = None) -> jax.Array:
    """``nn.Dense(features)(x)`` from Flax's or PyTorch's initialisation (``init``, see the module docstring); call it
    inside an ``nn.compact`` method."""
    if init == "flax":
        return nn.Dense(features, name=name)(x)
    if init != "torch":
        raise ValueError(f"Unknown init {init!r}; expected one of {INITS}.")
    bound = 1.0 / np.sqrt(x.shape[-1])  # torch.nn.Linear.reset_parameters draws the bias like the kernel

    def bias_init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return nn.Dense(features, kernel_init=TORCH_LINEAR_INIT, bias_init=bias_init, name=name)(x)


def _mlp(x: jax.Array, hidden_sizes: Sequence[int], init: str = "flax") -> jax.Array:
    for size in hidden_sizes:
        x = nn.relu(dense(size, x, init))
    return x


def bounds_as_tuples(action_low, action_high) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Action bounds (arrays, lists or scalars) as hashable float tuples for the actor modules' attributes."""
    low = tuple(float(v) for v in np.ravel(np.asarray(action_low, np.float64)))
    high = tuple(float(v) for v in np.ravel(np.asarray(action_high, np.float64)))
    if len(low) != len(high):
        raise ValueError(f"action_low and action_high differ in size: {len(low)} vs {len(high)}.")
    if not all(lo < hi for lo, hi in zip(low, high, strict=True)):
        raise ValueError(f"Need action_low < action_high everywhere, got {low} and {high}.")
    return low, high


def box_scale_and_offset(action_low, action_high) -> tuple[jax.Array, jax.Array]:
    """``(scale, offset)`` with ``a = offset + scale * y`` mapping y in [-1, 1] onto [low, high], each ``[A]``."""
    low = jnp.asarray(action_low, jnp.float32)
    high = jnp.asarray(action_high, jnp.float32)
    return 0.5 * (high - low), 0.5 * (high + low)


class QNetwork(nn.Module):
    """Q values ``[B, A]`` for discrete actions.

    Attributes:
      action_dim: number of discrete actions A.
      hidden_sizes: ReLU MLP hidden sizes (``"mlp"`` torso only; the Nature head is fixed at 512).
      torso: ``"mlp"`` for vector observations ``[B, D]`` or ``"nature_cnn"`` for uint8 Atari frames
        ``[B, 4, 84, 84]`` (Mnih et al. 2015; the torso already ends in Dense(512) + ReLU).
      dense_init: the Dense layers' initialisation of the ``"mlp"`` torso and the head (module docstring).
    """

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    torso: str = "mlp"
    dense_init: str = "flax"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        if self.torso == "mlp":
            chex.assert_rank(obs, 2)
            features = _mlp(obs.astype(jnp.float32), self.hidden_sizes, self.dense_init)
        elif self.torso == "nature_cnn":
            chex.assert_shape(obs, (None, *NATURE_CNN_OBS_SHAPE))
            features = NatureCNN(name="torso")(obs)
        else:
            raise ValueError(f"Unknown torso {self.torso!r}; expected one of {Q_TORSOS}.")
        head_init = self.dense_init if self.torso == "mlp" else "flax"
        return dense(self.action_dim, features, head_init).astype(jnp.float32)  # [B, A]


class DeterministicActor(nn.Module):
    """mu(s) in the box ``[action_low, action_high]``: ``offset + scale * tanh(MLP(s))``, ``[B, A]``.

    Attributes:
      action_dim: action dimension A.
      action_low: ``A`` lower bounds (use ``bounds_as_tuples`` to turn arrays into tuples).
      action_high: ``A`` upper bounds.
      hidden_sizes: ReLU MLP hidden sizes (TD3 paper: 256, 256).
      dense_init: the Dense layers' initialisation (module docstring).
    """

    action_dim: int
    action_low: Sequence[float]
    action_high: Sequence[float]
    hidden_sizes: Sequence[int] = (256, 256)
    dense_init: str = "flax"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        chex.assert_rank(obs, 2)
        scale, offset = box_scale_and_offset(self.action_low, self.action_high)
        chex.assert_shape([scale, offset], (self.action_dim,))
        x = _mlp(obs.astype(jnp.float32), self.hidden_sizes, self.dense_init)
        return offset + scale * jnp.tanh(dense(self.action_dim, x, self.dense_init))  # [B, A]


class ContinuousQ(nn.Module):
    """Q(s, a) ``[B]`` from an MLP on ``concat(obs [B, D], action [B, A])``."""

    hidden_sizes: Sequence[int] = (256, 256)
    dense_init: str = "flax"

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        chex.assert_rank([obs, action], 2)
        chex.assert_equal_shape_prefix([obs, action], 1)
        x = jnp.concatenate([obs.astype(jnp.float32), action.astype(jnp.float32)], axis=-1)
        return dense(1, _mlp(x, self.hidden_sizes, self.dense_init), self.dense_init)[:, 0]  # [B]


class TwinQ(nn.Module):
    """Two independent critics (TD3 Sec. 4.1, SAC): ``[Q1(s, a), Q2(s, a)]`` as ``[2, B]``."""

    hidden_sizes: Sequence[int] = (256, 256)
    dense_init: str = "flax"

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        q1 = ContinuousQ(self.hidden_sizes, self.dense_init, name="q1")(obs, action)
        q2 = ContinuousQ(self.hidden_sizes, self.dense_init, name="q2")(obs, action)
        return jnp.stack([q1, q2])  # [2, B]


class GaussianActor(nn.Module):
    """SAC policy head: ``(mean [B, A], log_std [B, A])`` of the pre-tanh Gaussian, log std clipped to [-5, 2].

    Sampling, squashing to the box and the log-prob live in ``squashed_gaussian_sample`` so that the bounds are
    an argument of the update rather than of the module. ``dense_init``: the Dense layers' initialisation (module
    docstring).
    """

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    dense_init: str = "flax"

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        chex.assert_rank(obs, 2)
        x = _mlp(obs.astype(jnp.float32), self.hidden_sizes, self.dense_init)
        mean = dense(self.action_dim, x, self.dense_init, name="mean")
        log_std = jnp.clip(dense(self.action_dim, x, self.dense_init, name="log_std"), LOG_STD_MIN, LOG_STD_MAX)
        return mean, log_std


def _log_one_minus_tanh_sq(u: jax.Array) -> jax.Array:
    # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u| (no 1 - 1 cancellation).
    return 2.0 * (jnp.log(2.0) - u - jax.nn.softplus(-2.0 * u))


def _squashed_log_prob_from_pre_tanh(u, mean, log_std, scale) -> jax.Array:
    gaussian = -0.5 * jnp.square((u - mean) * jnp.exp(-log_std)) - log_std - 0.5 * jnp.log(2.0 * jnp.pi)
    # Change of variables a = offset + scale * tanh(u): |da/du| = scale (1 - tanh(u)^2) per dimension (SAC Eq. 21).
    return jnp.sum(gaussian - jnp.log(scale) - _log_one_minus_tanh_sq(u), axis=-1)


def squashed_gaussian_sample(
    mean: jax.Array, log_std: jax.Array, key: jax.Array, *, action_low, action_high
) -> tuple[jax.Array, jax.Array]:
    """Reparameterised sample of the tanh-squashed Gaussian and its log-density (SAC Eq. 11 and 21).

    Args:
      mean, log_std: ``[B, A]`` parameters of the pre-tanh Gaussian.
      key: one PRNG key.
      action_low, action_high: ``[A]`` box bounds.

    Returns:
      ``(action [B, A], log_prob [B])``; the log-prob is a density on the box (it includes ``-log scale``).
    """
    chex.assert_equal_shape([mean, log_std])
    scale, offset = box_scale_and_offset(action_low, action_high)
    u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)  # [B, A]
    action = offset + scale * jnp.tanh(u)
    return action, _squashed_log_prob_from_pre_tanh(u, mean, log_std, scale)


def squashed_gaussian_log_prob(
    action: jax.Array, mean: jax.Array, log_std: jax.Array, *, action_low, action_high
) -> jax.Array:
    """log pi(a|s) ``[B]`` of given box actions ``[B, A]`` (inverts the squashing; prefer the sample's log-prob).

    Actions on the boundary are pulled in by 1e-6 (relative to the half-width) so atanh stays finite.
    """
    chex.assert_equal_shape([action, mean, log_std])
    scale, offset = box_scale_and_offset(action_low, action_high)
    y = jnp.clip((action - offset) / scale, -1.0 + 1e-6, 1.0 - 1e-6)
    return _squashed_log_prob_from_pre_tanh(jnp.arctanh(y), mean, log_std, scale)


def squashed_gaussian_mode(mean: jax.Array, *, action_low, action_high) -> jax.Array:
    """The deterministic (evaluation) action ``offset + scale * tanh(mean)``, ``[B, A]``."""
    scale, offset = box_scale_and_offset(action_low, action_high)
    return offset + scale * jnp.tanh(mean)
