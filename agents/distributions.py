"""Action distributions over an ``ActorCritic`` policy output.

Seed paper 000 (HTS-RL), Sec. 4.1 ("Asynchronous actors and executors"): randomness is owned by the
executor, which ships one pseudo-random seed with every observation. ``sample_actions`` therefore
takes one PRNG key per row and draws each row's action from its own key only, so an action does not
depend on which other observations share the actor's batch. ``log_prob`` / ``entropy`` give the log
pi(a|s) and H(pi(.|s)) terms of Eq. (4)-(6).

``policy_out`` is logits ``[B, A]`` (categorical policy), a tuple ``(mean, log_std)`` of ``[B, A]`` arrays
(diagonal Gaussian, CleanRL continuous PPO), ``Factored`` logits (one categorical per action component, a
MultiDiscrete or MultiBinary action: SB3's ``MultiCategoricalDistribution``, with a MultiBinary component as a
two-way categorical, the same law as SB3's Bernoulli on one logit difference), or ``StateDependentGaussian``
(generalized state-dependent exploration). The type decides which.
"""

import math

import chex
import jax
import jax.numpy as jnp
from flax import struct

_LOG_2PI = math.log(2.0 * math.pi)
_SDE_EPSILON = 1e-6  # SB3's StateDependentNoiseDistribution: the variance's floor


@struct.dataclass
class Factored:
    """Independent categoricals over ``K`` action components: ``logits [B, sum(nvec)]``, component ``k`` the
    ``nvec[k]`` columns after those of components ``0..k-1``. An action is int32 ``[B, K]``."""

    logits: jax.Array
    nvec: tuple = struct.field(pytree_node=False)

    def parts(self) -> list:
        """The ``[B, nvec[k]]`` logits of each component."""
        chex.assert_axis_dimension(self.logits, -1, sum(self.nvec))
        bounds = [sum(self.nvec[:k]) for k in range(len(self.nvec) + 1)]
        return [self.logits[..., lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]


@struct.dataclass
class StateDependentGaussian:
    """Generalized state-dependent exploration (gSDE: Raffin, Kober and Stulp, "Smooth Exploration for Robotic
    Reinforcement Learning", CoRL 2021, Sec. 3; Stable-Baselines3's ``StateDependentNoiseDistribution`` with
    ``full_std``, no ``expln`` and features not learned through the noise).

    The action is ``mean + latent @ E`` with an exploration matrix ``E [D, A]``, ``E_ij ~ N(0, exp(log_std_ij)^2)``,
    drawn from the row's key: the executor holds a row's key for ``sde_sample_freq`` steps
    (``agents.acting.action_keys``' ``hold``), so the noise changes smoothly with the state between draws. Given
    the state, the action is Gaussian with variance ``latent^2 @ exp(log_std)^2`` (+ 1e-6, as SB3), which gives
    ``log_prob`` and ``entropy``. ``latent`` is the policy's last features with the gradient stopped.
    """

    mean: jax.Array  # [B, A]
    latent: jax.Array  # [B, D]
    log_std: jax.Array  # [D, A], shared by every row

    @classmethod
    def of_features(cls, mean: jax.Array, features: jax.Array, log_std: jax.Array) -> "StateDependentGaussian":
        """The distribution over the policy head's input ``features [B, D]``, their gradient stopped (SB3's
        ``learn_features=False``): only the mean and the log-std learn from the noise."""
        return cls(mean, jax.lax.stop_gradient(features.astype(jnp.float32)), log_std)

    def std(self) -> jax.Array:
        """The per-row action std ``[B, A]``: sqrt(latent^2 @ exp(log_std)^2 + 1e-6)."""
        variance = jnp.square(self.latent) @ jnp.exp(2.0 * self.log_std)
        return jnp.sqrt(variance + _SDE_EPSILON)


def _is_continuous(policy_out) -> bool:
    return isinstance(policy_out, tuple)


def _categorical_log_prob(logits: jax.Array, actions: jax.Array) -> jax.Array:
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    return jnp.take_along_axis(log_probs, actions.astype(jnp.int32)[..., None], axis=-1)[..., 0]


def _categorical_entropy(logits: jax.Array) -> jax.Array:
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    # probs * log_probs with probs from exp(log_probs): 0 * -inf cannot occur for finite logits.
    return -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)


def _check_gaussian(policy_out):
    mean, log_std = policy_out
    chex.assert_rank(mean, 2)
    chex.assert_equal_shape([mean, log_std])
    return mean, log_std


