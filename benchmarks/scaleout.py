"""Scale-out benchmark: data-parallel A2C (Distributed BA3C, seed 001) against its device count and FC width,
GALA (seed 004, Algorithm 1) against all-reduce A2C with the same learners and envs, and HTS-RL (seed 000) with its
learner over several devices and processes, on forced XLA CPU devices.

Groups of rows:

* `devices` (seed 001, Fig. 8 shape, weak scaling): `systems.ba3c.system.run` on 1, 2 and 4 devices with the
  local batch fixed (CartPole-v1: 16 envs x sync_interval 5 = 80 per device, RMSProp 7e-4, time to an evaluation
  return of 450; Breakout-v5: the BA3C network and optimizer, 8 envs x 4 = 32 per device, SPS only).
* `hidden` (seed 001, Fig. 6 shape): Breakout-v5 data-parallel BA3C on one device with `--hidden` 256, 128, 64.
* `gala` (seed 004): 4 learners x 16 envs, sync_interval 5, CartPole-v1. GALA in its async (threads) and pmap
  (lock-step, 4 devices) modes against all-reduce A2C (datapar on 4 devices), without and with exponential env
  step times (mean 5 ms). Lock-step systems wait for the slowest of all 64 envs at every env step, an async GALA
  learner only for the slowest of its own 16: the zero-compute model of that is E[max of 64 Exp] / E[max of 16
  Exp] = H_64 / H_16 (harmonic numbers).
* `hts` (seed 000): `systems.hts.system.run`, HTS-PPO on CartPole-v1 (classic-control PPO preset, 16
  envs x sync_interval 64 = 1,024 env steps per round, 2 actor threads on device 0) with its learner as 1, 2 and 4
  data-parallel replicas in one process and as 2 processes x 2 replicas joined by `jax.distributed` on 127.0.0.1
  (both processes started at once, output to files; the row reports process 0's run), the two 4-replica layouts
  again with `--ordered_reduction`, and Breakout-v5 (Atari PPO preset) on 1 shared device against actors on device
  0 and 2 learner replicas on devices 1 and 2. Besides SPS: the median time per round (= per learner update) and
  the parameter fingerprint.

The device count of the XLA CPU platform is fixed when JAX starts, so every measurement runs in its own subprocess
with `XLA_FLAGS=--xla_force_host_platform_device_count=N` (`device_env`) and a hard timeout. On a 2-core machine
forced devices share the same two cores: the `devices` rows measure the system's overhead per device, not a
parallel speed-up.

SPS is the steady-state rate from the run's `progress.csv`: env steps between the first logged update and the last
over the wall time between them, minus the time spent in evaluations inside that span (lock-step systems stop
training while they evaluate), so JIT compilation, start-up and evaluation are excluded. One env step is one data
point, learned from once (A2C; HTS-PPO learns from it in each of its 4 epochs).

Usage:
  PYTHONPATH=. python -m benchmarks.scaleout            # full sweep (~25 min on 2 CPU cores)
  PYTHONPATH=. python -m benchmarks.scaleout --quick    # short runs of every kind, 1 repeat (~5 min)
  PYTHONPATH=. python -m benchmarks.scaleout --groups=hts --name=scaleout_hts_cpu   # HTS-RL rows only (~4 min)
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import itertools
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from benchmarks.common import background_cores, cpu_ticks_by_pid, die_with_parent, fmt, machine, median, run_job

_QUICK = flags.DEFINE_bool("quick", False, "Short runs of every row kind, 1 repeat; writes *_quick files.")
_GROUPS = flags.DEFINE_list(
    "groups", "devices,hidden,gala,hts",
    "Row groups to run: devices (data-parallel on 1/2/4 devices), hidden (BA3C FC width), gala (GALA vs "
    "all-reduce A2C, with and without step times), hts (HTS-RL's learner on 1/2/4 devices and 2 processes x 2).",
)
_REPEATS = flags.DEFINE_integer("repeats", 3, "Repeats of each CartPole row (median reported).")
_HEAVY_REPEATS = flags.DEFINE_integer("heavy_repeats", 1, "Repeats of each Breakout-v5 row of the devices group.")
_HIDDEN_REPEATS = flags.DEFINE_integer("hidden_repeats", 2, "Repeats of each row of the hidden group (Breakout-v5).")
_OUT_DIR = flags.DEFINE_string("out_dir", "benchmarks/results", "Directory for the Markdown table and CSVs.")
_NAME = flags.DEFINE_string("name", "scaleout_cpu", "Base name of the output files (quick mode adds _quick).")
_WORKER = flags.DEFINE_string("worker", "", "Internal: JSON job for one measurement in this process.")

SEED = 1  # repeat r runs seed SEED + r
CARTPOLE = "CartPole-v1"
BREAKOUT = "Breakout-v5"
TARGET_RETURN = 450.0  # CartPole-v1 time-to-target threshold (max return 500)
# CartPole A2C optimizer of every CartPole row (the GALA / Kostrikov A2C setting; BA3C's Adam does not learn
# CartPole reliably). GALA scales the rate by sqrt(learners) (its default), all-reduce A2C does not.
CARTPOLE_OPTIMIZER = dict(optimizer="rmsprop", learning_rate=7e-4, opt_eps=1e-5, anneal_lr=False)
# Distributed BA3C's optimizer (launch.ba3c's defaults): large-batch Adam, lr 1e-3, epsilon by the batch rule.
BA3C_OPTIMIZER = dict(optimizer="adam_large_batch", learning_rate=1e-3, opt_eps=None, anneal_lr=False)
NUM_LEARNERS = 4
ENVS_PER_LEARNER = 16
# HTS rows: (processes, forced devices per process); every process runs its actors on device 0 and a learner
# replica on each of its devices.
HTS_LAYOUTS = ((1, 1), (1, 2), (1, 4), (2, 2))
HTS_NUM_ENVS = 16  # over all processes
HTS_SYNC_INTERVAL = 64  # 16 x 64 = 1,024 env steps per round
HTS_ACTORS = 2  # actor threads per process


@dataclasses.dataclass(frozen=True)
class Row:
    """One table row: a system configuration measured `repeats` times."""

    group: str  # devices | hidden | gala | hts
    system: str  # datapar (BA3C, `launch.ba3c`; the key of the committed rows) | gala | hts
    env_id: str
    devices: int  # forced XLA CPU devices of each worker (datapar: num_devices; GALA pmap: one per learner)
    total_steps: int
    mode: str = "all-reduce"  # all-reduce (datapar) | async | pmap (GALA)
    step_time: str = "none"
    local_batch: int = 80  # datapar: per device = envs per device x sync_interval
    sync_interval: int = 5
    hidden: int = 256  # BA3C FC width (Atari)
    eval_every: int = 0  # env steps between evaluations (0: only at the end)
    eval_episodes: int = 10
    heavy: bool = False  # Breakout: heavy_repeats (hidden group: hidden_repeats) instead of repeats
    timeout_s: int = 240
    algo: str = "a2c"  # hts: ppo
    processes: int = 1  # hts: processes of the jax.distributed job, each with `devices` forced devices
    learner_devices: str = ""  # hts: local indices of each process's learner replicas
    ordered: bool = False  # hts: --ordered_reduction (gradients gathered and added up in replica order)
    num_envs: int = 0  # hts: envs over all processes

    @property
    def replicas(self) -> int:
        """HTS learner replicas over all processes."""
        return self.processes * len(self.learner_devices.split(",")) if self.learner_devices else 1

    @property
    def label(self) -> str:
        if self.system == "hts":
            layout = f"{self.processes}x{self.devices} devices" + (", ordered" if self.ordered else "")
            return f"{self.group}: HTS-PPO {self.env_id} {layout}, {self.replicas} replicas"
        system = "all-reduce A2C" if self.system == "datapar" else f"GALA {self.mode}"
        return f"{self.group}: {system} {self.env_id} dev={self.devices} hidden={self.hidden} {self.step_time}"


def _cartpole_datapar(group: str, devices: int, total_steps: int, eval_every: int, step_time: str = "none") -> Row:
    return Row(group, "datapar", CARTPOLE, devices, total_steps, step_time=step_time, eval_every=eval_every)


def _gala(mode: str, total_steps: int, step_time: str = "none") -> Row:
    return Row("gala", "gala", CARTPOLE, NUM_LEARNERS if mode == "pmap" else 1, total_steps, mode=mode,
               step_time=step_time)


def _breakout(group: str, devices: int, total_steps: int, hidden: int = 256) -> Row:
    return Row(group, "datapar", BREAKOUT, devices, total_steps, local_batch=32, sync_interval=4, hidden=hidden,
               eval_episodes=0, heavy=True, timeout_s=300)


def _hts(processes: int, devices: int, total_steps: int, ordered: bool = False) -> Row:
    return Row("hts", "hts", CARTPOLE, devices, total_steps, sync_interval=HTS_SYNC_INTERVAL, timeout_s=300,
               algo="ppo", processes=processes, learner_devices=",".join(str(i) for i in range(devices)),
               ordered=ordered, num_envs=HTS_NUM_ENVS)


def _hts_breakout(devices: int, rounds: int) -> Row:
    """HTS-PPO on Breakout-v5 with the Atari preset (8 envs x 128 steps, Nature CNN): one device shared by actors
    and learner, or actors on device 0 and 2 learner replicas on devices 1 and 2."""
    return Row("hts", "hts", BREAKOUT, devices, rounds * 8 * 128, sync_interval=128, eval_episodes=0, heavy=True,
               timeout_s=420, algo="ppo", learner_devices="0" if devices == 1 else "1,2", num_envs=8)


def _hts_rows(rounds: int, breakout_rounds: int) -> list[Row]:
    """The CartPole layouts with pmean, the two 4-replica layouts again with --ordered_reduction, the Breakout
    pair."""
    steps = rounds * HTS_NUM_ENVS * HTS_SYNC_INTERVAL
    rows = [_hts(processes, devices, steps) for processes, devices in HTS_LAYOUTS]
    rows += [_hts(processes, devices, steps, ordered=True) for processes, devices in ((1, 4), (2, 2))]
    return rows + [_hts_breakout(devices, breakout_rounds) for devices in (1, 3)]


def full_rows() -> list[Row]:
    # Steps: CartPole 200k with an evaluation every 20k (10 evaluations, time to target); Breakout sized for
    # ~60-90 s runs on 2 cores (~90 SPS); GALA vs A2C with 5 ms exponential step times sized for about a minute
    # (all-reduce A2C ~2,100 SPS).
    rows = [_cartpole_datapar("devices", d, 200_000, 20_000) for d in (1, 2, 4)]
    rows += [_breakout("devices", d, 6_400) for d in (1, 2)]
    rows += [_breakout("hidden", 1, 6_400, hidden=h) for h in (256, 128, 64)]
    for step_time, steps in (("none", 200_000), ("exp:0.005", 120_000)):
        # The all-reduce A2C row at no step time is the devices group's 4-device run (same job: measured once).
        rows.append(_cartpole_datapar("gala", NUM_LEARNERS, steps, 20_000 if step_time == "none" else 0, step_time))
        rows += [_gala(mode, steps, step_time) for mode in ("async", "pmap")]
    rows += _hts_rows(60, 40)
    return rows


def quick_rows() -> list[Row]:
    rows = [_cartpole_datapar("devices", d, 20_000, 10_000) for d in (1, 2, 4)]
    rows += [_breakout("devices", d, 640) for d in (1, 2)]
    rows += [_breakout("hidden", 1, 640, hidden=64)]
    for step_time, steps in (("none", 20_000), ("exp:0.005", 6_400)):
        rows.append(_cartpole_datapar("gala", NUM_LEARNERS, steps, 10_000 if step_time == "none" else 0, step_time))
        rows += [_gala(mode, steps, step_time) for mode in ("async", "pmap")]
    rows += _hts_rows(10, 4)
    return rows


def device_env(num_devices: int) -> dict:
    """Environment of a worker that sees `num_devices` XLA CPU devices (read once, when JAX starts)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={num_devices}"
    env["JAX_PLATFORMS"] = "cpu"
    return env


