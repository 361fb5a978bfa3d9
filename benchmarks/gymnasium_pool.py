"""`--env=gymnasium/<id>` against EnvPool on the same task (issue 30): env steps per second of the raw pools, and
HTS-PPO end to end through each.

    PYTHONPATH=. python -m benchmarks.gymnasium_pool [--repeats=3]

* Raw pools: `envs.factory.make_pool` of `CartPole-v1` (EnvPool's C++ threads) and of `gymnasium/CartPole-v1` (Python
  envs in worker processes, `envs/gymnasium_pool.py`), 8 envs on 2 workers / threads, synchronous `step` of random
  actions; median of `--repeats` timed loops of 2,000 steps.
* End to end: `launch.hts`'s system on both ids, CartPole's PPO preset, 2 actor threads, 50k env steps, one seed;
  SPS and final metric (the two simulators seed differently, so the returns are two samples, not one run twice).

Writes `results/gymnasium_pool_cpu.md`. Run it alone: a second job on the cores lowers every rate it measures.
"""

from __future__ import annotations

import datetime
import os
import statistics
import tempfile
import time

import numpy as np
from absl import app, flags

from benchmarks.common import git_commit
from envs.factory import make_pool, make_spec
from systems.common import hardware

_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed loops per pool (median).")
_OUT = flags.DEFINE_string("out", "benchmarks/results/gymnasium_pool_cpu.md", "Result file.")

IDS = ("CartPole-v1", "gymnasium/CartPole-v1")
NUM_ENVS, STEPS, E2E_STEPS = 8, 2_000, 50_000


def pool_sps(env_id: str, repeats: int) -> float:
    pool = make_pool(make_spec(env_id), num_envs=NUM_ENVS, batch_size=NUM_ENVS, seed=0, num_threads=2)
    rng = np.random.default_rng(0)
    try:
        pool.reset()
        rates = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(STEPS):
                pool.step(rng.integers(0, 2, NUM_ENVS).astype(np.int32))
            rates.append(NUM_ENVS * STEPS / (time.perf_counter() - start))
        return statistics.median(rates)
    finally:
        pool.close()


def hts_run(env_id: str) -> dict:
    from systems.common.presets import preset
    from systems.hts import system as hts

    values = preset("classic", "ppo")
    values.update(total_steps=E2E_STEPS)
    with tempfile.TemporaryDirectory() as logdir:
        config = hts.HTSConfig(env_id=env_id, **values, num_actors=2, quiet=True, seed=1,
                               logdir=os.path.join(logdir, "run"))
        summary = hts.run(config)
    return {"sps": summary["sps"], "final": summary["final_metric"], "wall": summary["wall_time"]}


def main(argv):
    del argv
    start = time.perf_counter()
    raw = {env_id: pool_sps(env_id, _REPEATS.value) for env_id in IDS}
    e2e = {env_id: hts_run(env_id) for env_id in IDS}
    lines = [
        "# Gymnasium envs in worker processes against EnvPool, CartPole-v1 (issue 30)",
        "",
        f"- Machine: {hardware.describe(hardware.card())}.",
        f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC. Commit {git_commit()}. Wall time "
        f"{(time.perf_counter() - start) / 60:.1f} min. 1-minute load at the end: {os.getloadavg()[0]:.1f}.",
        "- Command: `PYTHONPATH=. python -m benchmarks.gymnasium_pool` (module docstring: what each row measures).",
        "",
        "| env id | raw pool, env steps/s (8 envs, sync) | HTS-PPO SPS (50k steps) | HTS-PPO final metric |",
        "| --- | ---: | ---: | ---: |",
        *(f"| `{env_id}` | {raw[env_id]:,.0f} | {e2e[env_id]['sps']:,.0f} | {e2e[env_id]['final']:.1f} |"
          for env_id in IDS),
        "",
        f"EnvPool's threads step this task {raw[IDS[0]] / raw[IDS[1]]:.1f}x as fast as the worker processes: its "
        "step is a few microseconds of physics, so the pipe and queue hand-over per step is what the workers cost. "
        f"End to end, HTS through `gymnasium/` runs at {e2e[IDS[1]]['sps'] / e2e[IDS[0]]['sps']:.0%} of its EnvPool "
        "SPS.",
        "",
    ]
    with open(_OUT.value, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    app.run(main)
