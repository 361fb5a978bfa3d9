"""What a `launch.tune` study is made of (the command line is `launch.tune`'s): Optuna's study in its storage,
one real run of a launcher (`run_one`, started, resumed or read as `launch.sweep` does), the objective of a trial
(the mean final metric over its tuning seeds, normalized over several tasks), and the recovery of trials a stopped
process left running."""

from __future__ import annotations

import csv
import ctypes
import functools
import hashlib
import json
import math
import os
import signal
import socket
import subprocess
import time

from analysis import grid as grid_lib
from analysis import search_space
from launch import sweep

STUDY_NAME = "tune"
FRESH_SEED = 10_000  # the final seeds: FRESH_SEED, FRESH_SEED + 1, ...
RESERVED = ("env", "seed", "logdir", "resume")  # set by the study for each run
_RANDOM_CSV = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "results",
                           "learning_random_returns.csv")


class RunFailed(RuntimeError):
    """A run that exited without a finished summary (its trial fails; the study goes on)."""


# ---------------------------------------------------------------------------------------------------------------------
# The study


def storage(study_dir: str, url: str = ""):
    import optuna
    from optuna.storages.journal import JournalFileBackend

    if url:
        return url
    os.makedirs(study_dir, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(os.path.join(study_dir, "journal.log")))


def load_study(study_dir: str, url: str, sampler_seed: int, prune_warmup: int, worker: int = 0,
               prune_startup: int = 5):
    """The study in its storage (created the first time), with a median pruner that waits for `prune_startup`
    finished trials and `prune_warmup` evaluations of a run, and a TPE sampler seeded from `sampler_seed`, the
    `worker`'s number and the trials already there: each worker's sampler, and a resumed study's, starts from its
    own seed (reseeded as the first invocation's, it would draw that invocation's points again)."""
    import optuna

    study = optuna.create_study(
        study_name=STUDY_NAME, storage=storage(study_dir, url), direction="maximize", load_if_exists=True,
        pruner=optuna.pruners.MedianPruner(n_startup_trials=prune_startup, n_warmup_steps=prune_warmup))
    study.sampler = optuna.samplers.TPESampler(
        seed=sampler_seed + 7919 * worker + len(study.get_trials(deepcopy=False)))
    return study


def point_key(point: dict) -> str:
    """A point's folder name: its values, hashed (a point drawn again resumes its runs)."""
    return hashlib.sha1(json.dumps(point, sort_keys=True).encode()).hexdigest()[:12]


def finished_count(study) -> int:
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_stale_trials(study, host: str = "") -> list[int]:
    """Trials this host left RUNNING (its process is gone: a SIGKILL) fail, and their points are drawn again, so
    their runs resume. Trials of other hosts are theirs to recover. Returns the recovered trial numbers."""
    from optuna.trial import TrialState

    host = host or socket.gethostname()
    recovered = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        attrs = trial.user_attrs
        if attrs.get("host") != host or _alive(int(attrs.get("pid", -1))):
            continue
        # Optuna's storages fail stale trials themselves only with a heartbeat, which the journal lacks.
        study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
        study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
        recovered.append(trial.number)
    return recovered


# ---------------------------------------------------------------------------------------------------------------------
# One run


def _evaluations(run_dir: str) -> list[float]:
    try:
        with open(os.path.join(run_dir, "evaluations.csv")) as f:
            return [float(row["mean_return"]) for row in csv.DictReader(f)]
    except (OSError, KeyError, ValueError):
        return []


_PR_SET_PDEATHSIG = 1


