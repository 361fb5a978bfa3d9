"""Hyperparameter search beside rl-zoo3's `-optimize`: the same task, trial count, step budget, TPE sampler and
median pruner on both sides; then each side's best point trains on 5 fresh seeds at the full budget in the learning
benchmark.

    PYTHONPATH=. python -m benchmarks.tune                     # both studies (what is missing), then the report
    PYTHONPATH=. python -m benchmarks.tune --sides=ours --trials=2 --budget=4096 --work_dir=/tmp/tune-smoke
    PYTHONPATH=. python -m benchmarks.learning --tasks="LunarLander-v2 tuned"   # each best on seeds 10000-10004

* ours: `launch.tune --system=hts --env=LunarLander-v2 --trials=T --seeds_per_trial=3 --final_seeds=0
  --prune_warmup=3 --prune_startup=2 --total_steps=B --eval_every=B/10 --eval_episodes=10`: launch.tune's
  default PPO space (the `search` distributions declared beside the hyperparameters), a seeded TPE sampler, the
  median pruner after 3 evaluations, each trial's value the mean final metric over tuning seeds 0, 1, 2.
* peer: rl-zoo3's own `train -optimize` for SB3's PPO (`--max-total-trials T --sampler tpe --pruner median
  --n-startup-trials 5 --n-evaluations 10 --eval-episodes 10 -n B --seed 0`) on gymnasium's LunarLander-v3 (EnvPool's
  LunarLander-v2 is that env): its own space (`sample_ppo_params`) and one run per trial (rl-zoo3's own TODO: "eval
  each hyperparams several times"); its median pruner warms up for n_evaluations // 3 = 3 evaluations, as ours.
  The peer runs on one PyTorch thread (rl-zoo3's `--num-threads 1`): PyTorch's default of one thread a core spins
  wherever another process shares the 2 cores (a RecurrentPPO run beside the study: 11 SPS on two threads, 190 on
  one), which would bill the peer's study for waiting.
  Departures kept as each tool has them: rl-zoo3's TPE starts after 5 random trials (multivariate), launch.tune's
  after Optuna's 10; rl-zoo3's pruner waits for 5 finished trials, this study's for 2 (`--prune_startup=2`, the
  setting the committed study ran with; launch.tune's default is 5, as rl-zoo3's).
* Each study lives in an Optuna journal under `--work_dir` (not committed) and resumes when the command runs again:
  launch.tune redraws a trial a stopped process left running; for rl-zoo3, which counts running trials towards its
  total, such a trial is marked failed first. Each part (one process, start to exit) is metered for wall time, CPU
  time and load (`learning.PartMeter`), so a study that spans sessions sums its parts.
* A study that outlives a machine which does not keep `--work_dir` carries over through the repository:
  `--save_unfinished` copies each side's journal (its complete records) and parts into
  `results/tune/<task>/<side>_unfinished/` to be committed, and a side with no journal under `--work_dir` resumes from
  that copy; landing the finished study removes it.
* Results, committed as they land: `results/tune/<task>/` (each study's trials, ours `best.flags`, the peer's
  journal and best point as rl-zoo3's `--hyperparams`), and `results/tune_cpu.md`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from benchmarks import learning
from benchmarks.common import die_with_parent, git_commit, machine
from systems.common.atomic import write_atomic

RESULTS = learning.RESULTS
TASK = "LunarLander-v2"
PEER_ENV = "LunarLander-v3"
PEER_STUDY = learning.ZOO_STUDY_NAME
TUNING_SEEDS = 3
REPORT_MD = os.path.join(RESULTS, "tune_cpu.md")


def task_dir(task: str = TASK) -> str:
    """The committed results of one task's studies."""
    return os.path.join(RESULTS, "tune", task)


def our_command(study_dir: str, trials: int, budget: int) -> list[str]:
    return [sys.executable, "-m", "launch.tune", "--system=hts", f"--env={TASK}", f"--trials={trials}",
            f"--seeds_per_trial={TUNING_SEEDS}", "--final_seeds=0", "--prune_warmup=3", "--prune_startup=2",
            f"--study_dir={study_dir}", f"--total_steps={budget}", f"--eval_every={budget // 10}",
            "--eval_episodes=10", "--quiet"]


