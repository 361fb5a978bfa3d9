"""Pixel tasks end to end on the CPU: steady SPS of the main job against CleanRL's PyTorch PPO, side by
side in one run, and GFootball's time to a score of 0.8 before and after the CPU convolution plan.

    PYTHONPATH=. python -m benchmarks.cpu_e2e --parts=breakout,gfootball [--before=/tmp/before]
        [--cleanrl_python=/tmp/cleanrl-venv/bin/python --cleanrl_script=/tmp/cleanrl-peer/ppo_atari_envpool.py]
        [--programs=htsrl,cleanrl] [--out=benchmarks/results/cpu_e2e_<machine>]

Parts (every run is its own process, one at a time; a finished run's result is kept in
`results/cpu_e2e/<run>.json` and not measured again, so an interrupted benchmark resumes where it stopped):

* `breakout`: `python -m launch.hts --game=Breakout` with its defaults (HTS-PPO, 8 envs, alpha 128, 4 epochs x 4
  minibatches of 256, 1 actor thread) against CleanRL's `ppo_atari_envpool.py` (its own file, unchanged, from
  CleanRL's repository; PyTorch on the CPU, `--cuda=False`) on Breakout-v5 with its defaults, which are the same
  sizes (8 envs, 128 steps, 4 epochs, 4 minibatches), alternating, `--seconds` of wall time each, `--repeats` times;
  with `--before`, also the same command in a checkout of an earlier commit. `htsrl-hugetlb` and `cleanrl-hugetlb`
  run the same two commands with `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` (glibc 2.35+: transparent huge pages for
  malloc's large chunks, so fresh buffers are not faulted in 4 KiB at a time): PyTorch allocates its temporaries
  per operation, our update is one XLA program per round (`results/compute_bound_cpu.md` counts the faults).
  Steady SPS: env steps over wall time between the 4th and the last update (htsrl: `progress.csv`; CleanRL: its
  `SPS:` lines, the running average global_step / elapsed, from which each update's time is recovered), so start-up
  and compilation are out.
* `gfootball`: `launch.hts --env=gfootball/academy_empty_goal_close-v1` with its default preset (the task's own
  since 2026-11-28: the HTS-RL scripts' with rounds of 64 steps; before, the family's, alpha 128), 163,840 steps,
  an evaluation of 10 sampled episodes every 4,096 steps, target 0.8, at most 15 minutes, for `--seeds`, in this
  tree and (with `--before`) the earlier one: steady SPS and the required time (the first wall time at which the
  mean of the latest 10 evaluations reaches 0.8). Rows of the family preset measured in earlier sessions are kept
  as `htsrl-family`.

Writes `results/cpu_e2e_cpu.md` (medians) with the machine, date and command.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
from absl import app, flags

from benchmarks.common import cleanrl_points, die_with_parent, git_commit, htsrl_points, machine, steady_sps

_PARTS = flags.DEFINE_list("parts", ["breakout"], "breakout, gfootball.")
_SECONDS = flags.DEFINE_integer("seconds", 300, "Wall time of each Breakout run.")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Breakout runs per program.")
_PROGRAMS = flags.DEFINE_list("programs", [], "Breakout programs to run (htsrl, htsrl-hugetlb, htsrl-before, cleanrl, "
                              "cleanrl-hugetlb; empty: all that apply).")
_SEEDS = flags.DEFINE_list("seeds", ["1", "2", "3"], "GFootball seeds.")
_BEFORE = flags.DEFINE_string("before", "", "A checkout of an earlier commit to compare with ('' skips its rows).")
_CLEANRL_PYTHON = flags.DEFINE_string("cleanrl_python", "/tmp/cleanrl-venv/bin/python",
                                      "Python of CleanRL's venv (torch, envpool 0.8, gym 0.23).")
_CLEANRL_SCRIPT = flags.DEFINE_string("cleanrl_script", "/tmp/cleanrl-peer/ppo_atari_envpool.py",
                                      "CleanRL's ppo_atari_envpool.py ('' skips its rows).")
_WORK = flags.DEFINE_string("work_dir", "runs/cpu_e2e", "Run directories.")
_OUT = flags.DEFINE_string("out", "benchmarks/results/cpu_e2e", "Per-run results (<out>/*.json) and <out>_cpu.md.")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HUGETLB = "glibc.malloc.hugetlb=1"
CLEANRL_PROGRAMS = ("cleanrl", "cleanrl-hugetlb")  # its script as users run it, then with HUGETLB
BREAKOUT_PROGRAMS = ("htsrl", "htsrl-hugetlb", "htsrl-before", *CLEANRL_PROGRAMS)  # the table's row order


def program_env(label: str) -> dict:
    """The environment of a program: ours and CleanRL's as they run, or with HUGETLB added (`*-hugetlb`)."""
    environ = dict(os.environ)
    if label.endswith("-hugetlb"):
        environ["GLIBC_TUNABLES"] = ":".join(t for t in (environ.get("GLIBC_TUNABLES", ""), HUGETLB) if t)
    return environ