@functools.cache
def _prctl():
    """libc's prctl, looked up in the study's process (not in a forked child, where another thread may hold a
    lock); None off Linux."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent() -> None:
    """In this process: the kernel sends it SIGTERM when its parent ends, SIGKILL included (Linux's
    PR_SET_PDEATHSIG), so no run or worker outlives a killed study; the launchers answer SIGTERM by checkpointing."""
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def _stop(process: subprocess.Popen) -> None:
    """Ctrl-C to the run's group (it checkpoints), SIGKILL after `sweep.STOP_TIMEOUT_S`."""
    sweep._signal_group(process, signal.SIGINT)
    try:
        process.wait(timeout=sweep.STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        sweep._signal_group(process, signal.SIGKILL)
        process.wait()


def run_one(system: str, args: list[str], run_dir: str, on_evaluation=None) -> dict:
    """Runs (or resumes, or reads the finished) run of `args` in `run_dir` and returns its summary.
    `on_evaluation(index, value)` sees each new evaluation and may raise (optuna.TrialPruned): the run is stopped
    and the exception goes on. RunFailed when the run ends without a finished summary."""
    state = grid_lib.run_state(run_dir)
    if state == grid_lib.FINISHED:
        return grid_lib.read_summary(run_dir)
    if state == grid_lib.NEW:
        sweep.clear_run_dir(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    command = sweep.build_command(system, [*args, f"--logdir={run_dir}"], resume=state == grid_lib.CHECKPOINTED)
    with open(os.path.join(run_dir, "launch.log"), "a") as log:
        log.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} launch.tune: {' '.join(command)}\n")
        log.flush()
        _prctl()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True,
                                   preexec_fn=die_with_parent)
        seen = 0
        try:
            while process.poll() is None:
                time.sleep(sweep._POLL_S)
                values = _evaluations(run_dir)
                for index in range(seen, len(values)):
                    if on_evaluation is not None:
                        on_evaluation(index, values[index])
                seen = len(values)
        except BaseException:
            _stop(process)
            raise
    summary = grid_lib.read_summary(run_dir)
    if grid_lib.run_state(run_dir) != grid_lib.FINISHED or summary is None:
        raise RunFailed(f"{run_dir}: exit {process.returncode}: "
                        f"{sweep._last_line(os.path.join(run_dir, 'launch.log'))}")
    return summary


# ---------------------------------------------------------------------------------------------------------------------
# The objective


def random_returns(envs: list[str]) -> list[float]:
    """Each task's uniformly random return from the learning benchmark's table; ValueError names a missing one."""
    known = {}
    if os.path.exists(_RANDOM_CSV):
        with open(_RANDOM_CSV) as f:
            known = {row["env_id"]: float(row["mean_return"]) for row in csv.DictReader(f)}
    missing = [env for env in envs if env not in known]
    if missing:
        raise ValueError(f"no random-policy return for {', '.join(missing)} (benchmarks.learning.random_return "
                         "measures one)")
    return [known[env] for env in envs]


def score(task_means: list[float], lows: list[float] | None, highs: list[float] | None) -> float:
    """One task: its mean; several: the mean of (mean - random) / (reference - random)."""
    if len(task_means) == 1:
        return task_means[0]
    return sum((m - lo) / (hi - lo) for m, lo, hi in zip(task_means, lows, highs, strict=True)) / len(task_means)


