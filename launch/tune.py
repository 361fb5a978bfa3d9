"""`python -m launch.tune --system=sync --env=CartPole-v1 --trials=20 --seeds_per_trial=2 --study_dir=DIR`: search a
launcher's hyperparameters with Optuna, robust to seed noise.

* A trial draws one point of the space (`--space=FILE`, JSON or YAML, `analysis.search_space`; default: the
  `search` distributions declared on the system's config fields) with a seeded TPE sampler and runs the launcher
  once per tuning seed (0 .. K-1) and task: `python -m launch.<system> <passed flags> --env=<task> <point's flags>
  --seed=<s> --logdir=<study_dir>/runs/<point>/<task>/s<s>`, a real run that writes, checkpoints and resumes like any.
  Every flag `launch.tune` does not define is passed unchanged to every run (`--total_steps=50000`, ...).
* Its value: the mean of the runs' final metric over the seeds; over several tasks (`--env=A,B`), the mean of each
  task's mean normalized by a uniformly random policy's return (the learning benchmark's `random_return`)
  and `--references` (one score per task: 0 random, 1 the reference).
* Pruning: the first run of a trial reports each evaluation to Optuna's median pruner (after `--prune_warmup`
  evaluations, and once `--prune_startup` trials have finished); a pruned run is stopped as Ctrl-C stops it. A
  non-finite metric prunes.
* The study lives in Optuna's storage: a journal file in `--study_dir` by default, or `--storage=URL` (a database
  other hosts reach: each runs the same command and they work one study). Rerunning the command resumes: finished
  trials are kept, a trial this host was running when it was stopped (Ctrl-C, SIGTERM, SIGKILL) is drawn again
  with the same point and its runs resume from their checkpoints. `--workers=W` runs W trials at a time here.
* At the end, the best point and the default preset run again on `--final_seeds` fresh seeds (10000 ..., disjoint
  from the tuning seeds), and `<study_dir>/report.md` holds the trials, both on the fresh seeds, the seeds used and
  the plots; `<study_dir>/best.flags` is the best point as an absl `--flagfile` any launcher takes.
  `optuna-dashboard <study_dir>/journal.log` reads the study.

Bad input is one `error:` line and exit 2; an interrupted study exits 130 (rerun it to continue).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import warnings

from absl import app, flags

from analysis import search_space
from launch import sweep, tuning
from launch.tuning import (
    RESERVED,
    Objective,
    RunFailed,
    finished_count,
    load_study,
    random_returns,
    recover_stale_trials,
)
from systems.registry import LAUNCHERS

TUNE_FLAGS = flags.FlagValues()
_SYSTEM = flags.DEFINE_enum("system", None, list(LAUNCHERS), "Launcher to tune: python -m launch.<system>.",
                            flag_values=TUNE_FLAGS)
_ENV = flags.DEFINE_list("env", None, "Task(s), as the launcher's --env (several: normalized, see --references).",
                         flag_values=TUNE_FLAGS)
_SPACE = flags.DEFINE_string("space", "", "Search space file (JSON or YAML; default: the algorithm's own).",
                             flag_values=TUNE_FLAGS)
_TRIALS = flags.DEFINE_integer("trials", 20, "Finished (complete or pruned) trials the study needs.", lower_bound=1,
                               flag_values=TUNE_FLAGS)
_SEEDS = flags.DEFINE_integer("seeds_per_trial", 2, "Tuning seeds per trial and task (0 .. K-1).", lower_bound=1,
                              flag_values=TUNE_FLAGS)
_STUDY_DIR = flags.DEFINE_string("study_dir", None, "The study's folder: journal, runs, report.",
                                 flag_values=TUNE_FLAGS)
_STORAGE = flags.DEFINE_string("storage", "", "Optuna storage URL (default: a journal file in --study_dir).",
                               flag_values=TUNE_FLAGS)
_WORKERS = flags.DEFINE_integer("workers", 1, "Trials run at a time on this host.", lower_bound=1,
                                flag_values=TUNE_FLAGS)
_FINAL_SEEDS = flags.DEFINE_integer("final_seeds", 3, "Fresh seeds the best point and the default run on (0: none).",
                                    lower_bound=0, flag_values=TUNE_FLAGS)
_PRUNE_WARMUP = flags.DEFINE_integer("prune_warmup", 5, "Evaluations before a trial may be pruned.", lower_bound=0,
                                     flag_values=TUNE_FLAGS)
_PRUNE_STARTUP = flags.DEFINE_integer(
    "prune_startup", 5, "Finished trials before any is pruned (Optuna's and rl-zoo3's default).", lower_bound=0,
    flag_values=TUNE_FLAGS)
_SAMPLER_SEED = flags.DEFINE_integer("sampler_seed", 0, "Seed of the TPE sampler.", flag_values=TUNE_FLAGS)
_POPULATION = flags.DEFINE_integer(
    "population", 8, "launch.anakin with a space of one learning rate or entropy coefficient: trials run together in "
    "one program (its --learning_rates / --entropy_coefs), this many at a time (0: one program a trial).",
    lower_bound=0, flag_values=TUNE_FLAGS)
_REFERENCES = flags.DEFINE_list("references", [], "Several tasks: each one's reference score (normalized to 1).",
                                flag_values=TUNE_FLAGS)

# ---------------------------------------------------------------------------------------------------------------------
# Command line


_fail = sweep._fail  # one `error:` line, exit 2


def parse_flags(argv: list[str]) -> list[str]:
    """`app.run`'s flags_parser of the study (`sweep.parse_own_flags` over TUNE_FLAGS)."""
    return sweep.parse_own_flags(argv, TUNE_FLAGS, __doc__, "launch.tune")


