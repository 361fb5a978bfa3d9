"""Report tools (seed 000, section 5 evaluation protocol; Tables 1, 2, 4, 5; Figs. 4, 5): run metrics
against hand-computed values on synthetic run directories, bootstrap intervals, grouping, exact Markdown tables,
figures, and `launch.report` (output and the one-line exit-2 error path). No training runs."""

import csv
import dataclasses
import json
import os
import subprocess
import sys

import chex
import numpy as np
import pytest
from absl.testing import flagsaver

from analysis import metrics, plots, tables
from envs.step_time import parse_step_time
from launch import report as launch_report
from systems.common.config import TrainConfig
from systems.common.outputs import EVAL_FIELDS, ON_POLICY_LOSSES, PPO_COLUMNS, PROGRESS_BASE
from systems.hts.system import HTSConfig
from tests.fixtures import REPO_ROOT

ROOT = REPO_ROOT
SAMPLES = 2000  # bootstrap resamples where the exact interval does not matter (keeps the file fast)

# Twelve evaluations: return i at wall time 10 (i + 1) s and 100 (i + 1) env steps, 1 episode when i is even and 3
# when odd, so episode weighting matters:
#   final metric (i = 2..11): (2+4+6+8+10) * 1 + (3+5+7+9+11) * 3 = 135 over 20 episodes = 6.75 (unweighted: 6.5);
#   final time metric, T = 55 s (i = 0..4): (0 + 3 + 2 + 9 + 4) / 9 = 2.0;
#   running average at i = 0..6: 0, 3/4, 5/5, 14/8, 18/9, 33/12, 39/13 = 3.0 -> target 3 reached at 70 s.
EVALS = [(100 * (i + 1), 10.0 * (i + 1), 1 if i % 2 == 0 else 3, float(i)) for i in range(12)]
FINGERPRINT = "ab" * 32


PROGRESS_FIELDS = PROGRESS_BASE + ON_POLICY_LOSSES + PPO_COLUMNS  # an HTS-PPO run's progress.csv