class Objective:
    """The value of a trial (module docstring)."""

    def __init__(self, study_dir, system, envs, passthrough, space, seeds, lows, highs):
        self.study_dir, self.system, self.envs, self.passthrough = study_dir, system, envs, passthrough
        self.space, self.seeds, self.lows, self.highs = space, seeds, lows, highs

    def runs(self, point: dict, folder: str, seeds) -> list[tuple[str, int, list[str], str]]:
        """(env, seed, launcher args, run dir) of `point` over the tasks and `seeds`, under `folder`."""
        return [(env, seed, [*self.passthrough, f"--env={env}", *search_space.flags(point), f"--seed={seed}"],
                 os.path.join(self.study_dir, folder, env.replace("/", "_"), f"s{seed}"))
                for env in self.envs for seed in seeds]

    def __call__(self, trial) -> float:
        import optuna

        point = {d.name: d.suggest(trial) for d in self.space}
        key = point_key(point)
        trial.set_user_attr("host", socket.gethostname())
        trial.set_user_attr("pid", os.getpid())
        trial.set_user_attr("point", key)

        def report(index, value):
            if not math.isfinite(value):
                raise optuna.TrialPruned(f"evaluation {index} is not finite")
            trial.report(value, index)
            if trial.should_prune():
                raise optuna.TrialPruned(f"below the median at evaluation {index}")

        try:
            metrics = {env: [] for env in self.envs}
            for i, (env, _, args, run_dir) in enumerate(self.runs(point, os.path.join("runs", key), self.seeds)):
                metric = run_one(self.system, args, run_dir, report if i == 0 else None).get("final_metric")
                if metric is None or not math.isfinite(metric):
                    raise optuna.TrialPruned(f"{run_dir}: final metric {metric}")
                metrics[env].append(metric)
        except KeyboardInterrupt:  # stopped: the point is drawn again next time, and its runs resume
            trial.study.enqueue_trial(point, user_attrs={"retry_of": trial.number})
            raise
        return score([sum(v) / len(v) for v in metrics.values()], self.lows, self.highs)


# ---------------------------------------------------------------------------------------------------------------------
# Anakin: a population of trials in one program

POPULATION_FLAGS = {"learning_rate": "learning_rates", "entropy_coef": "entropy_coefs"}  # Anakin's swept flags


def population_flag(space) -> str | None:
    """Anakin's list flag that runs a population of this space's points in one program (a space of one learning
    rate or one entropy coefficient), else None."""
    names = [d.name for d in space]
    return POPULATION_FLAGS.get(names[0]) if len(names) == 1 else None


def population_values(summary: dict, name: str, points: list[dict]) -> list[float]:
    """Each point's mean final metric over its agents (Anakin's gathered summary lists each agent's rate, entropy
    coefficient and final metric)."""
    column = {"learning_rate": "learning_rates", "entropy_coef": "entropy_coefs"}[name]
    values = []
    for point in points:
        finals = [f for v, f in zip(summary[column], summary["final_metrics"], strict=True)
                  if math.isclose(v, point[name], rel_tol=1e-9) and f is not None]
        values.append(sum(finals) / len(finals) if finals else math.nan)
    return values


def run_populations(study, objective: Objective, size: int, trials: int) -> None:
    """Draws `size` trials at a time and runs them as one Anakin program (`--learning_rates` or `--entropy_coefs`,
    `--num_seeds` = the tuning seeds), until the study has `trials` finished ones. Each trial's value is the mean
    final metric of its agents. A population is not pruned (its agents share one program); a stopped one is drawn
    again with the same points, and its program resumes."""
    import optuna

    (dimension,) = objective.space
    flag = population_flag(objective.space)
    while finished_count(study) < trials:
        batch = [study.ask() for _ in range(min(size, trials - finished_count(study)))]
        for trial in batch:
            trial.set_user_attr("host", socket.gethostname())
            trial.set_user_attr("pid", os.getpid())
        points = [{dimension.name: dimension.suggest(trial)} for trial in batch]
        unique = sorted({p[dimension.name] for p in points})
        args = [*objective.passthrough, f"--env={objective.envs[0]}", f"--{flag}={','.join(map(repr, unique))}",
                f"--num_seeds={len(objective.seeds)}", "--seed=0"]
        run_dir = os.path.join(objective.study_dir, "runs", "population-" + point_key({"points": unique}))
        try:
            summary = run_one(objective.system, args, run_dir)
        except KeyboardInterrupt:
            for trial, point in zip(batch, points, strict=True):
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                study.enqueue_trial(point, user_attrs={"retry_of": trial.number})
            raise
        except RunFailed as error:
            print(f"[tune] population failed: {error}", flush=True)
            for trial in batch:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        for trial, point, value in zip(batch, points, population_values(summary, dimension.name, points), strict=True):
            if math.isfinite(value):
                study.tell(trial, value)
            else:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            print(f"[tune] trial {trial.number}: {value:.4g}  {point}", flush=True)