def _space(system: str, passthrough: list[str]):
    if _SPACE.value:
        return search_space.load(_SPACE.value)
    from systems.registry import ENTRIES

    entry = ENTRIES[system]
    algo = sweep.passthrough_value(passthrough, "algo") or entry.algos[0]
    offered = set(flags_of(system))
    space = search_space.default_space(entry.config_class(), algo, offered.__contains__)
    if not space:
        raise ValueError(f"launch.{system} ({algo}) has no default search space: give --space=FILE")
    return space


def flags_of(system: str) -> list[str]:
    from launch import flagsets

    return list(flagsets.flag_values(system))


def check(system: str, envs: list[str], passthrough: list[str], space) -> None:
    """ValueError (one line) for a flag the study sets, a space naming a flag the launcher lacks or also passed,
    or the first point (each distribution's low or first choice) that the launcher rejects."""
    names = {d.name for d in space}
    for token in passthrough:
        name = sweep.flag_name(token)
        base = name[2:] if name and name.startswith("no") and name[2:] in (*RESERVED, *names) else name
        if base in RESERVED:
            raise ValueError(f"{token}: --{base} is set by launch.tune for each run")
        if base in names:
            raise ValueError(f"{token}: --{base} is both searched and passed to every run")
    probe_point = {d.name: d.choices[0] if d.kind == "categorical" else (int(d.low) if d.kind == "int" else d.low)
                   for d in space}
    argvs = [[*passthrough, f"--env={env}", *search_space.flags(probe_point), "--seed=0"] for env in envs]
    probe = sweep.probe_launcher(system, argvs)
    missing = sorted(names - set(probe["flags"]))
    if missing:
        raise ValueError(f"--space: launch.{system} has no flag --{missing[0]}")
    for env, error in zip(envs, probe["errors"], strict=True):
        if error:
            raise ValueError(f"launch.{system} rejects --env={env} with the space's first point: "
                             f"{' '.join(error.split())}")


