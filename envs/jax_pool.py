"""JAX envs behind EnvPool's interface: gymnax's (`--env=gymnax/<id>`, `envs.gymnax_env`) and Brax's
(`--env=brax/<name>`, `envs.brax_env`). The envs are JAX functions, so a step of any set of them is one jitted,
vmapped call on JAX's default device, with no worker process and no copy but the results'; `launch.anakin` compiles
the same functions (`env_functions`) into its rounds. The pool keeps EnvPool 1.2.5's semantics (`envs.episodes`),
as `envs.gymnasium_pool` does:

* env i's generator starts from `PRNGKey(seed + i)`; each of its resets and steps splits that env's own key, so its
  trajectory depends on its actions only, not on which other envs step beside it or when (HTS's bit-identity);
* an env that terminated or truncated resets on its next step: the action is ignored, the reward is 0 and
  `info["elapsed_step"]` is 0 (a *reset step*); every real step adds one to it;
* termination is the env's own; truncation is ours, at the task's episode length, so the two stay apart;
* `frame_stack` N > 1 (an HxWxC image task) keeps each env's last N frames in its state, oldest first on the
  channel axis (H, W, N * C); a reset fills them with N copies of its first frame (as Gymnasium's
  `FrameStackObservation`, `envs.observations.stacked`);
* `recv()` returns the next `batch_size` finished steps in the order they were sent; `step` and `reset` return the
  envs in id order.

A `send` runs the step at once (under a lock: actor threads may send together) and queues its rows for `recv`.
"""

from __future__ import annotations

import collections
import functools
import threading

import numpy as np

from envs import brax_env, gymnax_env
from envs.pool_api import SyncMethods


def is_jax_env(env_id: str) -> bool:
    """A task whose envs are JAX functions: `gymnax/<id>` or `brax/<name>`."""
    return gymnax_env.is_gymnax(env_id) or brax_env.is_brax(env_id)


def _module(env_id: str):
    return brax_env if brax_env.is_brax(env_id) else gymnax_env


def spaces(env_id: str, env_kwargs: str = ""):
    """(observation space, action space, max_episode_steps) of a JAX env task."""
    return _module(env_id).spaces(env_id, env_kwargs)


def _stacked(reset, step, frames: int):
    """`reset` and `step` of one env whose observation is its last `frames` HxWxC frames on the channel axis; the
    state carries them beside the env's own."""
    import jax.numpy as jnp

    def reset_stacked(key):
        obs, state = reset(key)
        stack = jnp.concatenate([obs] * frames, axis=-1)
        return stack, (state, stack)

    def step_stacked(key, carried, action):
        state, stack = carried
        obs, state, reward, terminated = step(key, state, action)
        stack = jnp.concatenate([stack[..., obs.shape[-1]:], obs.astype(stack.dtype)], axis=-1)
        return stack, (state, stack), reward, terminated

    return reset_stacked, step_stacked


@functools.cache
def env_functions(env_id: str, env_kwargs: str = "", frame_stack: int = 1):
    """`(reset_one, step_one)`: one env's pure reset and step with EnvPool's semantics (module docstring), for
    `jax.vmap` by the pool here and by the Anakin system's jitted rounds, around the env's own (`raw_functions` of
    `envs.gymnax_env` or `envs.brax_env`).

    `reset_one(key) -> (key, obs, state)`; `step_one(key, state, done, elapsed, action) -> (key, state, done,
    elapsed, (obs, reward, terminated, truncated, elapsed))`, where `done` on the way in makes the step a reset
    step. Observations and rewards are float32; `frame_stack` > 1 stacks frames (module docstring)."""
    import jax
    import jax.numpy as jnp

    reset, step, limit = _module(env_id).raw_functions(env_id, env_kwargs)
    if frame_stack > 1:
        reset, step = _stacked(reset, step, frame_stack)

    def reset_one(key):
        key, reset_key = jax.random.split(key)
        obs, state = reset(reset_key)
        return key, obs.astype(jnp.float32), state

    def step_one(key, state, done, elapsed, action):
        key, reset_key, step_key = jax.random.split(key, 3)
        reset_obs, reset_state = reset(reset_key)
        obs, next_state, reward, terminated = step(step_key, state, action)
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), reset_state, next_state)
        obs = jnp.where(done, reset_obs.astype(jnp.float32), obs.astype(jnp.float32))
        elapsed = jnp.where(done, 0, elapsed + 1)
        terminated = ~done & jnp.asarray(terminated).astype(bool)  # Brax's may be a Python number or a float
        truncated = ~done & ~terminated & (elapsed >= limit)
        reward = jnp.where(done, 0.0, jnp.asarray(reward, jnp.float32))
        return key, state, terminated | truncated, elapsed, (obs, reward, terminated, truncated, elapsed)

    return reset_one, step_one


