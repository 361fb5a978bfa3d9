"""Thread-safe replay buffers for parallel actors and learners: PAL's prioritized replay buffer (seed 003, section IV:
K-ary sum tree, lazy writing and two locks, Algorithm 3) and a uniform buffer with the same interface.

Both store transitions in preallocated numpy arrays, one per field, `[capacity, ...]` with the field's own dtype
(uint8 frames stay uint8), in a FIFO ring (seed 003 section IV-A-1: the oldest slots are overwritten). Both keep a
`SumTree` over the slots: the prioritized buffer holds `(|delta| + eps) ** alpha` in it (PER, Schaul et al. 2016,
P(i) = p_i^alpha / sum_k p_k^alpha), the uniform buffer holds 1 for every completed slot, so in both a slot being
written (leaf 0) can never be sampled.

Locks (Algorithm 3). `tree lock` (global_tree_lock) guards the tree, the ring cursor and the per-slot bookkeeping;
`leaf lock` (last_level_lock) guards the leaf level only:
- priority update: tree lock, then leaf lock for the leaves, release it, recompute the inner levels, release;
- priority retrieval: leaf lock only, so reads run in parallel with the inner-level part of an update;
- insert (lazy writing, section IV-D-2): (i) under the tree lock, reserve the slots and set their priority to 0;
  (ii) copy the data with no lock held; (iii) under the tree lock, set the running maximum priority;
- sample: under the tree lock, walk the tree (GETPREFIXSUMINDEX) for the whole batch; then copy the data.
`single_lock=True` holds one global lock around every whole operation instead (the baseline of the paper's Fig. 10).

Two holes in Algorithm 3 as written, and how they are closed here:
- A learner may call `update_priorities` on a slot that an inserter has just zeroed and is still writing (it sampled
  the old transition there). Setting it non-zero would make a half-written slot sampleable, so updates skip slots
  that are mid-write (the update was for the evicted transition anyway).
- A sampler copies its slots after releasing the tree lock; an inserter may start overwriting one of them meanwhile.
  Every slot has a write generation, bumped in step (i); the sampler re-reads the generations of its slots after the
  copy and redraws the ones that changed (a seqlock). After a few optimistic tries it copies under the tree lock,
  which cannot be torn: a sampled slot has priority > 0, so no write to it is in flight, and none can start while
  the sampler holds the tree lock.
Remaining, as in the paper (section IV-D-3, write after read): a priority update for a slot that was overwritten
after it was sampled lands on the new transition. Sample generations could filter those later.
If more inserts are in flight than the capacity holds, two inserters can reserve the same slot; the second waits
until the first has finished it, so slots are never written by two threads at once.

Memory plan for 1M Atari transitions (uint8 84x84 frames, 4-frame stacks): a stacked observation is 28,224 bytes,
so 1M observations take 28.2 GB, and storing next_observation as its own field would double that to 56.4 GB. The
plan: do not store next observations; the next observation of slot i is the observation of the actor's next slot,
found by index (per-actor ring segments keep one actor's steps adjacent), so 1M transitions cost 28.2 GB plus a few
MB for actions, rewards and discounts, and the tree 8.5 MB (K=16). Storing single frames and rebuilding the stacks
by index (DQN Zoo / Dopamine) would bring it to 7.1 GB. Both index schemes are future work: this class stores
exactly the fields it is given.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from systems.replay.sum_tree import SumTree

_OPTIMISTIC_TRIES = 3  # lock-free copies before the sampler copies under the tree lock


class Sample(NamedTuple):
    """One sampled batch; unpacks as `indices, batch, weights = buffer.sample(...)`."""

    indices: np.ndarray  # [B] int64 slots, for `update_priorities`
    batch: dict[str, np.ndarray]  # field -> [B, ...] copies, the field's dtype
    weights: np.ndarray  # [B] float32 importance weights in (0, 1] (all 1 for the uniform buffer)


class ReplayBuffer:
    """The interface and storage shared by `UniformBuffer` and `PrioritizedBuffer`; use one of those."""

    _prioritized: bool

    def __init__(
        self,
        capacity: int,
        example: Mapping[str, np.ndarray],
        *,
        alpha: float,
        beta: float,
        k: int,
        eps: float,
        seed: int | None,
        single_lock: bool,
    ):
        if type(self) is ReplayBuffer:
            raise TypeError("ReplayBuffer is the shared base; use UniformBuffer or PrioritizedBuffer")
        if isinstance(capacity, bool) or not isinstance(capacity, int | np.integer) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        for name, value in (("alpha", alpha), ("beta", beta)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"eps must be finite and > 0 (it keeps every completed slot sampleable), got {eps!r}")
        if not isinstance(example, Mapping) or not example:
            raise ValueError("example must be a non-empty dict of field name -> one transition's array")
        self._capacity = int(capacity)
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.eps = float(eps)
        self._single_lock = bool(single_lock)
        self._fields: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        self._storage: dict[str, np.ndarray] = {}
        for name, value in example.items():
            if not isinstance(name, str):
                raise ValueError(f"field names must be strings, got {name!r}")
            value = np.asarray(value)
            self._fields[name] = (value.shape, value.dtype)
            self._storage[name] = np.zeros((self._capacity, *value.shape), dtype=value.dtype)
        self._tree = SumTree(self._capacity, k)
        self._cursor = 0  # next slot to write (FIFO eviction)
        self._size = 0  # slots reserved so far, at most capacity
        self._writing = np.zeros(self._capacity, dtype=bool)  # slot reserved and not yet published
        self._generation = np.zeros(self._capacity, dtype=np.int64)  # bumped when a write to the slot starts
        self._max_priority = 1.0  # running max of stored priorities (PER: new transitions get max_i p_i)
        self._rng = np.random.default_rng(seed)  # used only under the tree (or global) lock
        self._tree_lock = threading.Condition(threading.Lock())  # global_tree_lock; inserters wait on busy slots
        self._leaf_lock = threading.Lock()  # last_level_lock
        self._global_lock = threading.Lock()  # single_lock=True only

    # ----------------------------------------------------------------------------------------------- info

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Field name -> (shape of one transition's array, dtype)."""
        return dict(self._fields)

    @property
    def single_lock(self) -> bool:
        return self._single_lock

    @property
    def max_priority(self) -> float:
        """The priority new transitions get: running max of stored priorities, at least 1 (1 for uniform)."""
        return self._max_priority

    @property
    def tree(self) -> SumTree:
        """The slots' sum tree, for diagnostics and tests; reading it while other threads run is not locked."""
        return self._tree

    def __len__(self) -> int:
        """Slots holding a transition or being written: min(transitions inserted, capacity)."""
        return self._size

    # ----------------------------------------------------------------------------------------------- insert

    def insert(self, batch: Mapping[str, np.ndarray]) -> np.ndarray:
        """Writes B transitions into the next B ring slots (overwriting the oldest once full) at the maximum
        priority, by lazy writing (Algorithm 3 INSERT).

        Args:
          batch: field -> [B, ...] with exactly the fields, per-transition shapes and dtypes of `example`,
            1 <= B <= capacity. Anything else raises ValueError and writes nothing.
        Returns:
          [B] int64 slots written.
        """
        batch, n = self._check_batch(batch)
        if self._single_lock:
            with self._global_lock:
                indices = self._reserve(n)
                self._generation[indices] += 1
                self._write(indices, batch)
                self._set_priorities(indices, np.full(n, self._max_priority))
            return indices
        with self._tree_lock:
            indices = self._reserve(n)
            while np.any(self._writing[indices]):  # an earlier inserter still writes some of them
                self._tree_lock.wait()
            self._writing[indices] = True
            self._generation[indices] += 1
            self._set_priorities(indices, np.zeros(n))  # (i) a zero leaf is never sampled
        try:
            self._write(indices, batch)  # (ii) the long copy, no lock held
        except BaseException:
            with self._tree_lock:  # leave the slots at priority 0 (unsampleable) and free them
                self._writing[indices] = False
                self._tree_lock.notify_all()
            raise
        with self._tree_lock:
            self._set_priorities(indices, np.full(n, self._max_priority))  # (iii)
            self._writing[indices] = False
            self._tree_lock.notify_all()
        return indices

    # ----------------------------------------------------------------------------------------------- sample

    def sample(self, batch_size: int, rng: np.random.Generator | None = None, beta: float | None = None) -> Sample:
        """Draws `batch_size` completed transitions (with replacement) with probability P(i) = p_i / sum_k p_k.

        Args:
          batch_size: B >= 1.
          rng: the generator for the prefix-sum targets; None uses the buffer's own (seeded by `seed`).
          beta: importance-sampling exponent (None: `self.beta`); ignored by the uniform buffer.
        Returns:
          Sample(indices [B], batch {field: [B, ...]}, weights [B] float32).

        Importance weights: w_i = (N * P(i)) ** -beta / max_j w_j with N = len(self) and the max over the sampled
        batch (PER, Schaul et al. 2016, Algorithm 1 line 10). The batch max keeps weights in (0, 1] without a
        min-priority tree; normalising by the max over the whole buffer (OpenAI baselines) needs a second tree and
        lets one tiny priority anywhere shrink every update. With the batch max, N cancels:
        w_i = (P(i) / min_j P(j)) ** -beta.
        Raises ValueError if the buffer is empty; if every slot is mid-write, waits until one is published.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        beta = self.beta if beta is None else float(beta)
        if not (math.isfinite(beta) and beta >= 0):
            raise ValueError(f"beta must be finite and >= 0, got {beta!r}")
        rng = self._rng if rng is None else rng
        if self._single_lock:
            with self._global_lock:
                indices, probabilities, size = self._draw(batch_size, rng)
                batch = self._gather(indices)
        else:
            indices, probabilities, size, batch = self._sample_lazy(batch_size, rng)
        if self._prioritized:
            weights = (size * probabilities) ** -beta  # [B]
            weights = (weights / weights.max()).astype(np.float32)
        else:
            weights = np.ones(batch_size, dtype=np.float32)
        return Sample(indices, batch, weights)

    def _sample_lazy(self, batch_size, rng):
        """Walk under the tree lock, copy outside it, redraw slots whose write generation moved (see module doc)."""
        indices = np.empty(batch_size, dtype=np.int64)
        probabilities = np.empty(batch_size)
        batch = None
        todo = np.arange(batch_size)  # positions of the batch still to fill
        for attempt in range(_OPTIMISTIC_TRIES + 1):
            locked_copy = attempt == _OPTIMISTIC_TRIES
            with self._tree_lock:
                drawn, drawn_probabilities, size = self._draw(todo.size, rng)
                generation = self._generation[drawn]
                if locked_copy:
                    copied = self._gather(drawn)
            if not locked_copy:
                copied = self._gather(drawn)
            if batch is None:
                batch = copied
            else:
                for name, values in copied.items():
                    batch[name][todo] = values
            indices[todo] = drawn
            probabilities[todo] = drawn_probabilities
            if locked_copy:
                break
            with self._tree_lock:
                torn = self._generation[drawn] != generation
            if not np.any(torn):
                break
            todo = todo[torn]
        return indices, probabilities, size, batch

    def _draw(self, batch_size, rng):
        """Prefix-sum search for a batch (caller holds the tree or global lock): indices, P(i), N.

        If every slot is mid-write (only possible when the inserts in flight cover the whole capacity), waits for
        one to be published; with the global lock no slot is ever mid-write here."""
        while self._tree.total() <= 0 and np.any(self._writing):
            self._tree_lock.wait()
        total = self._tree.total()
        if total <= 0:
            raise ValueError("cannot sample from an empty buffer")
        indices = self._tree.sample_proportional(rng, batch_size)
        return indices, self._tree.get(indices) / total, self._size

    # ----------------------------------------------------------------------------------------------- priorities

    def update_priorities(self, indices, priorities) -> int:
        """Sets the priorities of slots `indices` ([B] ints in [0, len)) from raw priorities ([B], |TD error|,
        finite and >= 0), stored as (p + eps) ** alpha (Algorithm 3 PRIORITYUPDATE). Slots mid-write are skipped.
        Bad values raise ValueError, bad indices IndexError, and nothing is written. Returns the number of slots
        updated (always 0 for the uniform buffer, whose check is all it does)."""
        indices = self._check_slots(indices)
        priorities = np.asarray(priorities, dtype=np.float64)
        if priorities.shape != indices.shape:
            raise ValueError(f"priorities have shape {priorities.shape}, indices {indices.shape}")
        if not np.all(np.isfinite(priorities)) or np.any(priorities < 0):
            raise ValueError("priorities must be finite and >= 0")
        stored = (priorities + self.eps) ** self.alpha
        if not np.all(np.isfinite(stored)):
            raise ValueError("(priority + eps) ** alpha overflows")
        if not self._prioritized:
            return 0
        lock = self._global_lock if self._single_lock else self._tree_lock
        with lock:
            idle = ~self._writing[indices]
            indices, stored = indices[idle], stored[idle]
            self._set_priorities(indices, stored)
            if stored.size:
                self._max_priority = max(self._max_priority, float(stored.max()))
        return int(indices.size)

    def priority(self, indices) -> np.ndarray:
        """Stored priorities (p + eps) ** alpha of slots `indices` ([B] ints in [0, len)), 0 for a slot mid-write;
        ones for the uniform buffer. Takes only the leaf lock (Algorithm 3 PRIORITYRETRIEVAL)."""
        indices = self._check_slots(indices)
        if not self._prioritized:
            return np.ones(indices.shape)
        with self._global_lock if self._single_lock else self._leaf_lock:
            return self._tree.get(indices)

    # ----------------------------------------------------------------------------------------------- helpers

    def _set_priorities(self, indices, values):
        """Algorithm 3 lines 3-6; the caller holds the tree (or global) lock."""
        with self._leaf_lock:
            written = self._tree.set_leaves(indices, values)
        self._tree.update_ancestors(written)

    def _reserve(self, n):
        """Next n ring slots (caller holds the tree or global lock)."""
        indices = (self._cursor + np.arange(n, dtype=np.int64)) % self._capacity
        self._cursor = (self._cursor + n) % self._capacity
        self._size = min(self._size + n, self._capacity)
        return indices

    def _write(self, indices, batch):
        first = int(indices[0])
        contiguous = first + indices.size <= self._capacity
        for name, values in batch.items():
            if contiguous:
                self._storage[name][first : first + indices.size] = values
            else:
                self._storage[name][indices] = values

    def _gather(self, indices):
        return {name: np.take(storage, indices, axis=0) for name, storage in self._storage.items()}

    def _check_batch(self, batch):
        if not isinstance(batch, Mapping):
            raise ValueError(f"batch must be a dict of field -> [B, ...] arrays, got {type(batch).__name__}")
        if set(batch) != set(self._fields):
            missing, extra = set(self._fields) - set(batch), set(batch) - set(self._fields)
            raise ValueError(f"batch fields differ from the example: missing {sorted(missing)}, extra {sorted(extra)}")
        arrays, n = {}, None
        for name, (shape, dtype) in self._fields.items():
            value = np.asarray(batch[name])
            if value.dtype != dtype:
                raise ValueError(f"field {name!r} has dtype {value.dtype}, expected {dtype}")
            if value.ndim != len(shape) + 1 or value.shape[1:] != shape:
                raise ValueError(f"field {name!r} has shape {value.shape}, expected [B, {', '.join(map(str, shape))}]")
            if n is None:
                n = value.shape[0]
            elif value.shape[0] != n:
                raise ValueError(f"field {name!r} has {value.shape[0]} transitions, other fields {n}")
            arrays[name] = value
        if not 1 <= n <= self._capacity:
            raise ValueError(f"a batch must hold 1 to capacity={self._capacity} transitions, got {n}")
        return arrays, n

    def _check_slots(self, indices):
        indices = np.asarray(indices)
        if indices.ndim != 1:
            raise IndexError(f"indices must be 1-D, got shape {indices.shape}")
        if indices.size == 0:
            return indices.astype(np.int64)
        if indices.dtype == np.bool_ or not np.issubdtype(indices.dtype, np.integer):
            raise IndexError(f"indices must be integers, got dtype {indices.dtype}")
        size = self._size  # only grows, so a slot valid now stays valid
        if indices.min() < 0 or indices.max() >= size:
            raise IndexError(f"indices must lie in [0, len={size}), got [{indices.min()}, {indices.max()}]")
        return indices.astype(np.int64, copy=False)


class UniformBuffer(ReplayBuffer):
    """Uniform replay with the prioritized buffer's interface: every completed slot equally likely, weights all 1,
    `update_priorities` a checked no-op, `priority` ones. Its sum tree holds 1 per completed slot and 0 per slot
    mid-write, so lazy writing protects it exactly as it does the prioritized buffer (cost O(B log_K N))."""

    _prioritized = False

    def __init__(
        self,
        capacity: int,
        example: Mapping[str, np.ndarray],
        *,
        k: int = 16,
        seed: int | None = None,
        single_lock: bool = False,
    ):
        """Args:
        capacity: ring slots.
        example: one transition, field name -> array; gives the fields, shapes and dtypes.
        k: sum-tree fan-out.
        seed: seeds the buffer's own generator (used when `sample` gets no rng).
        single_lock: one global lock for everything (benchmark baseline) instead of lazy writing.
        """
        super().__init__(capacity, example, alpha=0.0, beta=0.0, k=k, eps=1.0, seed=seed, single_lock=single_lock)


class PrioritizedBuffer(ReplayBuffer):
    """PAL's parallel prioritized replay buffer (seed 003, section IV; priorities and weights as in PER)."""

    _prioritized = True

    def __init__(
        self,
        capacity: int,
        example: Mapping[str, np.ndarray],
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        k: int = 16,
        eps: float = 1e-6,
        seed: int | None = None,
        single_lock: bool = False,
    ):
        """Args:
        capacity: ring slots.
        example: one transition, field name -> array; gives the fields, shapes and dtypes.
        alpha: priority exponent; stored priority (p + eps) ** alpha (0: uniform).
        beta: default importance-sampling exponent of `sample` (anneal it by passing `beta=`).
        k: sum-tree fan-out.
        eps: added to raw priorities so no completed transition has probability 0.
        seed: seeds the buffer's own generator (used when `sample` gets no rng).
        single_lock: one global lock for everything (benchmark baseline) instead of lazy writing.
        """
        super().__init__(capacity, example, alpha=alpha, beta=beta, k=k, eps=eps, seed=seed, single_lock=single_lock)
