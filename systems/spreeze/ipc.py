"""How a Spreeze run's processes signal each other without leaving anything behind.

multiprocessing's `Event` and `Queue` are built on named POSIX semaphores (`/dev/shm/sem.mp-*`) under the
forkserver and spawn start methods; they are unlinked by the creating process's finalizers or, after a crash, by
its resource tracker, so a SIGKILL of the whole process group leaves them behind. Here instead:
- `Flags`: stop flags in a shared int8 array (`RawArray`, memory in a file multiprocessing unlinks at once and
  hands to the children as a descriptor); `Flag` has the `is_set` / `set` / `wait` of an Event, polled.
- `EventChannel`: one pipe per child (a socket pair: descriptors, no name) for the rare messages a child sends the
  learner (episodes, evaluations, errors); `put` in the child, `get_all` in the learner.
- `exit_with_parent`: a child exits at once when the process that started it dies (its parent's sentinel pipe
  closes), instead of running on, writing into shared memory nobody reads.
"""

from __future__ import annotations

import math
import os
import threading
import time
from multiprocessing import connection, parent_process

_POLL_SECONDS = 0.01


class Flag:
    """One flag of a `Flags` array: the `is_set` / `set` / `wait` of a multiprocessing Event without a semaphore.
    Picklable as a `Process` argument (the array's memory travels as a descriptor)."""

    def __init__(self, array, index: int):
        self._array = array
        self._index = index

    def is_set(self) -> bool:
        return bool(self._array[self._index])

    def set(self) -> None:
        self._array[self._index] = 1

    def wait(self, timeout: float | None = None) -> bool:
        """Polls every `_POLL_SECONDS` until set or `timeout` seconds pass; returns whether it is set."""
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(_POLL_SECONDS, left))
        return True


class Flags:
    """`count` flags in shared memory, all clear; `flags[i]` is a `Flag`."""

    def __init__(self, ctx, count: int):
        self._array = ctx.RawArray("b", int(count))
        self._flags = [Flag(self._array, i) for i in range(int(count))]

    def __getitem__(self, index: int) -> Flag:
        return self._flags[index]

    def __len__(self) -> int:
        return len(self._flags)


class EventWriter:
    """A child's end of an `EventChannel`: `put(message)` sends one picklable message to the learner."""

    def __init__(self, conn):
        self._conn = conn

    def put(self, message) -> None:
        self._conn.send(message)


class EventChannel:
    """The learner's side: `writer()` makes a pipe and returns the child's end (a `Process` argument); `get_all()`
    returns every message waiting on any pipe, without blocking. A pipe whose child has exited is dropped once
    drained."""

    def __init__(self, ctx):
        self._ctx = ctx
        self._readers: list = []

    def writer(self) -> EventWriter:
        reader, writer = self._ctx.Pipe(duplex=False)
        self._readers.append(reader)
        return EventWriter(writer)

    def get_all(self) -> list:
        messages = []
        while self._readers:
            ready = connection.wait(self._readers, timeout=0)
            if not ready:
                break
            for reader in ready:
                try:
                    messages.append(reader.recv())
                except (EOFError, OSError):  # the child exited and its pipe is empty
                    self._readers.remove(reader)
                    reader.close()
        return messages

    def close(self) -> None:
        for reader in self._readers:
            reader.close()
        self._readers = []


def exit_with_parent(exit_code: int = 1) -> None:
    """In a child of the run: a daemon thread that ends this process (no clean-up; the kernel frees its memory,
    descriptors and record locks) as soon as the process that started it dies. No-op in a process that multiprocessing
    did not start."""
    parent = parent_process()
    if parent is None:
        return

    def watch() -> None:
        connection.wait([parent.sentinel])
        os._exit(exit_code)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
