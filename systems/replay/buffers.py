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
  whose priority is 0, i.e. that are mid-write (the update was for the evicted transition anyway; a completed
  slot is always > 0 since eps > 0). The same rule keeps a slot that `save` caught mid-write dead after `load`.
- A sampler copies its slots after releasing the tree lock; an inserter may start overwriting one of them meanwhile.
  Every slot has a write generation, bumped in step (i); the sampler re-reads the generations of its slots after the
  copy and redraws the ones that changed (a seqlock). After a few optimistic tries it copies under the tree lock,
  which cannot be torn: a sampled slot has priority > 0, so no write to it is in flight, and none can start while
  the sampler holds the tree lock.
Remaining, as in the paper (section IV-D-3, write after read): a priority update for a slot that was overwritten
after it was sampled lands on the new transition. Sample generations could filter those later.
If more inserts are in flight than the capacity holds, two inserters can reserve the same slot; the second waits
until the first has finished it, so slots are never written by two threads at once.

Checkpoints: `save(path)` writes an .npz snapshot while the other threads keep running (the bookkeeping under the
tree lock; the storage copied under it up to 256 MiB, streamed lock-free above with the write generations marking
the slots overwritten meanwhile; atomic via a temporary file and os.replace), `load(path)` restores it into a buffer
built with the same arguments. Slots mid-write (or overwritten during a streamed save) are saved at priority 0 and
stay unsampleable after `load` until the ring overwrites them.