def _work(config: dict) -> None:
    """One worker: draws and runs trials until the study has `trials` finished ones."""
    import optuna
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    signal.signal(signal.SIGTERM, _raise_interrupt)
    if config["worker"] > 0:
        tuning.die_with_parent()  # a worker process: SIGTERM when the study's main process ends
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = load_study(config["study_dir"], config["storage"], config["sampler_seed"], config["prune_warmup"],
                       worker=config["worker"], prune_startup=config["prune_startup"])
    objective = Objective(config["study_dir"], config["system"], config["envs"], config["passthrough"],
                          search_space.from_dicts(config["space"]), range(config["seeds"]), config["lows"],
                          config["highs"])
    if finished_count(study) >= config["trials"]:
        return
    if config["population"]:
        tuning.run_populations(study, objective, config["population"], config["trials"])
        return
    study.optimize(objective, catch=(RunFailed,), callbacks=[
        MaxTrialsCallback(config["trials"], states=(TrialState.COMPLETE, TrialState.PRUNED)),
        lambda study, trial: print(f"[tune] trial {trial.number}: {trial.state.name.lower()}"
                                   + (f" {trial.value:.4g}" if trial.value is not None else "")
                                   + f"  {trial.params}", flush=True)])


def _population(system: str, envs: list[str], space) -> int:
    """Trials per Anakin program: `--population` where the space is one vmappable flag and one task, else 0."""
    if system != "anakin" or len(envs) != 1 or tuning.population_flag(space) is None:
        return 0
    return _POPULATION.value


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    passthrough = list(argv[1:])
    if not _SYSTEM.value or not _ENV.value or not _STUDY_DIR.value:
        _fail("give --system, --env and --study_dir")
    system, envs = _SYSTEM.value, list(_ENV.value)
    try:
        space = _space(system, passthrough)
        check(system, envs, passthrough, space)
        lows = highs = None
        if len(envs) > 1:
            if len(_REFERENCES.value) != len(envs):
                raise ValueError(f"--env names {len(envs)} tasks: give --references with one score each")
            lows, highs = random_returns(envs), [float(x) for x in _REFERENCES.value]
        import optuna  # the tune extra
    except ImportError:
        _fail('launch.tune needs Optuna: pip install -e ".[tune]"')
    except ValueError as error:
        _fail(error)
    study_dir = _STUDY_DIR.value
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # its matplotlib plots
    study = load_study(study_dir, _STORAGE.value, _SAMPLER_SEED.value, _PRUNE_WARMUP.value,
                       prune_startup=_PRUNE_STARTUP.value)
    for number in recover_stale_trials(study):
        print(f"[tune] trial {number} was left running by a stopped process: its point is drawn again", flush=True)
    config = dict(study_dir=study_dir, storage=_STORAGE.value, sampler_seed=_SAMPLER_SEED.value,
                  prune_warmup=_PRUNE_WARMUP.value, prune_startup=_PRUNE_STARTUP.value, system=system, envs=envs,
                  passthrough=passthrough,
                  space=search_space.as_dicts(space), seeds=_SEEDS.value, lows=lows, highs=highs,
                  trials=_TRIALS.value, population=_population(system, envs, space))
    print(f"[tune] launch.{system} on {', '.join(envs)}: {finished_count(study)}/{_TRIALS.value} trials finished; "
          f"space {', '.join(d.name for d in space)}; study {study_dir}", flush=True)
    workers = [multiprocessing.get_context("spawn").Process(target=_work, args=(dict(config, worker=w),))
               for w in range(1, _WORKERS.value)]
    try:
        for process in workers:
            process.start()
        _work(dict(config, worker=0))
        for process in workers:
            process.join()
    except KeyboardInterrupt:
        for process in workers:
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)
        for process in workers:
            process.join()
        print(f"[tune] stopped; rerun the same command to continue ({finished_count(study)}/{_TRIALS.value} "
              "trials finished)", flush=True)
        sys.exit(130)
    from launch import tune_report

    try:
        tune_report.finish(study, Objective(study_dir, system, envs, passthrough, space, range(_SEEDS.value), lows,
                                            highs), _FINAL_SEEDS.value)
    except KeyboardInterrupt:
        print("[tune] stopped during the final runs; rerun the same command to continue", flush=True)
        sys.exit(130)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
