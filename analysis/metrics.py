"""Run metrics of seed 000 (HTS-RL), section 5 "Evaluation protocol", computed from finished run directories, with
bootstrap 95% confidence intervals over seeds (`python -m launch.report`).

A run directory is what every on-policy system writes (`systems/common/outputs.py`, `monitor.py`): `config.json`,
`summary.json`, `progress.csv` and `evaluations.csv`. From it, per run:

* *final metric*: the mean return over all episodes of the last `LAST_POLICIES` (10) evaluations (100 episodes with
  the paper's 10 episodes per evaluation);
* *final time metric* for a time limit T: the final metric of the evaluations logged at wall time <= T (None if none);
* *required time* for a target: the first wall time at which the running average over the most recent ten
  evaluations reaches the target (None if never);
* steady-state SPS: env-step difference over wall-time difference between the first and the last progress row, so
  the first update's compile time is left out (falls back to the summary's SPS with fewer than two rows);
* the largest policy lag (learner version - behaviour version; HTS promises at most 1) and the parameter fingerprint.

The three evaluation metrics reuse `systems.common.evaluation.final_metric` / `required_time`, the definitions the
runs themselves write to `summary.json`: `evaluations.csv` keeps only each evaluation's mean and episode count, so an
evaluation becomes a record whose `episodes` returns all equal its mean, which leaves every episode-weighted mean
unchanged (up to the CSV's six significant digits).

Over seeds: a 95% percentile bootstrap interval of the mean (`scipy.stats.bootstrap`, 10,000 resamples by default and a
fixed seed, as the "Facebook Bootstrapped" implementation the paper uses); with one seed there is no interval (n=1).
Required time is a mean over the seeds that reached the target, reported with "k/n reached": seeds that never reached
it have no time to average, and counting them at the run's end time would turn "not reached" into a time the run never
achieved (the paper's Table 2 writes "-" when a method did not reach the score).

Runs are grouped by every config field that differs across the given runs (except seed- and directory-like fields),
plus the system name from `summary.json`; a group reads "hts num_actors=4". Learning curves (Fig. 5) interpolate each
run's evaluations onto a common grid of env steps or wall time and take the mean and a bootstrap band across seeds.
Fig. 4 (left) plots speedup against step-time variance; `step_time_variance` gives the variance of an
`envs.step_time` spec ("exp:MEAN" has variance MEAN^2, Claim 1's 1 / beta^2).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from scipy import stats

from envs.step_time import parse_step_time
from systems.common import evaluation, hardware

LAST_POLICIES = evaluation.LAST_POLICIES
PROGRESS_COLUMNS = ("env_steps", "wall_time")  # required; every other progress column is optional
EVAL_COLUMNS = ("env_steps", "wall_time", "episodes", "mean_return")
# Config fields that never tell two configurations apart: the seed (what the CI is over), where the run lives, and
# the plan (what the system derived from the config on its machine; PAL's measured allocation differs by seed).
NON_GROUPING_FIELDS = frozenset(
    {"seed", "logdir", "run_dir", "resume", "quiet", "process_id", "coordinator_address", "startup_timeout", "plan"}
)
BOOTSTRAP_SAMPLES = 10_000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
CURVE_POINTS = 100
SYSTEM_FIELD = "system"


class RunError(ValueError):
    """A directory that cannot be read as a run (missing file, unparsable CSV): one line naming the file."""


class UnfinishedRunError(RunError):
    """A run directory without `summary.json` (still running, or killed), or with an interrupted summary."""


@dataclasses.dataclass(frozen=True)
class Evaluations:
    """One run's `evaluations.csv`, in logging order (resume duplicates removed)."""

    env_steps: np.ndarray  # [E]
    wall_time: np.ndarray  # [E] seconds since the start of training
    episodes: np.ndarray  # [E] int, episodes per evaluation
    mean_return: np.ndarray  # [E]

    def __len__(self) -> int:
        return len(self.env_steps)

    def records(self) -> list[evaluation.EvaluationRecord]:
        """As `EvaluationRecord`s whose `episodes` returns all equal the evaluation's mean (`policy_version` is the
        evaluation's index: the metrics do not read it)."""
        return [
            evaluation.EvaluationRecord(
                env_steps=int(steps), wall_time=float(wall), policy_version=i, returns=[float(ret)] * int(count)
            )
            for i, (steps, wall, count, ret) in enumerate(
                zip(self.env_steps, self.wall_time, self.episodes, self.mean_return, strict=True)
            )
        ]