def env_keys(seed, total: int):
    """[total] keys: env i's generator starts from PRNGKey(seed + i) (module docstring); `seed` may be traced."""
    import jax
    import jax.numpy as jnp

    return jax.vmap(jax.random.PRNGKey)(seed + jnp.arange(total, dtype=jnp.uint32))


@functools.cache
def _programs(env_id: str, env_kwargs: str, frame_stack: int = 1):
    """The jitted reset and step of a task's envs (made once a process, shared by its pools)."""
    import jax
    import jax.numpy as jnp

    reset_one, step_one = env_functions(env_id, env_kwargs, frame_stack)

    @jax.jit
    def reset(keys, states, done, elapsed, ids):
        key, obs, state = jax.vmap(reset_one)(keys[ids])
        put = functools.partial(jax.tree.map, lambda full, part: full.at[ids].set(part))
        zeros = jnp.zeros(len(ids), jnp.int32)
        falses = jnp.zeros(len(ids), bool)
        return (keys.at[ids].set(key), put(states, state), done.at[ids].set(False), elapsed.at[ids].set(0),
                (obs, jnp.zeros(len(ids), jnp.float32), falses, falses, zeros))

    @jax.jit
    def step(keys, states, done, elapsed, ids, actions):
        take = functools.partial(jax.tree.map, lambda full: full[ids])
        key, state, now_done, now_elapsed, rows = jax.vmap(step_one)(
            keys[ids], take(states), done[ids], elapsed[ids], actions)
        put = functools.partial(jax.tree.map, lambda full, part: full.at[ids].set(part))
        return (keys.at[ids].set(key), put(states, state), done.at[ids].set(now_done),
                elapsed.at[ids].set(now_elapsed), rows)

    # Jitted once: Brax's reset run op by op is ~280 small compiles (~7 s).
    reset_all = jax.jit(jax.vmap(reset_one))

    def initial(seed: int, total: int):
        keys = env_keys(seed, total)
        _, _, states = reset_all(keys)  # shapes only: every env's first step is `async_reset`'s reset
        return keys, states, jnp.ones(total, bool), jnp.zeros(total, jnp.int32)

    return reset, step, initial


class JaxEnvPool(SyncMethods):
    """`num_envs` JAX envs with EnvPool's `async_reset` / `send` / `recv` / `reset` / `step` / `close` (module
    docstring). `render()` is not offered (gymnax draws with matplotlib, Brax with its own renderer), so videos draw the
    observation."""

    def __init__(self, env_id: str, env_kwargs: str = "", *, num_envs: int, batch_size: int, seed: int,
                 continuous: bool, frame_stack: int = 1):
        self.num_envs, self.batch_size = num_envs, batch_size
        self._continuous = continuous
        self._reset, self._step, initial = _programs(env_id, env_kwargs, frame_stack)
        self._carry = initial(seed, num_envs)
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._rows: collections.deque = collections.deque()  # (env id, obs, reward, terminated, truncated, elapsed)

    def async_reset(self) -> None:
        self._run(self._reset, np.arange(self.num_envs, dtype=np.int32))

    def send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        dtype = np.float32 if self._continuous else np.int32
        self._run(self._step, np.asarray(env_ids, np.int32), np.asarray(actions, dtype))

    def _run(self, program, ids: np.ndarray, *actions) -> None:
        with self._lock:
            *carry, rows = program(*self._carry, ids, *actions)
            self._carry = tuple(carry)
            obs, reward, terminated, truncated, elapsed = (np.asarray(x) for x in rows)
            self._rows.extend(zip(ids.tolist(), obs, reward.tolist(), terminated.tolist(), truncated.tolist(),
                                  elapsed.tolist(), strict=True))
            self._ready.notify_all()

    def recv(self, count: int | None = None, *, in_id_order: bool = False):
        """The next `count` (default `batch_size`) finished env steps: (obs, rewards, terminated, truncated, info)."""
        count = count or self.batch_size
        with self._ready:
            while len(self._rows) < count:
                self._ready.wait()
            rows = [self._rows.popleft() for _ in range(count)]
        if in_id_order:
            rows.sort(key=lambda row: row[0])
        ids, obs, reward, terminated, truncated, elapsed = zip(*rows, strict=True)
        info = {"env_id": np.asarray(ids, np.int32), "elapsed_step": np.asarray(elapsed, np.int32)}
        return (np.stack(obs), np.asarray(reward, np.float32), np.asarray(terminated, bool),
                np.asarray(truncated, bool), info)

    def close(self) -> None:
        with self._lock:
            self._rows.clear()
