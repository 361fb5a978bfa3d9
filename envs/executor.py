"""EnvPool in async mode as HTS-RL's executors and state buffer (seed 000, section 4.1, Fig. 1(e)).

The paper's executors take actions from an action buffer, step their environment and put the next state into a
state buffer, from which actors grab whatever is ready. Here EnvPool's C++ worker threads are the executors:

* `send(actions, env_ids)` is the action buffer (any actor thread may call it);
* a receiver thread calls EnvPool's `recv()` and pushes every finished env step into the `StateBuffer`;
* actors call `take()` and get every observation that is ready, never waiting for a particular env.

Two details the paper does not need but EnvPool does:

* EnvPool's `recv()` waits for exactly `batch_size` finished envs. At a round boundary (batch synchronization) the
  actors hold the envs that finished their alpha steps, so fewer than `batch_size` training envs may be in flight
  and a plain `recv()` would wait forever. The pool therefore has `batch_size - 1` *spare* envs at ids
  `>= num_envs`; the receiver sends them throw-away actions only while the training envs alone cannot fill a
  batch, and drops their results. Spares never touch the training envs' seeds or states, so results do not depend
  on `batch_size`.
* The step-time injector (`--step_time`, seed 000 Claim 1) delays each env step's result by a time drawn from a
  distribution. The delays of different envs overlap, as if every env had its own core: a result becomes visible
  to the actors at `receive time + delay`, and the state buffer hands out results in order of readiness.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import threading
import time

import numpy as np

from envs.cores import usable_cores
from envs.episodes import EpisodeTracker, split_done
from envs.factory import EnvSpec, make_pool
from envs.pool_api import EnvFailed
from envs.step_time import StepTimeDistribution


@dataclasses.dataclass
class StepResults:
    """A batch of finished env steps handed to an actor. Row i belongs to env `env_ids[i]`.

    `rewards`, `terminations` and `truncations` describe the step that *led to* `obs` (the training flags: for
    Atari a life loss is a termination). They are meaningless for the first observation after `reset()`.
    """

    env_ids: np.ndarray  # [K] int32
    obs: np.ndarray  # [K, ...]
    rewards: np.ndarray  # [K] float32
    terminations: np.ndarray  # [K] float32
    truncations: np.ndarray  # [K] float32

    def __len__(self) -> int:
        return len(self.env_ids)


class StateBuffer:
    """Finished env steps ordered by the time they become visible, shared by all actor threads.

    A heap of batches: the rows one `put_rows` call gives the same ready time (every row of a batch without the
    step-time injector) stay one entry, so handing out a batch costs a few array operations instead of one heap
    operation per row; with the injector each row is its own entry. Rows come out in the order (ready time,
    insertion), whatever the batching: a batch split by `max_items` keeps its place in the heap.
    """

    def __init__(self):
        self._heap: list = []  # (ready_time, seq, env_ids, obs, rewards, terms, truncs), arrays of one ready time
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._closed = False

    def put_rows(self, ready_times, env_ids, obs, rewards, terms, truncs) -> None:
        ready_times = np.asarray(ready_times)
        columns = (np.asarray(env_ids), obs, np.asarray(rewards), np.asarray(terms), np.asarray(truncs))
        if len(ready_times) and (ready_times == ready_times[0]).all():
            entries = [(float(ready_times[0]), columns)]
        else:
            entries = [(float(ready_times[i]), tuple(c[i:i + 1] for c in columns)) for i in range(len(ready_times))]
        with self._cond:
            for ready, rows in entries:
                heapq.heappush(self._heap, (ready, next(self._seq), *rows))
            # Rows ready together go to one taker (a taker takes every ready row up to its `max_items`, and one that
            # leaves some passes the wake-up on): waking every waiting actor only has them contend for the lock and
            # the interpreter. Rows of several ready times may be due to several takers: all are woken.
            if len(entries) == 1:
                self._cond.notify()
            else:
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def take(self, max_items: int, min_items: int = 1, timeout: float = 0.1) -> StepResults | None:
        """Pops up to `max_items` ready results; waits until `min_items` are ready or `timeout` passes (-> None)."""
        deadline = time.perf_counter() + timeout
        with self._cond:
            while True:
                now = time.perf_counter()
                ready = self._ready_rows(now)
                if ready >= min_items or (self._closed and ready > 0):
                    parts = self._pop_rows(min(ready, max_items))
                    if ready > max_items:
                        self._cond.notify()  # the rows left are another taker's
                    break
                if self._closed or now >= deadline:
                    return None
                # Sleep until the next row becomes ready (or a new row arrives: notify), never past the deadline.
                not_ready = [entry[0] for entry in self._heap if entry[0] > now]
                wake = min([deadline, *not_ready])
                self._cond.wait(max(wake - now, 0.0))
        env_ids, obs, rewards, terms, truncs = (np.concatenate(c) if len(c) > 1 else c[0]
                                                for c in zip(*parts, strict=True))
        return StepResults(env_ids=env_ids.astype(np.int32, copy=False), obs=obs,
                           rewards=rewards.astype(np.float32, copy=False),
                           terminations=terms.astype(np.float32, copy=False),
                           truncations=truncs.astype(np.float32, copy=False))

    def _ready_rows(self, now: float) -> int:
        if not self._heap or self._heap[0][0] > now:
            return 0
        return sum(len(entry[2]) for entry in self._heap if entry[0] <= now)

    def _pop_rows(self, n: int) -> list[tuple]:
        """The first `n` rows in heap order, as column tuples of the entries they came from (lock held)."""
        parts = []
        while n > 0:
            ready, seq, *columns = heapq.heappop(self._heap)
            if len(columns[0]) > n:  # split: the rest keeps the entry's place
                heapq.heappush(self._heap, (ready, seq, *(c[n:] for c in columns)))
                columns = [c[:n] for c in columns]
            parts.append(tuple(columns))
            n -= len(columns[0])
        return parts


class Executor:
    """`num_envs` EnvPool envs stepping asynchronously, with episode bookkeeping and optional step-time injection.

    Use: `start()` (async reset of every env), then actors loop `take()` -> policy -> `send()`. `close()` stops the
    receiver thread. Errors in the receiver thread are re-raised by `take()` and `send()`.
    """

    def __init__(
        self,
        spec: EnvSpec,
        *,
        num_envs: int,
        batch_size: int,
        seed: int,
        step_time: StepTimeDistribution | None = None,
        num_threads: int | None = None,
        clip_actions: bool = True,
        thread_affinity_offset: int = -1,
    ):
        if not 1 <= batch_size <= num_envs:
            raise ValueError(f"env batch size must be in [1, num_envs={num_envs}], got {batch_size}")
        self.spec = spec
        self.clip_actions = clip_actions  # continuous actions clipped to the bounds (CleanRL's ClipAction)
        self.num_envs = num_envs
        self.batch_size = batch_size
        # With batch_size == num_envs every recv() returns all envs, which are then sent together: no spares.
        self._num_spares = 0 if batch_size == num_envs else batch_size - 1
        threads = num_threads or min(num_envs, usable_cores())
        self._pool = make_pool(
            spec,
            num_envs=num_envs,
            batch_size=batch_size,
            seed=seed,
            num_threads=threads,
            extra_envs=self._num_spares,
            thread_affinity_offset=thread_affinity_offset,
        )
        self._step_time = step_time if step_time is not None and step_time.kind != "none" else None
        self._delay_rng = np.random.default_rng(seed + 7_919)
        self.tracker = EpisodeTracker(num_envs, spec.family, spec.max_episode_steps)
        self.buffer = StateBuffer()
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._train_in_flight = 0
        self._spare_in_flight = 0
        self._idle_spares: list[int] = []
        self._spare_action = self._zero_actions(1)
        self._stop = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.env_steps_received = 0

    def _zero_actions(self, n: int) -> np.ndarray:
        if self.spec.continuous:
            return np.zeros((n, self.spec.action_dim), np.float32)
        return np.zeros((n, self.spec.action_dim) if self.spec.factored else (n,), np.int32)

    # -- actor-facing API -------------------------------------------------------------------------------
    def start(self) -> None:
        """Resets every env (training and spare); the first observations arrive through `take()`."""
        self.reset_all()
        self._thread = threading.Thread(target=self._receive_loop, name="executor-recv", daemon=True)
        self._thread.start()

    def send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        """Queues one action per env id (the action buffer). Thread-safe."""
        self.raise_if_failed()
        if len(env_ids) == 0:
            return
        if self.spec.continuous:
            if self.clip_actions:
                actions = np.clip(actions, self.spec.action_low, self.spec.action_high)
            actions = np.asarray(actions, np.float32)
        with self._send_lock:
            self._pool.send(actions, np.asarray(env_ids, np.int32))
        with self._cond:
            self._train_in_flight += len(env_ids)
            self._cond.notify_all()

    def take(self, max_items: int, min_items: int = 1, timeout: float = 0.1) -> StepResults | None:
        self.raise_if_failed()
        return self.buffer.take(max_items, min_items, timeout)

    def hand_back(self, env_ids: np.ndarray, obs: np.ndarray) -> None:
        """Observations an actor held (at a round's end: the bootstrap of this round, the first of the next) ready
        again now, with zero rewards and flags: the collector's hand-back when the next round opens."""
        zeros = np.zeros(len(env_ids), np.float32)
        self.buffer.put_rows(np.full(len(env_ids), time.perf_counter()), env_ids, obs, zeros, zeros, zeros)

    def pop_episodes(self) -> list[tuple[int, float, int]]:
        with self._cond:
            return self.tracker.pop_finished()

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self.buffer.close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    # -- receiver thread ----------------------------------------------------------------------------------
    def raise_if_failed(self) -> None:
        """Re-raises the receiver thread's error: a user's env that failed as it is (one line and the env's own
        traceback, `EnvFailed`), anything else as the executor's failure."""
        if isinstance(self._error, EnvFailed):
            raise self._error
        if self._error is not None:
            raise RuntimeError("executor receiver thread failed") from self._error

    def _receive_loop(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._stop and self._train_in_flight == 0:
                        self._cond.wait()
                    if self._stop:
                        return
                self.receive_once()
        except BaseException as error:
            self.fail(error)

    def fail(self, error: BaseException) -> None:
        """Keeps a receive's error for the actors, who re-raise it (`raise_if_failed`), and closes the buffer so no
        taker waits for rows that will not come."""
        self._error = error
        self.buffer.close()

    def reset_all(self) -> None:
        """Every env (training and spare) in flight, reset asynchronously: `start` without the receiver thread."""
        with self._cond:
            self._train_in_flight = self.num_envs
            self._spare_in_flight = self._num_spares
        self._pool.async_reset()

    def receive_once(self) -> None:
        """One batch from EnvPool into the state buffer: tops the spares up so that `batch_size` envs are in
        flight (recv() cannot wait forever, see the module doc), then waits for the batch. The receiver thread's
        step, which an actor thread that owns its pool (no receiver thread) can take itself."""
        with self._cond:
            missing = self.batch_size - self._train_in_flight - self._spare_in_flight
            spares = [self._idle_spares.pop() for _ in range(min(missing, len(self._idle_spares)))]
            self._spare_in_flight += len(spares)
        if spares:
            with self._send_lock:
                actions = np.repeat(self._spare_action, len(spares), axis=0)
                self._pool.send(actions, np.asarray(spares, np.int32))
        obs, rewards, terminated, truncated, info = self._pool.recv()
        self._handle(obs, rewards, terminated, truncated, info)

    def _handle(self, obs, rewards, terminated, truncated, info) -> None:
        env_ids = np.asarray(info["env_id"])
        is_train = env_ids < self.num_envs
        with self._cond:
            spare_ids = env_ids[~is_train]
            self._spare_in_flight -= len(spare_ids)
            self._idle_spares.extend(int(i) for i in spare_ids)
            self._train_in_flight -= int(is_train.sum())
        if not is_train.any():
            return
        # Rows are handed out later, after further recv() calls: every pool's recv() returns arrays of their own
        # (EnvPool's are new buffers each batch, ours copies), which no later recv() overwrites.
        if not is_train.all():
            obs, rewards, terminated, truncated = (x[is_train] for x in (obs, rewards, terminated, truncated))
            info = _select_info(info, is_train)
            env_ids = env_ids[is_train]
        with self._cond:
            self.tracker.step(env_ids, rewards, terminated, truncated, info)
            self.env_steps_received += len(env_ids)
        terms, truncs = split_done(self.spec.family, terminated, truncated, info, self.spec.max_episode_steps)
        now = time.perf_counter()
        if self._step_time is None:
            ready = np.full(len(env_ids), now)
        else:
            ready = now + self._step_time.sample(self._delay_rng, len(env_ids))
        self.buffer.put_rows(ready, env_ids, obs, np.asarray(rewards, np.float32), terms, truncs)


def _select_info(info: dict, mask: np.ndarray) -> dict:
    out = {}
    for key, value in info.items():
        if isinstance(value, dict):
            out[key] = _select_info(value, mask)
        elif isinstance(value, np.ndarray) and value.shape[:1] == mask.shape:
            out[key] = value[mask]
        else:
            out[key] = value
    return out
