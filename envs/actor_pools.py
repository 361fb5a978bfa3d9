"""One EnvPool per actor thread: HTS-RL's executors split among the actors (seed 000, section 4.1).

`envs.executor.Executor` is the shared layout: one pool, a receiver thread that moves every finished env step into
the state buffer, and actor threads that take whatever is ready. Here each actor thread owns the pool of a contiguous
share of the envs and receives from it itself (`OwnPoolExecutor`): no receiver thread and no hand-over of
observations between threads, at the cost of forward passes that hold at most the actor's own envs.

`ActorPools` stands where the shared executor stood for the round collector and the run loop: it speaks the run's
env ids and routes actions, held observations and finished episodes to and from the pools' own ids. Env i of the
run is env i - start of its share's pool, seeded `seed + i` as in one pool (EnvPool seeds env j of a pool with its
seed + j), so each env steps through the same states whichever layout runs it, and with them the run's bits.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from envs.executor import Executor, StepResults
from envs.factory import EnvSpec


class OwnPoolExecutor(Executor):
    """An `Executor` that one actor thread owns: `start()` resets the envs and starts no receiver thread; `take()`
    hands out what is ready and otherwise receives EnvPool's next batch itself (`Executor.receive_once`)."""

    def start(self) -> None:
        self.reset_all()

    def take(self, max_items: int, min_items: int = 1, timeout: float = 0.1) -> StepResults | None:
        """Ready rows (held observations handed back at a round's start, or steps received before); else, with
        envs in flight, EnvPool's next batch; with none in flight (the actor's envs are all held until the round
        ends, or wait out an injected step time), waits up to `timeout` for rows to become ready."""
        self.raise_if_failed()
        ready = self.buffer.take(max_items, 1, timeout=0.0)
        if ready is not None:
            return ready
        with self._cond:
            in_flight = self._train_in_flight > 0
        if not in_flight:
            return self.buffer.take(max_items, min_items, timeout)
        try:
            self.receive_once()
        except BaseException as error:  # kept as the receiver thread keeps it: raise_if_failed names it alike
            self.fail(error)
        self.raise_if_failed()
        return self.buffer.take(max_items, 1, timeout=0.0)


def split_envs(num_envs: int, parts: int) -> list[int]:
    """`num_envs` dealt out over `parts` pools as evenly as they go, the first pools one env larger."""
    if not 1 <= parts <= num_envs:
        raise ValueError(f"cannot split {num_envs} envs over {parts} pools of at least one env")
    return [num_envs // parts + (k < num_envs % parts) for k in range(parts)]


def pool_threads(threads: int, parts: int) -> list[int]:
    """EnvPool threads of each of `parts` pools: `threads` dealt out as evenly as they go, at least one a pool (so
    with fewer threads than pools the pools hold more threads in all than one shared pool would)."""
    return [max(1, threads // parts + (k < threads % parts)) for k in range(parts)]


def pool_offsets(affinity_offset: int, counts: list[int]) -> list[int]:
    """EnvPool's `thread_affinity_offset` of each pool whose threads number `counts`: pool k's first core after the
    threads of pools 0..k-1, so pinned pools do not share cores (-1, no pinning, for every pool)."""
    if affinity_offset < 0:
        return [-1] * len(counts)
    return [affinity_offset + sum(counts[:k]) for k in range(len(counts))]


class ActorPools:
    """Pools of contiguous env shares (pool k holds the run's envs `starts[k]` .. `starts[k] + size - 1`), one per
    actor thread, behind the shared executor's interface: `send`, `hand_back`, `pop_episodes`, `start`, `close`,
    `raise_if_failed`, `env_steps_received`; actor k takes from its own pool with `take_from(k, ...)`."""

    @classmethod
    def make(cls, spec: EnvSpec, envs: list[int], batches: list[int], threads: list[int], pinned_from: list[int], *,
             seed: int, **options) -> ActorPools:
        """Pool k of the next `envs[k]` envs (env i of them all seeded `seed + i`, as in one pool), EnvPool batch
        `batches[k]`, `threads[k]` worker threads pinned from core `pinned_from[k]` (-1: not pinned); `options`
        are the other `Executor` arguments, the same for every pool."""
        starts = [sum(envs[:k]) for k in range(len(envs))]
        return cls([OwnPoolExecutor(spec, num_envs=size, batch_size=batch, seed=seed + start, num_threads=count,
                                    thread_affinity_offset=offset, **options)
                    for size, batch, count, offset, start in zip(envs, batches, threads, pinned_from, starts,
                                                                  strict=True)])

    def __init__(self, pools: list[OwnPoolExecutor]):
        if not pools:
            raise ValueError("ActorPools needs at least one pool")
        self.pools = pools
        self.spec = pools[0].spec
        sizes = [pool.num_envs for pool in pools]
        self.num_envs = sum(sizes)
        self.starts = np.cumsum([0, *sizes[:-1]])

    @property
    def env_steps_received(self) -> int:
        return sum(pool.env_steps_received for pool in self.pools)

    def start(self) -> None:
        for pool in self.pools:
            pool.start()

    def take_from(self, k: int, max_items: int, min_items: int = 1, timeout: float = 0.1) -> StepResults | None:
        """What pool `k` has ready (`OwnPoolExecutor.take`), its env ids the run's. Only actor thread k calls it."""
        results = self.pools[k].take(max_items, min_items, timeout)
        if results is None:
            return None
        return dataclasses.replace(results, env_ids=results.env_ids + np.int32(self.starts[k]))

    def send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        """Each action to the pool of its env (an actor's sends are for its own pool's envs)."""
        for k, rows in self._by_pool(env_ids):
            self.pools[k].send(actions[rows], env_ids[rows] - self.starts[k])

    def hand_back(self, env_ids: np.ndarray, obs: np.ndarray) -> None:
        """Held observations, ready again now, to the pools of their envs (`Executor.hand_back`)."""
        for k, rows in self._by_pool(env_ids):
            self.pools[k].hand_back(env_ids[rows] - self.starts[k], obs[rows])

    def pop_episodes(self) -> list[tuple[int, float, int]]:
        """(env id, return, length) of the episodes finished since the last pop, pool by pool."""
        return [(env_id + int(self.starts[k]), ret, length)
                for k, pool in enumerate(self.pools) for env_id, ret, length in pool.pop_episodes()]

    def raise_if_failed(self) -> None:
        for pool in self.pools:
            pool.raise_if_failed()

    def close(self) -> None:
        for pool in self.pools:
            pool.close()

    def _by_pool(self, env_ids: np.ndarray):
        """(pool, rows of `env_ids` in it) for every pool that `env_ids` reach."""
        env_ids = np.asarray(env_ids)
        owner = np.searchsorted(self.starts, env_ids, side="right") - 1
        for k in np.unique(owner):
            yield int(k), np.flatnonzero(owner == k)