@dataclasses.dataclass(frozen=True)
class Run:
    """One finished run directory."""

    run_dir: str
    config: dict  # config.json: dataclasses.asdict of the system's config
    summary: dict  # summary.json (Monitor.finish)
    progress: dict  # progress.csv: column name -> [R] float array (NaN where empty)
    evaluations: Evaluations

    @property
    def system(self) -> str:
        return str(self.summary.get(SYSTEM_FIELD) or "run")

    @property
    def seed(self):
        return self.config.get("seed", self.summary.get("seed"))


# ----------------------------------------------------------------------------------------------- reading run dirs


def is_run_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "config.json"))


def find_run_dirs(path: str) -> tuple[list[str], list[str]]:
    """(`path` itself if it is a run directory, else every run directory below it (a sweep directory holds one per
    point), sorted; the directories beside those runs that are not runs (a sweep point that never started: no
    config.json)). Raises RunError when there is no run."""
    if not os.path.exists(path):
        raise RunError(f"{path}: no such file or directory")
    if not os.path.isdir(path):
        raise RunError(f"{path}: not a directory")
    if is_run_dir(path):
        return [path], []
    found, holders = [], set()
    for root, dirs, _ in os.walk(path):
        dirs.sort()
        if is_run_dir(root):
            found.append(root)
            holders.add(os.path.dirname(root))
            dirs[:] = []  # checkpoints/ and tb/ hold no runs
    if not found:
        raise RunError(f"{path}: not a run directory (no config.json) and no run directory below it")
    not_runs = []
    for holder in sorted(holders):
        for name in sorted(os.listdir(holder)):
            child = os.path.join(holder, name)
            if os.path.isdir(child) and not any(r == child or r.startswith(child + os.sep) for r in found):
                not_runs.append(child)
    return found, not_runs


def load_run(run_dir: str) -> Run:
    """Reads one run directory. Raises UnfinishedRunError without summary.json (or for an interrupted run), and
    RunError naming the file for anything else missing or unreadable."""
    if not os.path.isdir(run_dir):
        raise RunError(f"{run_dir}: not a directory")
    config_path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(config_path):
        raise RunError(f"{run_dir}: not a run directory (missing config.json)")
    config = _read_json(config_path)
    summary_path = os.path.join(run_dir, "summary.json")
    if not os.path.isfile(summary_path):
        raise UnfinishedRunError(f"{run_dir}: unfinished run (no summary.json)")
    summary = _read_json(summary_path)
    if summary.get("interrupted"):
        raise UnfinishedRunError(
            f"{run_dir}: interrupted at {summary.get('env_steps', '?')} env steps (continue it with --resume)"
        )
    for name in ("progress.csv", "evaluations.csv"):
        if not os.path.isfile(os.path.join(run_dir, name)):
            raise RunError(f"{run_dir}: missing {name}")
    progress = _read_csv(os.path.join(run_dir, "progress.csv"), PROGRESS_COLUMNS)
    progress = _drop_superseded(progress)
    backwards = np.flatnonzero(np.diff(progress["wall_time"]) < 0)
    if backwards.size:  # two writers, or a hand-edited file: the SPS would be meaningless
        raise RunError(f"{os.path.join(run_dir, 'progress.csv')}: wall_time goes backwards after env step "
                       f"{int(progress['env_steps'][backwards[0]])}")
    evals = _drop_superseded(_read_csv(os.path.join(run_dir, "evaluations.csv"), EVAL_COLUMNS))
    episodes = evals["episodes"]
    if np.any(~np.isfinite(episodes)) or np.any(episodes < 1) or np.any(episodes != np.round(episodes)):
        raise RunError(f"{os.path.join(run_dir, 'evaluations.csv')}: 'episodes' must be positive integers")
    evaluations = Evaluations(
        env_steps=evals["env_steps"], wall_time=evals["wall_time"], episodes=episodes.astype(np.int64),
        mean_return=evals["mean_return"],
    )
    return Run(run_dir=run_dir, config=config, summary=summary, progress=progress, evaluations=evaluations)


