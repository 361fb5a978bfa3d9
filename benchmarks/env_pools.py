"""HTS end to end with one shared EnvPool against a pool per actor thread (`--env_pools`), alternated.

`benchmarks/host_path.py` measures the actors' host path without a policy or a learner; this runs the launcher a
user runs, `python -m launch.hts <--args> --env_pools=<layout>`, for `--seconds` of wall time (`--time_limit`,
evaluation off), the layouts alternated `--repeats` times so that the host's drift falls on both. Per run: steady
SPS (env steps over wall time from the 4th update to the last, `progress.csv`: start-up and compilation out), the
CPU time of the launcher's process per env step over the whole run (start-up included, the same for both), and the
cores other processes used meanwhile. Writes `results/env_pools_<tag>.md` (medians, and the ratio per actor /
shared of the median SPS) and, with `--out`, the runs as JSON lines:

    PYTHONPATH=. python -m benchmarks.env_pools --args="--env=CartPole-v1 --num_envs=64 --num_actors=2" --tag=cpu
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time

from benchmarks import common

RESULTS = os.path.join(os.path.dirname(__file__), "results")
LAYOUTS = ("shared", "per_actor")


def run_once(args: list[str], pools: str, seconds: float, run_dir: str) -> dict:
    """One launcher run of `seconds` under `--env_pools=pools`: steady SPS, CPU per env step, background cores."""
    command = [sys.executable, "-m", "launch.hts", *args, f"--env_pools={pools}", f"--time_limit={seconds:g}",
               "--eval_episodes=0", "--quiet", f"--logdir={run_dir}"]
    ticks, usage, started = common.cpu_ticks_by_pid(), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 600)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise SystemExit(f"error: launch.hts --env_pools={pools} exited {done.returncode}: {tail}")
    with open(os.path.join(run_dir, "summary.json")) as f:
        steps = json.load(f)["env_steps"]
    cpu_s = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    return dict(pools=pools, sps=common.steady_sps(common.htsrl_points(run_dir)), env_steps=steps,
                cpu_us_per_step=1e6 * cpu_s / max(steps, 1), wall_s=wall,
                background_cores=common.background_cores(ticks, common.cpu_ticks_by_pid(), wall, {os.getpid()}))


def table(runs: list[dict]) -> list[str]:
    """One row per layout: medians over its runs, and per actor / shared of the median steady SPS."""
    medians = {pools: {key: common.median([r[key] for r in runs if r["pools"] == pools])
                       for key in ("sps", "cpu_us_per_step", "background_cores")} for pools in LAYOUTS}
    lines = ["| --env_pools | runs | steady SPS (median) | range | of shared | CPU per env step, whole run | "
             "other processes' cores |", "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    for pools in LAYOUTS:
        mine = [r["sps"] for r in runs if r["pools"] == pools and r["sps"]]
        if not mine:
            continue
        ratio = (medians[pools]["sps"] / medians["shared"]["sps"]) if medians["shared"]["sps"] else None
        lines.append(f"| {pools} | {len(mine)} | {common.fmt(medians[pools]['sps'])} | "
                     f"{common.fmt(min(mine))}-{common.fmt(max(mine))} | {common.fmt(ratio, 2)} | "
                     f"{common.fmt(medians[pools]['cpu_us_per_step'], 1)} us | "
                     f"{common.fmt(medians[pools]['background_cores'], 2)} |")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--args", default="--env=CartPole-v1 --num_envs=64 --num_actors=2",
                        help="the launch.hts flags both layouts share")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--tag", default="", help="write results/env_pools_<tag>.md")
    parser.add_argument("--out", default="", help="also write the runs as JSON lines here")
    args = parser.parse_args(argv)
    shared_flags = shlex.split(args.args)
    if any(flag.startswith(("--env_pools", "--time_limit", "--logdir")) for flag in shared_flags):
        raise SystemExit("error: --args sets --env_pools, --time_limit or --logdir, which this benchmark sets")
    if args.seconds <= 0 or args.repeats < 1:
        raise SystemExit("error: --seconds must be positive and --repeats at least 1")
    runs = []
    with tempfile.TemporaryDirectory(prefix="env-pools-") as root:
        for repeat in range(args.repeats):
            for pools in LAYOUTS:
                run = dict(run_once(shared_flags, pools, args.seconds, os.path.join(root, f"{pools}-{repeat}")),
                           repeat=repeat)
                runs.append(run)
                print(json.dumps(run), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(run) + "\n" for run in runs)
    lines = table(runs)
    print("\n".join(lines))
    if args.tag:
        given = argv if argv is not None else sys.argv[1:]
        command = "PYTHONPATH=. python -m benchmarks.env_pools " + shlex.join(given)
        header = [
            "# HTS end to end: one shared EnvPool against a pool per actor thread",
            "",
            f"Machine: {common.machine()}. Date: {datetime.date.today()}. Commit: {common.git_commit()}. Command: "
            f"`{command}` (the module docstring says what each column is): `launch.hts {args.args}`, "
            f"{args.seconds:g} s a run, the two layouts alternated {args.repeats} times.",
            "",
        ]
        path = os.path.join(RESULTS, f"env_pools_{args.tag}.md")
        with open(path, "w") as f:
            f.write("\n".join(header + lines) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
