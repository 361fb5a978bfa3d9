"""Shared pytrees of the agents: the learner state and the rollout batch.

The ``Rollout`` holds exactly what seed paper 000 (HTS-RL), Sec. 4.1, stores per data storage: the
data D^{theta_{j-1}} collected by the behaviour policy (observations, actions, rewards, episode
ends) plus the behaviour log-probs and values needed for the delayed gradient of Eq. (6) and for PPO
ratios.
"""

from typing import Any, NamedTuple

import jax

Array = jax.Array


class TrainState(NamedTuple):
    """Learner state.

    Attributes:
      params: current (target) network parameters theta_j.
      opt_state: optimizer state for ``params``.
      key: learner PRNG key; updates that need randomness split it and return the next one.
      update_step: int32 scalar, number of ``*_update`` calls applied so far.
    """

    params: Any
    opt_state: Any
    key: jax.Array
    update_step: jax.Array


class Rollout(NamedTuple):
    """A time-major batch built by the systems.

    Attributes:
      obs: ``[T+1, B, ...]``; ``obs[T]`` is the bootstrap observation.
      actions: ``[T, B]`` int32 or ``[T, B, A]`` float32.
      rewards: ``[T, B]`` float32.
      terminations: ``[T, B]`` float32, 1.0 if step t terminated the episode.
      truncations: ``[T, B]`` float32, 1.0 if step t truncated the episode.
      valid: ``[T, B]`` float32; 0.0 where ``obs[t]`` is a final observation and step t is EnvPool's
        reset step (its action is ignored by the env, so it must not be learned from).
      behaviour_log_probs: ``[T, B]`` log pi_behaviour(a_t | obs[t]).
      behaviour_values: ``[T, B]`` V_behaviour(obs[t]).
      initial_carry: ``[B, S]`` each env's recurrent state entering step 0 of the round (already reset where
        ``obs[0]`` opens an episode), or None for a feed-forward policy (``agents.recurrent``).
    """

    obs: Array
    actions: Array
    rewards: Array
    terminations: Array
    truncations: Array
    valid: Array
    behaviour_log_probs: Array
    behaviour_values: Array
    initial_carry: Array | None = None


class SequenceObs(NamedTuple):
    """The observations of a recurrent policy's batch: whole env sequences from their stored start state.

    Attributes:
      obs: ``[T, B, ...]`` observations, time-major.
      carry: ``[B, S]`` each env's recurrent state entering step 0.
      first: ``[T, B]`` float32, 1.0 where ``obs[t]`` opens an episode: the state is zeroed before that step.
    """

    obs: Array
    carry: Array
    first: Array

    @property
    def rows(self) -> int:
        """Rows of the flat batch these sequences stand for (``T * B``, time-major: row ``t * B + b``)."""
        return self.first.shape[0] * self.first.shape[1]