def _read_json(path: str) -> dict:
    try:
        with open(path) as f:
            payload = json.load(f)
    except (OSError, json.JSONDecodeError) as error:
        raise RunError(f"{path}: cannot read JSON ({error})") from None
    if not isinstance(payload, dict):
        raise RunError(f"{path}: expected a JSON object")
    return payload


def _read_csv(path: str, required: Sequence[str]) -> dict[str, np.ndarray]:
    """Column name -> [R] float64 array; empty cells are NaN. Raises RunError naming the file and line."""
    try:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise RunError(f"{path}: empty file (no header)")
            missing = [c for c in required if c not in header]
            if missing:
                raise RunError(f"{path}: missing column(s) {', '.join(missing)}")
            rows = []
            for line, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(header):
                    raise RunError(f"{path} line {line}: {len(row)} fields, the header has {len(header)}")
                values = []
                for name, cell in zip(header, row, strict=True):
                    try:
                        values.append(float(cell) if cell.strip() else math.nan)
                    except ValueError:
                        raise RunError(f"{path} line {line}: column '{name}' is not a number: {cell!r}") from None
                rows.append(values)
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise RunError(f"{path}: cannot read ({error})") from None
    table = np.asarray(rows, np.float64).reshape(len(rows), len(header))  # [R, C]
    for name in required:
        column = table[:, header.index(name)]
        if np.any(~np.isfinite(column)):
            raise RunError(f"{path}: column '{name}' has empty or non-finite values")
    return {name: table[:, i] for i, name in enumerate(header)}