def peer_command(study_dir: str, trials: int, budget: int) -> list[str]:
    return [learning.PEER_PYTHON, "-m", "rl_zoo3.train", "--algo", "ppo", "--env", PEER_ENV, "-n", str(budget),
            "-optimize", "--max-total-trials", str(trials), "--n-jobs", "1", "--sampler", "tpe", "--pruner", "median",
            "--n-startup-trials", "5", "--n-evaluations", "10", "--eval-episodes", "10", "--seed", "0",
            "--storage", os.path.join(study_dir, "journal.log"), "--study-name", PEER_STUDY, "-f", study_dir,
            "--device", "cpu", "--vec-env", "dummy", "--num-threads", "1", "--verbose", "0", "--no-optim-plots"]


# A peer study stopped mid-trial leaves that trial RUNNING, which rl-zoo3's --max-total-trials counts: mark it failed
# (run in the peer's venv, which has Optuna).
_FAIL_STALE = """
import sys, optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
storage = JournalStorage(JournalFileBackend(sys.argv[1]))
try:
    study = optuna.load_study(study_name=sys.argv[2], storage=storage)
except KeyError:
    sys.exit(0)
for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
    storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
    print(f"[tune] peer trial {trial.number} was left running by a stopped process: marked failed")
"""

# The best complete trial's point as rl-zoo3's `--hyperparams key:value` arguments (its own converter, as its
# `--trial-id` would apply it; that path skips trial 0, whose number is falsy there).
_BEST_AS_ZOO_ARGS = """
import json, sys
from rl_zoo3.hyperparams_opt import HYPERPARAMS_CONVERTER
trials = [t for t in json.loads(sys.argv[1]) if t["state"] == "COMPLETE" and t["value"] is not None]
best = max(trials, key=lambda t: t["value"])
def show(v):
    if isinstance(v, type):
        return "nn." + v.__name__
    if isinstance(v, dict):
        return "dict(" + ", ".join(f"{k}={show(x)}" for k, x in v.items()) + ")"
    return repr(v)
print(json.dumps([f"{k}:{show(v)}" for k, v in sorted(HYPERPARAMS_CONVERTER["ppo"](best["params"]).items())]))
"""

# Every trial of a journal as rows (run in either venv: each has Optuna).
_TRIALS = """
import json, sys, optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
study = optuna.load_study(study_name=sys.argv[2], storage=JournalStorage(JournalFileBackend(sys.argv[1])))
print(json.dumps([dict(number=t.number, state=t.state.name, value=t.value, params=t.params,
                       seconds=t.duration.total_seconds() if t.duration else None) for t in study.trials]))
"""


CARRIED = ("journal.log", "parts.json")  # what an unfinished study needs to resume: its trials and its metered parts


def unfinished_dir(side: str) -> str:
    """The committed copy of a side's study that has not finished yet."""
    return os.path.join(task_dir(), f"{side}_unfinished")


def save_unfinished(side: str, work_dir: str) -> bool:
    """Copies a side's journal and parts from `work_dir` to `unfinished_dir(side)`; False where it has none. A copy
    taken while the study writes keeps the journal's complete records only (one JSON record per line)."""
    study_dir = os.path.abspath(os.path.join(work_dir, side))
    if not os.path.exists(os.path.join(study_dir, "journal.log")):
        return False
    out = unfinished_dir(side)
    os.makedirs(out, exist_ok=True)
    for name in CARRIED:
        src = os.path.join(study_dir, name)
        if os.path.exists(src):
            with open(src, "rb") as f:
                data = f.read()
            if name == "journal.log":
                data = data[:data.rfind(b"\n") + 1]
            write_atomic(os.path.join(out, name), data)
    return True