# --------------------------------------------------------------------------------------------------------------
# Worker side (runs in a subprocess with the row's device count).


def _make_config(job: dict):
    from envs.factory import family_of
    from systems.common.presets import preset

    if job["system"] == "hts":
        return _hts_config(job)
    atari = family_of(job["env_id"]) == "atari"
    values = preset(family_of(job["env_id"]), "a2c")  # Kostrikov A2C: n-step returns, entropy 0.01, norm 0.5
    values.pop("num_envs")  # derived by each system
    values.update(BA3C_OPTIMIZER if atari else CARTPOLE_OPTIMIZER)
    values.update(total_steps=job["total_steps"], sync_interval=job["sync_interval"])
    common = dict(
        env_id=job["env_id"], algo="a2c", seed=SEED + job["repeat"], step_time=job["step_time"],
        eval_every=job["eval_every"], eval_episodes=job["eval_episodes"], eval_deterministic=True,
        target_return=None if atari else TARGET_RETURN, checkpoint_every=0, logdir=job["logdir"], quiet=True,
    )
    if job["system"] == "datapar":
        from systems.ba3c.system import BA3CConfig, run

        config = BA3CConfig(num_devices=job["devices"], local_batch=job["local_batch"], hidden=job["hidden"],
                                    lr_scaling="none", **common, **values)
    else:
        from systems.gala.system import GALAConfig, run

        config = GALAConfig(num_learners=NUM_LEARNERS, envs_per_learner=ENVS_PER_LEARNER, gossip=job["mode"],
                              lr_scaling="sqrt", **common, **values)
    return config, run