GFOOTBALL_FLAGS = ["--env=gfootball/academy_empty_goal_close-v1", "--total_steps=163840", "--eval_every=4096",
                   "--eval_episodes=10", "--target_return=0.8", "--time_limit=900", "--checkpoint_every=0",
                   "--quiet"]


def _timed_run(command: list[str], cwd: str, seconds: float, stop: int = signal.SIGINT,
               env: dict | None = None) -> tuple[str, float]:
    """Runs `command` for `seconds` of wall time, then sends `stop` to its process group (htsrl: Ctrl-C, which
    checkpoints; CleanRL: SIGTERM, as Ctrl-C can wait in EnvPool's recv); returns its stdout."""
    start = time.perf_counter()
    with subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                          start_new_session=True, preexec_fn=die_with_parent) as process:
        try:
            stdout, _ = process.communicate(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, stop)
            try:
                stdout, _ = process.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                stdout, _ = process.communicate()
    return stdout, time.perf_counter() - start


def _result_path(name: str) -> str:
    return os.path.join(_OUT.value, f"{name}.json")


def _save(name: str, result: dict) -> None:
    os.makedirs(_OUT.value, exist_ok=True)
    tmp = _result_path(name) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, _result_path(name))
    print(f"  {name}: {result.get('sps')}", flush=True)


def _provenance(cwd: str) -> dict:
    """The commit a run's tree was at and the day it ran (runs of one table may span sessions and commits)."""
    return dict(commit=git_commit(cwd), date=f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}")


def _seed_cell(result: dict, minutes) -> str:
    """`s3 7.08 (c8f3766, 2026-11-27)`; runs from before the commit was recorded say so, so that a later seed's
    provenance is not read as theirs."""
    where = ", ".join(result[k] for k in ("commit", "date") if k in result) or "commit not recorded"
    return f"s{result['seed']} {_fmt(minutes, 2)} ({where})"


def breakout_runs() -> None:
    python = sys.executable
    programs = [("htsrl", ROOT), ("htsrl-hugetlb", ROOT)] + ([("htsrl-before", _BEFORE.value)] if _BEFORE.value
                                                             else [])
    if _CLEANRL_SCRIPT.value:
        programs += [(label, os.path.dirname(_CLEANRL_SCRIPT.value)) for label in CLEANRL_PROGRAMS]
    if _PROGRAMS.value:
        programs = [(label, cwd) for label, cwd in programs if label in _PROGRAMS.value]
    for repeat in range(_REPEATS.value):
        for label, cwd in programs:
            name = f"breakout-{label}-r{repeat}"
            if os.path.exists(_result_path(name)):
                continue
            if label in CLEANRL_PROGRAMS:
                command = [_CLEANRL_PYTHON.value, "-u", _CLEANRL_SCRIPT.value, "--env-id=Breakout-v5",
                           "--cuda=False", f"--seed={1 + repeat}"]
                stdout, wall = _timed_run(command, cwd, _SECONDS.value, stop=signal.SIGTERM, env=program_env(label))
                points = cleanrl_points(stdout)
            else:
                run_dir = os.path.abspath(os.path.join(_WORK.value, name))
                command = [python, "-m", "launch.hts", "--game=Breakout", f"--seed={1 + repeat}", f"--logdir={run_dir}",
                           "--quiet"]
                subprocess.run(["rm", "-rf", run_dir], check=True)
                stdout, wall = _timed_run(command, cwd, _SECONDS.value, env=program_env(label))
                points = htsrl_points(run_dir)
            _save(name, dict(part="breakout", program=label, repeat=repeat, sps=steady_sps(points),
                             updates=len(points), wall=wall, load=os.getloadavg()[0], command=" ".join(command[1:]),
                             tail=stdout[-600:], **({} if label in CLEANRL_PROGRAMS else _provenance(cwd))))


def gfootball_runs() -> None:
    trees = [("htsrl", ROOT)] + ([("htsrl-before", _BEFORE.value)] if _BEFORE.value else [])
    for label, cwd in trees:  # this tree's seeds first: the earlier tree's are the comparison
        for seed in _SEEDS.value:
            name = f"gfootball-{label}-s{seed}"
            if os.path.exists(_result_path(name)):
                continue
            run_dir = os.path.abspath(os.path.join(_WORK.value, name))
            subprocess.run(["rm", "-rf", run_dir], check=True)
            command = [sys.executable, "-m", "launch.hts", *GFOOTBALL_FLAGS, f"--seed={seed}", f"--logdir={run_dir}"]
            stdout, wall = _timed_run(command, cwd, 1200)
            with open(os.path.join(run_dir, "summary.json")) as f:
                summary = json.load(f)
            _save(name, dict(part="gfootball", program=label, seed=int(seed), sps=steady_sps(htsrl_points(run_dir)),
                             required_time=summary.get("required_time"), final_metric=summary.get("final_metric"),
                             env_steps=summary.get("env_steps"), wall=wall, command=" ".join(command[1:]),
                             **_provenance(cwd)))


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None


