"""Figures of seed 000 (HTS-RL), section 5, from grouped runs (matplotlib's `Figure`, which writes
PNGs without a backend: importing this module or plotting sets nothing global).

* Fig. 5 (`fig5_curves.png`): training curves, one column per environment; top row evaluation return against env
  steps, bottom row against wall time; per configuration the mean over seeds and the 95% bootstrap band
  (`metrics.curve`), or each seed's curve when the seeds share no range (wall times of runs at very different
  speeds).
* Fig. 4 right (`fig4_sps_vs_envs.png`): steady-state SPS against the number of envs, one line per configuration
  (written when the runs differ in num_envs).
* Fig. 4 left (`fig4_speedup_vs_variance.png`): speedup of HTS-RL over the synchronous baseline (SPS ratio) against
  the env step-time variance (Claim 1 / Eq. 7: synchronising every step pays for the slowest env, so the gain grows
  with the variance); hts and sync runs are paired by env, algorithm, num_envs and step time
  (`metrics.speedup_points`), the variance of "exp:MEAN" being MEAN^2.

`write_plots` writes the figures the runs support and says for the others why they were skipped.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import matplotlib
from matplotlib import ticker
from matplotlib.figure import Figure

from analysis import metrics as metrics_lib

FIG5 = "fig5_curves.png"
FIG4_SPS = "fig4_sps_vs_envs.png"
FIG4_SPEEDUP = "fig4_speedup_vs_variance.png"
DPI = 110


@dataclasses.dataclass(frozen=True)
class PlotResult:
    name: str  # file name
    path: str | None  # written file, None when skipped
    skipped: str | None  # why it was not written


def _time_unit(seconds: float) -> tuple[float, str]:
    if seconds >= 2 * 3600:
        return 3600.0, "h"
    if seconds >= 10 * 60:
        return 60.0, "min"
    return 1.0, "s"


def plot_curves(
    groups: Sequence[metrics_lib.Group],
    path: str,
    *,
    samples: int = metrics_lib.BOOTSTRAP_SAMPLES,
    seed: int = metrics_lib.BOOTSTRAP_SEED,
) -> PlotResult:
    """Fig. 5: return against env steps (top) and wall time (bottom), one column per env id."""
    name = os.path.basename(path)
    groups = [g for g in groups if any(len(run.evaluations) for run in g.runs)]
    if not groups:
        return PlotResult(name, None, "no run has evaluations")
    envs = sorted({str(g.value("env_id")) for g in groups})
    longest = max(float(run.evaluations.wall_time[-1]) for g in groups for run in g.runs if len(run.evaluations))
    scale, unit = _time_unit(longest)
    fig = Figure(figsize=(max(6.4, 4.8 * len(envs)), 7.0))
    axes = fig.subplots(2, len(envs), squeeze=False)
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    if len(groups) > len(colors):  # twenty sides: twenty colours, not ten drawn twice
        colors = list(matplotlib.colormaps["tab20"].colors)
    for i, group in enumerate(groups):
        column = envs.index(str(group.value("env_id")))
        color = colors[i % len(colors)]
        runs = [run for run in group.runs if len(run.evaluations)]
        for row, (axis, x_scale) in enumerate((("env_steps", 1.0), ("wall_time", scale))):
            ax = axes[row][column]
            c = metrics_lib.curve(runs, axis, samples=samples, seed=seed)
            if c is None:  # the seeds share no range on this axis: draw each seed
                label = f"{group.label} (each seed: no common range)"
                for run in runs:
                    x = getattr(run.evaluations, axis) / x_scale
                    ax.plot(x, run.evaluations.mean_return, color=color, linewidth=0.8, alpha=0.6, label=label)
                    label = None
                continue
            ax.plot(c.x / x_scale, c.mean, color=color, label=f"{group.label} (n={c.n})",
                    marker="." if len(c.x) == 1 else None)
            if c.low is not None:
                ax.fill_between(c.x / x_scale, c.low, c.high, color=color, alpha=0.25, linewidth=0)
    for column, env in enumerate(envs):
        axes[0][column].set_title(env)
        axes[0][column].set_xlabel("env steps")
        axes[0][column].xaxis.set_major_formatter(ticker.EngFormatter())  # 40k, 1M: plain digits overlap
        axes[1][column].set_xlabel(f"wall time ({unit})")
        for row in range(2):
            axes[row][column].set_ylabel("evaluation return")
            axes[row][column].grid(alpha=0.3)
    entries = {}  # label -> handle, over every panel, in drawing order
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    # One legend below the panels, 0.2 in a line (beside the curves it covered them): the figure grows to hold it.
    fig.set_figheight(fig.get_figheight() + 0.2 * len(entries))
    fig.legend(list(entries.values()), list(entries), loc="lower center", fontsize="small", frameon=False)
    fig.suptitle("Training curves: mean over seeds, 95% bootstrap band")
    return _save(fig, path, name, bottom=0.2 * len(entries) / fig.get_figheight() + 0.01)


def plot_sps_vs_envs(results: Sequence[metrics_lib.GroupMetrics], path: str) -> PlotResult:
    """Fig. 4 right: mean SPS (95% interval as error bars) against num_envs, one line per configuration."""
    name = os.path.basename(path)
    if len({r.group.value("num_envs") for r in results}) < 2:
        return PlotResult(name, None, "the runs do not differ in num_envs")
    series: dict[str, list] = {}
    for r in results:
        if r.sps is None or r.group.value("num_envs") is None:
            continue
        series.setdefault(r.group.label_without("num_envs"), []).append((r.group.value("num_envs"), r.sps))
    series = {label: sorted(points, key=lambda p: p[0]) for label, points in series.items() if len(points) >= 2}
    if not series:
        return PlotResult(name, None, "no configuration was run with two or more num_envs values")
    fig = Figure(figsize=(5.5, 4.0))
    ax = fig.subplots()
    for label, points in series.items():
        x = [p[0] for p in points]
        y = [p[1].mean for p in points]
        low = [p[1].mean - p[1].low if p[1].low is not None else 0.0 for p in points]
        high = [p[1].high - p[1].mean if p[1].high is not None else 0.0 for p in points]
        ax.errorbar(x, y, yerr=[low, high], marker="o", capsize=3, label=label)
    ax.set_xlabel("number of envs")
    ax.set_ylabel("steps per second (SPS)")
    ax.set_title("SPS vs number of envs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path, name)


def plot_speedup(points: Sequence[metrics_lib.SpeedupPoint], path: str) -> PlotResult:
    """Fig. 4 left: speedup (HTS SPS / sync SPS) against step-time variance, one line per hts/sync pairing."""
    name = os.path.basename(path)
    if not points:
        return PlotResult(
            name, None, "needs hts and sync runs with the same env_id, algo, num_envs and step_time"
        )
    series: dict[str, list] = {}
    for p in points:
        label = f"{p.hts.group.label_without('step_time')} / {p.sync.group.label_without('step_time')}"
        series.setdefault(label, []).append(p)
    fig = Figure(figsize=(5.5, 4.0))
    ax = fig.subplots()
    for label, members in series.items():
        members = sorted(members, key=lambda p: p.variance)
        x = [p.variance for p in members]
        y = [p.speedup.mean for p in members]
        low = [p.speedup.mean - p.speedup.low if p.speedup.low is not None else 0.0 for p in members]
        high = [p.speedup.high - p.speedup.mean if p.speedup.high is not None else 0.0 for p in members]
        ax.errorbar(x, y, yerr=[low, high], marker="o", capsize=3, label=label)
    ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
    ax.set_xlabel("env step time variance (s$^2$)")
    ax.set_ylabel("speedup (HTS SPS / sync SPS)")
    ax.set_title("Speedup vs step time variance")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path, name)


def write_plots(
    results: Sequence[metrics_lib.GroupMetrics],
    out_dir: str,
    *,
    speedups: Sequence[metrics_lib.SpeedupPoint] = (),
    samples: int = metrics_lib.BOOTSTRAP_SAMPLES,
    seed: int = metrics_lib.BOOTSTRAP_SEED,
) -> list[PlotResult]:
    """Writes Fig. 5 and the two Fig. 4 panels into `out_dir` where the runs support them."""
    os.makedirs(out_dir, exist_ok=True)
    groups = [r.group for r in results]
    return [
        plot_curves(groups, os.path.join(out_dir, FIG5), samples=samples, seed=seed),
        plot_sps_vs_envs(results, os.path.join(out_dir, FIG4_SPS)),
        plot_speedup(speedups, os.path.join(out_dir, FIG4_SPEEDUP)),
    ]


def _save(fig, path: str, name: str, *, bottom: float = 0.0) -> PlotResult:
    """Lays the axes out above `bottom` (the figure's fraction kept for a legend below them) and writes."""
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(path, dpi=DPI)
    return PlotResult(name, path, None)
