"""Helpers shared by the benchmark scripts (`throughput.py`, `scaleout.py`): one measurement per subprocess with a
hard timeout, the CPU time other processes took meanwhile (from /proc), the machine line of a table header, and
small formatting helpers, the median time of a jitted JAX program (`timed`), and the steady env steps per second of
a run from its per-update points (the main job's `progress.csv`, CleanRL's printed `SPS:` lines).

A benchmark module runs itself as the worker: `python -m <module> --worker=<JSON job>` prints one line
`RESULT <JSON>`, which `run_job` reads back."""

from __future__ import annotations

import csv
import ctypes
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

from systems.common import hardware


def timed(fn, *args, repeats: int) -> float:
    """Median seconds of `repeats` calls of the jitted `fn` after two warm-up calls (compilation excluded)."""
    import jax  # only the benchmarks that time JAX programs pay for it

    for _ in range(2):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(statistics.median(times))


_PR_SET_PDEATHSIG = 1
try:  # looked up here, not in the forked child, where another thread may hold a lock
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def die_with_parent() -> None:
    """`preexec_fn` of a benchmark's child run: the kernel sends it SIGTERM when the benchmark process ends, killed
    included, so no run outlives its benchmark to load the machine beside the next (Linux's PR_SET_PDEATHSIG;
    nothing elsewhere). Our launchers answer SIGTERM by saving and exiting."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def run_job(module: str, job: dict, timeout_s: float, env: dict | None = None, cwd: str | None = None) -> dict:
    """Runs `python -m module --worker=<job>` in a fresh process (environment `env`, default this one's; in `cwd`,
    whose code `-m` imports first); returns its result dict plus wall_s, started and background_cores, with 'error'
    on failure or timeout."""
    cmd = [sys.executable, "-m", module, f"--worker={json.dumps(job)}"]
    env = dict(env if env is not None else os.environ, PYTHONWARNINGS="ignore")
    started = time.strftime("%H:%M:%S")
    cpu_before = cpu_ticks_by_pid()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            preexec_fn=die_with_parent)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        stdout, stderr = None, None
    wall = time.perf_counter() - t0
    background = background_cores(cpu_before, cpu_ticks_by_pid(), wall, exclude={os.getpid(), proc.pid})
    meta = {"wall_s": wall, "started": started, "background_cores": background}
    if stdout is None:
        return {"sps": None, "error": f"timeout after {timeout_s:.0f} s", **meta}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return {**json.loads(line[len("RESULT "):]), **meta}
    tail = (stderr or stdout).strip().splitlines()[-3:]
    return {"sps": None, "error": f"exit {proc.returncode}: {' | '.join(tail)}", **meta}


def _stat_fields(pid: int | str) -> list[str]:
    """/proc/<pid>/stat after the command name: fields[11:15] are utime, stime, cutime, cstime (clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_ticks_by_pid() -> dict[int, int]:
    """utime + stime clock ticks of every process (Linux /proc); {} elsewhere."""
    ticks = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit():
            continue
        try:
            fields = _stat_fields(name)
            ticks[int(name)] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return ticks


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process and its finished children (Linux /proc); 0 once it is gone."""
    try:
        fields = _stat_fields(pid)
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def background_cores(before: dict, after: dict, wall: float, exclude: set) -> float | None:
    """CPU cores used on average by processes other than this driver and the worker during a run: other people's
    jobs on the machine steal cycles from the measurement (a 2-core machine is saturated by one run)."""
    if not after or wall <= 0:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    used = sum(t - before.get(pid, 0) for pid, t in after.items() if pid not in exclude)
    return max(used, 0) / hz / wall


SKIP_UPDATES = 3  # the first updates include compilation and warm-up


def steady_sps(points: list[tuple[float, int]]) -> float | None:
    """(wall time, env steps) of each update -> env steps per second from the (SKIP_UPDATES + 1)-th to the last."""
    points = points[SKIP_UPDATES:]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def htsrl_points(run_dir: str) -> list[tuple[float, int]]:
    with open(os.path.join(run_dir, "progress.csv")) as f:
        return [(float(r["wall_time"]), int(r["env_steps"])) for r in csv.DictReader(f)]


def cleanrl_points(stdout: str, steps_per_update: int = 1024) -> list[tuple[float, int]]:
    """CleanRL prints `SPS: int(global_step / elapsed)` after every update: elapsed = global_step / SPS."""
    rates = [int(m) for m in re.findall(r"^SPS: (\d+)$", stdout, flags=re.MULTILINE)]
    return [((i + 1) * steps_per_update / rate, (i + 1) * steps_per_update) for i, rate in enumerate(rates) if rate]


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, digits=0):
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def machine() -> str:
    return f"{hardware.cpu_model()}, {os.cpu_count()} cores"


def git_commit(cwd: str | None = None) -> str:
    """Short HEAD commit of the tree at `cwd` (default: the current directory's), with '+ uncommitted changes' when
    tracked files differ from it (read-only git calls); the benchmarks' own result files (`benchmarks/results/`,
    written by the runs themselves) do not count."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=cwd)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)benchmarks/results"], capture_output=True, text=True, check=True, cwd=cwd)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")
