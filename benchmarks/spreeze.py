"""Spreeze benchmarks (seed 002): time to solve against its Table 1, and a throughput table in the form of Table 3.

* `--mode=solve`: `python -m launch.spreeze --stop_at_target` per task and seed, each in its own process; reports
  the wall time and env steps of the first test return at or above the task's Table 1 target (the run's clock
  starts when the run directory is set up, so it includes starting the sampler processes and compiling; not
  Python start-up), median over seeds. Spreeze's own figures are in the table for comparison.
* `--mode=throughput`: fixed-time runs (`--seconds`) of configurations in the spirit of Table 3 (automatic choice,
  hand-set batch sizes and sampler counts, shared memory against a queue): sampling frame rate, update frame rate
  (batch x updates/s), update frequency, and the machine's CPU use during the run (GPU use: n/a without a GPU).

    PYTHONPATH=. python -m benchmarks.spreeze --mode=solve --tasks=Pendulum-v1 --seeds=1,2,3
    PYTHONPATH=. python -m benchmarks.spreeze --mode=throughput --env=Pendulum-v1 --seconds=40
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import shlex
import sys
import tempfile

from absl import app, flags

from benchmarks.common import die_with_parent, fmt, machine, median, run_job

_MODE = flags.DEFINE_enum("mode", "solve", ["solve", "throughput"], "Which table to produce.")
_TASKS = flags.DEFINE_list("tasks", ["Pendulum-v1"], "Tasks for --mode=solve (keys of TARGETS).")
_SEEDS = flags.DEFINE_list("seeds", ["1", "2", "3"], "Seeds for --mode=solve.")
_TIME_LIMIT = flags.DEFINE_float("time_limit", 600.0, "Give up a solve run after this many seconds of training.")
_ENV = flags.DEFINE_string("env", "Pendulum-v1", "Task for --mode=throughput.")
_SECONDS = flags.DEFINE_float("seconds", 40.0, "Training seconds per --mode=throughput run.")
_EXTRA = flags.DEFINE_string("extra", "", "Extra launch.spreeze flags for every run, space-separated, e.g. "
                             "'--num_samplers=1 --hidden_sizes=64,64'.")
_OUT_DIR = flags.DEFINE_string("out_dir", "benchmarks/results", "Directory for the Markdown table and CSV.")
_NAME = flags.DEFINE_string("name", "", "Base name of the output files (default spreeze_<mode>_cpu).")
_WORKER = flags.DEFINE_string("worker", "", "Internal: JSON job for one run in this process.")

# Spreeze Table 1: target return and Spreeze's time to reach it (seconds), REFERENCE.md.
TARGETS = {
    "Pendulum-v1": (-200.0, 16.3),
    "HalfCheetah-v4": (800.0, 215.0),
    "Walker2d-v4": (850.0, 221.0),
    "Ant-v4": (850.0, 415.0),
    "Humanoid-v4": (1800.0, 668.0),
}
# Hand-set configurations for the throughput table (Table 3's rows 2-8 in spirit).
THROUGHPUT_CONFIGS = {
    "auto": ["--num_samplers=auto", "--batch_size=auto"],
    "samplers 1, batch 256": ["--num_samplers=1", "--batch_size=256"],
    "samplers 2, batch 256": ["--num_samplers=2", "--batch_size=256"],
    "samplers 1, batch 128": ["--num_samplers=1", "--batch_size=128"],
    "samplers 1, batch 2048": ["--num_samplers=1", "--batch_size=2048"],
    "samplers 1, batch 256, queue": ["--num_samplers=1", "--batch_size=256", "--transfer=queue"],
}


def worker(job: dict) -> None:
    import subprocess

    from systems.spreeze.system import cpu_busy

    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [sys.executable, "-m", "launch.spreeze", *job["args"], f"--logdir={run_dir}", "--quiet"]
        busy0 = cpu_busy()
        subprocess.run(cmd, check=True, preexec_fn=die_with_parent)
        busy1 = cpu_busy()
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
    keys = ("time_to_target", "steps_to_target", "wall_time", "env_steps", "sampling_fps", "update_fps",
            "update_frequency_hz", "batch_size", "num_samplers", "optimizer_steps", "last_eval_return", "transfer")
    result = {k: summary.get(k) for k in keys}
    result["cpu_use"] = (busy1[0] - busy0[0]) / max(busy1[1] - busy0[1], 1)
    print("RESULT " + json.dumps(result), flush=True)


def main(argv):
    del argv
    if _WORKER.value:
        worker(json.loads(_WORKER.value))
        return
    command = "PYTHONPATH=. python -m benchmarks.spreeze " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    name = _NAME.value or f"spreeze_{_MODE.value}_cpu"
    solve = _MODE.value == "solve"
    rows = _solve_runs() if solve else _throughput_runs()
    os.makedirs(_OUT_DIR.value, exist_ok=True)
    fields = sorted({k for row in rows for k in row})
    with open(os.path.join(_OUT_DIR.value, f"{name}.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    lines = _header_lines(name, command) + (_solve_lines(rows) if solve else _throughput_lines(rows))
    with open(os.path.join(_OUT_DIR.value, f"{name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def _solve_runs() -> list[dict]:
    """One `--stop_at_target` run per task and seed, each in its own process."""
    rows = []
    for task in _TASKS.value:
        if task not in TARGETS:
            raise SystemExit(f"error: no Table 1 target for {task}; known: {', '.join(TARGETS)}")
        target, _ = TARGETS[task]
        for seed in _SEEDS.value:
            args = [f"--env={task}", f"--seed={seed}", f"--target_return={target}", "--stop_at_target",
                    "--total_steps=100000000", f"--time_limit={_TIME_LIMIT.value}", *shlex.split(_EXTRA.value)]
            result = run_job("benchmarks.spreeze", {"args": args}, _TIME_LIMIT.value + 300)
            rows.append({"task": task, "seed": seed, "args": " ".join(args), **result})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _throughput_runs() -> list[dict]:
    """One fixed-time run per THROUGHPUT_CONFIGS entry, each in its own process."""
    rows = []
    for label, config_args in THROUGHPUT_CONFIGS.items():
        args = [f"--env={_ENV.value}", "--total_steps=100000000", f"--time_limit={_SECONDS.value}",
                "--eval_episodes=0", *config_args, *shlex.split(_EXTRA.value)]
        result = run_job("benchmarks.spreeze", {"args": args}, _SECONDS.value + 600)
        rows.append({"config": label, "args": " ".join(args), **result})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _header_lines(name: str, command: str) -> list[str]:
    return [
        f"# Spreeze: {'time to solve (Table 1)' if _MODE.value == 'solve' else 'throughput (Table 3 form)'} ({name})",
        "",
        f"- Machine: {machine()}",
        f"- Date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Command: `{command}`",
        f"- Flags of every run besides the mode's own: `{_EXTRA.value or '(launch.spreeze defaults)'}`",
    ]


def _solve_lines(rows: list[dict]) -> list[str]:
    """The per-run table and the per-task summary against Spreeze's Table 1."""
    lines = [
        "- Time to solve: training wall time (from the run's start: spawning samplers and compiling included, "
        "Python start-up not) of the first test return (5-10 greedy episodes) at or above the Table 1 target.",
        "",
        "| task | target | seed | time to target (s) | env steps | samplers | batch | background cores |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        target, _ = TARGETS[row["task"]]
        if row.get("error"):
            lines.append(f"| {row['task']} | {target:g} | {row['seed']} | {row['error']} |  |  |  |  |")
            continue
        lines.append(
            f"| {row['task']} | {target:g} | {row['seed']} | {fmt(row['time_to_target'], 1)} | "
            f"{fmt(row['steps_to_target'])} | {row['num_samplers']} | {row['batch_size']} | "
            f"{fmt(row.get('background_cores'), 2)} |"
        )
    lines += ["", "| task | median time to target (s) | solved runs | Spreeze (Table 1, s) | "
              "ratio (Spreeze / ours) |", "| --- | ---: | ---: | ---: | ---: |"]
    for task in _TASKS.value:
        times = [r.get("time_to_target") for r in rows if r["task"] == task]
        solved = [t for t in times if t is not None]
        theirs = TARGETS[task][1]
        ours = median(solved) if len(solved) == len(times) else None
        lines.append(f"| {task} | {fmt(ours, 1)} | {len(solved)} of {len(times)} | {theirs:g} | "
                     f"{fmt(theirs / ours if ours else None, 2)} |")
    return lines


def _throughput_lines(rows: list[dict]) -> list[str]:
    """The per-configuration throughput table (Table 3 form)."""
    lines = [
        f"- Task {_ENV.value}; each configuration trains for {_SECONDS.value:g} s (`--time_limit`), no test "
        "process. Sampling frame rate = env steps / s; update frame rate = batch x updates / s; CPU use = the "
        "machine's busy fraction during the whole run (2 cores); GPU use n/a (no GPU).",
        "",
        "| configuration | samplers | batch | sampling fps | update fps | update Hz | CPU use |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        if row.get("error"):
            lines.append(f"| {row['config']} | {row['error']} |  |  |  |  |  |")
            continue
        lines.append(
            f"| {row['config']} | {row['num_samplers']} | {row['batch_size']} | {fmt(row['sampling_fps'])} | "
            f"{fmt(row['update_fps'])} | {fmt(row['update_frequency_hz'], 1)} | {fmt(100 * row['cpu_use'])}% |"
        )
    return lines


if __name__ == "__main__":
    app.run(main)
