"""Where a run's time goes: each thread splits its wall time into named stages, and the run names the stage that
bounds it.

A thread binds a `StageClock` of its role ("actors", "learner", "main", ...) with `Profile.bind`; code anywhere on
that thread then marks its stages with `with stage("inference"):`. Stages nest (an evaluation inside the main loop's
update): a clock charges each moment to the innermost open stage, and everything outside any stage to "other", so
the stages of one thread add up to its wall time by construction. The cost is two `time.perf_counter()` calls and a
thread-local lookup per stage (`benchmarks/profile_overhead.py` measures it); nothing waits for a device. On a
thread with no clock, `stage` does nothing.

HTS-RL's argument (seed 000, Sec. 3) is about exactly this split: simulators waiting for one another, the learner
waiting for the actors. The verdict (`Profile.breakdown`) reads, after the run's first update, the stages of the role
that waits on the others (the actors, or the one thread of a lock-step system): the stage where it spends most time
is the bound."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time

OTHER = "other"
_local = threading.local()


class StageClock:
    """One thread's wall time by stage. Only its own thread enters and leaves stages and stops the clock; `seconds()`
    may be read from any thread (floats read under the GIL; the open stage's running time is counted until `stop`,
    which the thread calls as it ends)."""

    __slots__ = ("role", "_seconds", "_stack", "_last", "started", "stopped")

    def __init__(self, role: str):
        self.role = role
        self._seconds: dict[str, float] = {OTHER: 0.0}
        self._stack: list[str] = [OTHER]
        self.started = self._last = time.perf_counter()
        self.stopped = False

    def stop(self) -> None:
        """Charges the open stages' time and freezes the clock (the thread is done)."""
        if not self.stopped:
            while len(self._stack) > 1:
                self.leave()
            now = time.perf_counter()
            self._seconds[OTHER] += now - self._last
            self._last = now
            self.stopped = True

    def enter(self, name: str) -> None:
        now = time.perf_counter()
        top = self._stack[-1]
        self._seconds[top] = self._seconds.get(top, 0.0) + now - self._last
        self._last = now
        self._stack.append(name)

    def leave(self) -> None:
        if len(self._stack) == 1:  # a stage entered before this clock was bound: nothing of it to charge here
            return
        now = time.perf_counter()
        top = self._stack.pop()
        self._seconds[top] = self._seconds.get(top, 0.0) + now - self._last
        self._last = now

    def seconds(self) -> dict[str, float]:
        """Seconds per stage so far, the open stage's running time included (until `stop`)."""
        seconds = dict(self._seconds)
        if not self.stopped:
            top, last = self._stack[-1], self._last
            seconds[top] = seconds.get(top, 0.0) + max(time.perf_counter() - last, 0.0)
        return seconds


class _Stage:
    """`stage(name)`'s context manager: stateless (the open stages live in the thread's clock), so one instance per
    name serves every thread and no generator is made per call (the cost is in `benchmarks/profile_overhead.py`)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __enter__(self) -> None:
        clock = getattr(_local, "clock", None)
        if clock is not None:
            clock.enter(self.name)

    def __exit__(self, *exc) -> None:
        clock = getattr(_local, "clock", None)
        if clock is not None:
            clock.leave()


_STAGES: dict[str, _Stage] = {}


def stage(name: str) -> _Stage:
    """Charges the time inside the `with` block to `name` on this thread's clock (nothing without one)."""
    found = _STAGES.get(name)
    if found is None:
        found = _STAGES.setdefault(name, _Stage(name))
    return found


def current() -> StageClock | None:
    return getattr(_local, "clock", None)


@dataclasses.dataclass(frozen=True)
class Bound:
    """What a stage of the deciding role means when it dominates, and what would move it."""

    verdict: str  # "learner-bound", ...
    advice: str


