"""Any Gymnasium env behind EnvPool's interface (`--env=gymnasium/<id>`): worker processes step the envs, so a slow
Python simulator does not hold the actors' and the learner's GIL, and hand their observations back through shared
memory.

`<id>` is anything `gymnasium.make` accepts, including its `module:EnvName-v0` form (the module is imported in every
process and registers the env). The pool keeps EnvPool 1.2.5's semantics (`envs.episodes`), so the executors,
evaluation and episode bookkeeping treat it as an EnvPool pool:

* env i is seeded with `seed + i` at its first reset (later resets continue its own generator);
* an env that terminated or truncated resets on its next step: the action is ignored, the reward is 0 and
  `info["elapsed_step"]` is 0 (a *reset step*); every real step adds one to it;
* `info` holds `env_id` and `elapsed_step`; `recv()` returns the first `batch_size` results to finish (asynchronous
  when `batch_size` is below the number of envs), `step(actions, env_ids)` is `send` then `recv` of those envs in id
  order, `reset()` resets every env and returns them in id order.

Envs are spread over `num_workers` processes (env i in worker i mod W; started with "spawn", as a forked JAX process
is unsafe, and with a launcher's `__main__` hidden while they start: spawn would otherwise import the launcher's
module, with JAX, Flax and EnvPool, in every worker, 2-3 s each; the workers' code is all in this module). A daemonic
process (a Spreeze sampler, itself a worker) may not start children: there the envs step in
the calling process. A worker exits when its pipe closes, so none outlives the run however the parent dies. Nothing
is named in /dev/shm, so nothing outlives a SIGKILL of the whole process group: the observation buffer is
multiprocessing's `RawArray` (a file unlinked at once, handed to the workers as a descriptor: the kernel frees it
with its last holder) and each worker answers on its own pipe (a socket pair), with no Queue and so no named
semaphore.
"""

from __future__ import annotations

import collections
import contextlib
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
import types
from multiprocessing import connection

import numpy as np

from envs.pool_api import EnvFailed, SyncMethods

PREFIX = "gymnasium/"
TIMEOUT_VARIABLE = "HTSRL_ENV_STEP_TIMEOUT"  # seconds a pool waits for any env step before it calls the env hung
DEFAULT_STEP_TIMEOUT = 60.0


def step_timeout() -> float:
    """The bound on waiting for an env step (`HTSRL_ENV_STEP_TIMEOUT` seconds, default 60; 0: none)."""
    try:
        return max(0.0, float(os.environ.get(TIMEOUT_VARIABLE, DEFAULT_STEP_TIMEOUT)))
    except ValueError:
        return DEFAULT_STEP_TIMEOUT


