"""What the per-stage profile (`systems.common.profile`) costs a run.

Measures (1) the cost of one stage (`with stage(name):` on a thread with a clock: two `time.perf_counter()` calls,
a thread-local lookup and a dict update), as the median of `--repeats` timings of `--calls` empty stages, and
(2) how many stages real runs enter per second (`launch.hts` and `launch.sync` on CartPole-v1 and one HTS run on
Breakout, each for `--steps` env steps, counted by wrapping `StageClock.enter`). Their product over the run's wall
time is the share of the run the profile takes. Writes `results/profile_cpu.md`.

    PYTHONPATH=. python -m benchmarks.profile_overhead
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import tempfile
import time

from systems.common import hardware
from systems.common import profile as profile_lib

RESULTS = os.path.join(os.path.dirname(__file__), "results", "profile_cpu.md")


def stage_cost_ns(calls: int, repeats: int) -> float:
    profile = profile_lib.Profile({"t": ("x",)}, "t", {})
    profile.bind("t")
    try:
        timings = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                with profile_lib.stage("x"):
                    pass
            timings.append((time.perf_counter() - start) / calls * 1e9)
    finally:
        profile.unbind()
    return statistics.median(timings)


def stages_per_second(launcher: str, flags: dict) -> tuple[float, float, int]:
    """(wall seconds, stages entered per second, env steps) of one run of `launcher` in this process."""
    import importlib
    import json

    from launch import cli

    counter = [0]
    enter = profile_lib.StageClock.enter

    def counting_enter(self, name):
        counter[0] += 1
        enter(self, name)

    module = importlib.import_module(f"launch.{launcher}")
    with tempfile.TemporaryDirectory() as logdir:
        run_dir = os.path.join(logdir, "run")
        argv = [launcher, f"--logdir={run_dir}", "--quiet", *(f"--{k}={v}" for k, v in flags.items())]
        module.FLAGS.unparse_flags()
        cli.launcher_parser(launcher, module.FLAGS, module.__doc__)(argv)
        profile_lib.StageClock.enter = counting_enter
        try:
            module.main([])
        finally:
            profile_lib.StageClock.enter = enter
            module.FLAGS.unparse_flags()
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
    return summary["wall_time"], counter[0] / summary["wall_time"], summary["env_steps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    cost = stage_cost_ns(args.calls, args.repeats)
    print(f"one stage: {cost:.0f} ns (median of {args.repeats} x {args.calls:,})", flush=True)
    runs = [
        ("hts", "CartPole-v1", dict(env="CartPole-v1", total_steps=args.steps, eval_episodes=0)),
        ("sync", "CartPole-v1", dict(env="CartPole-v1", total_steps=args.steps, eval_episodes=0)),
        ("hts", "Breakout (Atari)", dict(game="Breakout", total_steps=max(args.steps // 20, 2048), eval_episodes=0)),
    ]
    rows = []
    for launcher, task, flags in runs:
        wall, rate, steps = stages_per_second(launcher, flags)
        share = rate * cost * 1e-9
        print(f"{launcher} {task}: {rate:,.0f} stages/s over {wall:.1f} s -> {share:.3%} of the run", flush=True)
        rows.append(f"| `launch.{launcher}` {task} | {steps:,} | {wall:.1f} | {rate:,.0f} | {share:.3%} |")
    card = hardware.card()
    lines = [
        "# What the per-stage profile costs a run",
        "",
        f"Machine: {hardware.describe(card)}. Date: {datetime.date.today()}. Command: "
        "`PYTHONPATH=. python -m benchmarks.profile_overhead` (module docstring: the method).",
        "",
        f"One stage (`with stage(name):`, empty body, on a thread with a clock): **{cost:.0f} ns** (median of "
        f"{args.repeats} x {args.calls:,}).",
        "",
        "| run | env steps | wall (s) | stages entered per second | share of the run's time |",
        "| --- | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        "The share is stages per second x the cost of one stage; the stages run on the threads they time, so this is",
        "also the most a run can slow down by them. Other work may have shared the cores (load "
        f"{os.getloadavg()[0]:.2f} at the end).",
    ]
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
