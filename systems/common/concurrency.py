"""Small named helpers through which threads talk: a thread group that surfaces errors, a versioned parameter store
(seed 000, section 4.1: the actors always use the newest published policy, the learner the behaviour policy of the
batch it learns from; STYLE.md: no loose globals between threads), and a block that holds a stop signal until its
work is done (`stops_held`)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable
from typing import Any


class StopRequested(Exception):
    """Raised inside a worker when the run is stopping, to unwind it quietly."""


class ThreadGroup:
    """Runs worker threads; the first exception in any of them stops all and is re-raised in the main thread.

    Workers receive nothing; they poll `group.stopping` (an Event) in their loops and may raise `StopRequested`.
    """

    def __init__(self):
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def spawn(self, name: str, target: Callable[[], None]) -> None:
        def body():
            try:
                target()
            except StopRequested:
                pass
            except BaseException as error:  # recorded and re-raised in the main thread
                with self._lock:
                    if self._error is None:
                        self._error = error
                self.stopping.set()

        thread = threading.Thread(target=body, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def check(self) -> None:
        """Re-raises (in the calling thread) the first error of any worker, with its original traceback."""
        if self._error is not None:
            raise self._error

    def running(self) -> bool:
        """True while any worker thread is still alive."""
        return any(thread.is_alive() for thread in self._threads)

    def running_names(self) -> list[str]:
        """The names of the worker threads still alive."""
        return [thread.name for thread in self._threads if thread.is_alive()]

    def stop(self, timeout: float = 10.0, patience: float = 600.0,
             waiting: Callable[[list[str]], None] | None = None) -> None:
        """Signals the workers and joins them. One still busy after `timeout` s (inside an XLA program, which cannot
        be interrupted: a CPU update of 8,192 Atari frames takes ~40 s) is waited for up to `patience` s more, after
        `waiting(names)` says so: a daemon thread left inside XLA when the interpreter exits aborts the process."""
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        busy = [thread for thread in self._threads if thread.is_alive()]
        if busy and patience > 0:
            if waiting is not None:
                waiting([thread.name for thread in busy])
            deadline = time.monotonic() + patience
            for thread in busy:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))


class ParameterStore:
    """Versioned parameters. Version v is the policy after v learner updates (theta_v in seed 000, Eq. 6).

    Keeps the last `keep` versions so the learner can fetch the behaviour parameters of the batch it learns from.
    """

    def __init__(self, params: Any, version: int = 0, keep: int = 3):
        self._versions: dict[int, Any] = {version: params}
        self._latest = version
        self._keep = keep
        self._cond = threading.Condition()

    def publish(self, params: Any, version: int) -> None:
        with self._cond:
            if version != self._latest + 1:
                raise RuntimeError(f"parameter version {version} published after {self._latest}")
            self._versions[version] = params
            self._latest = version
            for old in [v for v in self._versions if v <= version - self._keep]:
                del self._versions[old]
            self._cond.notify_all()

    def latest(self) -> tuple[int, Any]:
        with self._cond:
            return self._latest, self._versions[self._latest]

    def get(self, version: int) -> Any:
        with self._cond:
            if version not in self._versions:
                raise KeyError(f"parameter version {version} is no longer kept (latest {self._latest})")
            return self._versions[version]

    def wait_for(self, version: int, stopping: threading.Event, poll: float = 0.05) -> Any:
        """Blocks until `version` is published (or the run stops: StopRequested)."""
        with self._cond:
            while self._latest < version:
                if stopping.is_set():
                    raise StopRequested
                self._cond.wait(poll)
            return self._versions[version]


@contextlib.contextmanager
def stops_held():
    """Within the block, a Ctrl-C or SIGTERM is held: the stop the installed handler raises (the launcher's
    KeyboardInterrupt or its `Terminated`) is raised when the block ends, not in its middle. Anakin wraps a program
    call and the hand-over of its rounds in it, so a stop keeps the rounds the call finished (a process of a
    multi-host job then saves the round the others reached). In the main thread only (signals are delivered there);
    elsewhere a plain block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[BaseException] = []
    originals = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

    def hold(signum, frame):
        handler = originals[signum]
        try:
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL and signum == signal.SIGINT:
                raise KeyboardInterrupt
        except KeyboardInterrupt as stop:
            held.append(stop)

    for signum in originals:
        signal.signal(signum, hold)
    try:
        yield
    finally:
        for signum, handler in originals.items():
            if signal.getsignal(signum) is hold:  # a handler that ran may have armed its successor: keep that one
                signal.signal(signum, handler)
    if held:
        raise held[0]
