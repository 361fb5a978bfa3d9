"""EnvPool's own Atari throughput on this machine: the ceiling the main job's actors can approach.

Steps Breakout-v5 (the main job's settings: `envs.factory.make_pool`) with random actions and no policy, in
EnvPool's async mode (a batch of half the envs, as HTS's actors receive them) and, for comparison, its sync mode, for
each thread count, and prints one JSON line per setting (env steps per second over `--seconds`, after a warm-up):

    PYTHONPATH=. python -m benchmarks.envpool_raw --envs=128 --threads=4,8,16 --seconds=20 --out=/tmp/raw.json

`benchmarks/gpu_check.sh` runs it first on a device machine.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def measure(env_id: str, num_envs: int, threads: int, batch: int, seconds: float, affinity_offset: int = -1) -> dict:
    """`affinity_offset`: -1 leaves EnvPool's threads to the scheduler; k pins thread t to core k + t."""
    from envs.factory import make_pool, make_spec

    spec = make_spec(env_id)
    pool = make_pool(spec, num_envs=num_envs, batch_size=batch, seed=0, num_threads=threads,
                     thread_affinity_offset=affinity_offset)
    rng = np.random.default_rng(0)
    try:
        pool.async_reset()
        steps, start, warm = 0, None, time.perf_counter() + 2.0
        while True:
            _, _, _, _, info = pool.recv()
            ids = np.asarray(info["env_id"])
            pool.send(rng.integers(spec.action_dim, size=len(ids)).astype(np.int32), ids)
            now = time.perf_counter()
            if start is None:
                if now >= warm:
                    start = now
                continue
            steps += len(ids)
            if now - start >= seconds:
                break
    finally:
        pool.close()
    return dict(env=env_id, envs=num_envs, threads=threads, batch=batch, seconds=round(now - start, 2),
                sps=round(steps / (now - start)), cores=len(os.sched_getaffinity(0)))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Breakout-v5")
    parser.add_argument("--envs", type=int, default=128)
    parser.add_argument("--threads", default="")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    threads = [int(t) for t in args.threads.split(",")] if args.threads else sorted({max(1, cores // 2), cores})
    rows = []
    for count in threads:
        for batch in (max(1, args.envs // 2), args.envs):
            rows.append(measure(args.env, args.envs, count, batch, args.seconds))
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