Memory plan for 1M Atari transitions (uint8 84x84 frames, 4-frame stacks): a stacked observation is 28,224 bytes,
so 1M observations take 28.2 GB, and storing next_observation as its own field would double that to 56.4 GB. The
plan: this class stores exactly the fields it is given, so it is for vector observations; image tasks use
`systems.replay.frames.FrameStackBuffer`, which stores each frame once per env stream and rebuilds obs and next_obs
stacks by index (DQN Zoo / Dopamine): 7.1 GB for 1M Atari transitions.
"""

from __future__ import annotations

import json
import math
import os
import threading
import zipfile
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from systems.common.atomic import write_atomic
from systems.replay import sum_tree as _sum_tree
from systems.replay.base import PriorityTreeBuffer, check_priority_params, checked_indices
from systems.replay.sum_tree import SumTree

_OPTIMISTIC_TRIES = 3  # lock-free copies before the sampler copies under the tree lock
_CHECKPOINT_FORMAT = "systems.replay.buffers/1"  # `meta["format"]` of a `save` file
_STORAGE_PREFIX = "storage."  # archive entry of field `name`: "storage.<name>.npy"
_SAVE_CHUNK_BYTES = 16 << 20  # `save` copies and writes the storage this much at a time


class Sample(NamedTuple):
    """One sampled batch; unpacks as `indices, batch, weights = buffer.sample(...)`."""

    indices: np.ndarray  # [B] int64 slots, for `update_priorities`
    batch: dict[str, np.ndarray]  # field -> [B, ...] copies, the field's dtype
    weights: np.ndarray  # [B] float32 importance weights in (0, 1] (all 1 for the uniform buffer)


class ReplayBuffer(PriorityTreeBuffer):
    """The interface and storage shared by `UniformBuffer` and `PrioritizedBuffer`; use one of those."""

    _prioritized: bool
    save_copy_limit_bytes: int = 256 << 20
    """`save` copies the storage under the lock up to this many bytes, and streams it lock-free above."""

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
        alpha, beta, eps = check_priority_params(alpha, beta, eps)
        if not isinstance(example, Mapping) or not example:
            raise ValueError("example must be a non-empty dict of field name -> one transition's array")
        self._init_tree(capacity, alpha=alpha, beta=beta, eps=eps, k=k, seed=seed)
        self._single_lock = bool(single_lock)
        self._fields: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        self._storage: dict[str, np.ndarray] = {}
        for name, value in example.items():
            if not isinstance(name, str):
                raise ValueError(f"field names must be strings, got {name!r}")
            value = np.asarray(value)
            self._fields[name] = (value.shape, value.dtype)
            self._storage[name] = np.zeros((self._capacity, *value.shape), dtype=value.dtype)
        self._tree_kernels = _kernel_args(self._tree)  # see `_set_priorities`
        self._cursor = 0  # next slot to write (FIFO eviction); `_size`: slots reserved so far, at most capacity
        self._writing = np.zeros(self._capacity, dtype=bool)  # slot reserved and not yet published
        self._generation = np.zeros(self._capacity, dtype=np.int64)  # bumped when a write to the slot starts
        self._waiters = 0  # threads in `_wait`, so publishing skips notify_all when nobody waits
        self._global_lock = threading.Lock()  # single_lock=True only

    # ----------------------------------------------------------------------------------------------- info

    @property
    def fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Field name -> (shape of one transition's array, dtype)."""
        return dict(self._fields)

    @property
    def single_lock(self) -> bool:
        return self._single_lock

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
        lock, writing = self._tree_lock, self._writing
        with lock:
            indices = self._reserve(n)
            while writing[indices].any():  # an earlier inserter still writes some of them
                self._wait()
            writing[indices] = True
            self._generation[indices] += 1
            self._set_priorities(indices, np.zeros(n))  # (i) a zero leaf is never sampled
        try:
            self._write(indices, batch)  # (ii) the long copy, no lock held
        except BaseException:
            with lock:  # leave the slots at priority 0 (unsampleable) and free them
                writing[indices] = False
                if self._waiters:
                    lock.notify_all()
            raise
        with lock:
            self._set_priorities(indices, np.full(n, self._max_priority))  # (iii)
            writing[indices] = False
            if self._waiters:
                lock.notify_all()
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
        rng, beta = self._sampling(batch_size, rng, beta)
        if self._single_lock:
            with self._global_lock:
                indices, probabilities, size = self._draw(batch_size, rng)
                batch = self._gather(indices)
        else:
            indices, probabilities, size, batch = self._sample_lazy(batch_size, rng)
        return Sample(indices, batch, self._weights(size, probabilities, beta))

    def _sample_lazy(self, batch_size, rng):
        return sample_with_redraw(self, batch_size, rng)

    def _draw(self, batch_size, rng):
        """Prefix-sum search for a batch (caller holds the tree or global lock): indices, P(i), N.

        If every slot is mid-write (only possible when the inserts in flight cover the whole capacity), waits for
        one to be published; with the global lock no slot is ever mid-write here."""
        while self._tree.total() <= 0 and self._writing.any():
            self._wait()
        total = self._tree.total()
        if total <= 0:
            raise ValueError("cannot sample from an empty buffer")
        indices = self._tree.sample_proportional(rng, batch_size)
        return indices, self._tree.get(indices) / total, self._size

    # ----------------------------------------------------------------------------------------------- priorities

    def update_priorities(self, indices, priorities) -> int:
        """Sets the priorities of slots `indices` ([B] ints in [0, len)) from raw priorities ([B], |TD error|,
        finite and >= 0), stored as (p + eps) ** alpha (Algorithm 3 PRIORITYUPDATE). Slots at priority 0 are
        skipped: those mid-write, and those a `save` caught mid-write (restored by `load` as dead slots).
        Bad values raise ValueError, bad indices IndexError, and nothing is written. Returns the number of slots
        updated (always 0 for the uniform buffer, whose check is all it does)."""
        indices = self._check_slots(indices)
        stored = self._stored_priorities(indices, priorities)
        if not self._prioritized:
            return 0
        lock = self._global_lock if self._single_lock else self._tree_lock
        kernels = self._tree_kernels
        if kernels is not None:  # one kernel pass: skip dead leaves, write the rest (see `_set_priorities`)
            array, leaf_offset, offsets, k, stride = kernels
            indices = np.ascontiguousarray(indices, dtype=np.int64)
            stored = np.ascontiguousarray(stored)
            with lock:
                with self._leaf_lock:
                    written, count, top = _sum_tree._set_live_leaves_kernel(
                        array, leaf_offset, k, stride, indices, stored
                    )
                _sum_tree._update_ancestors_kernel(array, offsets, k, stride, written)
                if top > self._max_priority:
                    self._max_priority = float(top)
            return int(count)
        with lock:
            live = self._tree.get(indices) > 0  # 0: mid-write (or saved mid-write by `save` and restored)
            indices, stored = indices[live], stored[live]
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

    # ----------------------------------------------------------------------------------------------- checkpoint

    def save(self, path: str | os.PathLike) -> str:
        """Writes a snapshot of the buffer to `path` (an uncompressed .npz, readable with `np.load`) while other
        threads keep inserting, sampling and updating; returns `path`. Restore it with `load`.

        Entries: "meta" (a JSON string: kind, capacity, k, fields, cursor, size, max_priority, alpha, beta, eps,
        the generator's `bit_generator.state`, storage_start), "leaves" ([capacity] float64, the leaf priorities
        in slot order) and "storage.<name>" per field ([capacity, ...], the field's dtype) in ring order from the
        cursor: row i holds slot (storage_start + i) % capacity, storage_start being the saved cursor.

        Consistency while other threads run, without stalling them for the disk write. Under the tree lock (the
        global lock with `single_lock=True`) the bookkeeping is copied: leaves, cursor, size, max priority, rng
        state and the per-slot write generations (16 MB for 1M slots). A slot mid-write at that moment already
        has priority 0 in the tree and is saved so. Then the storage, by size:
        - up to `save_copy_limit_bytes` (256 MiB) in all: copied under the same lock (the stall is one memcpy of
          the storage, tens of ms; memory doubles for the moment). The file is exactly the buffer at that moment.
        - larger (a 1M-frame Atari buffer is 28 GB; a copy would double it): streamed to the file with no lock
          held, 16 MB at a time. Each chunk is copied lock-free (as the sampler copies), its slots' write
          generations are compared with the snapshot's under the lock, and it is written. A slot whose generation
          moved before its last chunk copy ended (an insert started overwriting it, so the bytes may be old, new
          or torn) is saved with priority 0. So the file is the buffer at the snapshot with those slots
          unsampleable, as if their writes were in flight; every slot with a positive priority holds exactly the
          transition it held then. Inserters start at the cursor and move forward, and the storage is read from
          the same slot in the same direction (smallest fields first), so few slots are lost unless inserts
          outrun the copy; "moved_during_save" in the meta counts them. Extra memory: one chunk.
        Either way the lock is never held during the disk write.

        Atomic: everything goes to a temporary file in the same directory (the format `np.savez` writes, entry
        by entry through `zipfile` and `np.lib.format` so the leaves can follow the storage), which is flushed,
        fsynced and `os.replace`d onto `path`; on any failure the temporary file is removed and a previous file
        at `path` is untouched. Fields of object dtype cannot be saved (no pickles).
        """
        path = os.fspath(path)
        for name, (_, dtype) in self._fields.items():
            if dtype.hasobject:
                raise ValueError(f"field {name!r} has dtype {dtype}: object fields cannot be saved")
        lock = self._global_lock if self._single_lock else self._tree_lock
        leaves, generation, copies, meta = self._snapshot(lock)
        write_atomic(path, lambda f: self._write_archive(f, leaves, generation, copies, meta, lock))
        return path

    def _snapshot(self, lock):
        """Under `lock`, the consistent part of `save`: copies of the leaves and the write generations, the storage
        copied (or None when it is larger than `save_copy_limit_bytes`: it is streamed) and the meta dict."""
        with lock:
            leaves = self._tree.leaf_values()  # a copy; a slot mid-write reads 0
            generation = self._generation.copy()
            copies = None  # storage copied under the lock, or None: stream it (see `save`)
            if sum(storage.nbytes for storage in self._storage.values()) <= self.save_copy_limit_bytes:
                copies = {name: storage.copy() for name, storage in self._storage.items()}
            meta = {
                "format": _CHECKPOINT_FORMAT,
                "kind": self._kind(),
                "capacity": self._capacity,
                "k": self._tree.k,
                "fields": {name: [list(shape), dtype.str] for name, (shape, dtype) in self._fields.items()},
                "cursor": self._cursor,
                "size": self._size,
                "max_priority": self._max_priority,
                "alpha": self.alpha,
                "beta": self.beta,
                "eps": self.eps,
                "rng_state": self._rng.bit_generator.state,
                "storage_start": self._cursor,
            }
        return leaves, generation, copies, meta

    def _write_archive(self, f, leaves, generation, copies, meta, lock):
        """Writes the `save` archive to the open file `f` with no lock held (except per streamed chunk): the storage
        fields, smallest first, then the leaves with the slots moved during a streamed save set to 0, then the meta."""
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
            moved = np.zeros(self._capacity, dtype=bool)
            for name in sorted(self._storage, key=lambda name: self._storage[name].nbytes):
                if copies is not None:  # consistent already: no generation checks
                    self._stream_field(archive, name, copies.pop(name), meta["storage_start"])
                else:
                    self._stream_field(
                        archive, name, self._storage[name], meta["storage_start"], (generation, moved, lock)
                    )
            leaves[moved] = 0.0
            meta["moved_during_save"] = int(np.count_nonzero(moved))
            _write_npy(archive, "leaves", leaves)
            _write_npy(archive, "meta", np.array(json.dumps(meta)))

    def _stream_field(self, archive, name, source, start, check=None):
        """Writes storage field `name` from `source` ([capacity, ...]) as one .npy entry, rows in ring order from
        slot `start`, 16 MB at a time. With `check = (generation, moved, lock)` (`source` is the live storage,
        read without the lock), marks in `moved` the slots whose write generation differs from `generation` once
        their chunk is copied (see `save`)."""
        rows = max(1, _SAVE_CHUNK_BYTES // max(source[:1].nbytes, 1))
        header = {"descr": np.lib.format.dtype_to_descr(source.dtype), "fortran_order": False, "shape": source.shape}
        with archive.open(_STORAGE_PREFIX + name + ".npy", "w", force_zip64=True) as member:
            try:
                np.lib.format.write_array_header_1_0(member, header)
            except ValueError:  # a header over 64 KiB (np.save switches to version 2.0 the same way)
                np.lib.format.write_array_header_2_0(member, header)
            for first, end in ((start, self._capacity), (0, start)):
                for lo in range(first, end, rows):
                    hi = min(lo + rows, end)
                    if check is None:
                        chunk = np.ascontiguousarray(source[lo:hi])
                    else:
                        generation, moved, lock = check
                        chunk = source[lo:hi].copy()  # the bytes for disk: the CRC and the write see the same
                        with lock:
                            moved[lo:hi] |= self._generation[lo:hi] != generation[lo:hi]
                    member.write(chunk.reshape(-1).view(np.uint8))

    def load(self, path: str | os.PathLike) -> None:
        """Restores a `save` file into this buffer, which must have been built with the same kind (uniform or
        prioritized), capacity, k and fields (names, shapes, dtypes); `single_lock` and the tree backend may
        differ. Restores the storage, the leaf priorities (all ancestors recomputed), cursor, size, max priority,
        alpha, beta and eps (the saved leaves are in the saved alpha/eps scale) and the generator state, so the
        next insert goes to the same slot and `sample()` draws the same batches as the saved buffer would have.

        Raises ValueError (one line) if the file is missing, corrupt or does not match this buffer, and
        RuntimeError if inserts are in flight; in both cases nothing is modified. The whole file is read and
        checked before the buffer is touched, so memory peaks at about the buffer plus the file. Call it before
        other threads use the buffer: it takes the tree lock, but an in-flight sampler would mix old and new data.
        """
        path = os.fspath(path)
        try:
            state = self._read_checkpoint(path)
        except _BadCheckpoint as error:
            raise ValueError(f"cannot load replay buffer from {path!r}: {' '.join(str(error).split())}") from None
        except FileNotFoundError:
            raise ValueError(f"cannot load replay buffer from {path!r}: no such file") from None
        except Exception as error:  # zipfile / numpy / json errors of a corrupt file
            detail = " ".join(f"{type(error).__name__}: {error}".split())
            raise ValueError(
                f"cannot load replay buffer from {path!r}: corrupt or not a checkpoint ({detail})"
            ) from error
        storage, leaves, meta = state
        lock = self._global_lock if self._single_lock else self._tree_lock
        with lock:
            if np.any(self._writing):
                raise RuntimeError("cannot load a replay buffer while inserts are in flight")
            start = meta["storage_start"]  # file row i is slot (start + i) % capacity
            for name, values in storage.items():
                np.copyto(self._storage[name][start:], values[: self._capacity - start])
                np.copyto(self._storage[name][:start], values[self._capacity - start :])
            self._set_priorities(np.arange(self._capacity, dtype=np.int64), leaves)  # every leaf and ancestor
            self._cursor = meta["cursor"]
            self._size = meta["size"]
            self._max_priority = meta["max_priority"]
            self.alpha, self.beta, self.eps = meta["alpha"], meta["beta"], meta["eps"]
            self._rng.bit_generator.state = meta["rng_state"]
            self._writing[:] = False
            self._generation += 1  # a lock-free copy that somehow overlapped the restore redraws

    def _kind(self) -> str:
        return "prioritized" if self._prioritized else "uniform"

    def _read_checkpoint(self, path):
        """Reads and checks a `save` file against this buffer; returns (storage, leaves, meta) or raises
        `_BadCheckpoint` (a mismatch) or the reader's own error (a corrupt file). Touches nothing."""
        with open(path, "rb") as f:
            if f.read(4) != b"PK\x03\x04":  # np.load would take anything else for a pickle
                raise _BadCheckpoint("not an .npz archive")
        with np.load(path, allow_pickle=False) as archive:
            entries = set(archive.files)
            if "meta" not in entries or "leaves" not in entries:
                raise _BadCheckpoint("not a replay-buffer checkpoint (no meta or leaves entry)")
            meta = json.loads(str(archive["meta"][()]))
            if not isinstance(meta, dict) or meta.get("format") != _CHECKPOINT_FORMAT:
                raise _BadCheckpoint(
                    f"unknown checkpoint format {meta.get('format') if isinstance(meta, dict) else meta!r}"
                )
            for key, mine in (("kind", self._kind()), ("capacity", self._capacity), ("k", self._tree.k)):
                if meta.get(key) != mine:
                    raise _BadCheckpoint(f"{key} is {meta.get(key)!r} in the file, {mine!r} in this buffer")
            names = {entry[len(_STORAGE_PREFIX) :] for entry in entries if entry.startswith(_STORAGE_PREFIX)}
            if names != set(self._fields):
                missing, extra = sorted(set(self._fields) - names), sorted(names - set(self._fields))
                raise _BadCheckpoint(f"fields differ: missing from the file {missing}, not in this buffer {extra}")
            leaves = archive["leaves"]
            if leaves.shape != (self._capacity,) or leaves.dtype != np.float64:
                raise _BadCheckpoint(
                    f"leaves are {leaves.dtype}{list(leaves.shape)}, expected float64[{self._capacity}]"
                )
            if not np.all(np.isfinite(leaves)) or np.any(leaves < 0):
                raise _BadCheckpoint("leaf priorities must be finite and >= 0")
            size, cursor = meta.get("size"), meta.get("cursor")
            if not (isinstance(size, int) and 0 <= size <= self._capacity and isinstance(cursor, int)):
                raise _BadCheckpoint(f"bad size {size!r} / cursor {cursor!r}")
            if not (0 <= cursor < self._capacity and (size == self._capacity or cursor == size)):
                raise _BadCheckpoint(f"bad size {size!r} / cursor {cursor!r}")
            start = meta.get("storage_start")
            if not (isinstance(start, int) and 0 <= start < self._capacity):
                raise _BadCheckpoint(f"bad storage_start {start!r}")
            if np.any(leaves[size:] != 0):
                raise _BadCheckpoint(f"slots past size={size} have non-zero priorities")
            for key, least in (("max_priority", 0.0), ("alpha", None), ("beta", None), ("eps", 0.0)):
                value = meta.get(key)  # max_priority and eps > 0, alpha and beta >= 0
                if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                    raise _BadCheckpoint(f"bad {key} {value!r}")
                if least is not None and value <= least:
                    raise _BadCheckpoint(f"bad {key} {value!r}")
            scratch = type(self._rng.bit_generator)()  # check the state fits this generator's type
            try:
                scratch.state = meta.get("rng_state")
            except (TypeError, ValueError, KeyError) as error:
                raise _BadCheckpoint(f"generator state does not fit {type(scratch).__name__}: {error}") from None
            storage = {}
            for name, (shape, dtype) in self._fields.items():
                values = archive[_STORAGE_PREFIX + name]
                if values.shape != (self._capacity, *shape) or values.dtype != dtype:
                    raise _BadCheckpoint(
                        f"field {name!r} is {values.dtype}{list(values.shape)} in the file, "
                        f"{dtype}{[self._capacity, *shape]} in this buffer"
                    )
                storage[name] = values
        meta["max_priority"], meta["alpha"], meta["beta"], meta["eps"] = (
            float(meta[key]) for key in ("max_priority", "alpha", "beta", "eps")
        )
        return storage, leaves, meta

    # ----------------------------------------------------------------------------------------------- helpers

    def _set_priorities(self, indices, values):
        """Algorithm 3 lines 3-6; the caller holds the tree (or global) lock.

        Every caller passes valid input: `indices` C-contiguous int64 in [0, capacity) (from `_reserve`,
        `_check_slots` or `np.arange`), `values` C-contiguous float64, finite, >= 0, of the same length. So with
        the numba backend the tree's kernels are called directly, skipping `SumTree.set_leaves` /
        `update_ancestors`'s re-checks of the same input (four index checks and two priority checks per insert,
        more time than the kernels take). Same kernels, same arguments: the tree is bit-identical either way."""
        kernels = self._tree_kernels
        if kernels is None:
            super()._set_priorities(indices, values)
            return
        array, leaf_offset, offsets, k, stride = kernels
        with self._leaf_lock:
            written = _sum_tree._set_leaves_kernel(array, leaf_offset, k, stride, indices, values)
        _sum_tree._update_ancestors_kernel(array, offsets, k, stride, written)

    def _wait(self):
        """Waits on the tree lock (held) until an inserter publishes or frees its slots."""
        self._waiters += 1
        try:
            self._tree_lock.wait()
        finally:
            self._waiters -= 1

    def _reserve(self, n):
        """Next n ring slots (caller holds the tree or global lock)."""
        cursor = self._cursor
        if cursor + n <= self._capacity:
            indices = np.arange(cursor, cursor + n, dtype=np.int64)
        else:
            indices = (cursor + np.arange(n, dtype=np.int64)) % self._capacity
        self._cursor = (cursor + n) % self._capacity
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
        if batch.keys() != self._fields.keys():
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
        return checked_indices(indices, self._size, "len")  # `_size` only grows: a slot valid now stays valid


def _kernel_args(tree: SumTree):
    """(array, leaf offset, level offsets, k, stride) for calling the tree's numba kernels directly, exactly as
    `SumTree.set_leaves` / `update_ancestors` call them; None for the numpy backend (the buffer then goes through
    the public methods)."""
    if tree.backend != "numba":
        return None
    return tree._array, tree._offsets[-1], tree._offsets, tree._k, tree._stride


class _BadCheckpoint(Exception):
    """A `save` file that does not match the buffer loading it (`load` turns it into a ValueError)."""


def _write_npy(archive: zipfile.ZipFile, name: str, array: np.ndarray) -> None:
    """One .npy entry of an .npz archive, exactly as `np.savez` writes it (uncompressed, zip64, no pickles)."""
    with archive.open(name + ".npy", "w", force_zip64=True) as member:
        np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


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


def sample_with_redraw(buffer, batch_size: int, rng):
    """The seqlock sampler shared by `ReplayBuffer` and `FrameStackBuffer`: walk the tree under `buffer._tree_lock`,
    copy outside it, redraw the slots whose write generation moved meanwhile, and after `_OPTIMISTIC_TRIES` tries
    copy under the lock (see the module doc). `buffer` provides `_tree_lock`, `_draw(n, rng) -> (ids, P, N)`,
    `_generation` and `_gather(ids) -> {field: [n, ...]}`. Returns (ids [B], P [B], N, batch)."""
    indices = np.empty(batch_size, dtype=np.int64)
    probabilities = np.empty(batch_size)
    batch = None
    todo = np.arange(batch_size)  # positions of the batch still to fill
    for attempt in range(_OPTIMISTIC_TRIES + 1):
        locked_copy = attempt == _OPTIMISTIC_TRIES
        with buffer._tree_lock:
            drawn, drawn_probabilities, size = buffer._draw(todo.size, rng)
            generation = buffer._generation[drawn]
            if locked_copy:
                copied = buffer._gather(drawn)
        if not locked_copy:
            copied = buffer._gather(drawn)
        if batch is None:
            batch = copied
        else:
            for name, values in copied.items():
                batch[name][todo] = values
        indices[todo] = drawn
        probabilities[todo] = drawn_probabilities
        if locked_copy:
            break
        with buffer._tree_lock:
            torn = buffer._generation[drawn] != generation
        if not np.any(torn):
            break
        todo = todo[torn]
    return indices, probabilities, size, batch
