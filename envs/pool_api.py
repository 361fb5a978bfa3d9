"""EnvPool's synchronous `reset()` and `step()` in terms of its asynchronous `async_reset` / `send` / `recv`, for the
pools of ours that keep its interface (`envs.gymnasium_pool`, `envs.jax_pool`)."""

from __future__ import annotations

import numpy as np


class EnvFailed(RuntimeError):
    """A user's env failed (raised in `reset` or `step`, returned an observation of the wrong shape, or its worker
    process died): `str()` is one line naming the env id, the worker and the call; `detail` the env's own traceback
    (or "")."""

    def __init__(self, line: str, detail: str = ""):
        super().__init__(line)
        self.detail = detail


class SyncMethods:
    """Mixin: a pool with `num_envs`, `async_reset()`, `send(actions, env_ids)` and `recv(count, in_id_order=)`."""

    def reset(self):
        """Resets every env; (obs, info) in env id order."""
        self.async_reset()
        obs, _, _, _, info = self.recv(self.num_envs, in_id_order=True)
        return obs, info

    def step(self, actions: np.ndarray, env_ids: np.ndarray | None = None):
        """`send` then `recv` of those envs (default: all), in env id order."""
        env_ids = np.arange(self.num_envs, dtype=np.int32) if env_ids is None else np.asarray(env_ids)
        self.send(actions, env_ids)
        return self.recv(len(env_ids), in_id_order=True)
