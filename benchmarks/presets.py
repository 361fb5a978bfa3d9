"""Every launcher's preset at its real size: time to the first update, compile time and peak memory.

For each (launcher, task family, algorithm) it runs what a user runs, `python -m launch.<launcher> --env=<task>`,
with the preset untouched except the run length (one round for the on-policy systems; `learning_starts` + 1,000 env
steps for PAL and Spreeze, so the first updates happen) and evaluation off, in a fresh process, and records:

| column | meaning |
| --- | --- |
| first update s | seconds from process start until `progress.csv` holds its first row (the first update logged) |
| exit s | seconds until the process exits (the final checkpoint included) |
| compile s | seconds JAX spent tracing, lowering and compiling in the launcher's process (`jax.monitoring`) |
| peak PSS GB | largest proportional set size of the launcher's process tree over 0.2 s samples (with children |
| | such as Spreeze's samplers; shared pages counted once) |

Bounds: first update under 60 s and peak memory under 4 GB on the 2-core machine. The table marks
rows that miss either.

    PYTHONPATH=. python -m benchmarks.presets                 # every preset; rows already measured are kept
    PYTHONPATH=. python -m benchmarks.presets --only=hts,sync --redo
    PYTHONPATH=. python -m benchmarks.presets --misses              # only the rows that missed a bound

Resumable: each finished row is appended to `results/presets_cpu.csv` at once; a rerun skips rows already there
(`--redo` measures them again) and rewrites `results/presets_cpu.md` from the CSV.

Child mode (used by the driver): `python -m benchmarks.presets --child LAUNCHER COMPILE_JSON -- LAUNCHER_ARGS...`.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from benchmarks.common import die_with_parent

RESULTS = os.path.join(os.path.dirname(__file__), "results")
CSV_PATH = os.path.join(RESULTS, "presets_cpu.csv")
MD_PATH = os.path.join(RESULTS, "presets_cpu.md")
FIRST_UPDATE_BOUND_S = 60.0
PEAK_BOUND_GB = 4.0
FIELDS = ("launcher", "family", "algo", "env", "first_update_s", "exit_s", "compile_s", "peak_pss_gb", "status",
          "note", "date", "commit")

# One task per family (discrete and continuous where the family has both).
_TASKS = {
    ("atari", "discrete"): "Breakout-v5",
    ("gfootball", "discrete"): "gfootball/academy_empty_goal_close-v1",
    ("classic", "discrete"): "CartPole-v1",
    ("classic", "continuous"): "Pendulum-v1",
    ("box2d", "discrete"): "LunarLander-v2",
    ("box2d", "continuous"): "LunarLanderContinuous-v2",
    ("mujoco", "continuous"): "Hopper-v4",
}
_ON_POLICY_FAMILIES = (("atari", "discrete"), ("gfootball", "discrete"), ("classic", "discrete"),
                       ("box2d", "discrete"), ("mujoco", "continuous"))


@dataclasses.dataclass(frozen=True)
class Preset:
    launcher: str
    family: str
    algo: str
    env: str
    run_length: tuple[str, ...]  # the flags that shorten the run to its first update(s)
    note: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.launcher, self.family, self.algo)


def all_presets() -> list[Preset]:
    """Every (launcher, family, algorithm) combination the launchers have a preset for."""
    from systems.offpolicy.presets import PAL_PRESETS, SPREEZE_PRESETS

    one_round = ("--total_steps=1", "--eval_episodes=0")
    presets = []
    for launcher, algos in (("hts", ("ppo", "a2c")), ("sync", ("ppo", "a2c")), ("ba3c", ("a2c",)),
                            ("gala", ("a2c",))):
        for family, kind in _ON_POLICY_FAMILIES:
            for algo in algos:
                presets.append(Preset(launcher, family, algo, _TASKS[(family, kind)], one_round))
    for family, kinds in PAL_PRESETS.items():
        for kind, values in kinds.items():
            algos = ("dqn", "ddqn") if kind == "discrete" else ("ddpg", "td3", "sac")
            for algo in algos:
                presets.append(_off_policy("pal", family, algo, _TASKS[(family, kind)], values["learning_starts"]))
    for family, values in SPREEZE_PRESETS.items():
        for algo in ("sac", "td3", "ddpg"):
            presets.append(_off_policy("spreeze", family, algo, _TASKS[(family, "continuous")],
                                       values["learning_starts"]))
    return presets


# Off-policy presets collect `learning_starts` env steps before their first update; above this many, the benchmark
# shortens the warm-up (noted in the table) so the row measures building and running the update at the preset's
# sizes (network, batch, replay capacity), not env stepping: PAL's Atari preset waits for 80,000 steps.
MAX_WARMUP_STEPS = 5_000


def _off_policy(launcher: str, family: str, algo: str, env: str, learning_starts: int) -> Preset:
    starts = min(learning_starts, MAX_WARMUP_STEPS)
    run_length = (f"--total_steps={starts + 1_000}", "--eval_episodes=0")
    note = ""
    if starts < learning_starts:
        run_length += (f"--learning_starts={starts}",)
        note = f"learning_starts {learning_starts:,} shortened to {starts:,}"
    return Preset(launcher, family, algo, env, run_length, note)


# ------------------------------------------------------------------------------------------------ measurement


def _children(pid: int) -> list[int]:
    """pid and all its descendants (Linux /proc)."""
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parents[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in tree:
                tree.add(child)
                frontier.append(child)
    return sorted(tree)


def _pss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            continue
    return total


def _first_row_written(progress: str) -> bool:
    try:
        with open(progress) as f:
            return sum(1 for _ in f) >= 2
    except OSError:
        return False


def measure(preset: Preset, timeout_s: float) -> dict:
    """Runs one preset in a child process group; returns the row (status ok / bounds missed / error)."""
    with tempfile.TemporaryDirectory(prefix="preset-") as tmp:
        logdir = os.path.join(tmp, "run")
        compile_out = os.path.join(tmp, "compile.json")
        cmd = [sys.executable, "-m", "benchmarks.presets", "--child", preset.launcher, compile_out, "--",
               f"--env={preset.env}", f"--algo={preset.algo}", f"--logdir={logdir}", "--quiet", *preset.run_length]
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True, preexec_fn=die_with_parent)
        peak, first_update, timed_out = 0, None, False
        while proc.poll() is None:
            elapsed = time.perf_counter() - t0
            if elapsed > timeout_s:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                break
            peak = max(peak, _pss_bytes(_children(proc.pid)))
            if first_update is None and _first_row_written(os.path.join(logdir, "progress.csv")):
                first_update = elapsed
            time.sleep(0.2)
        _, stderr = proc.communicate()
        exit_s = time.perf_counter() - t0
        if first_update is None and _first_row_written(os.path.join(logdir, "progress.csv")):
            first_update = exit_s
        compile_s = None
        if os.path.exists(compile_out):
            with open(compile_out) as f:
                compile_s = json.load(f)["compile_s"]
    row = dict(launcher=preset.launcher, family=preset.family, algo=preset.algo, env=preset.env,
               first_update_s=first_update, exit_s=exit_s, compile_s=compile_s, peak_pss_gb=peak / 1e9,
               note=preset.note)
    if timed_out:
        row.update(status="error", note=f"killed after {timeout_s:.0f} s")
    elif proc.returncode != 0 or first_update is None:
        tail = " | ".join((stderr or "").strip().splitlines()[-2:])
        row.update(status="error", note=f"exit {proc.returncode}: {tail}"[:300])
    elif first_update > FIRST_UPDATE_BOUND_S or row["peak_pss_gb"] > PEAK_BOUND_GB:
        row["status"] = "over bound"
    else:
        row["status"] = "ok"
    return row


def child_main(argv: list[str]) -> None:
    """Runs one launcher in this process, summing JAX's compile-phase durations into a JSON file at exit."""
    import atexit
    import importlib

    import jax
    from absl import app

    from launch import cli

    launcher, out = argv[0], argv[1]
    launcher_args = argv[3:] if argv[2] == "--" else argv[2:]
    total = [0.0]

    def listener(name: str, seconds: float, **_):
        if name.startswith("/jax/core/compile/"):
            total[0] += seconds

    jax.monitoring.register_event_duration_secs_listener(listener)

    def write():
        with open(out, "w") as f:
            json.dump({"compile_s": total[0]}, f)

    atexit.register(write)
    module = importlib.import_module(f"launch.{launcher}")
    app.run(module.main, argv=[f"launch.{launcher}", *launcher_args],
            flags_parser=cli.launcher_parser(launcher, module.FLAGS, module.__doc__))


