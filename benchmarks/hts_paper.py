"""Seed 000's experiments in our form, on this machine: each part is a `launch.sweep` over HTS-RL (and the sync
baseline) followed by `launch.report` on the sweep directories, so the committed tables and figures are exactly what a
user gets from those two commands (both are printed in the results file).

Parts (`--parts`, all by default):

* `table4`: HTS-PPO with 1, 4, 8 and 16 actor threads on `gfootball/academy_3_vs_1_with_keeper-v1` (seed 000
  Table 4): SPS, final score and parameter fingerprint per actor count. Full determinism means identical scores and
  fingerprints whatever the number of actors.
* `table5`: HTS-PPO with synchronization intervals alpha = 4, 16, 64, 128, 256, 512 on the same scenario (Table 5):
  SPS and final score.
* `fig4_variance`: speedup of HTS over the sync baseline against env step-time variance (Fig. 4 left), with
  exponential step times injected into CartPole-v1 (`--step_time=exp:MEAN`, variance MEAN^2) so the variance is
  controlled; the paper instead compared GFootball/Atari games with different natural variances.
* `fig4_envs`: SPS against the number of envs for HTS and sync on `gfootball/academy_counterattack_hard-v1`
  (Fig. 4 right).
* `time_to_score`: wall time for HTS-PPO and sync-PPO to reach a score of 0.8 on
  `gfootball/academy_empty_goal_close-v1` (Table 2's required time metric; seed 000: HTS-PPO 2.0 min, PPO 15.5 min
  with 16 CPUs and 4 GPUs).

Departures, also stated in the results file: short budgets (minutes, not 5M steps) on 2 CPU cores; EnvPool's GFootball
reward is scoring only (the paper used scoring+checkpoints); evaluation runs inline in the training process (HTS
overlaps it with collection, the sync baseline pauses for it), so its cost is part of every wall time.

Usage:
  PYTHONPATH=. python -m benchmarks.hts_paper                      # every part (about 65 min on 2 CPU cores)
  PYTHONPATH=. python -m benchmarks.hts_paper --parts=table4,table5
Runs go to `--work_dir` (default runs/hts_paper; rerunning skips finished runs, as launch.sweep does); the results go
to `benchmarks/results/hts_paper_cpu.md` and `benchmarks/results/hts_paper/<part>/` (report.md and figures).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import shlex
import subprocess
import sys
import time

from absl import app, flags

from benchmarks.common import background_cores, cpu_ticks_by_pid, die_with_parent, git_commit, machine
from systems.common.atomic import write_atomic

_PARTS = flags.DEFINE_list(
    "parts", "table4,table5,fig4_variance,fig4_envs,time_to_score", "Parts to run (module docstring)."
)
_WORK_DIR = flags.DEFINE_string("work_dir", "runs/hts_paper", "Directory of the sweeps' run directories.")
_OUT_DIR = flags.DEFINE_string("out_dir", "benchmarks/results", "Directory of the results file and figures.")
_NAME = flags.DEFINE_string("name", "hts_paper_cpu", "Base name of the results file.")
_SEEDS = flags.DEFINE_list("seeds", ["1"], "Seeds of every run (--seeds of launch.sweep).")

ACADEMY_3V1 = "gfootball/academy_3_vs_1_with_keeper-v1"
COUNTERATTACK_HARD = "gfootball/academy_counterattack_hard-v1"
EMPTY_GOAL_CLOSE = "gfootball/academy_empty_goal_close-v1"


@dataclasses.dataclass(frozen=True)
class Sweep:
    name: str  # subdirectory of the part's work dir
    system: str  # launch.<system>
    swept: tuple[str, ...]  # --sweep=... values
    flags: tuple[str, ...]  # passed to every run


@dataclasses.dataclass(frozen=True)
class Part:
    name: str
    title: str
    sweeps: tuple[Sweep, ...]
    report_flags: tuple[str, ...]
    notes: str


def _quiet(*extra: str) -> tuple[str, ...]:
    return ("--quiet", "--checkpoint_every=0", *extra)


PARTS = {
    "table4": Part(
        "table4",
        "Table 4: number of actor threads (HTS-PPO, academy_3_vs_1_with_keeper)",
        (
            Sweep(
                "hts_actors", "hts", ("num_actors=1,4,8,16",),
                _quiet(f"--env={ACADEMY_3V1}", "--num_envs=16", "--sync_interval=128", "--total_steps=32768",
                       "--eval_every=0", "--eval_episodes=32"),
            ),
        ),
        (),
        "32,768 env steps (16 updates) per run, then one evaluation of 32 episodes with the final parameters (the "
        "paper: 5M steps, 100 episodes). Scores are this short budget's, far from the paper's 0.82; what the table "
        "checks is that they and the parameter fingerprints are identical across actor counts.",
    ),
    "table5": Part(
        "table5",
        "Table 5: synchronization interval alpha (HTS-PPO, academy_3_vs_1_with_keeper)",
        (
            Sweep(
                "hts_alpha", "hts", ("sync_interval=4,16,64,128,256,512",),
                _quiet(f"--env={ACADEMY_3V1}", "--num_envs=16", "--total_steps=32768", "--eval_every=0",
                       "--eval_episodes=32"),
            ),
        ),
        (),
        "32,768 env steps per run (from 512 updates at alpha=4 to 4 at alpha=512), then one evaluation of 32 "
        "episodes. Different alphas learn differently, so scores differ; SPS is the claim under test.",
    ),
    "fig4_variance": Part(
        "fig4_variance",
        "Fig. 4 (left): HTS over sync against step-time variance (CartPole-v1, exponential step times)",
        tuple(
            Sweep(
                f"{system}_steptime", system, ("step_time=none,exp:0.001,exp:0.004,exp:0.016",),
                _quiet("--env=CartPole-v1", "--num_envs=16", "--sync_interval=32", "--total_steps=16384",
                       "--eval_episodes=0", "--algo=ppo"),
            )
            for system in ("hts", "sync")
        ),
        (),
        "16 envs, alpha=32, PPO, 16,384 env steps per run; step times drawn i.i.d. per env step from an exponential "
        "of the given mean (variance mean^2) by envs/step_time.py.",
    ),
    "fig4_envs": Part(
        "fig4_envs",
        "Fig. 4 (right): SPS against number of envs (academy_counterattack_hard)",
        tuple(
            Sweep(
                f"{system}_envs", system, ("num_envs=2,4,8,16",),
                _quiet(f"--env={COUNTERATTACK_HARD}", "--sync_interval=128", "--total_steps=16384",
                       "--eval_episodes=0"),
            )
            for system in ("hts", "sync")
        ),
        (),
        "PPO, alpha=128, 16,384 env steps per run. On 2 CPU cores the game engines saturate the machine at 2-4 envs, "
        "so the curve cannot keep rising as on the paper's 16 CPUs.",
    ),
    "time_to_score": Part(
        "time_to_score",
        "Required time to a score of 0.8 (academy_empty_goal_close), HTS-PPO against sync-PPO",
        tuple(
            Sweep(
                f"{system}_egc", system, (),
                _quiet(f"--env={EMPTY_GOAL_CLOSE}", "--preset=family", "--total_steps=163840", "--eval_every=4096",
                       "--eval_episodes=10", "--target_return=0.8", "--time_limit=900"),
            )
            for system in ("hts", "sync")
        ),
        ("--targets=0.4,0.8",),
        "The family preset (seed 000's GFootball PPO settings: 16 envs, 4 actors, alpha 128, lr 3.43e-4 decayed "
        "linearly over the run) with a 163,840-step budget and a 15-minute cap; an evaluation of 10 sampled "
        "episodes every 4,096 steps; required time = first wall time at which the mean of the latest 10 "
        "evaluations (100 episodes) reaches the target, as in the paper.",
    ),
}


def _run(cmd: list[str], log: list[str]) -> int:
    log.append(" ".join(shlex.quote(c) for c in cmd))
    print(f"[hts_paper] $ {log[-1]}", flush=True)
    return subprocess.call(cmd, preexec_fn=die_with_parent)


def run_part(part: Part, work_dir: str, report_dir: str, seeds: list[str]) -> dict:
    commands: list[str] = []
    sweep_dirs = []
    cpu_before, t0 = cpu_ticks_by_pid(), time.perf_counter()
    failed = []
    for sweep in part.sweeps:
        sweep_dir = os.path.join(work_dir, part.name, sweep.name)
        sweep_dirs.append(sweep_dir)
        cmd = [sys.executable, "-m", "launch.sweep", f"--system={sweep.system}", *(f"--sweep={s}" for s in sweep.swept),
               f"--seeds={','.join(seeds)}", f"--sweep_dir={sweep_dir}", *sweep.flags]
        if _run(cmd, commands) != 0:
            failed.append(sweep.name)
    wall = time.perf_counter() - t0
    background = background_cores(cpu_before, cpu_ticks_by_pid(), wall, exclude=set())
    os.makedirs(report_dir, exist_ok=True)
    report_cmd = [sys.executable, "-m", "launch.report", *sweep_dirs, f"--report_dir={report_dir}",
                  f"--report_title={part.title}", *part.report_flags]
    code = _run(report_cmd, commands)
    report_path = os.path.join(report_dir, "report.md")
    report = open(report_path).read() if code == 0 and os.path.exists(report_path) else f"(launch.report exit {code})"
    return {"commands": commands, "wall_s": wall, "cpu_used": background, "failed": failed, "report": report}


def main(argv):
    del argv
    unknown = [p for p in _PARTS.value if p not in PARTS]
    if unknown:
        sys.exit(f"error: unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    started = datetime.datetime.now(datetime.timezone.utc)
    sections = []
    for name in _PARTS.value:
        part = PARTS[name]
        result = run_part(part, _WORK_DIR.value, os.path.join(_OUT_DIR.value, "hts_paper", name), _SEEDS.value)
        cores = "n/a" if result["cpu_used"] is None else f"{result['cpu_used']:.2f}"
        sections.append("\n".join([
            f"## {part.title}",
            "",
            f"- Settings: {part.notes}",
            f"- Part wall time {result['wall_s'] / 60:.1f} min; CPU cores busy on the whole machine meanwhile "
            f"{cores} (2 = saturated; anything from other jobs makes the SPS figures pessimistic).",
            *(["- Failed sweeps: " + ", ".join(result["failed"])] if result["failed"] else []),
            "- Commands:",
            "",
            "```",
            *result["commands"],
            "```",
            "",
            embed_report(result["report"], name),
        ]))
    header = "\n".join([
        "# Seed 000's tables and figures, reproduced on this machine (HTS-RL vs sync, PPO)",
        "",
        f"- Machine: {machine()} (no GPU). Date: {started:%Y-%m-%d %H:%M} UTC. Commit: {git_commit()}.",
        f"- Command: `PYTHONPATH=. python -m benchmarks.hts_paper --parts={','.join(_PARTS.value)} "
        f"--seeds={','.join(_SEEDS.value)}`.",
        "- Every part is a `launch.sweep` followed by `launch.report` (commands below); figures are next to each "
        "part's report.md under `benchmarks/results/hts_paper/<part>/`.",
        "- GFootball through EnvPool rewards scoring only (the paper: scoring+checkpoints), and budgets are minutes, "
        "not the paper's 5M steps: compare ratios and trends, not absolute scores.",
        "",
    ])
    os.makedirs(_OUT_DIR.value, exist_ok=True)
    path = os.path.join(_OUT_DIR.value, f"{_NAME.value}.md")
    write_atomic(path, header + "\n" + "\n\n".join(sections) + "\n")
    print(f"[hts_paper] wrote {path}")


def embed_report(markdown: str, part: str) -> str:
    """A part's report.md inside the results file: its title dropped (the part's heading says it), other headings
    one level down, figure links made relative to the results file."""
    lines = markdown.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    out = []
    for line in lines:
        if line.startswith("#"):
            line = "#" + line
        out.append(re.sub(r"\]\(([^)/]+\.png)\)", rf"](hts_paper/{part}/\1)", line))
    return "\n".join(out).strip("\n")


if __name__ == "__main__":
    app.run(main)