def is_gymnasium(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


def gymnasium_id(env_id: str) -> str:
    """"gymnasium/CartPole-v1" -> "CartPole-v1"."""
    return env_id[len(PREFIX):]


def parse_kwargs(env_kwargs: str) -> dict:
    """`--env_kwargs` ("" or a JSON object) as a dict; ValueError with one line otherwise."""
    if not env_kwargs:
        return {}
    try:
        kwargs = json.loads(env_kwargs)
    except json.JSONDecodeError as error:
        raise ValueError(f"--env_kwargs is not JSON ({error.msg} at character {error.pos}): {env_kwargs}") from None
    if not isinstance(kwargs, dict):
        raise ValueError(f"--env_kwargs must be a JSON object such as '{{\"size\": 8}}', got {env_kwargs}")
    return kwargs


def make_env(env_id: str, render: bool = False, env_kwargs: str = "", say=lambda line: None, frame_stack: int = 1):
    """`gymnasium.make` of a `gymnasium/<id>` task with its `--env_kwargs` (its module imported first for the
    `module:Name` form), its observation and action in forms the networks read (`envs.observations.adapted`, whose
    note line goes to `say`, and `envs.actions.adapted_actions`); `frame_stack` > 1 stacks that many image frames on
    the channel axis (`envs.observations.stacked`)."""
    import gymnasium

    from envs.actions import adapted_actions
    from envs.observations import adapted, stacked

    env = gymnasium.make(gymnasium_id(env_id), **parse_kwargs(env_kwargs),
                         **({"render_mode": "rgb_array"} if render else {}))
    return adapted(stacked(adapted_actions(env), frame_stack), say=say)


class _Envs:
    """Some of a pool's envs (`env_ids`) in this process, writing each observation into row `env_id` of `obs`."""

    def __init__(self, env_id: str, env_kwargs: str, env_ids: list, seed: int, obs: np.ndarray, render: bool,
                 frame_stack: int = 1):
        self.obs, self.seed = obs, seed
        self.envs = {i: make_env(env_id, render=render and i == 0, env_kwargs=env_kwargs, frame_stack=frame_stack)
                     for i in env_ids}
        self.seeded, self.done, self.elapsed = set(), set(env_ids), dict.fromkeys(env_ids, 0)

    def reset(self, i: int) -> tuple:
        obs, _ = self.envs[i].reset(seed=None if i in self.seeded else self.seed + i)
        self.seeded.add(i)
        self.done.discard(i)
        self.elapsed[i] = 0
        self._write(i, obs, "reset")
        return i, 0.0, False, False, 0

    def _write(self, i: int, obs, call: str) -> None:
        """Row i of the observations; ValueError (the env's fault, said as such) for another shape."""
        if np.shape(obs) != self.obs.shape[1:]:
            raise ValueError(f"{call} returned an observation of shape {np.shape(obs)}; the env's observation space "
                             f"says {self.obs.shape[1:]}")
        self.obs[i] = obs

    def step(self, i: int, action) -> tuple:
        if i in self.done:  # EnvPool's reset step
            return self.reset(i)
        obs, reward, terminated, truncated, _ = self.envs[i].step(action)
        self.elapsed[i] += 1
        if terminated or truncated:
            self.done.add(i)
        self._write(i, obs, "step")
        return i, float(reward), bool(terminated), bool(truncated), self.elapsed[i]

    def close(self) -> None:
        for env in self.envs.values():
            env.close()


def _worker(conn, buffer, env_id: str, env_kwargs: str, env_ids: list, seed: int, shape: tuple, dtype: str,
            total: int, render: bool, frame_stack: int = 1) -> None:
    """One worker process: steps its envs on command, writes their observations into the shared buffer and sends
    each env's result row (or its error) on `conn` as soon as it has it."""
    envs = None
    try:
        obs = np.frombuffer(buffer, np.dtype(dtype), count=total * int(np.prod(shape))).reshape(total, *shape)
        envs = _Envs(env_id, env_kwargs, env_ids, seed, obs, render, frame_stack)
        while True:
            command, payload = conn.recv()
            if command == "reset":
                for i in payload:
                    conn.send(_call(envs.reset, "reset", i))
            elif command == "step":
                for i, action in payload:
                    conn.send(_call(envs.step, "step", i, action))
            elif command == "render":
                try:
                    conn.send(("frame", np.asarray(envs.envs[0].render())))
                except Exception as error:  # e.g. the renderer's package is missing: the caller says so
                    conn.send(("render_error", f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"))
            else:
                return
    except (EOFError, KeyboardInterrupt, BrokenPipeError):
        return
    except BaseException as error:  # e.g. the user's env could not be made: the parent's recv() re-raises it
        try:
            conn.send(("error", -1, "make", f"{type(error).__name__}: {error}", _own_traceback(error)))
        except (BrokenPipeError, OSError):
            pass
    finally:
        if envs is not None:
            envs.close()


def _call(method, call: str, i: int, *args) -> tuple:
    """A worker's `reset` or `step` of env i: its result row, or ("error", i, call, the error's line, the env's
    traceback) for the parent to raise (`GymnasiumPool._next_result`)."""
    try:
        return method(i, *args)
    except Exception as error:
        return "error", i, call, f"{type(error).__name__}: {error}", _own_traceback(error)


def _own_traceback(error: BaseException) -> str:
    """The traceback of `error` in the env's frames alone (this module's are left out); "" when none is left (an
    observation of the wrong shape: the error's line says it all)."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename != __file__]
    if not frames:
        return ""
    return ("Traceback of the env (most recent call last):\n" + "".join(traceback.format_list(frames))
            + "".join(traceback.format_exception_only(type(error), error)))


@contextlib.contextmanager
def _main_module_hidden():
    """Under one of our launchers (`python -m launch.<name>`), spawned children start as from an interpreter with no
    main module: multiprocessing's spawn re-imports the parent's `__main__` in each child, for targets defined there
    (`_worker` is not). A user's own script stays the main module, so an env it registers reaches the workers."""
    main = sys.modules["__main__"]
    if not getattr(main.__spec__, "name", "").startswith("launch."):
        yield
        return
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


class GymnasiumPool(SyncMethods):
    """`num_envs` Gymnasium envs in worker processes, with EnvPool's `async_reset` / `send` / `recv` / `reset` /
    `step` / `render` / `close` (module docstring)."""

    def __init__(self, env_id: str, env_kwargs: str = "", *, num_envs: int, batch_size: int, seed: int,
                 obs_shape: tuple, obs_dtype, num_workers: int, render: bool = False, frame_stack: int = 1):
        self.num_envs, self.batch_size = num_envs, batch_size
        self._env_id = env_id if env_id.startswith(PREFIX) else PREFIX + env_id
        self._shape, self._dtype = tuple(obs_shape), np.dtype(obs_dtype)
        self._closed, self._conns, self._procs = False, [], []
        self._local: _Envs | None = None
        if multiprocessing.current_process().daemon:  # e.g. a Spreeze sampler: no children; step here
            self._obs = np.zeros((num_envs, *self._shape), self._dtype)
            self._local = _Envs(env_id, env_kwargs, list(range(num_envs)), seed, self._obs, render, frame_stack)
            self._pending = []
            return
        nbytes = max(int(np.prod((num_envs, *self._shape))) * self._dtype.itemsize, 1)
        context = multiprocessing.get_context("spawn")
        self._buffer = context.RawArray("b", nbytes)
        self._obs = np.frombuffer(self._buffer, self._dtype, count=int(np.prod((num_envs, *self._shape)))).reshape(
            num_envs, *self._shape)
        self._rows: collections.deque = collections.deque()  # results received, not yet handed out
        self._timeout = step_timeout()
        self._count_lock = threading.Lock()  # actors send while the receiver takes results
        workers = max(1, min(num_workers, num_envs))
        self._worker_of = np.arange(num_envs) % workers
        self._outstanding = np.zeros(workers, np.int64)  # env steps sent to each worker whose result is not in
        self._ids_of_worker = [list(range(w, num_envs, workers)) for w in range(workers)]
        with _main_module_hidden():
            for w, ids in enumerate(self._ids_of_worker):
                parent, child = context.Pipe()
                proc = context.Process(target=_worker, name=f"gymnasium-env-{w}", daemon=True, args=(
                    child, self._buffer, env_id, env_kwargs, ids, seed, self._shape, self._dtype.str, num_envs,
                    render, frame_stack))
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)

    def async_reset(self) -> None:
        if self._local is not None:
            self._pending += [self._local.reset(i) for i in range(self.num_envs)]
            return
        for w, ids in enumerate(self._ids_of_worker):
            self._count_sent(w, len(ids))
            self._send(w, ("reset", ids))

    def send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        actions, env_ids = np.asarray(actions), np.asarray(env_ids)
        if self._local is not None:
            self._pending += [self._local.step(int(i), _action(a)) for i, a in zip(env_ids, actions, strict=True)]
            return
        for w in range(len(self._conns)):
            mine = np.flatnonzero(self._worker_of[env_ids] == w)
            if len(mine):
                self._count_sent(w, len(mine))
                self._send(w, ("step", [(int(env_ids[k]), _action(actions[k])) for k in mine]))

    def _count_sent(self, worker: int, n: int) -> None:
        with self._count_lock:
            self._outstanding[worker] += n

    def recv(self, count: int | None = None, *, in_id_order: bool = False):
        """The next `count` (default `batch_size`) finished env steps: (obs, rewards, terminated, truncated, info)."""
        rows = [self._next_result() for _ in range(count or self.batch_size)]
        if in_id_order:
            rows.sort(key=lambda row: row[0])
        ids = np.asarray([row[0] for row in rows], np.int32)
        info = {"env_id": ids, "elapsed_step": np.asarray([row[4] for row in rows], np.int32)}
        return (self._obs[ids].copy(), np.asarray([row[1] for row in rows], np.float32),
                np.asarray([row[2] for row in rows], bool), np.asarray([row[3] for row in rows], bool), info)

    def render(self) -> np.ndarray:
        """[1, H, W, 3]: env 0's frame (the pool must be made with `render=True`), as EnvPool's `render()`."""
        if self._local is not None:
            return np.asarray(self._local.envs[0].render())[None]
        self._send(0, ("render", None))
        while True:  # env results that arrive first are kept for recv()
            message = self._receive(self._conns[0])
            if message[0] == "frame":
                return message[1][None]
            if message[0] == "render_error":
                raise RuntimeError(f"the gymnasium env's render failed: {message[1]}")
            self._rows.append(message)

    def _next_result(self):
        if self._local is not None:
            if not self._pending:
                raise RuntimeError("recv() with no env step in flight")
            return self._pending.pop(0)
        waiting_since = time.monotonic()
        while not self._rows:
            for conn in connection.wait(self._conns, timeout=min(1.0, self._timeout or 1.0)):
                self._rows.append(self._receive(conn))
            if not self._rows and self._timeout and time.monotonic() - waiting_since > self._timeout:
                raise EnvFailed(self._hang_text())
        row = self._rows.popleft()
        i = row[1] if row[0] == "error" else row[0]
        if i >= 0:  # a result of env i (not a worker's failure to make its envs)
            with self._count_lock:
                self._outstanding[self._worker_of[i]] -= 1
        if row[0] == "error":
            _, i, call, line, detail = row
            where = f"env {i}, worker {self._worker_of[i]}" if i >= 0 else "a worker"
            raise EnvFailed(f"{self._env_id} ({where}) failed in {call}: {line}", detail)
        return row

    def _hang_text(self) -> str:
        with self._count_lock:
            busy = [w for w in range(len(self._procs)) if self._outstanding[w] > 0] or list(range(len(self._procs)))
        w = busy[0]
        return (f"{self._env_id}: no env step returned in {self._timeout:g} s (env worker {w}, envs "
                f"{_ids_text(self._ids_of_worker[w])}): the env hangs ({TIMEOUT_VARIABLE} sets the bound, 0 none)")

    def _receive(self, conn):
        """One message of a worker; EnvFailed naming the worker and its exit status when it died."""
        try:
            return conn.recv()
        except (EOFError, OSError):
            raise self._worker_died(self._conns.index(conn)) from None

    def _send(self, worker: int, message) -> None:
        """A message to a worker; EnvFailed naming it and its exit status when it died (the pipe broke)."""
        try:
            self._conns[worker].send(message)
        except OSError:  # BrokenPipeError, ConnectionResetError: the worker is gone
            raise self._worker_died(worker) from None

    def _worker_died(self, worker: int) -> EnvFailed:
        proc = self._procs[worker]
        proc.join(timeout=5.0)
        return EnvFailed(f"{self._env_id}: env worker {worker} (envs {_ids_text(self._ids_of_worker[worker])}) "
                         f"exited{_exit_text(proc.exitcode)}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._local is not None:
            self._local.close()
            return
        for conn in self._conns:
            try:
                conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
            conn.close()
        for proc in self._procs:
            proc.join(timeout=5.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        del self._obs
        self._buffer = None  # the memory goes with its last holder

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the resource tracker unlinks the buffer
            pass


def _ids_text(ids: list) -> str:
    return ", ".join(str(i) for i in ids[:4]) + (", ..." if len(ids) > 4 else "")


def _exit_text(code: int | None) -> str:
    """' with status 1', ' on signal SIGSEGV', or ''."""
    if code is None:
        return ""
    if code < 0:
        try:
            return f" on signal {signal.Signals(-code).name}"
        except ValueError:
            return f" on signal {-code}"
    return f" with status {code}"


def _action(action):
    """A Discrete action as a Python int, a MultiDiscrete one as int64 components, a Box action as float32."""
    action = np.asarray(action)
    if action.ndim == 0:
        return int(action)
    return action.astype(np.int64 if action.dtype.kind in "iu" else np.float32)