def restore_unfinished(side: str, study_dir: str) -> bool:
    """Starts a side with no journal under `study_dir` from its committed unfinished study, if any."""
    saved = unfinished_dir(side)
    if os.path.exists(os.path.join(study_dir, "journal.log")) or not os.path.exists(os.path.join(saved, "journal.log")):
        return False
    for name in CARRIED:
        if os.path.exists(os.path.join(saved, name)):
            with open(os.path.join(saved, name), "rb") as f:
                write_atomic(os.path.join(study_dir, name), f.read())  # a cut copy would block the next restore
    return True


def run_study(side: str, work_dir: str, trials: int, budget: int) -> dict:
    """Runs (or resumes) one side's study, metered; returns the side's parts (wall, CPU, load) summed."""
    study_dir = os.path.abspath(os.path.join(work_dir, side))
    os.makedirs(study_dir, exist_ok=True)
    if restore_unfinished(side, study_dir):
        print(f"[tune-bench] {side}: resuming the unfinished study committed in {unfinished_dir(side)}", flush=True)
    if side == "peer":
        if not os.path.exists(learning.PEER_PYTHON):
            raise RuntimeError(f"peer venv missing: {learning.PEER_PYTHON} (benchmarks/learning.py says how)")
        subprocess.run([learning.PEER_PYTHON, "-c", _FAIL_STALE, os.path.join(study_dir, "journal.log"), PEER_STUDY],
                       check=True)
    cmd = (peer_command if side == "peer" else our_command)(study_dir, trials, budget)
    parts_file = os.path.join(study_dir, "parts.json")
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    with open(os.path.join(study_dir, "study.log"), "a") as out, \
            learning.PartMeter(parts_file, learning.read_parts(parts_file)) as meter:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent,
                                cwd=learning.ROOT)
        meter.watch(proc)
        returncode = proc.wait()
    if returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {returncode}; log: {study_dir}/study.log")
    parts = learning.read_parts(parts_file)
    return dict(side=side, command=" ".join([os.path.basename(cmd[0]), *cmd[1:]]),
                wall_s=sum(p["wall_s"] for p in parts), cpu_s=sum(p["cpu_s"] for p in parts), parts=len(parts))


def land(side: str, work_dir: str, metered: dict) -> None:
    """Copies a finished study's results into `results/tune/<task>/`: its trials (JSON), its cost and command,
    ours `best.flags` and report, the peer's journal and its best point as rl-zoo3's `--hyperparams`."""
    study_dir = os.path.abspath(os.path.join(work_dir, side))
    out = task_dir()
    os.makedirs(out, exist_ok=True)
    journal = os.path.join(study_dir, "journal.log")
    python = learning.PEER_PYTHON if side == "peer" else sys.executable
    name = PEER_STUDY if side == "peer" else "tune"
    listed = subprocess.run([python, "-c", _TRIALS, journal, name], check=True, capture_output=True, text=True)
    trials = json.loads(listed.stdout)
    extra = {}
    if side == "peer":
        best = subprocess.run([python, "-c", _BEST_AS_ZOO_ARGS, json.dumps(trials)], check=True, capture_output=True,
                              text=True)
        extra["best_hyperparams"] = json.loads(best.stdout)
    with open(os.path.join(out, f"{side}_trials.json"), "w") as f:
        json.dump(dict(metered, trials=trials, **extra, date=time.strftime("%Y-%m-%d"), commit=git_commit(),
                       machine=machine()), f, indent=1)
    if side == "ours":
        for name in ("best.flags", "report.md"):
            shutil.copyfile(os.path.join(study_dir, name), os.path.join(out, f"ours_{name}"))
    else:
        shutil.copyfile(journal, os.path.join(out, "peer_journal.log"))
    shutil.rmtree(unfinished_dir(side), ignore_errors=True)


