"""`python -m launch.report RUN_DIRS...`: seed 000's (HTS-RL) section 5 metrics, tables and figures from finished runs.

Each RUN_DIR is a run directory (`--logdir` of launch.hts / sync / ba3c / gala) or a directory with run directories
below it (a sweep directory of launch.sweep). Runs are grouped by the config fields in which they differ (seed
aside) and reported with 95% bootstrap intervals over seeds (`analysis.metrics`):

* a Table 1 / 2 style table: final metric, final time metric (`--report_time_limit`), required time in minutes to
  each of `--targets` ("a/b" like Table 2), SPS, largest policy lag, seeds;
* a Table 4 / 5 style table when the configurations differ in exactly one field (e.g. num_actors, sync_interval),
  with each seed's parameter fingerprint and whether they agree (HTS-RL's determinism, Table 4);
* the HTS-over-sync speedup per step-time variance (Fig. 4 left) when hts and sync runs pair up;
* with `--iqm`: each configuration's interquartile mean of the final metric over seeds with a stratified-bootstrap
  interval and, for runs of one task, performance profiles (rliable, the optional `rliable` extra);
* with `--report_dir`: report.md and the figures (Fig. 5 curves, Fig. 4 panels; `analysis.plots`).

Prints the report to stdout. Unfinished or interrupted runs are skipped with a warning on stderr; bad input (no
runs, a directory that is not a run, an unreadable CSV, a bad flag) gives one `error:` line and exit code 2.

Example: python -m launch.report runs/sweep-actors --targets=0.4,0.8 --report_time_limit=fastest --report_dir=out
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence

import numpy as np
from absl import app, flags

from analysis import metrics as metrics_lib
from analysis import plots as plots_lib
from analysis import tables
from launch import cli

_TARGETS = flags.DEFINE_list(
    "targets", [], "Evaluation returns for the required time metric, e.g. 0.4,0.8 (Table 2: time to 0.4 / to 0.8)."
)
_REPORT_TIME_LIMIT = flags.DEFINE_string(
    "report_time_limit", "",
    "Seconds for the final time metric (Table 1), or 'fastest': when the fastest configuration finished training "
    "(all its seeds). Empty: no final time metric column.",
)
_REPORT_DIR = flags.DEFINE_string(
    "report_dir", "", "Write report.md and the figures (PNG) here; empty: print the report only."
)
_BOOTSTRAP_SAMPLES = flags.DEFINE_integer(
    "bootstrap_samples", metrics_lib.BOOTSTRAP_SAMPLES, "Bootstrap resamples for the 95% intervals over seeds."
)
_REPORT_TITLE = flags.DEFINE_string("report_title", "HTS-RL report", "Title of the report.")
_IQM = flags.DEFINE_boolean(
    "iqm", False,
    "Add each configuration's interquartile mean of the final metric over seeds with a 95% stratified-bootstrap "
    "interval, and (with --report_dir, runs of one task) its performance profile: rliable (pip install -e "
    '".[rliable]").',
)
_REPORT_CI = flags.DEFINE_enum(
    "report_ci", "pm", list(tables.CI_STYLES),
    "How intervals read: pm ('mean ± half-width') or interval ('mean [low, high]').",
)

REPORT_FILE = "report.md"


class ReportError(ValueError):
    """Bad input to the report: one line on stderr, exit 2."""


def parse_targets(values: list[str]) -> list[float]:
    targets = []
    for value in values:
        try:
            target = float(value)
        except ValueError:
            raise ReportError(f"--targets must be numbers, got {value!r}") from None
        if not math.isfinite(target):
            raise ReportError(f"--targets must be finite, got {value!r}")
        targets.append(target)
    return targets


def parse_time_limit(value: str, groups: list[metrics_lib.Group]) -> float | None:
    value = value.strip()
    if not value:
        return None
    if value == "fastest":
        return metrics_lib.fastest_finish_time(groups)
    try:
        seconds = float(value)
    except ValueError:
        raise ReportError(f"--report_time_limit must be seconds or 'fastest', got {value!r}") from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise ReportError(f"--report_time_limit must be positive, got {value!r}")
    return seconds


def load_runs(paths: list[str]) -> tuple[list[metrics_lib.Run], list[str]]:
    """Finished runs under `paths` and one warning per skipped directory (unfinished or interrupted run, or a
    directory beside the runs that is not one)."""
    if not paths:
        raise ReportError("give one or more run directories (or directories holding runs)")
    runs, warnings = [], []
    seen = set()
    for path in paths:
        run_dirs, not_runs = metrics_lib.find_run_dirs(path)
        warnings += [f"{d}: not a run directory (no config.json; a run that never started?); skipped" for d in not_runs]
        for run_dir in run_dirs:
            real = os.path.realpath(run_dir)
            if real in seen:
                continue
            seen.add(real)
            try:
                runs.append(metrics_lib.load_run(run_dir))
            except metrics_lib.UnfinishedRunError as error:
                warnings.append(f"{error}; skipped")
    if not runs:
        raise ReportError(f"no finished runs in {', '.join(paths)}")
    return runs, warnings


def _notes(limit: float | None, fastest: bool, targets: Sequence[float]) -> list[str]:
    """What each column of the metrics table means (seed 000, section 5)."""
    notes = ["Final metric: mean return over the last 10 evaluations (all their episodes)."]
    if limit is not None:
        when = " (when the fastest configuration finished)" if fastest else ""
        notes.append(f"Final time metric: the same over the evaluations logged by {limit:g} s{when}.")
    if targets:
        notes.append(
            "Required time: first wall time at which the running average of the last 10 evaluations reaches the "
            "target, mean over the seeds that reached it, with (k/n) when only k of n seeds did; - when none did."
        )
    notes.append("SPS: steady-state env steps per second between the first and last progress rows.")
    return notes


def build_report(
    runs: list[metrics_lib.Run],
    *,
    targets: Sequence[float],
    time_limit: str,
    samples: int,
    ci: str,
    title: str,
    report_dir: str | None,
    skipped: Sequence[str] = (),
    iqm: bool = False,
) -> str:
    """The report's Markdown; writes the figures into `report_dir` when given."""
    groups = metrics_lib.group_runs(runs)
    limit = parse_time_limit(time_limit, groups)
    results = [
        metrics_lib.group_metrics(g, time_limit=limit, targets=targets, samples=samples) for g in groups
    ]
    lines = [
        f"# {title}",
        "",
        f"{len(runs)} finished run(s) in {len(groups)} configuration(s)"
        + (f"; {len(skipped)} unfinished or unstarted run(s) skipped" if skipped else "")
        + ". Intervals: 95% percentile bootstrap over seeds "
        f"({samples:,} resamples, seed {metrics_lib.BOOTSTRAP_SEED}); n=1: a single seed, no interval.",
        *(["", "Machine(s): " + "; ".join(machines)] if (machines := metrics_lib.machines(runs)) else []),
        "",
        "## Final metrics (Tables 1 and 2)",
        "",
        tables.metrics_table(results, targets=targets, time_limit=limit, ci=ci),
        "",
        " ".join(_notes(limit, time_limit.strip() == "fastest", targets)),
    ]
    for group in groups:
        repeated = metrics_lib.duplicate_seeds(group)
        if repeated:
            lines += ["", f"Note: {group.label} has several runs of seed(s) {', '.join(map(str, repeated))}; "
                      "each run counts as one sample in the intervals."]
    field = metrics_lib.swept_field(groups)
    if field is not None:
        lines += ["", f"## Swept variable: {field} (Tables 4 and 5)", "", tables.sweep_table(results, field, ci=ci)]
    elif len(groups) > 1:
        lines += ["", "(No Table 4/5-style table: the configurations differ in more than one field.)"]
    speedups = metrics_lib.speedup_points(results, samples=samples)
    if speedups:
        lines += ["", "## HTS-RL speedup over sync vs step-time variance (Fig. 4 left)", "",
                  tables.speedup_table(speedups, ci=ci)]
    if iqm:
        lines += ["", *_iqm_section(groups, report_dir)]
    lines += ["", "## Figures", ""]
    if report_dir:
        written = plots_lib.write_plots(results, report_dir, speedups=speedups, samples=samples)
        for result in written:
            if result.path is not None:
                lines += [f"![{result.name}]({result.name})", ""]
        lines += [f"- {r.name}: skipped ({r.skipped})" for r in written if r.path is None]
        lines.append("")
    else:
        lines += ["Not written (give --report_dir to write report.md and the figures).", ""]
    if skipped:
        lines += ["## Skipped runs", "", *(f"- {w}" for w in skipped), ""]
    return "\n".join(lines)