def _hts_config(job: dict):
    """HTS-PPO with the env family's PPO preset (CartPole: CleanRL ppo.py, Adam 2.5e-4 annealed, 4 epochs x 4
    minibatches, clip 0.2, GAE 0.95; Breakout: CleanRL's Atari PPO), the row's envs and rollout length, actors on
    device 0 and the row's learner replicas (process `process_id` of the job)."""
    from envs.factory import family_of
    from systems.common.presets import preset
    from systems.hts.system import HTSConfig, run

    atari = family_of(job["env_id"]) == "atari"
    values = preset(family_of(job["env_id"]), "ppo", HTSConfig)
    values.update(num_envs=job["num_envs"], sync_interval=job["sync_interval"], total_steps=job["total_steps"])
    config = HTSConfig(
        env_id=job["env_id"], algo=job["algo"], seed=SEED + job["repeat"], step_time=job["step_time"],
        eval_every=job["eval_every"], eval_episodes=job["eval_episodes"], eval_deterministic=True,
        target_return=None if atari else TARGET_RETURN, checkpoint_every=0, logdir=job["logdir"], quiet=True,
        num_actors=HTS_ACTORS,
        actor_devices="0", learner_devices=job["learner_devices"], num_processes=job["processes"],
        process_id=job.get("process_id", 0), coordinator_address=job.get("coordinator_address", ""),
        ordered_reduction=job["ordered"], **values,
    )
    return config, run


def _learning_rate(job: dict, config) -> float:
    """The learning rate as the system resolves it (HTS: not scaled, its replicas average their gradients)."""
    from agents import scale_learning_rate

    if job["system"] == "hts":
        return config.learning_rate
    learners = job["devices"] if job["system"] == "datapar" else NUM_LEARNERS
    return scale_learning_rate(config.learning_rate, learners, config.lr_scaling)


def round_seconds(progress: list[dict]) -> float | None:
    """Median wall time between consecutive progress rows: seconds per round (per update, in steady state)."""
    times = [float(r["wall_time"]) for r in progress]
    return median(b - a for a, b in itertools.pairwise(times))