def write_report() -> None:
    """`results/tune_cpu.md`: each landed study's trials (complete, pruned), best value and point, wall and CPU
    time."""
    lines = ["# Hyperparameter search beside rl-zoo3's `-optimize`", "",
             "`benchmarks/tune.py` (its docstring: commands, both sides' settings, the departures). A study's value is "
             "its side's own objective: ours the mean final metric over 3 tuning seeds, the peer's one run's mean "
             "evaluation return (rl-zoo3). Each side's best on fresh seeds: `benchmarks/learning.py`, task "
             f"`{TASK} tuned`.", "",
             "| side | trials (complete / pruned / failed) | best value | best point | wall | CPU | "
             "machine, date, commit |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for side in ("ours", "peer"):
        path = os.path.join(task_dir(), f"{side}_trials.json")
        if not os.path.exists(path):
            carried = " (its trials so far: `" + os.path.relpath(unfinished_dir(side), RESULTS) + "/`)" \
                if os.path.isdir(unfinished_dir(side)) else ""
            lines.append(f"| {side} | not finished yet{carried} | | | | | |")
            continue
        with open(path) as f:
            study = json.load(f)
        trials = study["trials"]
        count = {state: sum(t["state"] == state for t in trials) for state in ("COMPLETE", "PRUNED", "FAIL")}
        done = [t for t in trials if t["state"] == "COMPLETE" and t["value"] is not None]
        best = max(done, key=lambda t: t["value"]) if done else None
        point = ", ".join(f"{k}={_show(v)}" for k, v in sorted(best["params"].items())) if best else ""
        lines.append(f"| {side} | {count['COMPLETE']} / {count['PRUNED']} / {count['FAIL']} | "
                     f"{best['value']:.1f} (trial {best['number']}) | {point} | {study['wall_s'] / 60:.1f} min | "
                     f"{study['cpu_s'] / 60:.1f} min | {study['machine']}, {study['date']}, {study['commit']} |"
                     if best else f"| {side} | {count['COMPLETE']} / {count['PRUNED']} / {count['FAIL']} | | | | | |")
    lines += ["", "Commands:", ""]
    for side in ("ours", "peer"):
        path = os.path.join(task_dir(), f"{side}_trials.json")
        if os.path.exists(path):
            with open(path) as f:
                lines.append(f"- {side}: `{json.load(f)['command']}`")
    with open(REPORT_MD, "w") as f:
        f.write("\n".join(lines) + "\n")


def _show(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sides", default="ours,peer", help="comma-separated: ours, peer")
    parser.add_argument("--trials", type=int, default=30, help="finished trials of each study")
    parser.add_argument("--budget", type=int, default=200_000, help="env steps of one tuning run")
    parser.add_argument("--work_dir", default="runs/tune", help="the studies' journals and runs (not committed)")
    parser.add_argument("--report_only", action="store_true")
    parser.add_argument("--save_unfinished", action="store_true",
                        help="copy each side's study so far from --work_dir into results/ (to commit), then stop")
    args = parser.parse_args(argv)
    sides = args.sides.split(",")
    if any(side not in ("ours", "peer") for side in sides):
        sys.exit(f"error: --sides takes ours and peer, got {args.sides}")
    if args.trials < 1 or args.budget < 1000:
        sys.exit("error: --trials must be >= 1 and --budget >= 1000")
    smoke = (args.trials, args.budget) != (30, 200_000)  # a smoke run's studies are not landed in results/
    if args.save_unfinished:
        for side in sides:
            saved = save_unfinished(side, args.work_dir)
            print(f"[tune-bench] {side}: " + (f"saved to {unfinished_dir(side)}" if saved else
                                                f"no study under {args.work_dir}"), flush=True)
        write_report()
        return
    if not args.report_only:
        for side in sides:
            print(f"[tune-bench] {side} study: {args.trials} trials of {args.budget:,} steps ...", flush=True)
            metered = run_study(side, args.work_dir, args.trials, args.budget)
            print(f"[tune-bench] {side}: {metered['wall_s'] / 60:.1f} min wall, {metered['cpu_s'] / 60:.1f} min CPU",
                  flush=True)
            if not smoke:
                land(side, args.work_dir, metered)
    write_report()
    print(json.dumps({"report": REPORT_MD}))


if __name__ == "__main__":
    main(sys.argv[1:])
