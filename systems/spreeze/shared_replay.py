"""Spreeze's experience transfer (seed 002, section 3.3.2 "Replay Buffer Shared Memory"): sampler processes write
transitions straight into a replay buffer in shared memory and the learner samples large batches from it, with no
queue, no pipe and no pickling on the hot path; `QueueTransfer` is the queue baseline of the paper's ablation (Table
3 rows 6-8).

`SharedReplay` is a FIFO ring of `capacity` transitions (the oldest are overwritten).

Layout. ONE anonymous shared-memory file per buffer (a Linux memfd named `spreeze-<run_id>-<name>`; elsewhere an
unlinked temporary file): a small int64 header, then every field as a `[capacity, *shape]` array in its own dtype,
each starting on a 64-byte boundary. One segment rather than one per field: one descriptor to hand to a child, one
mmap per process, and the header and the data can never disagree about which run they belong to. The header holds a
magic word, the layout version, the owner's pid and a random token, the capacity, `total` (transitions completely
written, the write cursor is `total % capacity`), `started` (transitions whose write has begun; equal to `total`
except inside an insert) and one insert count per writer id.

Lifetime. The segment has no name in /dev/shm: a child receives a duplicate of its file descriptor when the handle
is pickled for it (`multiprocessing.reduction.DupFd`: as a `Process` argument, or through a multiprocessing
connection while the owner lives), and the kernel frees the memory when the last descriptor and mapping are gone,
however the processes end (exit, Ctrl-C, SIGKILL of the whole group, OOM). Nothing can go stale, nothing needs the
resource tracker, and a crashed run leaves nothing for the next one to clean up (named segments
would rely on the resource tracker, which a SIGKILL of the process group kills too).

Lock discipline. One lock per buffer: a POSIX record lock (`fcntl.lockf`) on the segment's descriptor, which belongs
to the process and which the kernel releases when the process dies, taken under a per-segment threading lock (record
locks do not exclude threads of one process). No named semaphore exists, so none can be left in /dev/shm. A lock
and unlock pair costs two system calls, a few times a multiprocessing lock's cost:
- insert: validate and convert the batch with no lock held (a bad batch raises ValueError and writes nothing); then
  under the lock: `started = total + n`, copy the n rows into the ring (at most two slices per field), `total += n`,
  the writer's count `+= n`. For MuJoCo a transition is 168 bytes and n is a few dozen, so the lock is held for a few
  microseconds. Copying under the lock keeps `total` a single in-order cursor: everything below it is complete.
- sample: read `(total, started)` under the lock (two integers), draw global transition numbers g uniformly from
  `[max(0, started - capacity), total)` (ring slot `g % capacity`), gather the rows with NO lock held, then read
  `started` again under the lock. A write that touched slot `g % capacity` after the first read has a number
  g' = g + k * capacity (k >= 1) below the new `started`, so row g may be torn exactly when
  `g < started_now - capacity`; those rows (and only those) are redrawn and re-gathered, the check repeated. After a
  few optimistic rounds (only reachable when writers lap the whole ring during one gather) the remaining rows are
  drawn and copied under the lock. It is a seqlock over the ring with the global counters as sequence numbers.
  Memory ordering: both counter reads and every write happen inside the lock, whose acquire/release are full
  barriers, so the check is sound on weakly ordered CPUs too, not only on x86.
So samplers never wait for the learner beyond two critical sections of a few microseconds per `sample`
(never during the gather of a large batch), and the learner never returns a half-written transition. Redrawn rows
are overwhelmingly the oldest slots, the ones being evicted; replacing them with a fresh uniform draw keeps the
sample uniform over the transitions present when the sample returns. `retries` counts redrawn rows.
An insert interrupted inside its critical section (Ctrl-C between two field copies; a finally releases the lock)
leaves `started > total`: the slots of `[total, started)` may be half written, and sampling already excludes them
(they are the oldest `started - total` numbers of the window), and the next insert starts again from `total`, so it
rewrites them. A process SIGKILLed inside its critical section leaves the same state, and the kernel releases its
lock, so the others go on.

Ctrl-C: every `SharedReplay` is a context manager (closes on exit); `close` and `unlink` (the owner's spelling of
the same) are idempotent.

`QueueTransfer` (baseline): samplers `put` batches (dicts of arrays, pickled by the queue's feeder thread) on a
`multiprocessing.Queue`; the learner spends its own time in `drain()` unpickling them into a local numpy ring and
samples from that. Same create / handle / attach / insert / sample / size / close / unlink interface, so a benchmark
swaps them; `SharedReplay.attach` also accepts a queue handle and returns the writer side of the queue. The queue
is multiprocessing's own (the baseline the paper measures), with its three named semaphores: removed when the run
ends in any way but a SIGKILL of the whole process group, resource tracker included, which leaves them in /dev/shm.

Memory: `memory_bytes` is the segment size. MuJoCo transitions (obs f32[17], action f32[6], reward f32,
next_obs f32[17], done f32) take 168 bytes: 168 MB for 1,000,000 transitions.
Sampling draws random rows of that array (cache and TLB misses), with `np.take`, about twice as fast as fancy
indexing (`benchmarks/replay.py` times insert and sample).
"""