# ------------------------------------------------------------------------------------------------ results


def read_rows(path: str = CSV_PATH) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def append_row(row: dict, path: str = CSV_PATH) -> None:
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow({k: (f"{v:.2f}" if isinstance(v, float) else v) for k, v in row.items()})


def _cell(value: str, digits: int = 1) -> str:
    try:
        return f"{float(value):.{digits}f}"
    except (TypeError, ValueError):
        return "n/a"


def write_markdown(rows: list[dict], path: str = MD_PATH) -> None:
    from benchmarks.common import machine

    dates = sorted({r["date"] for r in rows})
    commits = sorted({r["commit"] for r in rows})
    over = [r for r in rows if r["status"] != "ok"]
    lines = [
        "# Presets at their real size: first update, compile time, peak memory",
        "",
        f"Machine: {machine()}, JAX on the CPU. Dates: {', '.join(dates)}. Commits: {', '.join(commits)}.",
        "",
        "Command: `PYTHONPATH=. python -m benchmarks.presets` (module docstring: what each column measures). Each row",
        "is `python -m launch.<launcher> --env=<env> --algo=<algo>` with the preset untouched but its run length",
        "(one round on-policy; learning_starts + 1,000 steps off-policy, the warm-up capped at",
        f"{MAX_WARMUP_STEPS:,} steps) and evaluation off.",
        f"Bounds: first update < {FIRST_UPDATE_BOUND_S:.0f} s, peak < {PEAK_BOUND_GB:.0f} GB.",
        "",
        f"**{len(rows) - len(over)} of {len(rows)} presets within both bounds.**",
        "",
        "| launcher | family | algo | env | first update s | exit s | compile s | peak PSS GB | status |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        status = r["status"] + (f" ({r['note']})" if r["note"] else "")
        lines.append(
            f"| {r['launcher']} | {r['family']} | {r['algo']} | `{r['env']}` | {_cell(r['first_update_s'])} | "
            f"{_cell(r['exit_s'])} | {_cell(r['compile_s'])} | {_cell(r['peak_pss_gb'], 2)} | {status} |"
        )
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def driver_main(argv: list[str]) -> None:
    import argparse

    from benchmarks.common import git_commit

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated launchers (default: all)")
    parser.add_argument("--redo", action="store_true", help="measure rows already in the CSV again")
    parser.add_argument("--misses", action="store_true", help="measure again only the rows that missed a bound")
    parser.add_argument("--timeout_s", type=float, default=600.0, help="kill a preset after this many seconds")
    args = parser.parse_args(argv)
    os.makedirs(RESULTS, exist_ok=True)
    wanted = set(filter(None, args.only.split(",")))
    done = {(r["launcher"], r["family"], r["algo"]): r for r in read_rows()}
    presets = [p for p in all_presets() if not wanted or p.launcher in wanted]
    if args.misses:
        presets = [p for p in presets if p.key in done and done[p.key]["status"] != "ok"]
    for i, preset in enumerate(presets):
        if preset.key in done and not (args.redo or args.misses):
            continue
        row = measure(preset, args.timeout_s)
        row.update(date=time.strftime("%Y-%m-%d"), commit=git_commit())
        done[preset.key] = row
        rows = [r for r in read_rows() if (r["launcher"], r["family"], r["algo"]) != preset.key]
        if len(rows) != len(read_rows()):
            with open(CSV_PATH, "w", newline="") as f:  # drop the old row of a remeasured preset
                writer = csv.DictWriter(f, fieldnames=FIELDS)
                writer.writeheader()
                writer.writerows(rows)
        append_row(row)
        print(f"[{i + 1}/{len(presets)}] {preset.launcher:8s} {preset.family:10s} {preset.algo:5s} "
              f"first update {_cell(row['first_update_s'])} s  exit {row['exit_s']:.1f} s  compile "
              f"{_cell(row['compile_s'])} s  peak {row['peak_pss_gb']:.2f} GB  {row['status']} {row['note']}",
              flush=True)
    order = {p.key: i for i, p in enumerate(all_presets())}
    write_markdown(sorted(read_rows(), key=lambda r: order.get((r["launcher"], r["family"], r["algo"]), 1e9)))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
    else:
        driver_main(sys.argv[1:])