def _read_csv(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def steady_sps(progress: list[dict], evaluations: list[dict]) -> tuple[float | None, float]:
    """(env steps per second between the first and last progress row, excluding evaluation time; that time).

    An evaluation triggered at a progress row runs right after the row is logged and its record's wall_time is
    taken when it ends, so its duration is the record's wall_time minus the row's."""
    if len(progress) < 2:
        return None, 0.0
    first, last = progress[0], progress[-1]
    first_steps, last_steps = int(first["env_steps"]), int(last["env_steps"])
    row_time = {int(r["env_steps"]): float(r["wall_time"]) for r in progress}
    eval_s = 0.0
    for record in evaluations:
        steps = int(record["env_steps"])
        if first_steps <= steps < last_steps and steps in row_time:
            eval_s += max(float(record["wall_time"]) - row_time[steps], 0.0)
    span = float(last["wall_time"]) - float(first["wall_time"]) - eval_s
    return ((last_steps - first_steps) / span if span > 0 else None), eval_s


def _measure(job: dict) -> dict:
    logdir = tempfile.mkdtemp(prefix=f"scaleout-{job['system']}-")
    job = dict(job, logdir=os.path.join(logdir, "run"))
    config, run = _make_config(job)
    t0 = time.perf_counter()
    try:
        summary = run(config)
        elapsed = time.perf_counter() - t0
        progress = _read_csv(os.path.join(job["logdir"], "progress.csv"))
        evaluations = _read_csv(os.path.join(job["logdir"], "evaluations.csv"))
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    sps, eval_s = steady_sps(progress, evaluations)
    returns = [float(r["mean_return"]) for r in evaluations]
    reached = [float(r["wall_time"]) for r in evaluations
               if config.target_return is not None and float(r["mean_return"]) >= config.target_return]
    return {
        "sps": sps,
        "eval_s_in_span": eval_s,
        "summary_sps": summary["sps"],
        "env_steps": summary["env_steps"],
        "updates": summary["updates"],
        "first_update_s": float(progress[0]["wall_time"]) if progress else None,
        "process_run_s": elapsed,
        "param_count": summary["param_count"],
        "learning_rate": _learning_rate(job, config),  # as the system resolves it
        "time_to_target": reached[0] if reached else None,  # first evaluation >= target (wall time of its end)
        "required_time_avg10": summary["required_time"],  # seed 000's metric: running mean of the last 10 evals
        "final_return": returns[-1] if returns else None,
        "best_return": max(returns) if returns else None,
        "eval_returns": " ".join(f"{r:.0f}" for r in returns),
        "learner_iterations": " ".join(str(i) for i in summary.get("learner_iterations", [])),
        "round_s": round_seconds(progress),
        "fingerprint": summary.get("param_fingerprint", "")[:16],
    }


def worker(job: dict) -> None:
    import logging
    import warnings

    logging.getLogger("absl").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")
    print("RESULT " + json.dumps(_measure(job)), flush=True)


# --------------------------------------------------------------------------------------------------------------
# Driver side.


def harmonic(n: int) -> float:
    return sum(1.0 / k for k in range(1, n + 1))


def _step_mean(step_time: str) -> float | None:
    return float(step_time.split(":")[1]) if step_time.startswith("exp:") else None


def zero_compute_sps(row: Row) -> float | None:
    """SPS if only the exponential step times cost anything: every lock-step env step waits for the slowest of all
    the run's envs (E[max of n Exp(mean)] = mean H_n); an async GALA learner for the slowest of its own."""
    mean = _step_mean(row.step_time)
    if mean is None:
        return None
    num_envs = NUM_LEARNERS * ENVS_PER_LEARNER
    if row.system == "datapar":
        num_envs = row.devices * row.local_batch // row.sync_interval
    if row.system == "gala" and row.mode == "async":
        return NUM_LEARNERS * ENVS_PER_LEARNER / (mean * harmonic(ENVS_PER_LEARNER))
    return num_envs / (mean * harmonic(num_envs))


RUN_FIELDS = ["group", "system", "mode", "env_id", "devices", "processes", "learner_devices", "ordered", "replicas",
              "effective_batch", "hidden", "step_time", "total_steps", "repeat", "seed", "sps", "round_s",
              "summary_sps", "eval_s_in_span", "env_steps", "first_update_s", "wall_s", "param_count",
              "learning_rate", "time_to_target", "required_time_avg10", "final_return", "best_return", "eval_returns",
              "learner_iterations", "fingerprint", "reused", "started", "background_cores", "error"]


def effective_batch(row: Row) -> int:
    if row.system == "datapar":
        return row.devices * row.local_batch
    if row.system == "hts":
        return row.num_envs * row.sync_interval  # one round, over all replicas
    return NUM_LEARNERS * ENVS_PER_LEARNER * row.sync_interval  # summed over learners (each learns from 80)


def main(argv):
    del argv
    if _WORKER.value:
        worker(json.loads(_WORKER.value))
        return
    quick = _QUICK.value
    rows = [r for r in (quick_rows() if quick else full_rows()) if r.group in _GROUPS.value]
    name = _NAME.value + ("_quick" if quick else "")
    os.makedirs(_OUT_DIR.value, exist_ok=True)
    command = " ".join(["PYTHONPATH=. python -m benchmarks.scaleout", *(shlex.quote(a) for a in sys.argv[1:])])
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.perf_counter()
    done: dict[str, dict] = {}  # job key -> result: an identical job in two groups is measured once
    raw_rows, table = [], []
    for row in rows:
        repeats = _repeats(row, quick)
        results = []
        for r in range(repeats):
            result, raw_row = _run_repeat(row, r, done)
            results.append(result)
            raw_rows.append(raw_row)
        table.append(_table_row(row, repeats, results))
    _add_ratios(table)
    sweep_s = time.perf_counter() - t_start
    md_path, csv_path, raw_path = _write_outputs(name, raw_rows, table, command, started, sweep_s)
    print(f"sweep {sweep_s / 60:.1f} min; wrote {md_path}, {csv_path}, {raw_path}")


def _repeats(row: Row, quick: bool) -> int:
    if quick:
        return 1
    if row.group == "hidden":
        return _HIDDEN_REPEATS.value
    return _HEAVY_REPEATS.value if row.heavy else _REPEATS.value


def _run_repeat(row: Row, r: int, done: dict[str, dict]) -> tuple[dict, dict]:
    """Repeat r of `row`, measured in a subprocess or reused from `done`; prints a line and returns the result and
    its runs-CSV row."""
    job = dict(system=row.system, mode=row.mode, env_id=row.env_id, devices=row.devices,
               total_steps=row.total_steps, step_time=row.step_time, local_batch=row.local_batch,
               sync_interval=row.sync_interval, hidden=row.hidden, eval_every=row.eval_every,
               eval_episodes=row.eval_episodes, repeat=r)
    hts = dict(algo=row.algo, processes=row.processes, learner_devices=row.learner_devices, ordered=row.ordered,
               num_envs=row.num_envs)
    if row.system == "hts":
        job.update(hts)
    key = json.dumps(job, sort_keys=True)
    reused = key in done
    if not reused and row.processes > 1:
        done[key] = run_processes(job, row.timeout_s, row.devices, row.processes)
    elif not reused:
        done[key] = run_job("benchmarks.scaleout", job, row.timeout_s, env=device_env(row.devices))
    result = done[key]
    raw_row = {
        "group": row.group, "system": row.system, "mode": row.mode, "env_id": row.env_id,
        "devices": row.devices, "effective_batch": effective_batch(row), "hidden": row.hidden,
        "step_time": row.step_time, "total_steps": row.total_steps, "repeat": r, "seed": SEED + r,
        **(dict(hts, replicas=row.replicas) if row.system == "hts" else {}),
        "reused": reused, **{k: result.get(k) for k in RUN_FIELDS if k in result},
    }
    print(f"{row.label:<75} rep {r}: SPS {fmt(result.get('sps'))}  final return "
          f"{fmt(result.get('final_return'))}  target at {fmt(result.get('time_to_target'), 1)} s  "
          f"({result['wall_s']:.1f} s{', reused' if reused else ''}, background "
          f"{fmt(result.get('background_cores'), 2)} cores)"
          + (f"  ERROR {result['error']}" if result.get("error") else ""), flush=True)
    return result, raw_row


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def _wait_all(procs: list[subprocess.Popen], timeout_s: float) -> str:
    """Waits for every process: 'ok' when all exit 0; 'failed' (one exited non-zero: the others would wait for it
    forever) or 'timeout', after killing the ones still running."""
    deadline = time.perf_counter() + timeout_s
    status = "timeout"
    while time.perf_counter() < deadline:
        codes = [proc.poll() for proc in procs]
        if any(code not in (None, 0) for code in codes):
            status = "failed"
            break
        if all(code == 0 for code in codes):
            return "ok"
        time.sleep(0.2)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return status


def run_processes(job: dict, timeout_s: float, num_devices: int, num_processes: int) -> dict:
    """`job` as a `jax.distributed` job of `num_processes` workers on 127.0.0.1, `num_devices` forced devices
    each, all started at once; returns process 0's result as `run_job` does (plus wall_s, started and
    background_cores, every worker excluded), with 'error' on a timeout or a failed process. Output goes to files,
    not pipes: a process blocked on a full pipe would never reach JAX's shutdown barrier."""
    job = dict(job, coordinator_address=f"127.0.0.1:{free_port()}")
    env = dict(device_env(num_devices), PYTHONWARNINGS="ignore")
    started = time.strftime("%H:%M:%S")
    cpu_before = cpu_ticks_by_pid()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="scaleout-processes-") as tmp:
        procs, paths = [], []
        for p in range(num_processes):
            paths.append((os.path.join(tmp, f"process-{p}.out"), os.path.join(tmp, f"process-{p}.err")))
            cmd = [sys.executable, "-m", "benchmarks.scaleout", f"--worker={json.dumps(dict(job, process_id=p))}"]
            with open(paths[p][0], "w") as out, open(paths[p][1], "w") as err:
                procs.append(subprocess.Popen(cmd, stdout=out, stderr=err, env=env, preexec_fn=die_with_parent))
        status = _wait_all(procs, timeout_s)
        wall = time.perf_counter() - t0
        exclude = {os.getpid(), *(proc.pid for proc in procs)}
        meta = {"wall_s": wall, "started": started,
                "background_cores": background_cores(cpu_before, cpu_ticks_by_pid(), wall, exclude)}
        outputs = [tuple(_read_text(path) for path in pair) for pair in paths]
    if status == "timeout":
        return {"sps": None, "error": f"timeout after {timeout_s:.0f} s", **meta}
    failed = [(p, proc.returncode) for p, proc in enumerate(procs) if proc.returncode != 0]
    errors = [f"process {p} exit {code}: {' | '.join(outputs[p][1].strip().splitlines()[-3:])}"
              for p, code in failed]
    result = next((json.loads(line[len("RESULT "):]) for line in outputs[0][0].splitlines()
                   if line.startswith("RESULT ")), None)
    if result is None:
        return {"sps": None, "error": "; ".join(errors) or "process 0 printed no RESULT", **meta}
    return {**result, **({"error": "; ".join(errors)} if errors else {}), **meta}


