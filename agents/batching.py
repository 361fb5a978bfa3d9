"""Turns a time-major ``Rollout`` into the flat learner batch with GAE advantages.

Seed paper 000 (HTS-RL) Sec. 4.1: the learner reads the storage filled by the behaviour policy
theta_{j-1}. Advantages use the *stored* behaviour values V_{theta_{j-1}}(obs[t]) and the bootstrap
value V_{theta_{j-1}}(obs[T]) under the same behaviour parameters, so the whole target is a function
of (theta_{j-1}, D^{theta_{j-1}}) as Eq. (6) requires.
"""

import math
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from agents.gae import gae_advantages
from agents.losses import masked_mean
from agents.types import Rollout, SequenceObs


class FlatBatch(NamedTuple):
    """The rollout flattened to ``N = T * B`` rows (row index ``t * B + b``); a recurrent policy's ``obs`` are its
    whole env sequences (``SequenceObs``), whose outputs come back in the same row order."""

    obs: jax.Array | SequenceObs  # [N, ...], or the [T, B] sequences of the N rows
    actions: jax.Array  # [N] or [N, A]
    behaviour_log_probs: jax.Array  # [N]
    advantages: jax.Array  # [N]
    returns: jax.Array  # [N]
    valid: jax.Array  # [N]
    behaviour_values: jax.Array  # [N] (PPO's value clipping)


def check_rollout(rollout: Rollout) -> tuple[int, int]:
    """Shape checks on a ``Rollout``; returns ``(T, B)``."""
    chex.assert_rank(rollout.rewards, 2)
    num_steps, num_envs = rollout.rewards.shape
    chex.assert_shape(
        [
            rollout.terminations,
            rollout.truncations,
            rollout.valid,
            rollout.behaviour_log_probs,
            rollout.behaviour_values,
        ],
        (num_steps, num_envs),
    )
    chex.assert_shape(rollout.obs, (num_steps + 1, num_envs, ...))
    chex.assert_shape(rollout.actions, (num_steps, num_envs, ...))
    return num_steps, num_envs


def _flatten(x: jax.Array) -> jax.Array:
    return x.reshape((x.shape[0] * x.shape[1], *x.shape[2:]))


def prepare_batch(
    behaviour_params, rollout: Rollout, *, apply_fn, gamma: float, gae_lambda: float, num_chunks: int = 1
) -> tuple[FlatBatch, jax.Array]:
    """GAE from the behaviour values, then flatten ``[T, B] -> [T * B]``.

    A recurrent policy's round (``rollout.initial_carry``; ``apply_fn`` an ``agents.recurrent.SequenceApply``) is
    re-run under the behaviour parameters from its stored states: the bootstrap value, and the states from which
    its sequences are cut into ``num_chunks`` chunks per env (``chunk_sequences``).

    Returns:
      ``(batch, advantage_mean)``; ``advantage_mean`` is the masked mean raw advantage (a metric).
    """
    num_steps, num_envs = check_rollout(rollout)
    if rollout.initial_carry is None:
        obs = _flatten(rollout.obs[:-1])
        _, bootstrap_value = apply_fn(behaviour_params, rollout.obs[-1])  # [B]
    else:  # a recurrent policy: its state at obs[T] comes from re-running the round under the behaviour parameters
        first = sequence_first(rollout.valid)  # [T + 1, B]
        _, values, states = apply_fn.unroll(behaviour_params, SequenceObs(rollout.obs, rollout.initial_carry, first))
        bootstrap_value = values.reshape((num_steps + 1, num_envs))[-1]
        obs = SequenceObs(rollout.obs[:-1], rollout.initial_carry, first[:-1])
    advantages, returns = gae_advantages(
        rollout.rewards,
        rollout.behaviour_values,
        bootstrap_value,
        rollout.terminations,
        rollout.truncations,
        gamma=gamma,
        gae_lambda=gae_lambda,
    )  # [T, B] each
    valid = rollout.valid.astype(jnp.float32)
    batch = FlatBatch(
        obs=obs,
        actions=_flatten(rollout.actions),
        behaviour_log_probs=_flatten(rollout.behaviour_log_probs.astype(jnp.float32)),
        advantages=_flatten(advantages),
        returns=_flatten(returns),
        valid=_flatten(valid),
        behaviour_values=_flatten(rollout.behaviour_values.astype(jnp.float32)),
    )
    if isinstance(obs, SequenceObs) and num_chunks > 1:
        batch = chunk_sequences(batch, states[:-1], num_chunks)
    return batch, masked_mean(advantages, valid)