def _drop_superseded(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A resumed run appends to its CSVs from its newest checkpoint, so rows logged after that checkpoint by the
    killed process come again: a row whose env_steps do not exceed the previous kept row's replaces every kept row at
    or past its env steps, which leaves what the resumed run itself counts as its history."""
    kept: list[int] = []
    steps = columns["env_steps"]
    for i, value in enumerate(steps):
        while kept and steps[kept[-1]] >= value:
            kept.pop()
        kept.append(i)
    if len(kept) == len(steps):
        return columns
    return {name: column[kept] for name, column in columns.items()}


# ------------------------------------------------------------------------------------------------ per-run metrics


def final_metric(evals: Evaluations) -> float | None:
    """Mean return over all episodes of the last ten evaluations (seed 000, section 5); None without evaluations."""
    return evaluation.final_metric(evals.records())


def final_time_metric(evals: Evaluations, time_limit: float) -> float | None:
    """The final metric of the evaluations logged at wall time <= `time_limit` seconds; None if there are none."""
    return evaluation.final_metric([r for r in evals.records() if r.wall_time <= time_limit])


def required_time(evals: Evaluations, target: float) -> float | None:
    """First wall time (s) when the running average over the most recent ten evaluations reaches `target`."""
    return evaluation.required_time(evals.records(), target)


def steady_state_sps(run: Run) -> float | None:
    """Env steps per second between the first and the last progress row (leaves out start-up and the first
    compile); the summary's SPS when there are fewer than two rows."""
    steps, wall = run.progress["env_steps"], run.progress["wall_time"]
    if len(steps) >= 2 and wall[-1] > wall[0]:
        return float((steps[-1] - steps[0]) / (wall[-1] - wall[0]))
    sps = run.summary.get("sps")
    return None if sps is None else float(sps)


def max_policy_lag(run: Run) -> int | None:
    """Largest learner version - behaviour version over the run (progress.csv and summary.json)."""
    values = []
    lag = run.progress.get("policy_lag")
    if lag is not None and np.any(np.isfinite(lag)):
        values.append(int(np.nanmax(lag)))
    if run.summary.get("max_policy_lag") is not None:
        values.append(int(run.summary["max_policy_lag"]))
    return max(values) if values else None


def fingerprint(run: Run) -> str | None:
    """SHA-256 of the final parameters (`outputs.params_fingerprint`): equal iff bit-identical."""
    return run.summary.get("param_fingerprint")


def step_time_variance(spec: str) -> float:
    """Variance (s^2) of one simulated env step time (`envs.step_time` syntax): 0 for none and const, MEAN^2 for
    exp:MEAN (Claim 1: rate beta = 1 / MEAN, variance 1 / beta^2), MEAN^2 / SHAPE for gamma:SHAPE:MEAN."""
    distribution = parse_step_time(spec)
    if distribution.kind in ("none", "const"):
        return 0.0
    return distribution.mean**2 / distribution.shape  # exp: shape 1


@dataclasses.dataclass(frozen=True)
class RunMetrics:
    """Section 5's metrics of one run."""

    seed: Any
    final_metric: float | None
    final_time_metric: float | None  # None without a time limit or without an evaluation before it
    required_times: dict  # target -> seconds, or None when never reached
    sps: float | None
    max_policy_lag: int | None
    fingerprint: str | None
    wall_time: float | None  # summary: wall time at the end of the run


def run_metrics(run: Run, *, time_limit: float | None = None, targets: Sequence[float] = ()) -> RunMetrics:
    evals = run.evaluations
    wall = run.summary.get("wall_time")
    return RunMetrics(
        seed=run.seed,
        final_metric=final_metric(evals),
        final_time_metric=None if time_limit is None else final_time_metric(evals, time_limit),
        required_times={target: required_time(evals, target) for target in targets},
        sps=steady_state_sps(run),
        max_policy_lag=max_policy_lag(run),
        fingerprint=fingerprint(run),
        wall_time=None if wall is None else float(wall),
    )


# ---------------------------------------------------------------------------------------- bootstrap over seeds


@dataclasses.dataclass(frozen=True)
class Stat:
    """Mean over seeds with its 95% bootstrap interval (`low`, `high` are None with one seed)."""

    mean: float
    low: float | None
    high: float | None
    n: int  # seeds with a value
    total: int  # seeds in the group (n < total: some seeds had no value, e.g. never reached a target)

    @property
    def half_width(self) -> float | None:
        return None if self.low is None else (self.high - self.low) / 2


def bootstrap_ci(
    values: Iterable[float | None],
    *,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> Stat | None:
    """Mean of the non-None values with a percentile bootstrap interval (None if no value has one)."""
    values = list(values)
    present = np.asarray([v for v in values if v is not None], np.float64)  # [n]
    if present.size == 0:
        return None
    mean = float(np.mean(present))
    if present.size == 1:
        return Stat(mean, None, None, 1, len(values))
    with warnings.catch_warnings():  # constant samples: scipy may warn that the interval is degenerate
        warnings.simplefilter("ignore")
        result = stats.bootstrap(
            (present,), np.mean, n_resamples=samples, confidence_level=confidence, method="percentile",
            rng=np.random.default_rng(seed),
        )
    interval = result.confidence_interval
    return Stat(mean, float(interval.low), float(interval.high), int(present.size), len(values))


def bootstrap_ratio(
    numerator: Sequence[float], denominator: Sequence[float], *, samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Stat | None:
    """mean(numerator) / mean(denominator) with a percentile interval from resampling both sets of seeds
    independently (unpaired: the two systems' seeds are separate runs). No interval unless both have two seeds."""
    x = np.asarray([v for v in numerator if v is not None], np.float64)
    y = np.asarray([v for v in denominator if v is not None], np.float64)
    if x.size == 0 or y.size == 0 or np.mean(y) == 0:
        return None
    ratio = float(np.mean(x) / np.mean(y))
    n = min(x.size, y.size)
    if n < 2:
        return Stat(ratio, None, None, n, n)

    def statistic(a, b, axis=-1):
        return np.mean(a, axis=axis) / np.mean(b, axis=axis)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = stats.bootstrap(
            (x, y), statistic, n_resamples=samples, confidence_level=CONFIDENCE, method="percentile",
            rng=np.random.default_rng(seed),
        )
    interval = result.confidence_interval
    return Stat(ratio, float(interval.low), float(interval.high), n, n)


# ----------------------------------------------------------------------------------------------------- grouping



class _Missing:
    """A config field that a run's system config does not have (e.g. gossip's num_learners in an hts run)."""

    def __repr__(self):
        return "<missing>"


_MISSING = _Missing()


def _hashable(value):
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return value


def sort_value(value):
    if value is _MISSING or value is None:
        return (2, "")
    if isinstance(value, (bool, int, float)):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def format_value(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if value is None:
        return "none"
    return str(value)


@dataclasses.dataclass(frozen=True)
class Group:
    """Runs with the same system and the same value of every varying config field: seeds of one configuration."""

    system: str
    fields: tuple  # ((name, value), ...) of the varying config fields, sorted by name; `_MISSING` if absent
    runs: tuple  # Runs, sorted by seed

    @property
    def label(self) -> str:
        """e.g. "hts num_actors=4" (fields a system's config lacks are left out)."""
        parts = [self.system] + [f"{name}={format_value(v)}" for name, v in self.fields if v is not _MISSING]
        return " ".join(parts)

    def value(self, name: str, default=None):
        """A config field's value, common to all runs of the group (the system for "system")."""
        if name == SYSTEM_FIELD:
            return self.system
        for field, value in self.fields:
            if field == name:
                return default if value is _MISSING else value
        return self.runs[0].config.get(name, default) if self.runs else default

    def label_without(self, name: str) -> str:
        parts = [self.system] if name != SYSTEM_FIELD else []
        parts += [f"{n}={format_value(v)}" for n, v in self.fields if v is not _MISSING and n != name]
        return " ".join(parts) or "all"


def duplicate_seeds(group: Group) -> list:
    """Seeds run more than once in a group (each run still counts as one sample over seeds)."""
    seeds = [run.seed for run in group.runs]
    return sorted({s for s in seeds if seeds.count(s) > 1}, key=sort_value)


def varying_fields(runs: Sequence[Run]) -> list[str]:
    """Config fields (sorted) whose values are not the same in every run that has the field, seed and directories
    left out. A field only some systems' configs have (HTS's `num_actors`) does not vary by being absent elsewhere:
    the runs are grouped by system anyway."""
    names = sorted(set().union(*(run.config for run in runs)) - NON_GROUPING_FIELDS)
    varying = []
    for name in names:
        values = {_hashable(run.config[name]) for run in runs if name in run.config}
        if len(values) > 1:
            varying.append(name)
    return varying


def group_runs(runs: Sequence[Run]) -> list[Group]:
    """Groups by system and every varying config field; groups sorted by system then field values."""
    names = varying_fields(runs)
    buckets: dict[tuple, list[Run]] = {}
    for run in runs:
        fields = tuple((name, run.config.get(name, _MISSING)) for name in names)
        key = (run.system, tuple((n, _hashable(v)) for n, v in fields))
        buckets.setdefault(key, []).append(run)
    groups = []
    for (system, _), members in buckets.items():
        members = sorted(members, key=lambda r: (sort_value(r.seed), r.run_dir))
        fields = tuple((name, members[0].config.get(name, _MISSING)) for name in names)
        groups.append(Group(system=system, fields=fields, runs=tuple(members)))
    groups.sort(key=lambda g: (g.system, tuple(sort_value(v) for _, v in g.fields)))
    return groups


def swept_field(groups: Sequence[Group]) -> str | None:
    """The one field (config field or "system") in which the groups differ, or None if they differ in more (or
    there is only one group)."""
    if len(groups) < 2:
        return None
    differing = [name for name, _ in groups[0].fields if len({_hashable(g.value(name, _MISSING)) for g in groups}) > 1]
    if len({g.system for g in groups}) > 1:
        differing.append(SYSTEM_FIELD)
    return differing[0] if len(differing) == 1 else None


@dataclasses.dataclass(frozen=True)
class RequiredTime:
    """Required time over seeds: mean and interval over the seeds that reached the target (None if none did)."""

    target: float
    stat: Stat | None  # seconds
    reached: int
    total: int


@dataclasses.dataclass(frozen=True)
class GroupMetrics:
    group: Group
    runs: tuple  # RunMetrics per run
    final_metric: Stat | None
    final_time_metric: Stat | None
    required_times: tuple  # RequiredTime per target, in the given order
    sps: Stat | None
    max_policy_lag: int | None
    fingerprints: dict  # seed -> fingerprint (first run of that seed)
    bound: str | None = None  # the runs' most common bound (summary.json "profile"), e.g. "learner-bound (update 71%)"

    @property
    def seeds(self) -> int:
        return len(self.runs)


def group_bound(runs: Sequence[Run]) -> str | None:
    """The bound most of `runs` name (`systems.common.profile`), with its stage and the median share of the runs
    that name it; None when no run has a profile (runs from before it)."""
    bounds = [run.summary.get("profile", {}).get("bound") for run in runs]
    bounds = [b for b in bounds if b]
    if not bounds:
        return None
    kinds = [(b["verdict"], b["stage"]) for b in bounds]
    verdict, stage = max(set(kinds), key=lambda kind: (kinds.count(kind), kind))
    shares = [b["share"] for b in bounds if (b["verdict"], b["stage"]) == (verdict, stage)]
    count = f", {len(shares)}/{len(runs)} runs" if len(shares) < len(runs) else ""
    return f"{verdict} ({stage} {float(np.median(shares)):.0%}{count})"


def machines(runs: Sequence[Run]) -> list[str]:
    """The distinct machines of `runs` (summary.json "hardware"), one line each."""
    return sorted({hardware.describe(run.summary["hardware"]) for run in runs if run.summary.get("hardware")})


def group_metrics(
    group: Group,
    *,
    time_limit: float | None = None,
    targets: Sequence[float] = (),
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> GroupMetrics:
    per_run = tuple(run_metrics(run, time_limit=time_limit, targets=targets) for run in group.runs)

    def ci(values):
        return bootstrap_ci(values, samples=samples, seed=seed)

    required = []
    for target in targets:
        times = [m.required_times[target] for m in per_run]
        reached = sum(t is not None for t in times)
        required.append(RequiredTime(target, ci(times), reached, len(times)))
    lags = [m.max_policy_lag for m in per_run if m.max_policy_lag is not None]
    fingerprints = {}
    for m in per_run:
        fingerprints.setdefault(m.seed, m.fingerprint)
    return GroupMetrics(
        group=group,
        runs=per_run,
        final_metric=ci(m.final_metric for m in per_run),
        final_time_metric=None if time_limit is None else ci(m.final_time_metric for m in per_run),
        required_times=tuple(required),
        sps=ci(m.sps for m in per_run),
        max_policy_lag=max(lags) if lags else None,
        fingerprints=fingerprints,
        bound=group_bound(group.runs),
    )


def fastest_finish_time(groups: Sequence[Group]) -> float:
    """Table 1's time limit: when the fastest configuration finished training, i.e. the smallest over groups of the
    time by which all its seeds had finished (summary wall time)."""
    finish = []
    for group in groups:
        times = [run.summary.get("wall_time") for run in group.runs]
        if times and all(t is not None for t in times):
            finish.append(max(float(t) for t in times))
    if not finish:
        raise RunError("no run has a wall_time in summary.json to take the fastest finish time from")
    return min(finish)


# ------------------------------------------------------------------------------------------------------- curves


@dataclasses.dataclass(frozen=True)
class Curve:
    """Mean evaluation return of a group against env steps or wall time, on a common grid."""

    x: np.ndarray  # [P]
    mean: np.ndarray  # [P]
    low: np.ndarray | None  # [P] bootstrap 95% band; None with one seed
    high: np.ndarray | None  # [P]
    n: int  # runs with evaluations


def curve(
    runs: Sequence[Run],
    axis: str,
    *,
    points: int = CURVE_POINTS,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Curve | None:
    """Each run's evaluation returns against `axis` ("env_steps" or "wall_time"), linearly interpolated onto
    a grid spanning the range every run covers (from the latest first evaluation to the earliest last one): `points`
    evenly spaced values plus every evaluation point in the range, so peaks are not cut. Then the mean and percentile
    bootstrap band across runs at each grid point. None if no run has evaluations or the runs share no range."""
    if axis not in ("env_steps", "wall_time"):
        raise ValueError(f"curve axis must be env_steps or wall_time, got {axis!r}")
    series = [
        (getattr(run.evaluations, axis), run.evaluations.mean_return) for run in runs if len(run.evaluations)
    ]
    if not series:
        return None
    low_x = max(float(x[0]) for x, _ in series)
    high_x = min(float(x[-1]) for x, _ in series)
    if high_x < low_x:  # e.g. wall times of seeds run at very different speeds: no point where all have a value
        return None
    evaluated = np.concatenate([x[(x >= low_x) & (x <= high_x)] for x, _ in series])
    grid = np.union1d(np.linspace(low_x, high_x, points if high_x > low_x else 1), evaluated)  # [P]
    values = np.stack([np.interp(grid, x, y) for x, y in series])  # [N, P]
    mean = values.mean(axis=0)
    if len(series) < 2:
        return Curve(grid, mean, None, None, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = stats.bootstrap(
            (values,), np.mean, axis=0, n_resamples=samples, confidence_level=CONFIDENCE, method="percentile",
            rng=np.random.default_rng(seed),
        )
    interval = result.confidence_interval
    return Curve(grid, mean, np.asarray(interval.low), np.asarray(interval.high), len(series))


# ------------------------------------------------------------------------------------- Fig. 4 speedup pairing

PAIR_FIELDS = ("env_id", "algo", "num_envs", "step_time")


@dataclasses.dataclass(frozen=True)
class SpeedupPoint:
    """HTS over the synchronous baseline at one step-time distribution (seed 000, Fig. 4 left)."""

    hts: GroupMetrics
    sync: GroupMetrics
    step_time: str
    variance: float  # s^2
    speedup: Stat  # SPS ratio hts / sync


def speedup_points(
    metrics: Sequence[GroupMetrics], *, samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED
) -> list[SpeedupPoint]:
    """Pairs every hts group with every sync group of the same env, algorithm, num_envs and step time; the speedup
    is the ratio of their mean steady-state SPS (bootstrap interval over both groups' seeds)."""
    points = []
    for hts in (m for m in metrics if m.group.system == "hts"):
        key = tuple(hts.group.value(name) for name in PAIR_FIELDS)
        for sync in (m for m in metrics if m.group.system == "sync"):
            if tuple(sync.group.value(name) for name in PAIR_FIELDS) != key:
                continue
            ratio = bootstrap_ratio(
                [m.sps for m in hts.runs], [m.sps for m in sync.runs], samples=samples, seed=seed
            )
            if ratio is None:
                continue
            spec = str(hts.group.value("step_time") or "none")
            points.append(SpeedupPoint(hts, sync, spec, step_time_variance(spec), ratio))
    return points