def _table_row(row: Row, repeats: int, results: list[dict]) -> dict:
    """The table entry of `row`: medians over its repeats (relative_sps is added by `_add_ratios`)."""
    reached = [x["time_to_target"] for x in results if x.get("time_to_target") is not None]
    hts = dict(processes=row.processes, replicas=row.replicas, ordered=row.ordered,
               round_s=median(x.get("round_s") for x in results),
               fingerprint=results[0].get("fingerprint") if results else None)  # repeat 0's
    return dict(
        group=row.group, system=row.system, mode=row.mode, env_id=row.env_id, devices=row.devices,
        effective_batch=effective_batch(row), hidden=row.hidden, step_time=row.step_time,
        total_steps=row.total_steps, eval_every=row.eval_every, repeats=repeats,
        sps=median(x.get("sps") for x in results),
        param_count=median(x.get("param_count") for x in results),
        learning_rate=median(x.get("learning_rate") for x in results),
        time_to_target=median(reached), reached=len(reached),
        final_return=median(x.get("final_return") for x in results),
        zero_compute_sps=zero_compute_sps(row),
        background_cores=median(x.get("background_cores") for x in results),
        errors="; ".join(sorted({x["error"] for x in results if x.get("error")})),
        **(hts if row.system == "hts" else {}),
    )