def sequence_first(valid: jax.Array) -> jax.Array:
    """``first [T + 1, B]`` of a round from its ``valid [T, B]``: 0 at step 0 (the stored state is already reset
    there), then 1 after each EnvPool reset step (``valid[t - 1] == 0``: step t-1 observed an episode's final
    observation, so ``obs[t]`` opens the next one)."""
    return jnp.concatenate([jnp.zeros_like(valid[:1], jnp.float32), 1.0 - valid.astype(jnp.float32)], axis=0)


def sequence_chunks(num_envs: int, num_minibatches: int) -> int:
    """K, the fewest chunks to cut each env's sequence into for ``num_minibatches`` minibatches of whole chunks:
    ``M / gcd(M, B)`` (it divides T whenever M divides T * B)."""
    return num_minibatches // math.gcd(num_minibatches, num_envs)


def chunk_sequences(batch: FlatBatch, states: jax.Array, num_chunks: int) -> FlatBatch:
    """A recurrent batch of B sequences of T steps as ``num_chunks * B`` sequences of ``T / K`` steps (chunk k of
    env b is sequence ``k * B + b``), each from the behaviour parameters' state ``states [T, B, S]`` entering its
    first step (sb3-contrib's ``RecurrentPPO`` likewise starts its sequences from the states stored while acting).
    Truncated back-propagation through time then spans a chunk, not the round. The flat rows follow: row
    ``t' * (K * B) + k * B + b`` is step ``k * T / K + t'`` of env b."""
    num_steps, num_envs = batch.obs.first.shape
    k = num_chunks
    length = num_steps // k

    def by_chunk(x):  # [T, B, ...] -> [T / K, K * B, ...]
        x = x.reshape((k, length, num_envs, *x.shape[2:]))
        return jnp.swapaxes(x, 0, 1).reshape((length, k * num_envs, *x.shape[3:]))

    def rows(x):  # a flat [T * B, ...] leaf, in the chunks' row order
        return _flatten(by_chunk(x.reshape((num_steps, num_envs, *x.shape[1:]))))

    starts = states.reshape((k, length, num_envs, states.shape[-1]))[:, 0].reshape((k * num_envs, -1))
    sequences = SequenceObs(obs=by_chunk(batch.obs.obs), carry=starts, first=by_chunk(batch.obs.first))
    return batch._replace(**{name: rows(getattr(batch, name)) for name in batch._fields if name != "obs"},
                          obs=sequences)


def minibatches(batch: FlatBatch, permutation: jax.Array, num_minibatches: int) -> FlatBatch:
    """``batch`` split into ``num_minibatches`` after ``permutation``: each leaf ``[M, N / M, ...]``.

    Feed-forward batches permute rows. A recurrent batch (``SequenceObs``) permutes whole env sequences:
    ``permutation`` is over its B envs, each minibatch holds ``B / M`` of them for all T steps, its flat rows in
    time-major order ``t * (B / M) + b`` as ``agents.recurrent.unroll`` returns them."""
    m = num_minibatches
    if not isinstance(batch.obs, SequenceObs):
        return jax.tree.map(lambda x: x[permutation].reshape((m, x.shape[0] // m, *x.shape[1:])), batch)
    num_steps, num_envs = batch.obs.first.shape

    def by_env(x, time_major: bool):  # [T, B, ...] (or [B, ...]) -> [M, T * B / M, ...] (or [M, B / M, ...])
        if not time_major:
            return x[permutation].reshape((m, num_envs // m, *x.shape[1:]))
        return jnp.moveaxis(x[:, permutation].reshape((num_steps, m, num_envs // m, *x.shape[2:])), 1, 0)

    def rows(x):  # a flat [T * B, ...] leaf
        x = by_env(x.reshape((num_steps, num_envs, *x.shape[1:])), True)
        return x.reshape((m, num_steps * (num_envs // m), *x.shape[3:]))

    sequences = SequenceObs(obs=by_env(batch.obs.obs, True), carry=by_env(batch.obs.carry, False),
                            first=by_env(batch.obs.first, True))
    return batch._replace(**{name: rows(getattr(batch, name)) for name in batch._fields if name != "obs"},
                          obs=sequences)
