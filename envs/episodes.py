"""Episode bookkeeping over EnvPool steps: real-episode returns and lengths, training done flags.

This is the only module that reads EnvPool's raw `info`. Facts it relies on (EnvPool 1.2.5):

* Auto-reset: after EnvPool returns terminated or truncated for an env, that env's next step ignores
  the action and returns the reset observation with reward 0. We call it a *reset step*.
* A full reset reports info["elapsed_step"] == 0 (so do the observations from `async_reset`);
  every real step adds one.
* Atari with episodic_life: a life loss returns terminated=True, and the next step is also a reset
  step (action ignored, reward 0, elapsed_step not incremented), but the game goes on.
  info["terminated"] marks the real game over and info["reward"] is the unclipped reward.

Episode length counts real steps only (steps whose action the env applied), so reset steps,
including the ones after an Atari life loss, are not part of any episode: a finished episode's
length equals EnvPool's final info["elapsed_step"], and for CartPole length == return.
"""

from __future__ import annotations

import numpy as np


def _elapsed(info) -> np.ndarray:
    return np.asarray(info["elapsed_step"], dtype=np.int64)


def recompute_truncation(info, truncated, max_episode_steps: int) -> np.ndarray:
    """[B] bool: EnvPool's truncated OR info["elapsed_step"] >= max_episode_steps."""
    return np.asarray(truncated, dtype=bool) | (_elapsed(info) >= max_episode_steps)


def split_done(family: str, terminated, truncated, info, max_episode_steps: int):
    """Training termination and truncation flags for one EnvPool batch.

    Termination is EnvPool's returned `terminated` (for Atari training pools it includes life loss,
    the A2C / GALA convention); truncation is recomputed from elapsed_step. They are exclusive:
    a step that is both counts as terminated (no bootstrap).

    Args:
      family: EnvSpec.family (all families use the same rule today; kept for the interface).
      terminated: [B] EnvPool's terminated.
      truncated: [B] EnvPool's truncated.
      info: EnvPool's info for the batch.
      max_episode_steps: EnvSpec.max_episode_steps.

    Returns:
      (term, trunc): [B] float32 each.
    """
    del family  # Life loss is already in Atari's returned `terminated`.
    term = np.asarray(terminated, dtype=bool)
    trunc = recompute_truncation(info, truncated, max_episode_steps) & ~term
    return term.astype(np.float32), trunc.astype(np.float32)


class EpisodeTracker:
    """Per-env running returns/lengths over *real* episodes (not lives).

    Atari uses info['reward'] (raw) and info['terminated'] (game over) plus truncation; other
    families use the returned reward and terminated | truncated. See the module docstring for
    how reset steps are treated.

    If the recomputed truncation ends an episode before EnvPool resets the env (only possible
    when max_episode_steps is below EnvPool's own limit), the env's further steps are ignored
    until EnvPool's reset, so no stray partial episode is reported.
    """

    def __init__(self, num_envs: int, family: str, max_episode_steps: int):
        self._num_envs = num_envs
        self._atari = family == "atari"
        self._max_episode_steps = max_episode_steps
        self._returns = np.zeros(num_envs, np.float64)
        self._lengths = np.zeros(num_envs, np.int64)
        # EnvPool reported terminated|truncated on the env's last step: its next step is a reset.
        self._reset_next = np.zeros(num_envs, bool)
        # The real episode was reported but EnvPool has not reset the env yet.
        self._awaiting_reset = np.zeros(num_envs, bool)
        self._finished: list[tuple[int, float, int]] = []

    def truncation(self, info, truncated) -> np.ndarray:
        """[B] bool: info['elapsed_step'] >= max_episode_steps OR EnvPool's truncated."""
        return recompute_truncation(info, truncated, self._max_episode_steps)

    def step(self, env_ids, rewards, terminated, truncated, info) -> None:
        """Records one EnvPool recv batch.

        Args:
          env_ids: [B] info['env_id'] of the batch; ids >= num_envs (spare envs) are ignored.
          rewards: [B] returned (possibly clipped) rewards.
          terminated: [B] returned terminated.
          truncated: [B] returned truncated.
          info: EnvPool's info for the batch.
        """
        env_ids = np.asarray(env_ids, dtype=np.int64)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        elapsed = _elapsed(info)
        if self._atari:
            rewards = np.asarray(info["reward"], dtype=np.float64)
            real_end = np.asarray(info["terminated"], dtype=bool)
        else:
            rewards = np.asarray(rewards, dtype=np.float64)
            real_end = terminated.copy()
        real_end |= self.truncation(info, truncated)
        envpool_done = terminated | truncated

        for k, i in enumerate(env_ids):
            if i >= self._num_envs:
                continue
            is_reset = self._reset_next[i] or elapsed[k] == 0
            self._reset_next[i] = envpool_done[k]
            if is_reset:
                # The reset observation starts (or, after a life loss, continues) an episode.
                self._awaiting_reset[i] = False
                continue
            if self._awaiting_reset[i]:
                continue
            self._returns[i] += rewards[k]
            self._lengths[i] += 1
            if real_end[k]:
                self._finished.append((int(i), float(self._returns[i]), int(self._lengths[i])))
                self._returns[i] = 0.0
                self._lengths[i] = 0
                self._awaiting_reset[i] = not envpool_done[k]

    def pop_finished(self) -> list[tuple[int, float, int]]:
        """(env_id, return, length) of episodes finished since the last pop, in finishing order."""
        finished, self._finished = self._finished, []
        return finished