def _write_outputs(name, raw_rows, table, command, started, sweep_s) -> tuple[str, str, str]:
    """Writes the runs CSV, the table CSV and the Markdown table; returns their paths (Markdown first)."""
    raw_path = os.path.join(_OUT_DIR.value, f"{name}_runs.csv")
    with open(raw_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=RUN_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(raw_rows)
    csv_path = os.path.join(_OUT_DIR.value, f"{name}.csv")
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for t in table for k in t)))  # hts: more
        writer.writeheader()
        writer.writerows(table)
    md_path = os.path.join(_OUT_DIR.value, f"{name}.md")
    with open(md_path, "w") as f:
        f.write(_markdown(table, command, started, sweep_s))
    return md_path, csv_path, raw_path


def _add_ratios(table: list[dict]) -> None:
    """relative_sps: to the 1-device row of the same env (devices, hidden: to hidden 256), to all-reduce A2C with
    the same step time (gala) or to the 1-replica row (hts)."""
    for t in table:
        if t["group"] == "hts":
            base = [b for b in table if b["group"] == "hts" and b["replicas"] == 1 and b["env_id"] == t["env_id"]]
        elif t["group"] == "gala":
            base = [b for b in table if b["group"] == "gala" and b["system"] == "datapar"
                    and b["step_time"] == t["step_time"]]
        elif t["group"] == "hidden":
            base = [b for b in table if b["group"] == "hidden" and b["hidden"] == 256]
        else:
            base = [b for b in table if b["group"] == t["group"] and b["env_id"] == t["env_id"] and b["devices"] == 1]
        base_sps = base[0]["sps"] if base else None
        t["relative_sps"] = t["sps"] / base_sps if t["sps"] and base_sps else None


def _markdown(table, command, started, sweep_s) -> str:
    lines = [
        *_header_lines(command, started, sweep_s, {t["group"] for t in table}),
        *_devices_lines([t for t in table if t["group"] == "devices"]),
        *_hidden_lines([t for t in table if t["group"] == "hidden"]),
        *_gala_lines([t for t in table if t["group"] == "gala"]),
        *_hts_lines([t for t in table if t["group"] == "hts"]),
    ]
    return "\n".join(lines)


def _header_lines(command, started, sweep_s, groups: set) -> list[str]:
    """Machine, command and how SPS, the agents and the background load are measured (the A2C agent and job reuse
    only with A2C/GALA rows; the HTS section describes its own agent)."""
    a2c, hts = bool(groups - {"hts"}), "hts" in groups
    subject = "data-parallel A2C (BA3C) and GALA"
    if hts:
        subject = "data-parallel A2C (BA3C), GALA and HTS-RL's learner" if a2c else "HTS-RL's learner"
    points = " (= data points, each learned from once)" if not hts else (
        " (= data points: A2C learns from each once, HTS-PPO in each of its 4 epochs)" if a2c else "")
    return [
        f"# Scale-out: {subject} on forced CPU devices",
        "",
        f"- Machine: {machine()} (no GPU). Date: {started:%Y-%m-%d %H:%M} UTC. Sweep wall time: "
        f"{sweep_s / 60:.1f} min.",
        f"- Command: `{command}` (from the repository root).",
        "- Every run is its own process with `XLA_FLAGS=--xla_force_host_platform_device_count=N` (N = "
        f"{'devices column' if a2c else 'devices per process, in the layout column'}). **Forced CPU devices share "
        "the machine's cores** (4 devices on 2 cores here), so more devices "
        "measure the system's per-device overhead, not a real parallel speed-up.",
        f"- SPS = env steps{points} per second in steady state: from `progress.csv`, "
        "env steps between the first and last logged update over the wall time between them minus evaluation time, "
        "so JIT compilation, start-up and evaluations are excluded. Medians over the repeats (repeat r: seed 1 + r).",
        *(_a2c_header_lines() if a2c else []),
        "- background = median CPU cores used by *other* processes during the row's runs (from /proc): well above 0 "
        "means a loaded machine and unreliable numbers.",
        *(_reuse_header_lines() if a2c else []),
        "",
    ]


def _a2c_header_lines() -> list[str]:
    return [
        "- Agent: A2C (n-step returns, entropy 0.01, value 0.5, gradient norm 0.5, gamma 0.99: the Kostrikov "
        "preset). CartPole: MLP, RMSProp (PyTorch form) eps 1e-5, base learning rate 7e-4 (all-reduce A2C: not "
        "scaled; GALA: x sqrt(4 learners) = 1.4e-3, its default), no annealing. Breakout: BA3C network "
        "(`--hidden` as listed), BA3C large-batch Adam (lr 1e-3, beta 0.8/0.75, eps 1e-3 below batch 512).",
    ]


def _reuse_header_lines() -> list[str]:
    return [
        "- A job identical in two groups is measured once and reused (`reused` in the runs CSV): the hidden-256 row's "
        "first repeat is the devices group's 1-device Breakout run, the GALA table's all-reduce row without step "
        "times is the devices group's 4-device CartPole runs.",
    ]