class Profile:
    """The run's clocks, by role. `roles` declares each role's stages (progress.csv's columns; a stage not declared
    still counts in the summary); `bounds` maps a stage of `deciding_role` to its `Bound`: the verdict of a run is
    the deciding role's largest stage, unless a role of `saturated` ({role: (stage, Bound)}) spends at least
    `SATURATED` of its time in that stage. On a CPU the learner's update and the simulators share the cores: a
    learner busy all the time slows the simulators, and the actors then seem to wait for them."""

    SATURATED = 0.9

    def __init__(self, roles: dict[str, tuple[str, ...]], deciding_role: str, bounds: dict[str, Bound],
                 saturated: dict[str, tuple[str, Bound]] | None = None, row_every_s: float = 1.0):
        self.roles = {role: (*stages, OTHER) for role, stages in roles.items()}
        self.deciding_role = deciding_role
        self.bounds = bounds
        self.saturated = saturated or {}
        self._row_every_s = row_every_s
        self._clocks: list[StageClock] = []
        self._sources: list = []
        self._lock = threading.Lock()
        self._last_row: dict[tuple[str, str], float] = {}
        self._next_row = 0.0
        self._steady_from: dict | None = None

    def add_source(self, source) -> None:
        """Clocks kept elsewhere (other processes): `source()` returns [(role, {stage: seconds})], one per thread
        or process, counted with this profile's own."""
        self._sources.append(source)

    def columns(self) -> tuple[str, ...]:
        return tuple(f"time/{role}/{name}" for role, stages in self.roles.items() for name in stages)

    def bind(self, role: str) -> StageClock:
        """A new clock of `role` for the calling thread (its stages from now on, until `unbind`)."""
        clock = StageClock(role)
        with self._lock:
            self._clocks.append(clock)
        _local.clock = clock
        return clock

    @staticmethod
    def unbind() -> None:
        """The calling thread stops its clock and recording (a thread's last call)."""
        clock = current()
        if clock is not None:
            clock.stop()
        _local.clock = None

    def timed(self, role: str, target):
        """`target` (a thread's body) run under a clock of `role`, for `ThreadGroup.spawn`."""
        def body():
            with self.thread(role):
                target()
        return body

    @contextlib.contextmanager
    def thread(self, role: str):
        """The calling thread's clock of `role` for the block (a worker thread's whole body)."""
        clock = self.bind(role)
        try:
            yield clock
        finally:
            self.unbind()

    def seconds(self) -> dict[str, dict[str, float]]:
        """{role: {stage: seconds summed over the role's threads}}, with each role's thread count under
        "threads" and its threads' wall time under "wall"."""
        with self._lock:
            clocks = [(clock.role, clock.seconds()) for clock in self._clocks]
        for source in self._sources:
            clocks += source()
        roles: dict[str, dict[str, float]] = {}
        for role, seconds in clocks:
            entry = roles.setdefault(role, {"threads": 0, "wall": 0.0})
            entry["threads"] += 1
            for name, value in seconds.items():
                entry[name] = entry.get(name, 0.0) + value
                entry["wall"] += value
        return roles

    def shares(self) -> dict[str, float]:
        """progress.csv's columns `time/<role>/<stage>`: each stage's share of its role's time since the previous
        row that had them (the shares of one role add up to 1). At most one row a second has them (an empty dict
        otherwise): shares over a few milliseconds say little, and each is a TensorBoard scalar."""
        now = time.perf_counter()
        if now < self._next_row:
            return {}
        self._next_row = now + self._row_every_s
        row = {}
        for role, entry in self.seconds().items():
            stages = {k: v for k, v in entry.items() if k not in ("threads", "wall")}
            deltas = {k: max(v - self._last_row.get((role, k), 0.0), 0.0) for k, v in stages.items()}
            total = sum(deltas.values())
            for name, value in stages.items():
                self._last_row[(role, name)] = value
            if total > 0:
                row.update({f"time/{role}/{k}": 0.0 for k in self.roles.get(role, ())})
                row.update({f"time/{role}/{k}": v / total for k, v in deltas.items()})
        return row

    def mark_steady(self) -> None:
        """From now on the run is in its steady state (the monitor calls it at the first update): the verdict reads
        the time after this, without start-up and the first compilations, where there is any."""
        if self._steady_from is None:
            self._steady_from = self.seconds()

    def breakdown(self) -> dict:
        """summary.json's "profile": per role its threads, wall seconds and the share of each stage over the whole
        run ("roles") and after the first update ("steady"), and the verdict ("bound") on the steady state (the
        whole run when it has none): the deciding role's largest stage, what it means and what would move it."""
        measured = self.seconds()
        result = {"roles": self._shares_by_role(measured), "steady": None, "bound": None}
        if self._steady_from is not None:
            after = {role: {k: v - self._steady_from.get(role, {}).get(k, 0.0) if k != "threads" else v
                            for k, v in entry.items()} for role, entry in measured.items()}
            steady = self._shares_by_role(after)
            if steady.get(self.deciding_role, {}).get("seconds", 0.0) > 0:
                result["steady"] = steady
        result["bound"] = self._verdict(result["steady"] or result["roles"], steady=result["steady"] is not None)
        return result

    def _shares_by_role(self, measured: dict) -> dict:
        roles = {}
        for role in sorted(measured, key=lambda r: list(self.roles).index(r) if r in self.roles else len(self.roles)):
            entry = measured[role]
            wall = entry["wall"]
            stages = {k: max(v, 0.0) for k, v in entry.items() if k not in ("threads", "wall")}
            roles[role] = {"threads": int(entry["threads"]), "seconds": wall,
                           "shares": {k: v / wall for k, v in sorted(stages.items(), key=lambda kv: -kv[1])}
                           if wall > 0 else {}}
        return roles

    def _verdict(self, roles: dict, *, steady: bool) -> dict | None:
        for role, (name, bound) in self.saturated.items():
            share = roles.get(role, {}).get("shares", {}).get(name, 0.0)
            if share >= self.SATURATED:
                return {"role": role, "stage": name, "share": share, "verdict": bound.verdict,
                        "advice": bound.advice, "steady": steady}
        deciding = roles.get(self.deciding_role, {}).get("shares", {})
        if not deciding:
            return None
        name, share = next(iter(deciding.items()))
        bound = self.bounds.get(name, Bound("overhead-bound", "time outside the measured stages (Python "
                                                              "bookkeeping); a profiler would tell more"))
        return {"role": self.deciding_role, "stage": name, "share": share, "verdict": bound.verdict,
                "advice": bound.advice, "steady": steady}


def bound_text(breakdown: dict | None) -> str | None:
    """The verdict in a few words for tables: "learner-bound (update 71%)"; None without one."""
    bound = (breakdown or {}).get("bound")
    return f"{bound['verdict']} ({bound['stage']} {bound['share']:.0%})" if bound else None


def describe(breakdown: dict) -> list[str]:
    """The end-of-run lines: each role's stages by share, then the verdict."""
    lines = []
    for role, entry in breakdown["roles"].items():
        threads = entry["threads"]
        who = f"{role} ({threads} threads)" if threads > 1 else role
        parts = ", ".join(f"{name} {share:.0%}" for name, share in entry["shares"].items() if share >= 0.005)
        lines.append(f"  time: {who}: {parts}")
    bound = breakdown["bound"]
    if bound is not None:
        threads = breakdown["roles"][bound["role"]]["threads"]
        when = " after the first update" if bound.get("steady") else ""
        lines.append(f"  {bound['verdict']}: {bound['role']} ({threads} thread{'s' if threads > 1 else ''}) spent "
                     f"{bound['share']:.0%} of their time{when} in {bound['stage']}; {bound['advice']}")
    return lines
