"""Markdown tables in the style of seed 000 (HTS-RL), section 5, from `metrics.GroupMetrics`.

* `metrics_table`: Tables 1 and 2 -- one row per configuration: final metric, final time metric for a time limit
  (Table 1), required time in minutes to each target written "a/b" (Table 2: "time to 0.4 / time to 0.8", "-" when
  not reached), steady-state SPS, largest policy lag and seeds.
* `sweep_table`: Tables 4 and 5 -- configurations that differ in exactly one field (number of actors, synchronization
  interval), one column per value; rows SPS, average score (the final metric: 100 evaluation episodes) and each
  seed's parameter fingerprint, followed by a line saying whether the fingerprints are identical for every seed
  (what HTS-RL's determinism promises across numbers of actors, Table 4).
* `speedup_table`: the numbers behind Fig. 4 (left): HTS-RL's SPS over the synchronous baseline's per step-time
  variance.

Cells over seeds read "mean ± h" with h the half-width of the 95% bootstrap interval ("mean [low, high]" with
`ci="interval"`), or "mean (n=1)" for a single seed; "(k/n)" is added when only k of n seeds have a value.
"""

from __future__ import annotations

from collections.abc import Sequence

from analysis import metrics as metrics_lib

CI_STYLES = ("pm", "interval")
FINGERPRINT_CHARS = 8


def format_number(value: float) -> str:
    """Three significant digits, never scientific: 1862, 25.1, 1.50, 0.82, 0.0123."""
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    if magnitude == 0:
        return "0"
    return f"{value:.3g}"


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def format_stat(stat: metrics_lib.Stat | None, *, ci: str = "pm", scale: float = 1.0) -> str:
    """A mean over seeds with its interval (values multiplied by `scale`, e.g. 1/60 for minutes); "-" for None."""
    if ci not in CI_STYLES:
        raise ValueError(f"ci must be one of {CI_STYLES}, got {ci!r}")
    if stat is None:
        return "-"
    text = format_number(stat.mean * scale)
    if stat.low is None:
        text += f" (n={stat.n})"
    else:
        digits = _decimals(text)
        if ci == "pm":
            text += f" ± {stat.half_width * scale:.{digits}f}"
        else:
            text += f" [{stat.low * scale:.{digits}f}, {stat.high * scale:.{digits}f}]"
    if stat.n < stat.total:
        text += f" ({stat.n}/{stat.total})"
    return text


def format_required_times(required: Sequence[metrics_lib.RequiredTime]) -> str:
    """Table 2's "a/b": mean minutes over the seeds that reached each target, "-" if none did, "(k/n)" if only some."""
    parts = []
    for item in required:
        if item.stat is None:
            parts.append("-")
            continue
        text = format_number(item.stat.mean / 60)
        if item.reached < item.total:
            text += f" ({item.reached}/{item.total})"
        parts.append(text)
    return "/".join(parts)


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; "|" in cells is escaped."""

    def line(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *(line(row) for row in rows)])


def metrics_table(
    results: Sequence[metrics_lib.GroupMetrics],
    *,
    targets: Sequence[float] = (),
    time_limit: float | None = None,
    ci: str = "pm",
) -> str:
    """Tables 1 / 2: one row per configuration."""
    header = ["configuration", "final metric"]
    if time_limit is not None:
        header.append(f"final time metric (T = {time_limit:g} s)")
    if targets:
        header.append("required time (min) to " + "/".join(f"{t:g}" for t in targets))
    header += ["SPS", "bound (stage, share of its thread)", "max policy lag", "seeds"]
    rows = []
    for result in results:
        row = [result.group.label, format_stat(result.final_metric, ci=ci)]
        if time_limit is not None:
            row.append(format_stat(result.final_time_metric, ci=ci))
        if targets:
            row.append(format_required_times(result.required_times))
        row += [
            format_stat(result.sps, ci=ci),
            result.bound or "-",
            "-" if result.max_policy_lag is None else str(result.max_policy_lag),
            str(result.seeds),
        ]
        rows.append(row)
    return markdown(header, rows)


def sweep_table(results: Sequence[metrics_lib.GroupMetrics], field: str, *, ci: str = "pm") -> str:
    """Tables 4 / 5: one column per value of `field` (the groups must differ in it alone), rows SPS, average score
    and each seed's fingerprint, then a line on whether the fingerprints agree for every seed."""
    header = [field] + [metrics_lib.format_value(r.group.value(field)) for r in results]
    rows = [
        ["Steps per second (SPS)"] + [format_stat(r.sps, ci=ci) for r in results],
        ["Average score (final metric)"] + [format_stat(r.final_metric, ci=ci) for r in results],
    ]
    seeds = sorted({s for r in results for s in r.fingerprints}, key=metrics_lib.sort_value)
    for seed in seeds:
        cells = []
        for r in results:
            value = r.fingerprints.get(seed)
            cells.append(value[:FINGERPRINT_CHARS] if value else "-")
        rows.append([f"Fingerprint (seed {seed})"] + cells)
    return markdown(header, rows) + "\n\n" + fingerprint_line(results, field)


def fingerprint_line(results: Sequence[metrics_lib.GroupMetrics], field: str) -> str:
    """Whether every seed's final parameters are bit-identical across the values of `field`."""
    seeds = sorted({s for r in results for s in r.fingerprints}, key=metrics_lib.sort_value)
    common = [s for s in seeds if all(r.fingerprints.get(s) for r in results)]
    partial = [s for s in seeds if s not in common]
    if not common:
        return f"Fingerprints: no seed has a fingerprint for every {field} value, nothing to compare."
    differ = [s for s in common if len({r.fingerprints[s] for r in results}) > 1]
    names = ", ".join(str(s) for s in common)
    if differ:
        text = (
            f"Fingerprints differ across {field} for seed(s) {', '.join(str(s) for s in differ)} "
            f"(compared seeds: {names})."
        )
    else:
        text = f"Fingerprints identical across every {field} value for each seed ({names}): bit-identical parameters."
    if partial:
        text += f" Not compared (missing for some {field} value): seed(s) {', '.join(str(s) for s in partial)}."
    return text


def speedup_table(points: Sequence[metrics_lib.SpeedupPoint], *, ci: str = "pm") -> str:
    """Fig. 4 (left) as numbers: per pair of hts and sync configurations (same env, algo, num_envs and step time),
    SPS of each and their ratio."""
    header = ["env", "num_envs", "HTS", "sync", "step time", "variance (s^2)", "HTS SPS", "sync SPS", "speedup"]

    def order(p):
        return (str(p.hts.group.value("env_id")), metrics_lib.sort_value(p.hts.group.value("num_envs")),
                p.hts.group.label_without("step_time"), p.variance)

    rows = []
    for p in sorted(points, key=order):
        rows.append([
            str(p.hts.group.value("env_id")), str(p.hts.group.value("num_envs")),
            p.hts.group.label_without("step_time"), p.sync.group.label_without("step_time"), p.step_time,
            f"{p.variance:.3g}", format_stat(p.hts.sps, ci=ci), format_stat(p.sync.sps, ci=ci),
            format_stat(p.speedup, ci=ci),
        ])
    return markdown(header, rows)