def _devices_lines(devices: list[dict]) -> list[str]:
    """Data-parallel scaling section (nothing without `devices` rows)."""
    if not devices:
        return []
    lines = [
        "## Data-parallel scaling (seed 001, Fig. 8 shape)",
        "",
        "Weak scaling: the local batch is fixed (CartPole 16 envs x 5 steps = 80, Breakout 8 envs x 4 = 32 per "
        "device), so the effective batch grows with the devices; gradients are averaged by an all-reduce "
        "(`pmean`). CartPole: an evaluation with 10 deterministic episodes every `eval every` env steps; "
        f"time to target = wall time (from the start of the run, JIT included) at the end of the first "
        f"evaluation with mean return >= {TARGET_RETURN:.0f}, median over the runs that reached it; final "
        "eval return = the last evaluation (at the end of the run). Breakout: SPS only, no evaluation. "
        "relative SPS = SPS / the 1-device SPS of the same env.",
        "",
        "| env | devices | effective batch | total steps | eval every | repeats | SPS | relative SPS | "
        "time to target (s) | reached | final eval return | background | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for t in devices:
        cartpole = t["env_id"] == CARTPOLE
        reached = f"{t['reached']}/{t['repeats']}"
        lines.append(
            f"| {t['env_id']} | {t['devices']} | {t['effective_batch']} | {t['total_steps']:,} | "
            f"{fmt(t['eval_every']) if cartpole else '-'} | {t['repeats']} | {fmt(t['sps'])} | "
            f"{fmt(t['relative_sps'], 2)} | "
            f"{fmt(t['time_to_target'], 1) if cartpole else '-'} | "
            f"{reached if cartpole else '-'} | "
            f"{fmt(t['final_return'], 1) if cartpole else '-'} | {fmt(t['background_cores'], 2)} | "
            f"{t['errors']} |"
        )
    lines.append("")
    return lines


def _hidden_lines(hidden: list[dict]) -> list[str]:
    """Throughput against the FC width section (nothing without `hidden` rows)."""
    if not hidden:
        return []
    lines = [
        "## Throughput against the FC width (seed 001, Fig. 6 shape)",
        "",
        "Breakout-v5, BA3C network, 1 device, local batch 32 (8 envs x 4 steps), no evaluation. On one machine "
        "no gradients cross a network, so only the compute cost of the wider FC layer shows (in the paper the "
        "FC layer's size also sets the communication volume). relative SPS = SPS / the hidden-256 SPS.",
        "",
        "| hidden | parameters | total steps | repeats | SPS | relative SPS | background | errors |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for t in hidden:
        lines.append(
            f"| {t['hidden']} | {fmt(t['param_count'])} | {t['total_steps']:,} | {t['repeats']} | "
            f"{fmt(t['sps'])} | {fmt(t['relative_sps'], 2)} | {fmt(t['background_cores'], 2)} | {t['errors']} |"
        )
    lines.append("")
    return lines


def _gala_lines(gala: list[dict]) -> list[str]:
    """GALA against all-reduce A2C section (nothing without `gala` rows)."""
    if not gala:
        return []
    model = harmonic(NUM_LEARNERS * ENVS_PER_LEARNER) / harmonic(ENVS_PER_LEARNER)
    async_exp = [t for t in gala if t["mode"] == "async" and t["step_time"] != "none"]
    ratio = async_exp[0]["relative_sps"] if async_exp else None
    verdict = "n/a" if ratio is None else ("met" if ratio >= 1.3 else "not met")
    lines = [
        "## GALA vs all-reduce A2C (seed 004)",
        "",
        f"CartPole-v1, {NUM_LEARNERS} learners x {ENVS_PER_LEARNER} envs, sync_interval 5 (80 data points per "
        "learner per update). All-reduce A2C = `systems.ba3c` on 4 devices, local batch 80, RMSProp lr 7e-4 "
        "(not scaled: the GALA paper's A2C baseline uses the same base rate); GALA = `systems.gala`, 1-peer "
        "ring, lr 7e-4 x sqrt(4) = 1.4e-3, `async` (a thread per learner, 1 device) or `pmap` (lock-step, one "
        "learner per forced device). `exp:0.005` = every env step takes an exponential time of mean 5 ms: the "
        "lock-step systems wait for the slowest of all 64 envs at each step, an async GALA learner only for the "
        "slowest of its own 16. Budgets: total steps as listed; with both groups in the sweep the all-reduce "
        "row without step times is the devices group's 4-device runs (the same job, measured once: its "
        "periodic evaluations are excluded from SPS); final eval return = 10 deterministic episodes at the end. "
        "ratio = SPS / all-reduce A2C SPS with the same step time. zero-compute SPS = 64 envs / "
        "(5 ms x E[max of the envs waited for]) = 64 / (5 ms x H_n), n = 64 lock-step or 16 async.",
        "",
        f"Target: async GALA >= 1.3x all-reduce A2C SPS with step times: ratio {fmt(ratio, 2)}, **{verdict}**. "
        f"Zero-compute model: H_64 / H_16 = {harmonic(64):.3f} / {harmonic(16):.3f} = {model:.3f}.",
        "",
        "| system | mode | devices | step_time | total steps | repeats | SPS | ratio to A2C | zero-compute SPS | "
        "final eval return | background | errors |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for t in gala:
        system = "all-reduce A2C" if t["system"] == "datapar" else "GALA"
        lines.append(
            f"| {system} | {t['mode']} | {t['devices']} | {t['step_time']} | {t['total_steps']:,} | "
            f"{t['repeats']} | {fmt(t['sps'])} | {fmt(t['relative_sps'], 2)} | {fmt(t['zero_compute_sps'])} | "
            f"{fmt(t['final_return'], 1)} | {fmt(t['background_cores'], 2)} | {t['errors']} |"
        )
    lines.append("")
    return lines


def _layout(t: dict) -> str:
    processes, devices = t["processes"], t["devices"]
    layout = f"{processes} process{'es' if processes > 1 else ''} x {devices} device{'s' if devices > 1 else ''}"
    return layout + (", ordered reduction" if t.get("ordered") else "")


def _hts_lines(hts: list[dict]) -> list[str]:
    """HTS-RL learner over devices and processes section (nothing without `hts` rows)."""
    if not hts:
        return []
    lines = [
        "## HTS-RL learner over devices",
        "",
        f"CartPole-v1, HTS-PPO (`systems.hts`) with the classic-control PPO preset (CleanRL ppo.py: Adam 2.5e-4 "
        f"annealed, 4 epochs x 4 minibatches, clip 0.2, GAE 0.95), {HTS_NUM_ENVS} envs x sync_interval "
        f"{HTS_SYNC_INTERVAL} = {HTS_NUM_ENVS * HTS_SYNC_INTERVAL:,} env steps per round, {HTS_ACTORS} actor threads "
        "per process on device 0 (`--actor_devices=0`), the learner on every device of its process "
        "(`--learner_devices=0,..,N-1`): R replicas, each learning from 16/R envs' columns of the round, gradients "
        "averaged before each optimizer step. 2 processes = a `jax.distributed` job on 127.0.0.1 (gloo), each "
        "process stepping 8 of the envs; the row is process 0's run. No evaluation until the end (10 deterministic "
        "episodes: final eval return). round time = median wall time between consecutive learner updates "
        "(seconds per round in steady state). relative SPS = SPS / the 1-replica SPS of the same env. ordered "
        "reduction = `--ordered_reduction` (each gradient gathered from every replica and added up in replica "
        "order instead of `pmean`). Breakout-v5 rows: the Atari PPO preset (8 envs x 128 steps, Nature CNN, 4 x 4 "
        "minibatches), no evaluation; 1 device shared by actors and learner against actors on device 0 and 2 "
        "learner replicas on devices 1 and 2 (`--learner_devices=1,2`), the same rows and optimizer steps per round.",
        "",
        "| env | layout | learner replicas | total steps | repeats | SPS | relative SPS | round time s | "
        "final eval return | fingerprint (repeat 0) | background | errors |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for t in hts:
        lines.append(
            f"| {t['env_id']} | {_layout(t)} | {t['replicas']} | {t['total_steps']:,} | {t['repeats']} | "
            f"{fmt(t['sps'])} | "
            f"{fmt(t['relative_sps'], 2)} | {fmt(t['round_s'], 3)} | {fmt(t['final_return'], 1)} | "
            f"`{t['fingerprint'] or 'n/a'}` | {fmt(t['background_cores'], 2)} | {t['errors']} |"
        )
    lines += ["", _hts_note(hts), ""]
    return lines


def _hts_note(hts: list[dict]) -> str:
    """What the HTS rows measure, and whether the 1x4 and 2x2 runs of repeat 0 ended with the same fingerprint."""
    four = {t["processes"]: t["fingerprint"] for t in hts if t["replicas"] == 4 and t["fingerprint"]
            and not t.get("ordered")}
    ordered = {t["processes"]: t["fingerprint"] for t in hts if t["replicas"] == 4 and t["fingerprint"]
               and t.get("ordered")}
    if len(ordered) == 2:
        same = "agree, bit for bit" if ordered[1] == ordered[2] else "DIFFER (the ordered sum should not)"
        ordered_verdict = f" With `--ordered_reduction` the two fingerprints {same}."
    else:
        ordered_verdict = ""
    if len(four) < 2:
        verdict = "(one of the two rows is missing here, so there is nothing to compare)"
    elif four[1] == four[2]:
        verdict = "and in this sweep their fingerprints agree"
    else:
        verdict = ("and in this sweep their fingerprints differ: the fingerprint hashes every bit, so a "
                   "difference in the last bits of one sum, carried through every later update, changes it; it "
                   "does not say how far apart the parameters are")
    breakout = [t for t in hts if t["env_id"] == BREAKOUT and t["replicas"] > 1 and t["relative_sps"]]
    breakout_note = (
        f" Breakout-v5 is the exception measured here: actors on device 0 and 2 replicas on devices 1 and 2 ran at "
        f"{breakout[0]['relative_sps']:.2f}x the SPS of one shared device (one run each; the cause is not profiled, "
        "a guess: the two devices' programs run side by side on the 2 cores, which one device's convolutions "
        "do not keep busy, issue 17)." if breakout else "")
    return (
        "The forced CPU devices (and the two processes) share the machine's 2 cores, so more replicas measure the "
        "overhead of splitting the learner (more, smaller per-device programs plus the all-reduce), not a speed-up."
        f"{breakout_note} "
        "For a fixed seed and number of replicas the parameters do not depend on how the replicas are spread over "
        "processes: the 1 x 4 and 2 x 2 rows compute the same parameters up to the all-reduce's summation order "
        f"(gloo's across the processes, XLA's within one), {verdict}.{ordered_verdict} Runs with different numbers "
        "of replicas split each minibatch differently and are not expected to match."
    )


if __name__ == "__main__":
    app.run(main)