def _fmt(value, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def write_table() -> None:
    results = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(_OUT.value, "*.json")))]
    lines = ["# Pixel tasks end to end on the CPU (issue 17)", "",
             f"- Machine: {machine()} (no GPU). Written {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} "
             f"UTC at commit {git_commit()}; each run's own command (and, since 2026-11-27, its commit and date) is in "
             f"`{_OUT.value}/<run>.json`.",
             f"- Command (the latest; runs measured earlier keep theirs in their JSON): `PYTHONPATH=. python -m "
             f"benchmarks.cpu_e2e {' '.join(sys.argv[1:])}` (module docstring: what each run is and how steady SPS is "
             "measured).", ""]
    breakout = [r for r in results if r["part"] == "breakout"]
    if breakout:
        lines += ["## Breakout-v5: HTS-PPO defaults against CleanRL's PyTorch PPO (same sizes)", "",
                  "htsrl-before: the same command in the `--before` checkout; `-hugetlb`: the same command with "
                  f"`GLIBC_TUNABLES={HUGETLB}` (huge pages for malloc's large chunks). Load: the 1-minute load "
                  "average at each run's end.", "",
                  "| program | commit | runs | steady SPS (median) | each run | load | relative to CleanRL | relative "
                  "to CleanRL with huge pages |", "| --- | --- | ---: | ---: | --- | --- | ---: | ---: |"]
        peers = [_median([r["sps"] for r in breakout if r["program"] == label]) for label in CLEANRL_PROGRAMS]
        for label in BREAKOUT_PROGRAMS:
            runs = [r for r in breakout if r["program"] == label]
            if runs:
                sps = _median([r["sps"] for r in runs])
                ratios = ["n/a" if not (sps and peer) else f"{sps / peer:.2f}x" for peer in peers]
                loads = ", ".join(_fmt(r.get("load"), 1) for r in runs)
                commits = ", ".join(sorted({r.get("commit", "-") for r in runs}))
                lines.append(f"| {label} | {commits} | {len(runs)} | {_fmt(sps)} | "
                             f"{', '.join(_fmt(r['sps']) for r in runs)} | {loads} | {' | '.join(ratios)} |")
        notes = sorted({f"{r['program']}: {r['note']}" for r in breakout if r.get("note")})
        lines += [""] + [f"- {note}" for note in notes] if notes else []
        lines.append("")
    football = [r for r in results if r["part"] == "gfootball"]
    if football:
        lines += ["## GFootball academy_empty_goal_close: time to a score of 0.8", "",
                  "htsrl: this tree's default command (the scenario's own preset since 2026-11-28: rounds of 64 "
                  "steps); htsrl-family: the family preset (rounds of 128) in earlier sessions; htsrl-before: the same "
                  "command in the `--before` checkout (each seed names its commit). Beside a nice-19 benchmark: "
                  "`gfootball_time_to_score_notes.md`.", "",
                  "| program | seeds | steady SPS (median) | required time, min (median) | each seed (min) |",
                  "| --- | ---: | ---: | ---: | --- |"]
        for label in ("htsrl", "htsrl-family", "htsrl-before"):
            runs = [r for r in football if r["program"] == label]
            if not runs and label != "htsrl-family":  # the earlier sessions' rows are kept, never measured again
                lines.append(f"| {label} | 0 | not measured yet (rerun the part: it resumes) | | |")
            elif runs:
                times = [None if r["required_time"] is None else r["required_time"] / 60 for r in runs]
                lines.append(f"| {label} | {len(runs)} | {_fmt(_median([r['sps'] for r in runs]))} | "
                             f"{_fmt(_median(times), 2)} | "
                             + ", ".join(_seed_cell(r, t) for r, t in zip(runs, times, strict=True))
                             + " |")
    with open(_OUT.value + "_cpu.md", "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv):
    del argv
    unknown = sorted(set(_PROGRAMS.value) - set(BREAKOUT_PROGRAMS))
    if unknown:
        sys.exit(f"error: unknown --programs {', '.join(unknown)} (choose from {', '.join(BREAKOUT_PROGRAMS)})")
    if "breakout" in _PARTS.value:
        breakout_runs()
    if "gfootball" in _PARTS.value:
        gfootball_runs()
    write_table()
    print(f"written: {_OUT.value}_cpu.md", flush=True)


if __name__ == "__main__":
    app.run(main)
