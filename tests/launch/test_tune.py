"""`launch.tune`: search spaces from files and from the config fields, the objective (seeds, tasks, pruning),
stale trials drawn again, and a tiny study that a SIGTERM stops and a rerun finishes without repeating a run."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis import search_space
from launch import tuning
from systems.sync.config import SyncConfig
from tests.fixtures import REPO_ROOT, launcher_config

_SPECS = st.one_of(
    st.builds(lambda low, width, log: {"type": "float", "low": low, "high": low + width, "log": log},
              st.floats(1e-6, 10), st.floats(1e-3, 10), st.booleans()),
    st.builds(lambda low, width: {"type": "int", "low": low, "high": low + width},
              st.integers(1, 100), st.integers(1, 100)),
    st.lists(st.one_of(st.integers(0, 9), st.text("abc,", min_size=1, max_size=5)), min_size=1, max_size=4,
             unique=True).map(lambda choices: {"type": "categorical", "choices": choices}),
)


@settings(max_examples=60, deadline=None)
@given(specs=st.dictionaries(st.sampled_from(["a", "b", "c"]), _SPECS, min_size=1), seed=st.integers(0, 100))
def test_a_point_drawn_from_any_space_lies_in_it_and_its_flags_read_back(specs, seed, tmp_path_factory):
    path = tmp_path_factory.mktemp("space") / "space.json"
    path.write_text(json.dumps(specs))
    space = search_space.load(str(path))
    assert search_space.from_dicts(search_space.as_dicts(space)) == space
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)).ask()
    point = {d.name: d.suggest(trial) for d in space}
    for name, value in point.items():
        spec = specs[name]
        if spec["type"] == "categorical":
            assert value in spec["choices"]
        else:
            assert spec["low"] <= value <= spec["high"]
    for flag, (name, value) in zip(search_space.flags(point), point.items(), strict=True):
        written = flag.partition("=")[2]
        assert flag.startswith(f"--{name}=") and (float(written) == value if isinstance(value, float)
                                                  else written == str(value))


def test_yaml_spaces_and_bad_ones_are_one_line(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("learning_rate: {type: float, low: 1.0e-5, high: 1.0e-2, log: true}\n")
    (lr,) = search_space.load(str(path))
    assert (lr.kind, lr.low, lr.high, lr.log) == ("float", 1e-5, 1e-2, True)
    for text, says in (("{}", "non-empty mapping"), ('{"x": {"type": "float", "low": 2, "high": 1}}', "low < high"),
                       ('{"x": {"type": "float", "low": 0, "high": 1, "log": true}}', "low > 0"),
                       ('{"x": {"type": "normal"}}', "one of float"), ('{"x": {"type": "categorical"}}', "choices"),
                       ('{"x": {"type": "int", "low": 0.5, "high": 3}}', "whole numbers"), ("{x", "not valid json")):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(ValueError, match=says) as error:
            search_space.load(str(tmp_path / "bad.json"))
        assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="No such file"):
        search_space.load(str(tmp_path / "missing.json"))


def test_the_default_space_is_declared_on_the_fields_and_ppos_own_only_for_ppo():
    def names(algo):
        return {d.name for d in search_space.default_space(SyncConfig, algo, lambda name: True)}

    assert names("ppo") == {"learning_rate", "gamma", "gae_lambda", "entropy_coef", "clip_eps", "num_epochs",
                            "num_minibatches", "hidden_sizes"}
    assert names("a2c") == names("ppo") - {"clip_eps", "num_epochs", "num_minibatches"}
    assert not search_space.default_space(SyncConfig, "ppo", lambda name: False)


def test_one_task_scores_its_mean_and_several_their_normalized_mean():
    assert tuning.score([3.0], None, None) == 3.0
    assert tuning.score([10.0, 0.0], [0.0, -10.0], [20.0, 10.0]) == pytest.approx((0.5 + 0.5) / 2)


def _objective(tmp_path, run_one, monkeypatch, seeds=2):
    monkeypatch.setattr(tuning, "run_one", run_one)
    space = (search_space.Dimension("learning_rate", "float", 1e-4, 1e-2, True),)
    return tuning.Objective(str(tmp_path), "sync", ["CartPole-v1"], [], space, range(seeds), None, None)


def test_a_trial_is_the_mean_over_its_seeds_and_a_non_finite_run_prunes(tmp_path, monkeypatch):
    metrics = iter([10.0, 30.0, 5.0, math.nan])
    objective = _objective(tmp_path, lambda system, args, run_dir, on_evaluation=None: {
        "final_metric": next(metrics)}, monkeypatch)
    study = optuna.create_study(direction="maximize")
    study.optimize(objective, n_trials=2)
    states = [t.state for t in study.trials]
    assert study.trials[0].value == 20.0 and states[1] == optuna.trial.TrialState.PRUNED


def _worse_below_1e3(system, args, run_dir, on_evaluation=None):
    """A run whose six evaluations read -1 at a learning rate below 1e-3 and 1 above."""
    rate = float(args[-2].partition("=")[2])
    for index in range(6):
        if on_evaluation is not None:
            on_evaluation(index, -1.0 if rate < 1e-3 else 1.0)
    return {"final_metric": 1.0}


def test_a_run_below_the_median_is_pruned_at_its_evaluation(tmp_path, monkeypatch):
    study = optuna.create_study(direction="maximize",
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=2))
    for rate in (5e-3, 6e-3, 2e-4):
        study.enqueue_trial({"learning_rate": rate})
    study.optimize(_objective(tmp_path, _worse_below_1e3, monkeypatch, seeds=1), n_trials=3)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE", "PRUNED"]
    assert max(study.trials[2].intermediate_values) == 2  # stopped at the first evaluation after the warm-up


@pytest.mark.parametrize("startup", [2, 3])
def test_the_study_prunes_only_once_prune_startup_trials_have_finished(tmp_path, monkeypatch, startup):
    study = tuning.load_study(str(tmp_path / "study"), "", 0, 1, prune_startup=startup)
    for rate in (5e-3, 6e-3, 2e-4, 3e-4):
        study.enqueue_trial({"learning_rate": rate})
    study.optimize(_objective(tmp_path, _worse_below_1e3, monkeypatch, seeds=1), n_trials=4)
    # Two good trials, then two bad ones: the first bad one is pruned only when `startup` trials stand before it.
    expected = ["COMPLETE", "COMPLETE", "PRUNED", "PRUNED"] if startup == 2 else [
        "COMPLETE", "COMPLETE", "COMPLETE", "PRUNED"]
    assert [t.state.name for t in study.trials] == expected


def test_a_trial_left_running_by_a_dead_process_is_drawn_again_others_are_not(tmp_path):
    study = tuning.load_study(str(tmp_path), "", 0, 1)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    owners = {"dead": ("here", int(done.stdout)), "alive": ("here", os.getpid()), "other host": ("there", 1)}
    for owner, (host, pid) in owners.items():
        trial = study.ask({"learning_rate": optuna.distributions.FloatDistribution(1e-4, 1e-2)})
        trial.set_user_attr("host", host)
        trial.set_user_attr("pid", pid)
        trial.set_user_attr("owner", owner)
    assert tuning.recover_stale_trials(study, host="here") == [0]
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "RUNNING", "RUNNING", "WAITING"]
    assert trials[3].params == {} and trials[3].system_attrs["fixed_params"] == trials[0].params


def _tune(study_dir, *extra):
    return [sys.executable, "-m", "launch.tune", "--system=sync", "--env=CartPole-v1", "--seeds_per_trial=1",
            f"--study_dir={study_dir}", "--total_steps=1024", "--eval_every=256", "--eval_episodes=1",
            "--num_envs=4", "--sync_interval=32", *extra]


def _starts(run_dir) -> int:
    with open(os.path.join(run_dir, "launch.log")) as f:
        return sum(line.startswith("# ") and "launch.tune:" in line for line in f)


@pytest.mark.slow
def test_a_study_stopped_by_sigterm_resumes_without_repeating_a_finished_run(tmp_path):
    """Three trials of tiny sync runs: SIGTERM while the second runs (exit 130), then the same command on two
    workers finishes the study, resuming the second trial's run and starting no run twice; the report, the best
    flags (which the launcher takes) and the fresh-seed runs (seeds apart from the tuning seed) are written."""
    study_dir = tmp_path / "study"
    process = subprocess.Popen(_tune(study_dir, "--trials=3", "--final_seeds=1", "--space=" + _space(tmp_path)),
                               cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    runs = study_dir / "runs"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (runs.is_dir() and len(os.listdir(runs)) >= 2):
        time.sleep(0.2)
    time.sleep(1.5)  # the second trial's run has started
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=120)[0]
    assert process.returncode == 130, output
    first = sorted(runs.iterdir(), key=os.path.getmtime)[0] / "CartPole-v1" / "s0"
    assert _starts(first) == 1

    again = subprocess.run(_tune(study_dir, "--trials=3", "--final_seeds=1", "--workers=2",
                                 "--space=" + _space(tmp_path)),
                           cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert _starts(first) == 1
    study = tuning.load_study(str(study_dir), "", 0, 1)
    assert tuning.finished_count(study) >= 3  # two workers may each start the last one
    points = [run for run in runs.iterdir()]
    assert len(points) == tuning.finished_count(study)  # every trial its own point, none run twice
    assert all(_starts(point / "CartPole-v1" / "s0") <= 2 for point in points)  # at most the resumed one twice
    assert sorted(p.name for p in (study_dir / "final" / "best" / "CartPole-v1").iterdir()) == ["s10000"]
    assert not (runs / points[0].name / "CartPole-v1" / "s10000").exists()
    assert (study_dir / "report.md").read_text().count("| complete |") >= 1
    flags = (study_dir / "best.flags").read_text().split()
    config = launcher_config(__import__("launch.sync").sync, "--env=CartPole-v1", f"--flagfile={study_dir}/best.flags")
    assert np.isclose(config.learning_rate, float(flags[0].partition("=")[2]))
    assert (study_dir / "final" / "default" / "CartPole-v1" / "s10000" / "summary.json").exists()


def _space(tmp_path) -> str:
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}}))
    return str(path)


@pytest.mark.parametrize("extra, says", [
    (("--seed=3",), "--seed is set by launch.tune"),
    (("--learning_rate=0.1",), "both searched and passed"),
    (("--space={space_with_a_typo}",), "launch.sync has no flag --learning_rat"),
])
def test_bad_input_is_one_error_line(tmp_path, extra, says):
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"learning_rat": {"type": "float", "low": 1e-4, "high": 1e-2}}))
    extra = [e.format(space_with_a_typo=typo) for e in extra]
    done = subprocess.run(_tune(tmp_path / "study", "--trials=1", *extra), cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")


def test_anakin_runs_a_population_of_trials_in_one_program(tmp_path, monkeypatch):
    """A space of one learning rate: `--population` trials go to one Anakin call as `--learning_rates`, with the
    tuning seeds as `--num_seeds`; each trial's value is the mean of its agents' final metrics."""
    calls = []

    def run_one(system, args, run_dir, on_evaluation=None):
        calls.append(args)
        rates = [float(v) for v in next(a for a in args if a.startswith("--learning_rates=")).split("=")[1].split(",")]
        seeds = int(next(a for a in args if a.startswith("--num_seeds=")).split("=")[1])
        agents = [(rate, seed) for rate in rates for seed in range(seeds)]
        return {"learning_rates": [r for r, _ in agents], "entropy_coefs": [0.01] * len(agents),
                "final_metrics": [1000 * r + s for r, s in agents]}

    monkeypatch.setattr(tuning, "run_one", run_one)
    space = (search_space.Dimension("learning_rate", "float", 1e-4, 1e-2, True),)
    assert tuning.population_flag(space) == "learning_rates"
    assert tuning.population_flag((*space, search_space.Dimension("gamma", "categorical", choices=(0.9,)))) is None
    objective = tuning.Objective(str(tmp_path), "anakin", ["gymnax/CartPole-v1"], [], space, range(2), None, None)
    study = optuna.create_study(direction="maximize")
    tuning.run_populations(study, objective, size=3, trials=5)
    assert len(calls) == 2 and all("--num_seeds=2" in args for args in calls)
    for trial in study.trials:
        assert trial.value == pytest.approx(1000 * trial.params["learning_rate"] + 0.5)
    assert len(study.trials) == 5


def test_the_off_policy_default_space_keeps_dqns_own_to_dqn():
    from systems.pal.config import PALConfig

    def names(algo):
        return {d.name for d in search_space.default_space(PALConfig, algo, lambda name: True)}

    shared = {"learning_rate", "gamma", "hidden_sizes", "batch_size"}
    assert names("dqn") == names("ddqn") == shared | {"target_update_period", "epsilon_end", "exploration_fraction"}
    assert names("sac") == names("td3") == shared


def _descendants(pid: int) -> set[int]:
    """Every process whose ancestry reaches `pid` (from /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid:
            found |= {int(entry)} | _descendants(int(entry))
    return found


def _alive(pids) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.add(pid)
        except OSError:
            pass
    return alive


@pytest.mark.slow
def test_a_sigkilled_study_leaves_no_run_or_worker_behind(tmp_path):
    """SIGKILL of the study's process while two workers run: the kernel ends its workers and their launcher runs
    (PR_SET_PDEATHSIG), which checkpoint on the way out."""
    study_dir = tmp_path / "study"
    process = subprocess.Popen(_tune(study_dir, "--trials=4", "--final_seeds=0", "--workers=2",
                                     "--space=" + _space(tmp_path), "--total_steps=100000"),
                               cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not ((study_dir / "runs").is_dir() and
                                               len(os.listdir(study_dir / "runs")) >= 2):
        time.sleep(0.2)
    time.sleep(2.0)
    family = _descendants(process.pid)
    assert len(family) >= 4  # two workers' launcher runs (and their worker processes)
    process.kill()
    process.wait()
    deadline = time.monotonic() + 60
    while _alive(family) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(family)