IQM_FIGURE = "iqm.png"


def _iqm_section(groups: list[metrics_lib.Group], report_dir: str | None) -> list[str]:
    """`--iqm`: each configuration's IQM of the final metric over its runs (rliable), and with `report_dir` the
    IQM / performance-profile figure when every run is of one task (returns of different tasks do not compare)."""
    try:
        from analysis import aggregate

        aggregate.require_rliable()
    except ImportError as error:
        raise ReportError(f"--iqm: {error}") from None
    finals = {}
    for group in groups:
        values = [metrics_lib.final_metric(run.evaluations) for run in group.runs]
        values = [v for v in values if v is not None]
        if values:
            finals[group.label] = np.asarray(values)
    if not finals:
        return ["## IQM over seeds (rliable)", "", "(No run has an evaluation.)"]
    intervals = aggregate.iqm_intervals(finals)
    rows = [[label, str(len(finals[label])), f"{iqm:.4g} [{low:.4g}, {high:.4g}]"]
            for label, (iqm, low, high) in intervals.items()]
    lines = ["## IQM over seeds (rliable)", "",
             tables.markdown(["configuration", "runs", "IQM of the final metric [95% CI]"], rows), "",
             "IQM: the mean of the middle 50% of the runs' final metrics (Agarwal et al. 2021); interval: 95% "
             "stratified bootstrap."]
    env_ids = {run.config.get("env_id") for group in groups for run in group.runs}
    if report_dir and len(env_ids) == 1:
        os.makedirs(report_dir, exist_ok=True)
        aggregate.plot_iqm_and_profiles(finals, os.path.join(report_dir, IQM_FIGURE), xlabel="final metric")
        lines += ["", f"![{IQM_FIGURE}]({IQM_FIGURE})"]
    return lines


def main(argv):
    try:
        if _BOOTSTRAP_SAMPLES.value < 1:
            raise ReportError(f"--bootstrap_samples must be positive, got {_BOOTSTRAP_SAMPLES.value}")
        targets = parse_targets(_TARGETS.value)
        runs, skipped = load_runs(list(argv[1:]))
        for warning in skipped:
            print(f"warning: {warning}", file=sys.stderr)
        report_dir = _REPORT_DIR.value or None
        report = build_report(
            runs, targets=targets, time_limit=_REPORT_TIME_LIMIT.value, samples=_BOOTSTRAP_SAMPLES.value,
            ci=_REPORT_CI.value, title=_REPORT_TITLE.value, report_dir=report_dir, skipped=skipped,
            iqm=_IQM.value,
        )
        if report_dir:
            with open(os.path.join(report_dir, REPORT_FILE), "w") as f:
                f.write(report)
    except (ReportError, metrics_lib.RunError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    print(report)
    if report_dir:
        print(f"wrote {os.path.join(report_dir, REPORT_FILE)}", file=sys.stderr)

if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