from __future__ import annotations

import dataclasses
import fcntl
import math
import mmap
import multiprocessing
import os
import queue as queue_lib
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Mapping
from multiprocessing import reduction
from typing import Any

import numpy as np

PREFIX = "spreeze"
DEFAULT_NAME = "replay"
SHM_DIR = "/dev/shm"

_MAGIC = 0x3145_5A45_4552_5053  # b"SPREEZE1" read as little-endian int64
_VERSION = 2  # 2: anonymous memfd segments and record locks (1: named segments)
_ALIGN = 64
# Header words (int64).
_H_MAGIC, _H_VERSION, _H_PID, _H_TOKEN, _H_CAPACITY, _H_TOTAL, _H_STARTED, _H_MAX_WRITERS = range(8)
_H_WRITERS = 16  # per-writer insert counts start here
_OPTIMISTIC_ROUNDS = 8

_RUN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
_NAME = re.compile(r"^[A-Za-z0-9_]{1,32}$")

# One threading lock per segment in this process (keyed by the segment's inode): POSIX record locks belong to the
# process, so threads of one process (or two SharedReplay objects of one segment in one process) exclude each other
# with this lock, and processes with the record lock taken under it.
_THREAD_LOCKS: dict[tuple[int, int], threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()

Fields = Mapping[str, tuple[tuple[int, ...], Any]]
_Spec = tuple[tuple[str, tuple[int, ...], np.dtype], ...]


def segment_name(run_id: str, name: str = DEFAULT_NAME) -> str:
    """The name of buffer `name` of run `run_id` (shown as `/memfd:<name>` in /proc/<pid>/fd; not a path)."""
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise ValueError(f"run_id must match {_RUN_ID.pattern}, got {run_id!r}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"name must match {_NAME.pattern}, got {name!r}")
    return f"{PREFIX}-{run_id}-{name}"


def _align(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _normalize_fields(fields: Fields) -> _Spec:
    if not isinstance(fields, Mapping) or not fields:
        raise ValueError("fields must be a non-empty dict {name: (shape, dtype)}")
    spec = []
    for name, value in fields.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"field names must be non-empty strings, got {name!r}")
        try:
            shape, dtype = value
        except (TypeError, ValueError):
            raise ValueError(f"field {name!r}: expected (shape, dtype), got {value!r}") from None
        shape = (int(shape),) if np.isscalar(shape) else tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise ValueError(f"field {name!r}: negative dimension in {shape}")
        dtype = np.dtype(dtype)
        if dtype.hasobject or dtype.itemsize == 0:
            raise ValueError(f"field {name!r}: dtype {dtype} cannot live in shared memory")
        spec.append((name, shape, dtype))
    return tuple(spec)


def _prepare(spec: _Spec, batch: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int]:
    """Checks a batch against the fields and converts it to the fields' dtypes (no lock held, nothing written).
    Dtypes convert under numpy's "same_kind" rule (float64 -> float32, bool -> float32), never float -> int."""
    if not isinstance(batch, Mapping):
        raise ValueError(f"batch must be a dict of arrays, got {type(batch).__name__}")
    expected = [name for name, _, _ in spec]
    if set(batch) != set(expected):
        missing = sorted(set(expected) - set(batch))
        extra = sorted(set(batch) - set(expected), key=str)
        raise ValueError(f"batch fields do not match the buffer's: missing {missing}, unexpected {extra}")
    arrays: dict[str, np.ndarray] = {}
    n = None
    for name, shape, dtype in spec:
        array = np.asarray(batch[name])
        if array.ndim != len(shape) + 1 or array.shape[1:] != shape:
            expected_shape = "[n" + "".join(f", {d}" for d in shape) + "]"
            raise ValueError(f"field {name!r}: expected shape {expected_shape}, got {list(array.shape)}")
        if n is None:
            n = array.shape[0]
        elif array.shape[0] != n:
            raise ValueError(f"field {name!r} has {array.shape[0]} rows, an earlier field has {n}")
        if array.dtype != dtype:
            if not np.can_cast(array.dtype, dtype, "same_kind"):
                raise ValueError(f"field {name!r}: dtype {array.dtype} does not convert to {dtype} (same_kind)")
            array = array.astype(dtype)
        arrays[name] = array
    return arrays, int(n)


def _ring_write(view: np.ndarray, source: np.ndarray, first: int, capacity: int) -> None:
    """Writes `source` (at most `capacity` rows) to the ring slots of global numbers first, first + 1, ..."""
    n = source.shape[0]
    start = first % capacity
    head = min(n, capacity - start)
    view[start:start + head] = source[:head]
    if head < n:
        view[:n - head] = source[head:]


def _anonymous_file(name: str, size: int) -> int:
    """A file descriptor of `size` zero bytes that no path names: a memfd on Linux, else an unlinked temporary
    file (in /dev/shm when it exists). The kernel frees it with its last descriptor and mapping."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
    else:  # pragma: no cover - not Linux
        fd, path = tempfile.mkstemp(prefix=name + "-", dir=SHM_DIR if os.path.isdir(SHM_DIR) else None)
        os.unlink(path)
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _rebuild_handle(fields: dict, fd_wrapper) -> SharedReplayHandle:
    return SharedReplayHandle(fd=fd_wrapper.detach(), **fields)


@dataclasses.dataclass(frozen=True)
class SharedReplayHandle:
    """What another process needs to attach: pickled while spawning a Process (or sent through multiprocessing),
    the segment's file descriptor travels as a duplicate (`multiprocessing.reduction.DupFd`), never by name."""

    segment: str
    run_id: str
    capacity: int
    fields: _Spec
    offsets: tuple[int, ...]
    header_words: int
    nbytes: int
    max_writers: int
    fd: int

    def __reduce__(self):
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "fd"}
        return _rebuild_handle, (fields, reduction.DupFd(self.fd))


class SharedReplay:
    """FIFO ring of transitions in one shared-memory segment; many writer processes, readers that never see a torn
    transition. Build with `create` (owner, usually the learner) or `attach(handle)` (samplers)."""

    def __init__(self, fd: int, handle: SharedReplayHandle, *, owner: bool, writer_id: int | None):
        self._fd = fd
        self._mmap = mmap.mmap(fd, handle.nbytes)
        self._handle = handle
        with _THREAD_LOCKS_GUARD:
            stat = os.fstat(fd)
            self._thread_lock = _THREAD_LOCKS.setdefault((stat.st_dev, stat.st_ino), threading.Lock())
        self._owner = owner
        self._writer_id = writer_id
        self._spec = handle.fields
        self.capacity = handle.capacity
        self._header = np.ndarray((handle.header_words,), np.int64, buffer=self._mmap, offset=0)
        self._views = {name: np.ndarray((handle.capacity, *shape), dtype, buffer=self._mmap, offset=offset)
                       for (name, shape, dtype), offset in zip(handle.fields, handle.offsets, strict=True)}
        self._closed = False
        self._rng: np.random.Generator | None = None
        self.retries = 0  # sampled rows redrawn in this process because a write overlapped their gather

    # ----------------------------------------------------------------------------------------------- set-up
    @classmethod
    def create(cls, capacity: int, fields: Fields, *, run_id: str, name: str = DEFAULT_NAME,
               max_writers: int = 64, ctx=None) -> SharedReplay:
        """Creates the segment, owned by the caller (`close` or `unlink` frees this process's share of it; the
        kernel frees it when no process holds it). `fields`: {name: (shape, dtype)}. `ctx` is accepted and unused,
        so `create` takes the arguments of `QueueTransfer.create`."""
        del ctx
        capacity = int(capacity)
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if int(max_writers) < 0:
            raise ValueError(f"max_writers must be >= 0, got {max_writers}")
        spec = _normalize_fields(fields)
        segment = segment_name(run_id, name)
        header_words = _H_WRITERS + int(max_writers)
        offsets, offset = [], _align(header_words * 8)
        for _, shape, dtype in spec:
            offsets.append(offset)
            offset = _align(offset + capacity * math.prod(shape) * dtype.itemsize)
        fd = _anonymous_file(segment, offset)
        handle = SharedReplayHandle(segment, run_id, capacity, spec, tuple(offsets), header_words, offset,
                                    int(max_writers), fd)
        try:
            buffer = cls(fd, handle, owner=True, writer_id=None)
        except BaseException:
            os.close(fd)
            raise
        header = buffer._header
        header[_H_VERSION], header[_H_PID], header[_H_TOKEN] = _VERSION, os.getpid(), secrets.randbits(62)
        header[_H_CAPACITY], header[_H_MAX_WRITERS] = capacity, int(max_writers)
        header[_H_MAGIC] = _MAGIC
        return buffer

    def handle(self) -> SharedReplayHandle:
        """Pass it to a child as a `Process` argument, then `SharedReplay.attach(handle)` there."""
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        return self._handle

    @classmethod
    def attach(cls, handle, *, writer_id: int | None = None) -> SharedReplay | QueueTransfer:
        """Attaches to the buffer of `handle` (in a child process, or anywhere). `writer_id` in [0, max_writers)
        makes `insert` count its transitions under that id (`snapshot_counts`). A `QueueTransfer` handle gives the
        writer side of that queue instead, so sampler code serves both transfers. In the process that created the
        buffer, the attached object has a descriptor of its own (closing it leaves the owner's open)."""
        if isinstance(handle, QueueHandle):
            return QueueTransfer.attach(handle, writer_id=writer_id)
        if not isinstance(handle, SharedReplayHandle):
            raise TypeError(f"expected a SharedReplayHandle, got {type(handle).__name__}")
        if writer_id is not None and not 0 <= int(writer_id) < handle.max_writers:
            raise ValueError(f"writer_id must be in [0, {handle.max_writers}), got {writer_id}")
        fd = os.dup(handle.fd)  # this object's own descriptor: a handle may be attached more than once
        try:
            ok = os.fstat(fd).st_size >= handle.nbytes
            if ok:
                header = np.frombuffer(os.pread(fd, _H_WRITERS * 8, 0), np.int64)
                ok = int(header[_H_MAGIC]) == _MAGIC and int(header[_H_CAPACITY]) == handle.capacity
            if not ok:
                raise ValueError(f"segment {handle.segment} does not hold the buffer this handle describes")
            return cls(fd, handle, owner=False, writer_id=None if writer_id is None else int(writer_id))
        except BaseException:
            os.close(fd)
            raise

    # ------------------------------------------------------------------------------------------- lock
    def _acquire(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        self._thread_lock.acquire()
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._thread_lock.release()
            raise

    def _release(self) -> None:
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()

    def _counters(self) -> tuple[int, int]:
        self._acquire()
        try:
            return int(self._header[_H_TOTAL]), int(self._header[_H_STARTED])
        finally:
            self._release()

    # -------------------------------------------------------------------------------------------- writer
    def insert(self, batch: Mapping[str, np.ndarray], *, writer_id: int | None = None) -> None:
        """Appends the n transitions of `batch` ({field: [n, *shape]}); ValueError (nothing written) if its fields,
        shapes or dtypes do not match. Holds the lock only for the copy of the n rows."""
        arrays, n = _prepare(self._spec, batch)
        wid = self._writer_id if writer_id is None else int(writer_id)
        if wid is not None and not 0 <= wid < self._handle.max_writers:
            raise ValueError(f"writer_id must be in [0, {self._handle.max_writers}), got {wid}")
        if n == 0:
            return
        capacity = self.capacity
        if n > capacity:  # only the newest `capacity` rows survive anyway
            skip = n - capacity
            arrays = {name: array[skip:] for name, array in arrays.items()}
        else:
            skip = 0
        header = self._header
        self._acquire()
        try:
            total = int(header[_H_TOTAL])
            end = total + n
            header[_H_STARTED] = max(int(header[_H_STARTED]), end)  # [total, end) may be torn until `total` moves
            for name, view in self._views.items():
                self._write_field(view, arrays[name], total + skip)
            header[_H_TOTAL] = end
            if wid is not None:
                header[_H_WRITERS + wid] += n
        finally:
            self._release()

    def _write_field(self, view: np.ndarray, source: np.ndarray, first: int) -> None:
        _ring_write(view, source, first, self.capacity)

    # -------------------------------------------------------------------------------------------- reader
    def sample(self, batch_size: int, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """`batch_size` transitions drawn uniformly (with replacement) from the buffer, as fresh arrays
        {field: [batch_size, *shape]}. ValueError when the buffer holds no transition."""
        batch_size = int(batch_size)
        if batch_size < 0:
            raise ValueError(f"batch_size must be >= 0, got {batch_size}")
        if rng is None:
            rng = self._rng = self._rng or np.random.default_rng()
        capacity = self.capacity
        total, started = self._counters()
        low = max(0, started - capacity)
        if total <= low:
            raise ValueError("sample from an empty replay buffer")
        numbers = rng.integers(low, total, batch_size)
        slots = numbers % capacity
        out = {name: self._gather_field(name, view, slots) for name, view in self._views.items()}
        rows = np.arange(batch_size)
        for _ in range(_OPTIMISTIC_ROUNDS):
            total, started = self._counters()
            torn = numbers < started - capacity  # a write that began after our read may have touched these slots
            if not torn.any():
                return out
            rows = rows[torn]
            self.retries += rows.size
            low = max(0, started - capacity)
            if total <= low:
                break
            numbers = rng.integers(low, total, rows.size)
            slots = numbers % capacity
            for name, view in self._views.items():
                out[name][rows] = self._gather_field(name, view, slots)
        # Writers lapped the ring during every gather: finish the remaining rows under the lock.
        self._acquire()
        try:
            total, started = int(self._header[_H_TOTAL]), int(self._header[_H_STARTED])
            low = max(0, started - capacity)
            if total <= low:
                raise ValueError("no complete transition in the replay buffer")
            slots = rng.integers(low, total, rows.size) % capacity
            for name, view in self._views.items():
                out[name][rows] = np.take(view, slots, axis=0)
        finally:
            self._release()
        return out

    def _gather_field(self, name: str, view: np.ndarray, slots: np.ndarray) -> np.ndarray:
        return np.take(view, slots, axis=0)  # a fresh array; about 2x faster than view[slots] for 2-D fields

    def snapshot(self) -> dict[str, np.ndarray]:
        """Copies of every transition in the buffer, oldest first. Holds the lock for the whole copy (writers wait):
        for tests and checkpoints, not for the training loop."""
        self._acquire()
        try:
            total, started = int(self._header[_H_TOTAL]), int(self._header[_H_STARTED])
            slots = np.arange(max(0, started - self.capacity), total) % self.capacity
            return {name: view[slots] for name, view in self._views.items()}
        finally:
            self._release()

    # ------------------------------------------------------------------------------------------ counts
    @property
    def size(self) -> int:
        """Transitions that can be sampled: min(total_inserted, capacity), less any left half-written by an
        interrupted insert."""
        total, started = self._counters()
        return max(0, total - max(0, started - self.capacity))

    @property
    def total_inserted(self) -> int:
        return self._counters()[0]

    def snapshot_counts(self) -> dict[str, Any]:
        """{"total_inserted", "size", "per_writer": list of insert counts by writer id} read together."""
        self._acquire()
        try:
            total, started = int(self._header[_H_TOTAL]), int(self._header[_H_STARTED])
            per_writer = [int(c) for c in self._header[_H_WRITERS:]]
        finally:
            self._release()
        return {"total_inserted": total, "size": max(0, total - max(0, started - self.capacity)),
                "per_writer": per_writer}

    @property
    def fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        return {name: (shape, dtype) for name, shape, dtype in self._spec}

    @property
    def memory_bytes(self) -> int:
        return self._handle.nbytes

    @property
    def segment(self) -> str:
        return self._handle.segment

    @property
    def is_owner(self) -> bool:
        return self._owner

    # --------------------------------------------------------------------------------------- tear-down
    def close(self) -> None:
        """Detaches this object (idempotent): unmaps the segment and closes its descriptor. The segment lives on while
        any process holds it; the kernel frees it after the last one, however that one ends."""
        if self._closed:
            return
        with self._thread_lock:  # closing a descriptor drops this process's record locks on the file: not mid-insert
            self._closed = True
            self._views = {}
            self._header = None  # drop every numpy view of the mapping before closing it
            self._mmap.close()
            os.close(self._fd)

    def unlink(self) -> None:
        """Owner only: the same as `close` (the segment has no name to remove); kept so the owner's tear-down reads
        the same for both transfers."""
        if not self._owner:
            raise RuntimeError("only the process that created the buffer unlinks it (others: close)")
        self.close()

    def __enter__(self) -> SharedReplay:
        return self

    def __exit__(self, *exc) -> None:
        if self._owner:
            self.unlink()
        else:
            self.close()

    def __reduce__(self):
        raise TypeError("a SharedReplay is not picklable; pass handle() to the child process and attach there")

    def __repr__(self) -> str:
        role = "owner" if self._owner else "attached"
        state = ", closed" if self._closed else ""
        return f"SharedReplay({self._handle.segment}, capacity={self.capacity}, {role}{state})"


# ------------------------------------------------------------------------------------------------- baseline
@dataclasses.dataclass(frozen=True)
class QueueHandle:
    """Writer-side description of a `QueueTransfer` (picklable while spawning a Process)."""

    queue: Any
    capacity: int
    fields: _Spec
    run_id: str


class QueueTransfer:
    """The ablation baseline (seed 002, Table 3): samplers put batches on a multiprocessing.Queue; the learner
    `drain`s them into a local numpy ring (its own time: unpickling and copying) and samples from that.

    Writers' `insert` pickles the batch in the queue's feeder thread; with `maxsize` > 0 it blocks while the queue is
    full (the coupling the paper measures), with 0 the queue grows without bound. `close(flush=False)` drops what the
    feeder has not sent yet, so a writer exits even when the learner has stopped draining (Ctrl-C)."""

    def __init__(self, handle: QueueHandle, *, owner: bool, writer_id: int | None):
        self._handle = handle
        self._queue = handle.queue
        self._spec = handle.fields
        self._owner = owner
        self._writer_id = writer_id
        self.capacity = handle.capacity
        self._closed = False
        self._rng: np.random.Generator | None = None
        self._total = 0
        self._per_writer: dict[int, int] = {}
        self._storage = ({name: np.zeros((handle.capacity, *shape), dtype) for name, shape, dtype in handle.fields}
                         if owner else {})

    @classmethod
    def create(cls, capacity: int, fields: Fields, *, run_id: str = "", ctx=None, maxsize: int = 0,
               **_ignored) -> QueueTransfer:
        """The learner side (owns the local ring). Extra keyword arguments of `SharedReplay.create` are accepted
        and ignored, so the two are interchangeable."""
        capacity = int(capacity)
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        ctx = ctx or multiprocessing.get_context("spawn")
        handle = QueueHandle(ctx.Queue(int(maxsize)), capacity, _normalize_fields(fields), run_id)
        return cls(handle, owner=True, writer_id=None)

    def handle(self) -> QueueHandle:
        return self._handle

    @classmethod
    def attach(cls, handle: QueueHandle, *, writer_id: int | None = None) -> QueueTransfer:
        """The writer side, in a sampler process."""
        if not isinstance(handle, QueueHandle):
            raise TypeError(f"expected a QueueHandle, got {type(handle).__name__}")
        return cls(handle, owner=False, writer_id=writer_id)

    def insert(self, batch: Mapping[str, np.ndarray], *, writer_id: int | None = None) -> None:
        """Puts the batch on the queue (validated first: ValueError, nothing sent)."""
        if self._closed:
            raise RuntimeError("QueueTransfer is closed")
        arrays, n = _prepare(self._spec, batch)
        if n:
            self._queue.put((self._writer_id if writer_id is None else writer_id, arrays))

    def drain(self, max_items: int | None = None, timeout: float = 0.0) -> tuple[int, float]:
        """Learner: moves up to `max_items` queued batches (all that are ready if None) into the local ring, waiting
        up to `timeout` seconds for the first one. Returns (transitions moved, seconds spent)."""
        self._require_owner("drain")
        start = time.perf_counter()
        moved = items = 0
        while max_items is None or items < max_items:
            try:
                if items == 0 and timeout > 0:
                    writer_id, arrays = self._queue.get(timeout=timeout)
                else:
                    writer_id, arrays = self._queue.get_nowait()
            except queue_lib.Empty:
                break
            n = len(next(iter(arrays.values())))
            if n > self.capacity:
                arrays = {name: array[n - self.capacity:] for name, array in arrays.items()}
            first = self._total + n - min(n, self.capacity)
            for name, view in self._storage.items():
                _ring_write(view, arrays[name], first, self.capacity)
            self._total += n
            if writer_id is not None:
                self._per_writer[writer_id] = self._per_writer.get(writer_id, 0) + n
            moved += n
            items += 1
        return moved, time.perf_counter() - start

    def sample(self, batch_size: int, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """Learner: uniform sample (with replacement) of what has been drained so far."""
        self._require_owner("sample")
        if int(batch_size) < 0:
            raise ValueError(f"batch_size must be >= 0, got {batch_size}")
        if self.size == 0:
            raise ValueError("sample from an empty replay buffer (nothing drained yet)")
        if rng is None:
            rng = self._rng = self._rng or np.random.default_rng()
        slots = rng.integers(0, self.size, int(batch_size))
        return {name: np.take(view, slots, axis=0) for name, view in self._storage.items()}

    def snapshot(self) -> dict[str, np.ndarray]:
        self._require_owner("snapshot")
        slots = np.arange(self._total - self.size, self._total) % self.capacity
        return {name: view[slots] for name, view in self._storage.items()}

    @property
    def size(self) -> int:
        return min(self._total, self.capacity)

    @property
    def total_inserted(self) -> int:
        """Transitions drained into the local ring so far (learner side)."""
        return self._total

    def snapshot_counts(self) -> dict[str, Any]:
        per_writer = [0] * (max(self._per_writer, default=-1) + 1)
        for writer_id, count in self._per_writer.items():
            per_writer[writer_id] = count
        return {"total_inserted": self._total, "size": self.size, "per_writer": per_writer}

    @property
    def fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        return {name: (shape, dtype) for name, shape, dtype in self._spec}

    @property
    def memory_bytes(self) -> int:
        return sum(view.nbytes for view in self._storage.values())

    def _require_owner(self, what: str) -> None:
        if not self._owner:
            raise RuntimeError(f"{what} is for the learner side of a QueueTransfer")

    def close(self, flush: bool = True) -> None:
        """Writer: `flush` lets the feeder send what is queued when this process exits (blocks while the pipe is
        full and nobody drains); flush=False drops it and never blocks. Learner: closes its end, never blocks."""
        if self._closed:
            return
        self._closed = True
        if self._owner or not flush:
            self._queue.cancel_join_thread()
        self._queue.close()

    def unlink(self) -> None:
        """Nothing to free beyond `close` (the queue's pipe goes with its last process)."""
        self.close()

    def __enter__(self) -> QueueTransfer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"QueueTransfer(capacity={self.capacity}, {'owner' if self._owner else 'writer'})"