def sample_actions(policy_out, keys: jax.Array) -> jax.Array:
    """Draws one action per row, row ``i`` using only ``policy_out[i]`` and ``keys[i]``.

    Args:
      policy_out: logits ``[B, A]`` or ``(mean [B, A], log_std [B, A])``.
      keys: ``[B]`` typed PRNG keys (or ``[B, 2]`` raw uint32 keys), one per row.

    Returns:
      int32 ``[B]`` (discrete), int32 ``[B, K]`` (factored) or float32 ``[B, A]`` (continuous; not clipped,
      the env wrapper clips to the action bounds).
    """
    if isinstance(policy_out, Factored):
        chex.assert_axis_dimension(keys, 0, policy_out.logits.shape[0])

        def _sample_row(row_logits, key):  # component k from the k-th key of the row's own key
            parts = Factored(row_logits[None], policy_out.nvec).parts()
            component_keys = jax.random.split(key, len(parts))
            return jnp.stack([jax.random.categorical(k, part[0]) for k, part in zip(component_keys, parts,
                                                                                    strict=True)])

        return jax.vmap(_sample_row)(policy_out.logits, keys).astype(jnp.int32)
    if isinstance(policy_out, StateDependentGaussian):
        chex.assert_axis_dimension(keys, 0, policy_out.mean.shape[0])
        scale = jnp.exp(policy_out.log_std)

        def _sde_row(mean_row, latent_row, key):  # the row's exploration matrix, then its noise
            matrix = scale * jax.random.normal(key, scale.shape, jnp.float32)
            return mean_row + latent_row @ matrix

        return jax.vmap(_sde_row)(policy_out.mean, policy_out.latent, keys).astype(jnp.float32)
    if _is_continuous(policy_out):
        mean, log_std = _check_gaussian(policy_out)
        chex.assert_axis_dimension(keys, 0, mean.shape[0])

        def _sample_row(mean_row, log_std_row, key):
            noise = jax.random.normal(key, mean_row.shape, jnp.float32)
            return mean_row + jnp.exp(log_std_row) * noise

        return jax.vmap(_sample_row)(mean, log_std, keys).astype(jnp.float32)

    logits = policy_out
    chex.assert_rank(logits, 2)
    chex.assert_axis_dimension(keys, 0, logits.shape[0])
    # vmap over rows: a batched categorical would draw all rows from one key stream.
    actions = jax.vmap(lambda row, key: jax.random.categorical(key, row))(logits, keys)
    return actions.astype(jnp.int32)


def log_prob(policy_out, actions: jax.Array) -> jax.Array:
    """log pi(a|s) per row: ``[B]`` float32. ``actions`` is int ``[B]``, int ``[B, K]`` (factored: the sum of the
    components' log-probabilities) or float ``[B, A]``."""
    if isinstance(policy_out, Factored):
        parts = policy_out.parts()
        chex.assert_shape(actions, (policy_out.logits.shape[0], len(parts)))
        return sum(_categorical_log_prob(part, actions[:, k]) for k, part in enumerate(parts))
    if isinstance(policy_out, StateDependentGaussian):
        chex.assert_equal_shape([policy_out.mean, actions])
        std = policy_out.std()
        z = (actions.astype(jnp.float32) - policy_out.mean) / std
        return jnp.sum(-0.5 * jnp.square(z) - jnp.log(std) - 0.5 * _LOG_2PI, axis=-1)
    if _is_continuous(policy_out):
        mean, log_std = _check_gaussian(policy_out)
        chex.assert_equal_shape([mean, actions])
        z = (actions.astype(jnp.float32) - mean) * jnp.exp(-log_std)
        return jnp.sum(-0.5 * jnp.square(z) - log_std - 0.5 * _LOG_2PI, axis=-1)

    logits = policy_out
    chex.assert_rank([logits, actions], [2, 1])
    chex.assert_axis_dimension(actions, 0, logits.shape[0])
    return _categorical_log_prob(logits, actions)


def entropy(policy_out) -> jax.Array:
    """Entropy H(pi(.|s)) per row: ``[B]`` float32 (factored: the sum of the components' entropies)."""
    if isinstance(policy_out, Factored):
        return sum(_categorical_entropy(part) for part in policy_out.parts())
    if isinstance(policy_out, StateDependentGaussian):
        return jnp.sum(jnp.log(policy_out.std()) + 0.5 * (_LOG_2PI + 1.0), axis=-1)
    if _is_continuous(policy_out):
        _, log_std = _check_gaussian(policy_out)
        return jnp.sum(log_std + 0.5 * (_LOG_2PI + 1.0), axis=-1)

    chex.assert_rank(policy_out, 2)
    return _categorical_entropy(policy_out)


def mode(policy_out) -> jax.Array:
    """Greedy action per row (for evaluation): argmax int32 ``[B]``, each component's argmax int32 ``[B, K]`` or
    the mean ``[B, A]``."""
    if isinstance(policy_out, Factored):
        return jnp.stack([jnp.argmax(part, axis=-1) for part in policy_out.parts()], axis=-1).astype(jnp.int32)
    if isinstance(policy_out, StateDependentGaussian):
        return policy_out.mean.astype(jnp.float32)
    if _is_continuous(policy_out):
        mean, _ = _check_gaussian(policy_out)
        return mean.astype(jnp.float32)
    chex.assert_rank(policy_out, 2)
    return jnp.argmax(policy_out, axis=-1).astype(jnp.int32)