def _write_run(
    run_dir, *, system="hts", seed=1, evals=EVALS, progress=((64, 10.0), (1064, 12.0)), fingerprint=FINGERPRINT,
    summary=None, **config,
):
    """A run directory as the systems write it (config.json from the real TrainConfig, the real CSV columns)."""
    os.makedirs(run_dir, exist_ok=True)
    config_cls = HTSConfig if system == "hts" else TrainConfig
    cfg = config_cls(**{"env_id": "CartPole-v1", "seed": seed, "logdir": str(run_dir), **config})
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(dataclasses.asdict(cfg), f)
    with open(os.path.join(run_dir, "progress.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, PROGRESS_FIELDS)
        writer.writeheader()
        for i, (steps, wall) in enumerate(progress):
            writer.writerow({"env_steps": steps, "wall_time": wall, "sps": 1.0, "update": i + 1, "policy_lag": 1})
    with open(os.path.join(run_dir, "evaluations.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, EVAL_FIELDS)
        writer.writeheader()
        for steps, wall, episodes, mean in evals:
            writer.writerow({"env_steps": steps, "wall_time": wall, "policy_version": steps // 64,
                             "episodes": episodes, "mean_return": mean, "std_return": 0.0})
    if summary is not False:
        payload = {"system": system, "seed": seed, "env_id": cfg.env_id, "sps": 123.0, "wall_time": 130.0,
                   "max_policy_lag": 1, "interrupted": False, "param_fingerprint": fingerprint,
                   "env_steps": progress[-1][0]}
        payload.update(summary or {})
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            json.dump(payload, f)
    return str(run_dir)


def _run(tmp_path, name="run", **kwargs):
    return metrics.load_run(_write_run(tmp_path / name, **kwargs))


# ---------------------------------------------------------------------------------------------- per-run metrics


def test_final_metric_is_episode_weighted_over_last_ten(tmp_path):
    run = _run(tmp_path)
    assert metrics.final_metric(run.evaluations) == pytest.approx(6.75)
    assert run.summary["system"] == "hts" and run.seed == 1


def test_final_time_metric(tmp_path):
    evals = _run(tmp_path).evaluations
    assert metrics.final_time_metric(evals, 55.0) == pytest.approx(2.0)
    assert metrics.final_time_metric(evals, 1e9) == pytest.approx(6.75)
    assert metrics.final_time_metric(evals, 5.0) is None  # no evaluation before the limit


def test_required_time(tmp_path):
    evals = _run(tmp_path).evaluations
    assert metrics.required_time(evals, 3.0) == pytest.approx(70.0)
    assert metrics.required_time(evals, 100.0) is None
    # Each step of the running average (0, 3/4, 5/5, 14/8, 18/9, 33/12, 39/13) against a naive loop over episodes.
    episodes = [[ret] * count for _, _, count, ret in EVALS]
    running = [np.mean(sum(episodes[max(0, i - 9) : i + 1], [])) for i in range(len(EVALS))]
    np.testing.assert_allclose(running[:7], [0, 0.75, 1, 1.75, 2, 2.75, 3])
    for i in range(1, len(EVALS)):
        if running[i] > max(running[:i]):  # first time the running average reaches this value: evaluation i
            assert metrics.required_time(evals, running[i]) == pytest.approx(EVALS[i][1])


def test_sps_lag_fingerprint(tmp_path):
    run = _run(tmp_path, progress=((64, 10.0), (564, 11.0), (1064, 12.0)))
    assert metrics.steady_state_sps(run) == pytest.approx(1000 / 2.0)
    assert metrics.max_policy_lag(run) == 1
    assert metrics.fingerprint(run) == FINGERPRINT
    single = _run(tmp_path, "single", progress=((64, 10.0),))
    assert metrics.steady_state_sps(single) == 123.0  # one row: the summary's SPS


def test_resumed_run_drops_superseded_rows(tmp_path):
    # Killed after evaluating at 300 and 400 steps, resumed from a checkpoint at 250: 300 and 400 come again.
    evals = [(100, 1.0, 1, 1.0), (200, 2.0, 1, 2.0), (300, 3.0, 1, 9.0), (400, 4.0, 1, 9.0),
             (300, 3.5, 1, 3.0), (400, 4.5, 1, 4.0)]
    run = _run(tmp_path, evals=evals)
    np.testing.assert_array_equal(run.evaluations.env_steps, [100, 200, 300, 400])
    np.testing.assert_array_equal(run.evaluations.mean_return, [1, 2, 3, 4])


def test_progress_whose_wall_time_goes_backwards_is_refused(tmp_path):
    """Rows of two runs interleaved in one progress.csv gave a 62x-wrong SPS (the run-directory lock now prevents
    the interleaving; the report still refuses such a file rather than compute from it)."""
    with pytest.raises(metrics.RunError, match=r"progress.csv: wall_time goes backwards after env step 1064"):
        _run(tmp_path, progress=((64, 10.0), (1064, 12.0), (1128, 3.0)))


def test_step_time_variance():
    assert metrics.step_time_variance("none") == 0.0
    assert metrics.step_time_variance("const:0.01") == 0.0
    assert metrics.step_time_variance("exp:0.004") == pytest.approx(0.004**2)  # 1 / beta^2 with beta = 250
    assert metrics.step_time_variance("gamma:4:0.002") == pytest.approx(0.002**2 / 4)
    for spec in ("exp:0.004", "gamma:4:0.002"):
        samples = parse_step_time(spec).sample(np.random.default_rng(0), 200_000)
        assert np.var(samples) == pytest.approx(metrics.step_time_variance(spec), rel=0.03)
    with pytest.raises(ValueError, match="step time"):
        metrics.step_time_variance("weibull:3")


# --------------------------------------------------------------------------------------------- reading errors


def test_load_run_errors_name_the_file(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(metrics.RunError, match="config.json"):
        metrics.load_run(str(empty))
    with pytest.raises(metrics.RunError, match="no run directory below"):
        metrics.find_run_dirs(str(empty))
    unfinished = _write_run(tmp_path / "unfinished", summary=False)
    with pytest.raises(metrics.UnfinishedRunError, match="summary.json"):
        metrics.load_run(unfinished)
    interrupted = _write_run(tmp_path / "interrupted", summary={"interrupted": True})
    with pytest.raises(metrics.UnfinishedRunError, match="interrupted"):
        metrics.load_run(interrupted)
    no_evals = _write_run(tmp_path / "no_evals")
    os.remove(os.path.join(no_evals, "evaluations.csv"))
    with pytest.raises(metrics.RunError, match="missing evaluations.csv"):
        metrics.load_run(no_evals)
    bad = _write_run(tmp_path / "bad")
    with open(os.path.join(bad, "progress.csv"), "a") as f:
        f.write("abc" + "," * (len(PROGRESS_FIELDS) - 1) + "\n")
    with pytest.raises(metrics.RunError, match=r"progress.csv line 4: column 'env_steps' is not a number: 'abc'"):
        metrics.load_run(bad)


def test_find_run_dirs_walks_a_sweep_dir(tmp_path):
    a = _write_run(tmp_path / "sweep" / "p0")
    b = _write_run(tmp_path / "sweep" / "p1")
    (tmp_path / "sweep" / "sweep.json").write_text("{}")
    (tmp_path / "sweep" / "p2").mkdir()  # a point that never started: only launch.sweep's launch.log
    (tmp_path / "sweep" / "p2" / "launch.log").write_text("error: ...")
    never = str(tmp_path / "sweep" / "p2")
    assert metrics.find_run_dirs(str(tmp_path / "sweep")) == ([a, b], [never])
    assert metrics.find_run_dirs(a) == ([a], [])
    assert metrics.find_run_dirs(str(tmp_path)) == ([a, b], [never])


# ------------------------------------------------------------------------------------------------- bootstrap


def test_bootstrap_ci():
    values = [1.0, 4.0, 2.0, 8.0, 5.0]
    stat = metrics.bootstrap_ci(values)
    assert stat.mean == pytest.approx(4.0) and stat.n == 5
    assert stat.low < stat.mean < stat.high
    assert metrics.bootstrap_ci(values) == stat  # fixed seed: reproducible
    # Degenerate: all seeds equal -> zero width.
    same = metrics.bootstrap_ci([0.82, 0.82, 0.82])
    assert (same.low, same.mean, same.high) == pytest.approx((0.82, 0.82, 0.82)) and same.half_width == pytest.approx(0)
    # Two seeds a < b: a resample's mean is a, (a+b)/2 or b with probability 1/4, 1/2, 1/4, so the 2.5th and 97.5th
    # percentiles are a and b.
    pair = metrics.bootstrap_ci([10.0, 30.0])
    assert (pair.low, pair.mean, pair.high) == (10.0, 20.0, 30.0)
    single = metrics.bootstrap_ci([5.0, None])
    assert single == metrics.Stat(5.0, None, None, 1, 2)
    assert metrics.bootstrap_ci([None, None]) is None


def test_bootstrap_ratio():
    ratio = metrics.bootstrap_ratio([2000.0, 2000.0], [1000.0, 1000.0])
    assert (ratio.low, ratio.mean, ratio.high) == pytest.approx((2.0, 2.0, 2.0))
    spread = metrics.bootstrap_ratio([1800.0, 2200.0, 2000.0], [900.0, 1100.0], samples=SAMPLES)
    assert spread.mean == pytest.approx(2000 / 1000) and spread.low < spread.mean < spread.high
    assert metrics.bootstrap_ratio([2000.0], [1000.0]).low is None


# -------------------------------------------------------------------------------------------------- grouping


def test_grouping_labels(tmp_path):
    runs = [_run(tmp_path, f"a{a}_s{s}", seed=s, num_actors=a) for a in (16, 4, 1) for s in (2, 1)]
    runs.append(_run(tmp_path, "sync", system="sync"))  # the sync baseline has no actor threads
    groups = metrics.group_runs(runs)
    labels = ["hts num_actors=1", "hts num_actors=4", "hts num_actors=16", "sync"]
    assert [g.label for g in groups] == labels
    assert [[r.seed for r in g.runs] for g in groups] == [[1, 2], [1, 2], [1, 2], [1]]
    assert metrics.varying_fields(runs) == ["num_actors"]  # seed and logdir differ too but never group
    assert metrics.swept_field(groups) is None  # num_actors and system
    assert metrics.swept_field(groups[:3]) == "num_actors"
    same = metrics.group_runs([_run(tmp_path, "h", seed=3), _run(tmp_path, "s", system="sync", seed=3)])
    assert [g.label for g in same] == ["hts", "sync"] and metrics.swept_field(same) == "system"


def test_seeds_whose_plans_differ_stay_one_configuration(tmp_path):
    """A plan is what the system derived on its machine (PAL's measured allocation can differ by seed)."""
    runs = [_run(tmp_path, f"s{s}", seed=s) for s in (1, 2)]
    for run, actors in zip(runs, (2, 3), strict=True):
        run.config["plan"] = {"num_actors": actors}
    assert [len(g.runs) for g in metrics.group_runs(runs)] == [2] and metrics.varying_fields(runs) == []


def test_group_metrics_required_time_over_reaching_seeds(tmp_path):
    never = [(s, w, c, 0.0) for s, w, c, _ in EVALS]
    runs = [_run(tmp_path, "s1", seed=1), _run(tmp_path, "s2", seed=2, evals=never)]
    (group,) = metrics.group_runs(runs)
    result = metrics.group_metrics(group, time_limit=55.0, targets=(3.0, 100.0))
    reach, miss = result.required_times
    assert (reach.reached, reach.total, reach.stat.mean, reach.stat.low) == (1, 2, 70.0, None)
    assert (miss.reached, miss.stat) == (0, None)
    assert result.final_metric.mean == pytest.approx((6.75 + 0.0) / 2)
    assert result.final_time_metric.mean == pytest.approx(1.0)
    assert tables.format_required_times(result.required_times) == "1.17 (1/2)/-"


def test_fastest_time_limit(tmp_path):
    # Table 1: the time limit is when the fastest configuration finished, i.e. its slowest seed (100 s here).
    runs = [_run(tmp_path, "slow", num_envs=4), _run(tmp_path, "fast1", num_envs=8, summary={"wall_time": 90.0}),
            _run(tmp_path, "fast2", num_envs=8, seed=2, summary={"wall_time": 100.0})]
    groups = metrics.group_runs(runs)
    assert metrics.fastest_finish_time(groups) == 100.0
    assert launch_report.parse_time_limit("fastest", groups) == 100.0
    assert launch_report.parse_time_limit(" 55 ", groups) == 55.0 and launch_report.parse_time_limit("", groups) is None


def test_curve_mean_and_band(tmp_path):
    shifted = [(s, w + 1.0, c, r + 2.0) for s, w, c, r in EVALS]
    runs = [_run(tmp_path, "a", seed=1), _run(tmp_path, "b", seed=2, evals=shifted)]
    by_steps = metrics.curve(runs, "env_steps", points=50, samples=SAMPLES)
    chex.assert_equal_shape([by_steps.x, by_steps.mean, by_steps.low, by_steps.high])
    chex.assert_rank(by_steps.x, 1)
    at_evals = np.isin(by_steps.x, [e[0] for e in EVALS])
    assert at_evals.sum() == len(EVALS)  # every evaluation point is on the grid
    np.testing.assert_allclose(by_steps.mean[at_evals], np.arange(12) + 1.0)
    assert np.all(by_steps.low <= by_steps.mean) and np.all(by_steps.mean <= by_steps.high)
    by_time = metrics.curve(runs, "wall_time", samples=SAMPLES)
    assert by_time.x[0] == pytest.approx(11.0) and by_time.x[-1] == pytest.approx(120.0)  # common range
    one = metrics.curve(runs[:1], "env_steps")
    assert one.low is None and one.n == 1
    later = [(s, w + 500.0, c, r) for s, w, c, r in EVALS]  # a seed that started after the other finished
    assert metrics.curve([runs[0], _run(tmp_path, "late", seed=3, evals=later)], "wall_time") is None


# ---------------------------------------------------------------------------------------------------- tables


def _metrics(system, fields, final, final_time, required, sps, lag, seeds):
    group = metrics.Group(system=system, fields=fields, runs=())
    per_run = tuple(metrics.RunMetrics(s, None, None, {}, None, None, None, None) for s in range(seeds))
    return metrics.GroupMetrics(group, per_run, final, final_time, required, sps, lag, {})


def test_metrics_table_exact_markdown():
    results = [
        _metrics(
            "hts", (("num_actors", 1),), metrics.Stat(0.82, 0.77, 0.87, 2, 2), metrics.Stat(0.7, None, None, 1, 2),
            (metrics.RequiredTime(0.4, metrics.Stat(60.0, 30.0, 90.0, 2, 2), 2, 2),
             metrics.RequiredTime(0.8, None, 0, 2)),
            metrics.Stat(1362.0, 1312.0, 1412.0, 2, 2), 1, 2,
        ),
        _metrics(
            "hts", (("num_actors", 4),), metrics.Stat(0.8, 0.8, 0.8, 2, 2), None,
            (metrics.RequiredTime(0.4, metrics.Stat(45.0, None, None, 1, 2), 1, 2),
             metrics.RequiredTime(0.8, metrics.Stat(600.0, 600.0, 600.0, 2, 2), 2, 2)),
            metrics.Stat(1393.4, None, None, 1, 1), None, 1,
        ),
    ]
    expected = (
        "| configuration | final metric | final time metric (T = 600 s) | required time (min) to 0.4/0.8 | SPS "
        "| bound (stage, share of its thread) | max policy lag | seeds |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |\n"
        "| hts num_actors=1 | 0.82 ± 0.05 | 0.7 (n=1) (1/2) | 1.00/- | 1362 ± 50 | learner-bound (update 71%) "
        "| 1 | 2 |\n"
        "| hts num_actors=4 | 0.8 ± 0.0 | - | 0.75 (1/2)/10.0 | 1393 (n=1) | - | - | 1 |"
    )
    results[0] = dataclasses.replace(results[0], bound="learner-bound (update 71%)")
    assert tables.metrics_table(results, targets=(0.4, 0.8), time_limit=600.0) == expected
    interval = tables.metrics_table(results[:1], ci="interval")
    assert interval.splitlines()[2] == ("| hts num_actors=1 | 0.82 [0.77, 0.87] | 1362 [1312, 1412] | learner-bound "
                                        "(update 71%) | 1 | 2 |")


def test_sweep_table_num_actors_identical_fingerprints(tmp_path):
    runs = [
        _run(tmp_path, f"a{a}_s{s}", seed=s, num_actors=a, fingerprint=f"{s:02d}" * 32,
             progress=((64, 10.0), (64 + 1000 * a, 12.0)))
        for a in (1, 4) for s in (1, 2)
    ]
    groups = metrics.group_runs(runs)
    field = metrics.swept_field(groups)
    results = [metrics.group_metrics(g, samples=SAMPLES) for g in groups]
    assert field == "num_actors"
    assert tables.sweep_table(results, field) == (
        "| num_actors | 1 | 4 |\n"
        "| --- | --- | --- |\n"
        "| Steps per second (SPS) | 500 ± 0 | 2000 ± 0 |\n"
        "| Average score (final metric) | 6.75 ± 0.00 | 6.75 ± 0.00 |\n"
        "| Fingerprint (seed 1) | 01010101 | 01010101 |\n"
        "| Fingerprint (seed 2) | 02020202 | 02020202 |\n"
        "\n"
        "Fingerprints identical across every num_actors value for each seed (1, 2): bit-identical parameters."
    )
    changed = _run(tmp_path, "a4_s2_changed", seed=2, num_actors=4, fingerprint="ff" * 32)
    results = [metrics.group_metrics(g, samples=SAMPLES) for g in metrics.group_runs(runs[:3] + [changed])]
    assert tables.fingerprint_line(results, "num_actors") == (
        "Fingerprints differ across num_actors for seed(s) 2 (compared seeds: 1, 2)."
    )


def test_speedup_pairs_hts_and_sync(tmp_path):
    runs = []
    for step_time, hts_speed in (("none", 1.5), ("exp:0.001", 4.0)):
        for s in (1, 2):
            sync_wall = 12.0 + 0.5 * (s - 1)  # sync: 1000 steps in 2 s (seed 1) or 2.5 s (seed 2)
            runs.append(_run(tmp_path, f"sync_{step_time}_{s}", system="sync", seed=s, step_time=step_time,
                             progress=((64, 10.0), (1064, sync_wall))))
            runs.append(_run(tmp_path, f"hts_{step_time}_{s}", seed=s, step_time=step_time,
                             progress=((64, 10.0), (1064, 10.0 + (sync_wall - 10.0) / hts_speed))))
    runs.append(_run(tmp_path, "sync_other_envs", system="sync", num_envs=16))  # no hts partner
    results = [metrics.group_metrics(g, samples=SAMPLES) for g in metrics.group_runs(runs)]
    points = metrics.speedup_points(results, samples=SAMPLES)
    assert [(p.step_time, p.variance) for p in points] == [("exp:0.001", pytest.approx(1e-6)), ("none", 0.0)]
    assert [p.speedup.mean for p in points] == pytest.approx([4.0, 1.5])
    # Two seeds each: a resampled mean is one seed's value with probability 1/4 > 2.5%, so the interval runs from
    # the smallest to the largest ratio of seed values: none 600/500 to 750/400, exp 1600/500 to 2000/400.
    assert [bound for p in points for bound in (p.speedup.low, p.speedup.high)] == pytest.approx([3.2, 5, 1.2, 1.875])
    assert tables.speedup_table(points).splitlines()[2:] == [
        "| CartPole-v1 | 8 | hts num_envs=8 | sync num_envs=8 | none | 0 | 675 ± 75 | 450 ± 50 | 1.50 ± 0.34 |",
        "| CartPole-v1 | 8 | hts num_envs=8 | sync num_envs=8 | exp:0.001 | 1e-06 | 1800 ± 200 | 450 ± 50 "
        "| 4.00 ± 0.90 |",
    ]


# ----------------------------------------------------------------------------------------------------- plots


def _png_ok(path):
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(path) > 1000


def test_plots_written_and_skipped(tmp_path):
    runs = []
    for num_envs in (4, 8):
        for step_time in ("none", "exp:0.001"):
            for system in ("hts", "sync"):
                steps = 64 + 100 * num_envs * (2 if system == "hts" else 1)  # in 1 s
                for s in (1, 2):
                    runs.append(_run(tmp_path, f"{system}_{num_envs}_{step_time}_{s}", system=system, seed=s,
                                     num_envs=num_envs, step_time=step_time, progress=((64, 10.0), (steps, 11.0))))
    results = [metrics.group_metrics(g, samples=SAMPLES) for g in metrics.group_runs(runs)]
    points = metrics.speedup_points(results, samples=SAMPLES)
    written = plots.write_plots(results, str(tmp_path / "out"), speedups=points, samples=SAMPLES)
    assert [r.name for r in written] == [plots.FIG5, plots.FIG4_SPS, plots.FIG4_SPEEDUP]
    for result in written:
        assert result.skipped is None
        _png_ok(result.path)
    # One configuration: only Fig. 5, the others say why not.
    single = [metrics.group_metrics(g, samples=SAMPLES) for g in metrics.group_runs(runs[:2])]
    written = plots.write_plots(single, str(tmp_path / "single"), samples=SAMPLES)
    assert [r.path is not None for r in written] == [True, False, False]
    assert "num_envs" in written[1].skipped and "hts and sync" in written[2].skipped


# ---------------------------------------------------------------------------------------------- launch.report


def test_report_main(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for a in (1, 4):
        for s in (1, 2):
            _write_run(sweep / f"a{a}_s{s}", seed=s, num_actors=a, fingerprint=f"{s:02d}" * 32)
    _write_run(sweep / "unfinished", summary=False, num_actors=8)
    out = tmp_path / "report"
    with flagsaver.flagsaver(targets=["3", "100"], report_time_limit="55", report_dir=str(out),
                             bootstrap_samples=SAMPLES):
        launch_report.main(["report", str(sweep)])
    captured = capsys.readouterr()
    assert "| hts num_actors=1 | 6.75 ± 0.00 | 2.00 ± 0.00 | 1.17/- | 500 ± 0 | - | 1 | 2 |" in captured.out
    assert "| num_actors | 1 | 4 |" in captured.out
    assert "Fingerprints identical across every num_actors value for each seed (1, 2)" in captured.out
    assert "unfinished run (no summary.json); skipped" in captured.err
    with open(out / "report.md") as f:
        assert f.read().strip() == captured.out.strip()
    _png_ok(out / plots.FIG5)
    assert not (out / plots.FIG4_SPS).exists()


def test_report_iqm_over_seeds(tmp_path, capsys):
    """--iqm: the interquartile mean of four seeds' final metrics drops the best and the worst (rliable)."""
    sweep = tmp_path / "sweep"
    for s, shift in enumerate((0.0, 1.0, 2.0, 100.0)):  # final metrics 6.75 + shift
        evals = [(steps, wall, episodes, mean + shift) for steps, wall, episodes, mean in EVALS]
        _write_run(sweep / f"s{s}", seed=s, evals=evals)
    out = tmp_path / "report"
    with flagsaver.flagsaver(iqm=True, report_dir=str(out), bootstrap_samples=SAMPLES):
        launch_report.main(["report", str(sweep)])
    captured = capsys.readouterr()
    assert "## IQM over seeds (rliable)" in captured.out
    section = captured.out.split("## IQM over seeds (rliable)")[1]
    row = next(line for line in section.splitlines() if line.startswith("| hts |"))
    assert row.split("|")[2].strip() == "4"
    assert float(row.split("|")[3].split("[")[0]) == pytest.approx(6.75 + 1.5)  # mean of 7.75 and 8.75
    _png_ok(out / launch_report.IQM_FIGURE)


def test_the_seed_fixes_the_iqm_intervals_whatever_numpys_global_state():
    """rliable's stratified bootstrap draws from NumPy's global generator: `aggregate` seeds it for the call and
    puts it back, so the intervals (and the figures) are the same in every process and the caller's draws are
    untouched."""
    from analysis import aggregate

    scores = {"a": np.random.default_rng(1).normal(size=(5, 3)), "b": np.random.default_rng(2).normal(size=(4, 3))}
    results = []
    for global_seed in (1, 2):
        np.random.seed(global_seed)
        results.append(aggregate.iqm_intervals(scores, reps=500, seed=7))
        after_call = np.random.random()
        np.random.seed(global_seed)
        assert after_call == np.random.random()  # the global state is the caller's again
    assert results[0] == results[1]
    assert results[0] != aggregate.iqm_intervals(scores, reps=500, seed=8)  # the seed, not chance, fixes them


@pytest.mark.parametrize(
    "args,flag_values,message",
    [
        ([], {}, "give one or more run directories"),
        (["missing"], {}, "no such file or directory"),
        (["empty"], {}, "not a run directory"),
        (["bad"], {}, "is not a number"),
        (["only_unfinished"], {}, "no finished runs"),
        (["good"], {"targets": ["x"]}, "--targets must be numbers"),
        (["good"], {"report_time_limit": "soon"}, "--report_time_limit"),
    ],
)
def test_report_bad_input_one_line_exit_2(tmp_path, capsys, args, flag_values, message):
    (tmp_path / "empty").mkdir()
    _write_run(tmp_path / "good")
    _write_run(tmp_path / "only_unfinished", summary=False)
    bad = _write_run(tmp_path / "bad")
    with open(os.path.join(bad, "evaluations.csv"), "a") as f:
        f.write("100,1.0,1,1,oops,0\n")
    with flagsaver.flagsaver(**flag_values), pytest.raises(SystemExit) as exit_info:
        launch_report.main(["report"] + [str(tmp_path / a) for a in args])
    assert exit_info.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning:")]
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_report_subprocess_error_has_no_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "launch.report", str(tmp_path / "nothing")], cwd=ROOT, capture_output=True, text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {tmp_path / 'nothing'}: no such file or directory"]
