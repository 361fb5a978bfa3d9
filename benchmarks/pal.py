"""End-to-end PAL benchmark (seed 003, section V; the paper's task): DQN with prioritized replay on LunarLander-v2,
wall time until the evaluation return reaches 200.

Each configuration runs `python -m launch.pal` in its own process (with `--target_return=200`) and reports, from the
run's `evaluations.csv` and `summary.json`: the wall time and env steps of the first evaluation whose mean return
(10 episodes, greedy policy) is >= 200, the required-time metric of seed 000 (running mean of the last ten
evaluations >= 200), the final metric, env steps per second and optimizer steps per second. The background CPU
load during each run is recorded (other processes on the shared 2-core machine slow it down).

    PYTHONPATH=. python -m benchmarks.pal [--configs=per,uniform] [--repeats=1]
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

_CONFIGS = flags.DEFINE_list("configs", ["per"], "Configurations to run (names in CONFIGS).")
_REPEATS = flags.DEFINE_integer("repeats", 1, "Runs per configuration (different seeds: 1, 2, ...).")
_OUT_DIR = flags.DEFINE_string("out_dir", "benchmarks/results", "Directory for the Markdown table and CSV.")
_NAME = flags.DEFINE_string("name", "pal_cpu", "Base name of the output files.")
_TIMEOUT = flags.DEFINE_float("timeout", 3600.0, "Hard timeout per run (s).")
_WORKER = flags.DEFINE_string("worker", "", "Internal: JSON job for one run in this process.")

TARGET = 200.0
# SB3 rl-zoo's LunarLander DQN settings (lr 6.3e-4, batch 128, buffer 50k, target every 250 updates, one gradient
# step per env step, epsilon to 0.1 over 12% of the run, 256x256 MLP), in PAL with 1 actor x 4 envs, 1 learner.
_BASE = [
    "--env=LunarLander-v2", "--algo=dqn", "--total_steps=200000", "--learning_rate=6.3e-4", "--batch_size=128",
    "--buffer_size=50000", "--learning_starts=1000", "--update_interval=1", "--target_update_period=250",
    "--exploration_fraction=0.12", "--epsilon_end=0.1", "--hidden_sizes=256,256", "--num_actors=1",
    "--envs_per_actor=4", "--num_learners=1", "--eval_every=5000", "--eval_episodes=10", f"--target_return={TARGET}",
    "--checkpoint_every=0", "--quiet",
]
CONFIGS = {
    "per": _BASE + ["--replay=per"],
    "uniform": _BASE + ["--replay=uniform"],
}


def worker(job: dict) -> None:
    import subprocess

    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [sys.executable, "-m", "launch.pal", *job["args"], f"--seed={job['seed']}", f"--logdir={run_dir}"]
        subprocess.run(cmd, check=True, preexec_fn=die_with_parent)
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        with open(os.path.join(run_dir, "evaluations.csv")) as f:
            evaluations = list(csv.DictReader(f))
    first = next((e for e in evaluations if float(e["mean_return"]) >= TARGET), None)
    result = {
        "first_reached_s": float(first["wall_time"]) if first else None,
        "first_reached_steps": int(first["env_steps"]) if first else None,
        "required_time_s": summary["required_time"],
        "final_metric": summary["final_metric"],
        "best_eval": max(float(e["mean_return"]) for e in evaluations),
        "env_steps": summary["env_steps"],
        "wall_s_run": summary["wall_time"],
        "sps": summary["sps"],
        "optimizer_steps_per_second": summary["optimizer_steps_per_second"],
    }
    print("RESULT " + json.dumps(result), flush=True)


def main(argv):
    del argv
    if _WORKER.value:
        worker(json.loads(_WORKER.value))
        return
    command = "PYTHONPATH=. python -m benchmarks.pal " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    rows = []
    for name in _CONFIGS.value:
        if name not in CONFIGS:
            raise SystemExit(f"error: unknown config {name!r}; known: {', '.join(CONFIGS)}")
        for seed in range(1, _REPEATS.value + 1):
            result = run_job("benchmarks.pal", {"args": CONFIGS[name], "seed": seed}, _TIMEOUT.value)
            row = {"config": name, "seed": seed, **result}
            print(json.dumps(row), flush=True)
            rows.append(row)
    os.makedirs(_OUT_DIR.value, exist_ok=True)
    fields = sorted({k for row in rows for k in row})
    with open(os.path.join(_OUT_DIR.value, f"{_NAME.value}.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        f"# PAL end to end: DQN on LunarLander-v2, time to a return of {TARGET:.0f} ({_NAME.value})",
        "",
        f"- Machine: {machine()}",
        f"- Date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Command: `{command}`",
        f"- Settings: `python -m launch.pal {' '.join(_BASE)}` plus `--replay` and `--seed`.",
        "- first >= 200: the first evaluation (10 greedy episodes) with mean return >= 200; required time: seed 000's "
        "metric (running mean of the last ten evaluations >= 200). Background: other processes' CPU use, in cores.",
        "",
        "| config | seed | first >= 200 (s) | at env steps | required time (s) | best eval | final metric | SPS | "
        "optimizer steps/s | run wall (s) | background cores |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        if row.get("error"):
            lines.append(f"| {row['config']} | {row['seed']} | {row['error']} |  |  |  |  |  |  |  |  |")
            continue
        lines.append(
            f"| {row['config']} | {row['seed']} | {fmt(row['first_reached_s'], 1)} | {fmt(row['first_reached_steps'])} "
            f"| {fmt(row['required_time_s'], 1)} | {fmt(row['best_eval'], 1)} | {fmt(row['final_metric'], 1)} | "
            f"{fmt(row['sps'])} | {fmt(row['optimizer_steps_per_second'])} | {fmt(row['wall_s_run'], 1)} | "
            f"{fmt(row.get('background_cores'), 2)} |"
        )
    for name in _CONFIGS.value:
        times = [r.get("first_reached_s") for r in rows if r["config"] == name]
        if len(times) > 1:
            reached = [t for t in times if t is not None]
            lines += ["", f"{name}: median first >= 200 over {len(times)} runs: {fmt(median(reached), 1)} s "
                      f"({len(reached)} of {len(times)} reached it)."]
    with open(os.path.join(_OUT_DIR.value, f"{_NAME.value}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    app.run(main)
