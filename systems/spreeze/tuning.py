"""Automatic tuning of the two parallelism hyperparameters (Spreeze, seed 002 section 3.4).

`--batch_size=auto` grows the batch geometrically while the measured update throughput still rises markedly and memory
allows; `--num_samplers=auto` adds samplers while sampling throughput rises and CPU load leaves room for the learner.
The two are tuned independently (the paper: "largely independent"). Both searches walk up from the small end and stop at
the first value that is not worth it, so every value is measured at most once and nothing past the knee is measured
except the one value that showed the knee. The chosen values and the measurements behind them are printed as a table
(like the paper's Table 3) and stored in the run directory (`save_tuning`).

The functions here only decide; the caller supplies `measure` (run a few updates / let n samplers run for a while and
return the rates), which keeps them testable with synthetic curves.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from systems.common.atomic import write_atomic

__all__ = ["TuningResult", "format_table", "save_tuning", "to_json", "tune_batch_size", "tune_num_samplers"]

# row["status"]: the first value measured / a step taken / the step that showed no marked gain or broke the CPU cap /
# a step not measured because memory would not allow it or measuring failed with an out-of-memory error.
START, ACCEPTED, REJECTED, SKIPPED = "start", "accepted", "rejected", "skipped"


@dataclasses.dataclass
class TuningResult:
    """`choice`: the chosen value; `rows`: one dict per value considered, in order (keys `value`, `status`,
    `throughput` (frames/s, None if not measured), `gain` (vs. the current choice), `required` (the gain needed),
    `note`, plus what the measurement reported, e.g. `updates_per_s`, `cpu_load`, `gpu_use`); `reason`: why the search
    stopped."""

    parameter: str
    choice: int
    rows: list[dict]
    reason: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def tune_batch_size(
    measure: Callable[[int], Any],
    *,
    start: int = 256,
    maximum: int = 65536,
    growth: float = 2,
    min_gain: float = 1.15,
    memory_ok: Callable[[int], bool] = lambda b: True,
    oom_errors: tuple[type[BaseException], ...] = (),
) -> TuningResult:
    """Chooses the batch size by geometric growth.

    `measure(b)` returns the update frame rate at batch size b (batch x updates/s), either as a number or as
    `(rate, extras)` with a dict of further measurements for the table (e.g. `{"gpu_use": 0.82}`).

    Starting from `start` (always measured, assumed to fit), the next candidate is `round(current * growth)`. It is
    tried only if it is <= `maximum` and `memory_ok(candidate)`; it is measured once and accepted -- becoming the
    current value -- if its rate is >= `min_gain` x the current value's rate. The search stops at the first candidate
    that exceeds `maximum`, does not fit in memory (not measured), raises one of `oom_errors` while measured (e.g.
    jax's XlaRuntimeError for RESOURCE_EXHAUSTED), or gains less than `min_gain`. The choice is the last accepted
    value: if the next growth step gives less than `min_gain`, the current batch is kept, even if the larger batch is
    somewhat faster (a larger batch means fewer updates per second for a small gain in frames).
    """
    _check_int("start", start, 1)
    _check_int("maximum", maximum, start)
    if not growth > 1:
        raise ValueError(f"growth must be > 1, got {growth}")
    if not min_gain >= 1:
        raise ValueError(f"min_gain must be >= 1, got {min_gain}")

    current = start
    rate, extras = _rate(measure(start), f"measure({start})")
    rows = [_row(start, START, rate, extras, batch=True)]
    while True:
        candidate = max(current + 1, int(round(current * growth)))
        if candidate > maximum:
            reason = f"next batch size {candidate} exceeds the maximum {maximum}"
            break
        if not memory_ok(candidate):
            rows.append(_row(candidate, SKIPPED, None, {}, note="does not fit in memory"))
            reason = f"batch size {candidate} does not fit in memory"
            break
        try:
            result = measure(candidate)
        except oom_errors as e:
            rows.append(_row(candidate, SKIPPED, None, {}, note=f"out of memory: {type(e).__name__}"))
            reason = f"batch size {candidate} ran out of memory ({type(e).__name__})"
            break
        new_rate, extras = _rate(result, f"measure({candidate})")
        gain = _gain(new_rate, rate)
        if gain < min_gain:
            rows.append(_row(candidate, REJECTED, new_rate, extras, gain, min_gain, "gain below threshold", batch=True))
            reason = f"growing to {candidate} gains {gain:.3g}x < {min_gain:g}x"
            break
        rows.append(_row(candidate, ACCEPTED, new_rate, extras, gain, min_gain, batch=True))
        current, rate = candidate, new_rate
    return TuningResult("batch_size", current, rows, reason)


def tune_num_samplers(
    measure: Callable[[int], Any],
    *,
    start: int = 1,
    maximum: int,
    min_gain: float = 1.1,
    max_cpu_load: float = 0.9,
) -> TuningResult:
    """Chooses the number of sampler processes by adding one at a time.

    `measure(n)` runs n samplers and returns `(sampling frames/s, cpu_load)` with cpu_load the busy fraction of the
    whole machine (0..1), optionally `(rate, cpu_load, extras)`.

    Gain threshold per added sampler: going from n to n+1 samplers can at best multiply the rate by (n+1)/n, which
    soon falls under any fixed factor, so the threshold is scaled: n+1 is accepted if
    `rate(n+1) >= rate(n) * (1 + (min_gain - 1) / n)`, i.e. the added sampler must contribute at least `min_gain - 1`
    (10 % by default) of the current average per-sampler rate. For the first addition (n = 1) this is exactly
    `min_gain`; a perfectly scaling machine keeps adding samplers until the CPU cap or `maximum`.

    Samplers are added while the gain holds and the measured load stays <= `max_cpu_load` (the rest is left to the
    learner). The search stops at `maximum`, at the first n+1 that gains too little, or at the first n+1 whose load
    exceeds the cap; that n+1 is measured (once) but not chosen. `start` is always measured and is the smallest
    possible choice: if its load is already over the cap it is chosen and nothing more is measured.
    """
    _check_int("start", start, 1)
    _check_int("maximum", maximum, start)
    if not min_gain >= 1:
        raise ValueError(f"min_gain must be >= 1, got {min_gain}")
    if not 0 < max_cpu_load <= 1:
        raise ValueError(f"max_cpu_load must be in (0, 1], got {max_cpu_load}")

    current = start
    rate, load, extras = _rate_load(measure(start), f"measure({start})")
    note = f"CPU load {load:.0%} already over the cap {max_cpu_load:.0%}" if load > max_cpu_load else ""
    rows = [_row(start, START, rate, {"cpu_load": load, **extras}, note=note)]
    while True:
        candidate = current + 1
        if note:
            reason = f"{start} samplers already load the CPU to {load:.0%} > {max_cpu_load:.0%}; none added"
            break
        if candidate > maximum:
            reason = f"reached the maximum of {maximum} samplers"
            break
        new_rate, new_load, extras = _rate_load(measure(candidate), f"measure({candidate})")
        gain = _gain(new_rate, rate)
        required = 1 + (min_gain - 1) / current
        measured = {"cpu_load": new_load, **extras}
        if new_load > max_cpu_load:
            rows.append(_row(candidate, REJECTED, new_rate, measured, gain, required, "CPU load over the cap"))
            reason = f"{candidate} samplers load the CPU to {new_load:.0%} > {max_cpu_load:.0%}"
            break
        if gain < required:
            rows.append(_row(candidate, REJECTED, new_rate, measured, gain, required, "gain below threshold"))
            reason = f"sampler {candidate} gains {gain:.3g}x < {required:.3g}x"
            break
        rows.append(_row(candidate, ACCEPTED, new_rate, measured, gain, required))
        current, rate = candidate, new_rate
    return TuningResult("num_samplers", current, rows, reason)


_COLUMNS = {  # optional measurement columns shown when any row has them, in this order
    "updates_per_s": ("updates/s", lambda x: _num(x)),
    "cpu_load": ("CPU use", lambda x: f"{x:.0%}"),
    "gpu_use": ("GPU use", lambda x: f"{x:.0%}"),
}


def format_table(results: Mapping[str, TuningResult]) -> str:
    """A Markdown table of all measurements (one row per value tried, chosen values marked), then one line per
    parameter with the choice and why the search stopped."""
    rows = [(key, row, row["value"] == res.choice) for key, res in results.items() for row in res.rows]
    extra = [k for k in _COLUMNS if any(r.get(k) is not None for _, r, _ in rows)]
    others = sorted({k for _, r, _ in rows for k in r} - set(_BASE_KEYS) - set(_COLUMNS))
    header = ["parameter", "value", "throughput (frames/s)", *(_COLUMNS[k][0] for k in extra), *others, "gain",
              "result", "chosen"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, row, chosen in rows:
        gain = "" if row.get("gain") is None else f"{row['gain']:.2f}x (need {row['required']:.2f}x)"
        result = row["status"] + (f": {row['note']}" if row.get("note") else "")
        cells = [key, str(row["value"]), _num(row["throughput"]),
                 *("" if row.get(k) is None else _COLUMNS[k][1](row[k]) for k in extra),
                 *("" if row.get(k) is None else _cell(row[k]) for k in others),
                 gain, result, "**yes**" if chosen else ""]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"{key} = {res.choice}: {res.reason}" for key, res in results.items()]
    return "\n".join(lines) + "\n"


def to_json(results: Mapping[str, TuningResult]) -> str:
    return json.dumps({key: res.to_dict() for key, res in results.items()}, indent=2, sort_keys=True)


def save_tuning(run_dir: str, results: Mapping[str, TuningResult], name: str = "tuning") -> tuple[str, str]:
    """Stores `{name}.json` and `{name}.md` (the table) in `run_dir`, each atomically; returns their paths."""
    os.makedirs(run_dir, exist_ok=True)
    paths = []
    for ext, text in (("json", to_json(results) + "\n"), ("md", format_table(results))):
        path = os.path.join(run_dir, f"{name}.{ext}")
        write_atomic(path, text)
        paths.append(path)
    return paths[0], paths[1]


_BASE_KEYS = ("value", "status", "throughput", "gain", "required", "note")


def _row(value, status, rate, extras, gain=None, required=None, note="", batch=False) -> dict:
    if gain is not None and not math.isfinite(gain):
        gain = None  # from a zero rate: no ratio (and JSON has no infinity)
    row = {"value": value, "status": status, "throughput": rate, "gain": gain, "required": required, "note": note}
    if batch and rate is not None:
        row["updates_per_s"] = rate / value
    row.update(extras)
    return row


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def _finite(x: Any, what: str) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{what} returned {x!r}, not a number") from None
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{what} returned {x}, not a finite non-negative number")
    return x


def _rate(result: Any, what: str) -> tuple[float, dict]:
    if isinstance(result, tuple):
        if len(result) != 2 or not isinstance(result[1], Mapping):
            raise ValueError(f"{what} must return a rate or (rate, extras dict), got {result!r}")
        return _finite(result[0], what), dict(result[1])
    return _finite(result, what), {}


def _rate_load(result: Any, what: str) -> tuple[float, float, dict]:
    if not isinstance(result, tuple) or len(result) not in (2, 3) or (len(result) == 3 and not isinstance(
            result[2], Mapping)):
        raise ValueError(f"{what} must return (rate, cpu_load) or (rate, cpu_load, extras dict), got {result!r}")
    extras = dict(result[2]) if len(result) == 3 else {}
    return _finite(result[0], what), _finite(result[1], what + " cpu_load"), extras


def _gain(new: float, old: float) -> float:
    if old > 0:
        return new / old
    return math.inf if new > 0 else 1.0


def _num(x: Any) -> str:
    if x is None:
        return ""
    x = float(x)
    if abs(x) >= 1e5:
        return f"{x:.2E}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def _cell(x: Any) -> str:
    return _num(x) if isinstance(x, int | float) and not isinstance(x, bool) else str(x)
