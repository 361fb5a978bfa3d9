"""Throughput benchmark: HTS-RL against the synchronous baseline and the raw EnvPool ceiling (seed 000, sec. 4.2
and 5, Fig. 4).

For each row (env, num_envs, step time, alpha) it measures, with the same agent, envs, alpha and env steps:

* ceiling SPS: raw EnvPool random-action throughput through `envs.executor.Executor` (async mode, the HTS batch
  size, the same step-time injection), driven by one loop that takes whatever is ready and sends random actions;
* sync SPS: `systems.sync.system.run`;
* HTS SPS: `systems.hts.system.run`.

System SPS is the steady-state rate from the run's `progress.csv`, between the first logged update and the last
(env_steps / wall_time difference), so JIT compilation and start-up are excluded. Each measurement runs in its own
subprocess with a hard timeout, so a hang is reported, not waited on. Results: a Markdown table and CSVs under
`benchmarks/results/`.

The last column is the zero-compute model of seed 000, Claim 1: with i.i.d. exponential step times of mean mu,
the sync baseline waits E[max over n envs of one step] per step and HTS E[max over n envs of a Gamma(alpha, mu)
sum] per round, so no implementation can beat `model HTS/sync` = alpha E[max_n Exp] / E[max_n Gamma(alpha)]
(Monte Carlo, 20,000 draws) unless the baseline also pays for learning, which HTS overlaps.

Usage:
  PYTHONPATH=. python -m benchmarks.throughput            # full sweep (~25 min on 2 CPU cores)
  PYTHONPATH=. python -m benchmarks.throughput --quick    # two CartPole rows, 1 repeat (~2 min)
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import os
import shlex
import shutil
import sys
import tempfile
import time

from absl import app, flags

from benchmarks.common import fmt as _fmt
from benchmarks.common import machine as _machine
from benchmarks.common import median as _median
from benchmarks.common import run_job
from systems.common.profile import bound_text

_QUICK = flags.DEFINE_bool("quick", False, "Two short CartPole rows, 1 repeat; writes *_quick files.")
_GROUPS = flags.DEFINE_list(
    "groups", "steptime,overhead,atari,gfootball",
    "Row groups to run: steptime (CartPole with exp step times), overhead (CartPole, no step time), atari "
    "(Breakout-v5), gfootball (academy_3_vs_1_with_keeper).",
)
_REPEATS = flags.DEFINE_integer("repeats", 3, "Repeats of each HTS/sync pair for CartPole rows (median reported).")
_HEAVY_REPEATS = flags.DEFINE_integer("heavy_repeats", 1, "Repeats of each HTS/sync pair for Atari/GFootball rows.")
_CEILING_SECONDS = flags.DEFINE_float("ceiling_seconds", 3.0, "Measured seconds of each raw EnvPool ceiling run.")
_OUT_DIR = flags.DEFINE_string("out_dir", "benchmarks/results", "Directory for the Markdown table and CSVs.")
_NAME = flags.DEFINE_string("name", "throughput_cpu", "Base name of the output files (quick mode adds _quick).")
_WORKER = flags.DEFINE_string("worker", "", "Internal: JSON job for one measurement in this process.")

# Agent settings shared by every row (stated in the table header).
ALGO = "ppo"
NUM_ACTORS = 2
NUM_EPOCHS = 2
NUM_MINIBATCHES = 4
SEED = 1


@dataclasses.dataclass(frozen=True)
class Row:
    """One table row: a configuration measured for the ceiling, sync and HTS."""

    group: str
    env_id: str
    num_envs: int
    step_time: str
    total_steps: int  # env steps of each system run (same for HTS and sync)
    heavy: bool = False  # Atari/GFootball: fewer repeats, longer timeout
    alpha: int = 32  # sync_interval of both systems (the rollout length per update)
    env_batch_size: int = 0  # 0: the system default (num_envs // 2)
    inference_batch: int = 0  # 0: the system default (num_envs // 2)
    timeout_s: int = 120  # per system run
    systems: tuple = ("hts", "sync")


def full_rows() -> list[Row]:
    rows = []
    # Fig. 4 shape: step-time mean at 16 envs, then env count at exp:0.004. Steps sized for ~10-20 s sync runs.
    for mean, steps in (("0.001", 40_960), ("0.004", 20_480), ("0.016", 6_144)):
        rows.append(Row("steptime", "CartPole-v1", 16, f"exp:{mean}", steps))
    rows.append(Row("steptime", "CartPole-v1", 8, "exp:0.004", 12_288))
    rows.append(Row("steptime", "CartPole-v1", 4, "exp:0.004", 8_192))
    # The paper's GFootball setting, alpha = 128, where batch synchronization costs less (Claim 1, Fig. 3b).
    for num_envs, mean, steps in ((16, "0.004", 40_960), (16, "0.016", 16_384), (32, "0.004", 65_536)):
        rows.append(Row("steptime", "CartPole-v1", num_envs, f"exp:{mean}", steps, alpha=128, timeout_s=200))
    # No step time: the cost of the HTS machinery itself, with the default and with full EnvPool/inference batches.
    rows.append(Row("overhead", "CartPole-v1", 8, "none", 40_960))
    rows.append(Row("overhead", "CartPole-v1", 8, "none", 40_960, env_batch_size=8, inference_batch=8))
    # CPU learning is slow here (a 256-sample Nature-CNN PPO minibatch step takes ~0.3 s): 5 rounds.
    rows.append(Row("atari", "Breakout-v5", 8, "none", 1_280, heavy=True, env_batch_size=4, timeout_s=300))
    rows.append(Row(
        "gfootball", "gfootball/academy_3_vs_1_with_keeper-v1", 8, "none", 1_280, heavy=True, env_batch_size=4,
        timeout_s=300,
    ))
    return rows


def quick_rows() -> list[Row]:
    return [
        Row("steptime", "CartPole-v1", 16, "exp:0.004", 6_144),
        Row("overhead", "CartPole-v1", 8, "none", 12_288),
    ]


# --------------------------------------------------------------------------------------------------------------
# Worker side (runs in a subprocess).


def _measure_ceiling(job: dict) -> dict:
    import numpy as np

    from envs.executor import Executor
    from envs.factory import make_spec
    from envs.step_time import parse_step_time

    spec = make_spec(job["env_id"])
    num_envs = job["num_envs"]
    batch_size = job["env_batch_size"] or max(1, num_envs // 2)
    executor = Executor(
        spec, num_envs=num_envs, batch_size=batch_size, seed=SEED, step_time=parse_step_time(job["step_time"])
    )
    rng = np.random.default_rng(0)
    steps = 0
    warmup, seconds = 0.5, job["seconds"]
    executor.start()
    try:
        t_start = time.perf_counter()
        t_measure = t_start + warmup
        t_end = t_measure + seconds
        while True:
            results = executor.take(max_items=num_envs, timeout=0.05)
            now = time.perf_counter()
            if now >= t_end:
                break
            if results is None:
                continue
            if now >= t_measure:
                steps += len(results)
            if spec.continuous:
                actions = rng.uniform(spec.action_low, spec.action_high, (len(results), spec.action_dim))
            else:
                actions = rng.integers(0, spec.action_dim, len(results)).astype(np.int32)
            executor.send(actions, results.env_ids)
    finally:
        executor.close()
    return {"sps": steps / seconds, "steps": steps, "seconds": seconds, "env_batch_size": batch_size}


def _measure_system(job: dict) -> dict:
    from envs.factory import family_of
    from systems.common.config import TrainConfig
    from systems.common.presets import preset

    if job["system"] == "hts":
        from systems.hts.system import HTSConfig as config_cls
        from systems.hts.system import run
    else:
        from systems.sync.system import run

        config_cls = TrainConfig
    logdir = tempfile.mkdtemp(prefix=f"bench-{job['system']}-")
    settings = preset(family_of(job["env_id"]), ALGO, config_cls)
    settings.update(num_envs=job["num_envs"], sync_interval=job["alpha"], total_steps=job["total_steps"],
                    num_epochs=NUM_EPOCHS, num_minibatches=NUM_MINIBATCHES)
    if job["system"] == "hts":  # the sync baseline has no actor threads and steps every env at once
        settings.update(num_actors=NUM_ACTORS, env_batch_size=job["env_batch_size"],
                        inference_batch=job["inference_batch"])
    config = config_cls(
        env_id=job["env_id"], algo=ALGO, seed=SEED + job["repeat"], step_time=job["step_time"], eval_episodes=0,
        checkpoint_every=0, logdir=logdir, quiet=True, **settings,
    )
    t0 = time.perf_counter()
    try:
        summary = run(config)
        elapsed = time.perf_counter() - t0
        with open(os.path.join(logdir, "progress.csv")) as f:
            progress = list(csv.DictReader(f))
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    first, last = progress[0], progress[-1]
    span = float(last["wall_time"]) - float(first["wall_time"])
    steady = (int(last["env_steps"]) - int(first["env_steps"])) / span if len(progress) > 1 and span > 0 else None
    return {
        "sps": steady,
        "summary_sps": summary["sps"],
        "env_steps": summary["env_steps"],
        "updates": summary["updates"],
        "first_update_s": float(first["wall_time"]),
        "process_run_s": elapsed,
        "max_policy_lag": summary["max_policy_lag"],
        "bound": bound_text(summary.get("profile")),
    }


def worker(job: dict) -> None:
    result = _measure_ceiling(job) if job["system"] == "ceiling" else _measure_system(job)
    print("RESULT " + json.dumps(result), flush=True)


# --------------------------------------------------------------------------------------------------------------
# Driver side.


def _run_job(job: dict, timeout_s: float) -> dict:
    """Runs one measurement in a fresh process; returns its result dict, with 'error' on failure or timeout."""
    return run_job("benchmarks.throughput", job, timeout_s)


def claim1_model_ratio(step_time: str, num_envs: int, alpha: int, draws: int = 20_000) -> float | None:
    """Zero-compute bound on HTS/sync under exponential step times (seed 000, Claim 1; module docstring)."""
    if not step_time.startswith("exp:"):
        return None
    import numpy as np

    rng = np.random.default_rng(0)
    sync_step = rng.exponential(1.0, (draws, num_envs)).max(axis=1).mean()
    hts_round = rng.gamma(alpha, 1.0, (draws, num_envs)).max(axis=1).mean()
    return float(alpha * sync_step / hts_round)


def main(argv):
    del argv
    if _WORKER.value:
        worker(json.loads(_WORKER.value))
        return
    quick = _QUICK.value
    rows = quick_rows() if quick else [r for r in full_rows() if r.group in _GROUPS.value]
    name = _NAME.value + ("_quick" if quick else "")
    os.makedirs(_OUT_DIR.value, exist_ok=True)
    command = "PYTHONPATH=. python -m benchmarks.throughput " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    started = datetime.datetime.now().astimezone()
    raw_rows = []
    table = []
    for row in rows:
        repeats = 1 if quick else (_HEAVY_REPEATS.value if row.heavy else _REPEATS.value)
        results = {s: [] for s in ("ceiling", *row.systems)}
        jobs = [("ceiling", 0)]  # one ceiling run per row: it is the least noisy of the three
        for r in range(repeats):
            jobs += [(s, r) for s in row.systems]
        for system, r in jobs:
            result, raw_row = _run_system(row, system, r)
            results[system].append(result)
            raw_rows.append(raw_row)
        table.append(_table_row(row, repeats, results))
    _write_outputs(name, raw_rows, table, command, started)


RAW_FIELDS = ["group", "env_id", "num_envs", "step_time", "alpha", "total_steps", "system", "repeat",
              "sps", "summary_sps", "first_update_s", "wall_s", "max_policy_lag", "bound", "started",
              "background_cores", "error"]


def _run_system(row: Row, system: str, r: int) -> tuple[dict, dict]:
    """Repeat r of `system` ("ceiling", "hts" or "sync") on `row` in a fresh process; prints a line and returns the
    result and its runs-CSV row."""
    base = dict(env_id=row.env_id, num_envs=row.num_envs, step_time=row.step_time,
                env_batch_size=row.env_batch_size, inference_batch=row.inference_batch, alpha=row.alpha)
    job = dict(base, system=system, repeat=r, total_steps=row.total_steps, seconds=_CEILING_SECONDS.value)
    timeout = 60 if system == "ceiling" else row.timeout_s
    result = _run_job(job, timeout)
    raw_row = {
        "group": row.group, "env_id": row.env_id, "num_envs": row.num_envs, "step_time": row.step_time,
        "alpha": row.alpha, "total_steps": row.total_steps, "system": system, "repeat": r,
        **{k: result.get(k) for k in ("sps", "summary_sps", "first_update_s", "wall_s", "max_policy_lag", "bound",
                                      "started", "background_cores", "error")},
    }
    print(f"{row.env_id:>42} n={row.num_envs:<3} {row.step_time:<10} {system:<8} rep {r}: "
          f"SPS {_fmt(result.get('sps'))}  ({result['wall_s']:.1f} s, background "
          f"{_fmt(result.get('background_cores'), 2)} cores)"
          + (f"  ERROR {result['error']}" if result.get("error") else ""), flush=True)
    return result, raw_row


def _table_row(row: Row, repeats: int, results: dict[str, list[dict]]) -> dict:
    """The table entry of `row`: median SPS per system over the repeats, their ratios and the Claim 1 model."""
    ceiling = _median(x["sps"] for x in results["ceiling"])
    sync = _median(x["sps"] for x in results.get("sync", []))
    hts = _median(x["sps"] for x in results.get("hts", []))
    errors = sorted({x["error"] for xs in results.values() for x in xs if x.get("error")})
    return dict(
        group=row.group, env_id=row.env_id, num_envs=row.num_envs, step_time=row.step_time, alpha=row.alpha,
        total_steps=row.total_steps, env_batch_size=row.env_batch_size or max(1, row.num_envs // 2),
        inference_batch=row.inference_batch or max(1, row.num_envs // 2),
        repeats=repeats, ceiling_sps=ceiling, sync_sps=sync, hts_sps=hts,
        hts_over_sync=hts / sync if hts and sync else None,
        hts_over_ceiling=hts / ceiling if hts and ceiling else None,
        sync_over_ceiling=sync / ceiling if sync and ceiling else None,
        model_hts_over_sync=claim1_model_ratio(row.step_time, row.num_envs, row.alpha),
        background_cores=_median(x.get("background_cores") for xs in results.values() for x in xs),
        hts_bound=_most_common(x.get("bound") for x in results.get("hts", [])),
        sync_bound=_most_common(x.get("bound") for x in results.get("sync", [])),
        errors="; ".join(errors),
    )


def _most_common(values) -> str | None:
    """The bound most repeats of a system name (the first of equals), None without any."""
    values = [v for v in values if v]
    return max(values, key=values.count) if values else None


def _write_outputs(name, raw_rows, table, command, started) -> None:
    """Writes the runs CSV, the table CSV and the Markdown table."""
    raw_path = os.path.join(_OUT_DIR.value, f"{name}_runs.csv")
    with open(raw_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=RAW_FIELDS)
        writer.writeheader()
        writer.writerows(raw_rows)
    csv_path = os.path.join(_OUT_DIR.value, f"{name}.csv")
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    md_path = os.path.join(_OUT_DIR.value, f"{name}.md")
    with open(md_path, "w") as f:
        f.write(_markdown(table, command, started, time.perf_counter()))
    print(f"wrote {md_path}, {csv_path}, {raw_path}")


_START = time.perf_counter()


def _markdown(table, command, started, now) -> str:
    lines = [
        "# Throughput: HTS-RL vs synchronous baseline vs raw EnvPool (CPU)",
        "",
        f"- Machine: {_machine()} (no GPU). Date: {started:%Y-%m-%d %H:%M %Z}. Sweep wall time: "
        f"{(now - _START) / 60:.1f} min.",
        f"- Command: `{command}` (from the repository root).",
        f"- Agent: {ALGO.upper()} (CartPole: MLP; Breakout: Nature CNN; GFootball: the preset network), "
        f"num_epochs={NUM_EPOCHS}, num_minibatches={NUM_MINIBATCHES}, alpha (sync_interval) as listed, "
        f"num_actors={NUM_ACTORS} (HTS), env_batch_size and inference_batch as listed (HTS and ceiling; sync uses "
        "num_envs for both), "
        "other hyperparameters from `systems.common.config.preset`; eval_episodes=0.",
        "- SPS = env steps per second in steady state: from `progress.csv`, (env_steps, wall_time) of the last "
        "logged update minus the first, so JIT compilation and start-up are excluded. HTS and sync run the same "
        "total_steps. Ceiling = raw EnvPool random actions through `envs.executor.Executor` (HTS batch size, same "
        "step-time injection), one driver loop taking whatever is ready, 0.5 s warm-up then "
        f"{_CEILING_SECONDS.value:g} s measured, one ceiling run per row. HTS and sync: medians over the repeats "
        "listed (a row's median is 'n/a' when every run failed).",
        "- background = median CPU cores used by *other* processes on the machine during the row's runs (from "
        "/proc): anything well above 0 means the numbers were measured on a shared, loaded machine.",
        "- Targets: HTS >= 3x sync under exponential step times; HTS/ceiling >= 0.5 on CartPole with step time.",
        "- model HTS/sync = the zero-compute Claim 1 bound for that row (module docstring of the script).",
        "- HTS bound, sync bound: the stage that bounds the run after its first update (`systems.common.profile`: the "
        "actors' largest stage for HTS, the one thread's for sync, or a learner busy 90% of its time) with its share, "
        "most repeats' verdict.",
        "",
        "| env | num_envs | step_time | alpha | env batch | infer batch | total steps | repeats | ceiling SPS | "
        "sync SPS | HTS SPS | HTS/sync | model HTS/sync | HTS/ceiling | sync/ceiling | HTS bound | sync bound | "
        "background | errors |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- "
        "| --- | ---: | --- |",
    ]
    for t in table:
        lines.append(
            f"| {t['env_id']} | {t['num_envs']} | {t['step_time']} | {t['alpha']} | {t['env_batch_size']} | "
            f"{t['inference_batch']} | {t['total_steps']:,} | {t['repeats']} | "
            f"{_fmt(t['ceiling_sps'])} | {_fmt(t['sync_sps'])} | {_fmt(t['hts_sps'])} | "
            f"{_fmt(t['hts_over_sync'], 2)} | {_fmt(t['model_hts_over_sync'], 2)} | "
            f"{_fmt(t['hts_over_ceiling'], 2)} | {_fmt(t['sync_over_ceiling'], 2)} | "
            f"{t['hts_bound'] or 'n/a'} | {t['sync_bound'] or 'n/a'} | "
            f"{_fmt(t['background_cores'], 2)} | {t['errors'] or ''} |"
        )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    app.run(main)
