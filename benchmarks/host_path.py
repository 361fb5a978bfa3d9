"""The actors' host path without a policy: HTS-RL's executor, state buffer and round collector beside raw EnvPool.

What does the Python between EnvPool and the policy cost per env step, and what share of EnvPool's own rate does it
leave? Each repeat runs, in fresh processes, on Breakout-v5 at the same envs, EnvPool threads and batch:

* **raw**: `benchmarks.envpool_raw.measure`, one loop that receives a batch and sends random actions back;
* **host path**: `envs.executor.Executor` (its receiver thread, the spare envs, the state buffer) and
  `systems.common.rollout.RoundCollector` (rounds of `--sync_interval` steps, the fixed-shape chunks of the forward
  pass, the round storage) in `--actors` threads, as `systems.hts.system` wires them, with a policy that draws random
  actions in NumPy: no network, no device.

Reported per setting (medians over `--repeats`): env steps per second of both and their ratio; the CPU time the
Python threads (actors and receiver, read from /proc/self/task) spend per env step: they share one interpreter
lock, so 1e6 / (that figure) is about the most env steps per second the host path can run whatever the cores (a
conservative bound: the receiver's part includes EnvPool's recv(), which waits outside the lock, partly spinning); the
forward-pass chunks per batch an actor takes (more than one when ready envs share a chunk row: `chunk_members`);
and the spare envs' share of EnvPool's steps. `--threads=16,12` compares EnvPool thread counts (default: the
usable cores); `--baseline=<checkout>` runs another commit's host path beside this tree's (a `git worktree` with
this file copied into its `benchmarks/`). Writes `results/host_path_<tag>.md` (and `--out` JSON lines):

    PYTHONPATH=. python -m benchmarks.host_path --tag=cpu --baseline=../before

`--pools=shared,per_actor` adds HTS's other layout (`--env_pools=per_actor`, `envs.actor_pools`): each actor thread
owns a pool of envs / actors envs (the threads and the batch split alike) and receives from it itself, so there is
no receiver thread and no hand-over between threads; its forward passes then hold at most envs / actors real rows,
so on an accelerator it pays more round trips per env step than this policy shows (its row is an upper bound).
`--affinity_offsets=-1,4` compares EnvPool's threads left to the scheduler with its threads pinned to cores 4, 5,
... (EnvPool's `thread_affinity_offset`: the first cores left to the Python threads). `benchmarks/gpu_check.sh`
runs both on a device machine's cores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import threading
import time

import numpy as np

from benchmarks import common

RESULTS = os.path.join(os.path.dirname(__file__), "results")
MODULE = "benchmarks.host_path"
WARM_UP_S = 2.0


def _thread_cpu_s(native_ids: set[int]) -> float:
    """User + system CPU seconds of this process's threads `native_ids` (Linux /proc/self/task)."""
    total = 0
    for tid in native_ids:
        try:
            fields = common._stat_fields(f"self/task/{tid}")
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def measure_host_path(env_id: str, envs: int, sync_interval: int, actors: int, batch: int, threads: int,
                      inference_batch: int, seconds: float, pools: str = "shared",
                      warm_up_s: float = WARM_UP_S, affinity_offset: int = -1) -> dict:
    """`pools="shared"`: one pool and its receiver thread for every actor thread; `"per_actor"`: each actor thread
    owns a pool of envs / actors envs (`envs.actor_pools`; EnvPool's threads dealt out by `pool_threads`, batch /
    actors each) and receives from it itself: HTS's two `--env_pools`, with one round collector over all the envs as
    HTS has. `affinity_offset` k >= 0 pins EnvPool's threads to cores k, k + 1, ... (each own pool's after the
    previous pool's); -1 leaves them to the scheduler."""
    import functools

    import jax

    from envs.actor_pools import ActorPools, pool_offsets, pool_threads
    from envs.executor import Executor
    from envs.factory import make_spec
    from systems.common.rollout import RoundCollector

    spec = make_spec(env_id)
    counts, counting = dict(spares=0, chunks=0, takes=0), threading.Lock()

    def count(key: str, n: int = 1) -> None:
        with counting:
            counts[key] += n

    if pools == "shared":
        executor = Executor(spec, num_envs=envs, batch_size=batch, seed=0, num_threads=threads,
                            thread_affinity_offset=affinity_offset)
        lanes, takes = [executor], [executor.take] * actors
    else:
        per_pool = pool_threads(threads, actors)
        executor = ActorPools.make(spec, [envs // actors] * actors, [max(1, batch // actors)] * actors, per_pool,
                                   pool_offsets(affinity_offset, per_pool), seed=0)
        lanes, takes = executor.pools, [functools.partial(executor.take_from, k) for k in range(actors)]
    rng = np.random.default_rng(0)

    def policy(params, obs, env_ids, env_steps, run_key):
        count("chunks")
        n = len(env_ids)
        return rng.integers(spec.action_dim, size=n).astype(np.int32), np.zeros(n, np.float32), np.zeros(n, np.float32)

    for lane in lanes:
        def counting_send(actions, env_ids, send=lane._pool.send, limit=lane.num_envs):
            count("spares", int((np.asarray(env_ids) >= limit).sum()))  # the spare envs' share of EnvPool's work
            send(actions, env_ids)

        lane._pool.send = counting_send
    collector = RoundCollector(
        executor, policy_fn=policy, run_key=jax.random.PRNGKey(0), sync_interval=sync_interval,
        inference_batch=inference_batch, first_round=0, total_rounds=sys.maxsize, params=None, version=0,
        on_round_complete=lambda storage, last: (0, None), action_shape=(), action_dtype=np.int32)
    stopping = threading.Event()

    failures = []

    def actor(take) -> None:
        try:
            while not stopping.is_set():
                results = take(max_items=envs, timeout=0.05)
                if results is not None:
                    count("takes")
                    collector.process(results)
        except BaseException as error:  # re-raised by the measuring thread: a failed actor is no measurement
            failures.append(error)
            stopping.set()

    executor.start()
    workers = [threading.Thread(target=actor, args=(take,), name=f"actor-{i}") for i, take in enumerate(takes)]
    for worker in workers:
        worker.start()
    receivers = {lane._thread.native_id for lane in lanes if lane._thread is not None}
    try:
        time.sleep(warm_up_s)
        python_threads = {w.native_id for w in workers} | receivers

        def snapshot():
            with counting:
                counted = dict(counts)
            return (time.perf_counter(), executor.env_steps_received, _thread_cpu_s(python_threads), counted,
                    _thread_cpu_s(receivers))

        before = snapshot()
        time.sleep(seconds)
        after = snapshot()
    finally:
        stopping.set()
        for worker in workers:
            worker.join()
        executor.close()
    if failures:
        raise failures[0]
    wall, steps = after[0] - before[0], after[1] - before[1]
    delta = {key: after[3][key] - before[3][key] for key in counts}
    return dict(sps=steps / wall, python_us=1e6 * (after[2] - before[2]) / steps,
                receiver_us=1e6 * (after[4] - before[4]) / steps,
                chunks_per_take=delta["chunks"] / max(delta["takes"], 1),
                spare_share=delta["spares"] / max(steps + delta["spares"], 1))


def worker(job: dict) -> dict:
    if job["kind"] == "raw":
        from benchmarks.envpool_raw import measure

        return measure(job["env"], job["envs"], job["threads"], job["batch"], job["seconds"],
                       job.get("affinity_offset", -1))
    return measure_host_path(job["env"], job["envs"], job["sync_interval"], job["actors"], job["batch"],
                             job["threads"], job["inference_batch"], job["seconds"], job.get("pools", "shared"),
                             affinity_offset=job.get("affinity_offset", -1))


def _commit(path: str) -> str:
    """The short commit of the checkout at `path`, as the table names it."""
    import subprocess

    done = subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return f"commit {done.stdout.strip()}" if done.returncode == 0 else f"`{path}`"


def setting_rows(args, inference_batch: int, threads: int, affinity_offset: int = -1) -> list[dict]:
    """Medians of `args.repeats` raw and host-path runs (each of `args.pools` in this tree and, with `--baseline`,
    the shared pool in that checkout), alternated so that drift falls on all of them; one row per variant."""
    base = dict(env=args.env, envs=args.envs, threads=threads, batch=args.batch or max(1, args.envs // 2),
                seconds=args.seconds, affinity_offset=affinity_offset)
    host = dict(base, kind="host", sync_interval=args.sync_interval, actors=args.actors,
                inference_batch=inference_batch)
    variants = {("this tree", pools): None for pools in args.pools.split(",")}
    if args.baseline:
        variants[(_commit(args.baseline), "shared")] = args.baseline
    runs = {"raw": [], **{variant: [] for variant in variants}}
    for _ in range(args.repeats):
        runs["raw"].append(common.run_job(MODULE, dict(base, kind="raw"), timeout_s=args.seconds + 120))
        for (tree, pools), path in variants.items():
            env, cwd = (None, None) if path is None else (dict(os.environ, PYTHONPATH=os.path.abspath(path)), path)
            runs[(tree, pools)].append(common.run_job(MODULE, dict(host, pools=pools), timeout_s=args.seconds + 120,
                                                      env=env, cwd=cwd))
    failed = [r["error"] for kind in runs for r in runs[kind] if r.get("error")]
    if failed:
        raise SystemExit(f"error: a run failed: {failed[0]}")

    def median(kind, key):
        return statistics.median(r[key] for r in runs[kind])

    background = statistics.median(r["background_cores"] or 0 for kind in runs for r in runs[kind])
    rows = []
    for variant in variants:
        tree, pools = variant
        row = dict(base, tree=tree, pools=pools, sync_interval=args.sync_interval, actors=args.actors,
                   inference_batch=inference_batch, raw_sps=median("raw", "sps"), host_sps=median(variant, "sps"),
                   python_us=median(variant, "python_us"), receiver_us=median(variant, "receiver_us"),
                   chunks_per_take=median(variant, "chunks_per_take"), spare_share=median(variant, "spare_share"),
                   repeats=args.repeats, background_cores=background)
        row["ratio"] = row["host_sps"] / row["raw_sps"]
        rows.append(row)
    return rows


def _threads_and_batch(row: dict, per_actor: bool) -> str:
    offset = row.get("affinity_offset", -1)
    pinned = f" pinned from core {offset}" if offset >= 0 else ""
    if not per_actor:
        return f"{row['threads']}{pinned}, {row['batch']}"
    from envs.actor_pools import pool_threads

    threads = pool_threads(row["threads"], row["actors"])
    each = f"{threads[0]}" if len(set(threads)) == 1 else f"{min(threads)}-{max(threads)}"
    return (f"{sum(threads)} ({each} a pool){pinned}, "
            f"{row['batch']} ({max(1, row['batch'] // row['actors'])} a pool)")


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| code | pools | envs x steps, actors | EnvPool threads, batch | forward-pass batch | raw EnvPool SPS | "
        "host path SPS | host / raw | Python CPU per env step (receiver) | bound of the Python threads | "
        "chunks per take | spare envs' share |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        per_actor = r.get("pools") == "per_actor"
        pools = f"one per actor ({r['envs'] // r['actors']} envs)" if per_actor else "one, shared"
        lines.append(
            f"| {r.get('tree', 'this tree')} | {pools} | {r['envs']} x {r['sync_interval']}, {r['actors']} | "
            f"{_threads_and_batch(r, per_actor)} | {r['inference_batch']} | "
            f"{r['raw_sps']:,.0f} | {r['host_sps']:,.0f} | {r['ratio']:.2f} | "
            f"{r['python_us']:.1f} us ({r['receiver_us']:.1f}) | {1e6 / r['python_us']:,.0f} | "
            f"{r['chunks_per_take']:.2f} | {r['spare_share']:.1%} |")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", default="")
    parser.add_argument("--env", default="Breakout-v5")
    parser.add_argument("--envs", type=int, default=128)
    parser.add_argument("--sync_interval", type=int, default=8)
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--batch", type=int, default=0, help="EnvPool's batch (0: half the envs, HTS's default)")
    parser.add_argument("--threads", default="", help="EnvPool's thread counts to compare, e.g. 16,12 (default: the "
                        "usable cores)")
    parser.add_argument("--inference_batches", default="",
                        help="forward-pass batches to compare, e.g. 64,128 (default: half the envs, and all of them)")
    parser.add_argument("--affinity_offsets", default="-1",
                        help="EnvPool thread pinning to compare, e.g. -1,4: -1 leaves the threads to the scheduler, "
                             "k pins thread t to core k + t")
    parser.add_argument("--pools", default="shared",
                        help="shared (one pool, HTS's layout), per_actor (a pool each), or both: shared,per_actor")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tag", default="", help="write results/host_path_<tag>.md")
    parser.add_argument("--out", default="", help="also write the rows as JSON lines here")
    parser.add_argument("--baseline", default="",
                        help="a checkout of other code (a git worktree, with this file copied into its benchmarks/) "
                             "whose host path runs beside this tree's")
    args = parser.parse_args(argv)
    if args.baseline and not os.path.isfile(os.path.join(args.baseline, "benchmarks", "host_path.py")):
        raise SystemExit(f"error: --baseline={args.baseline} holds no benchmarks/host_path.py (copy this file there)")
    if args.worker:
        print("RESULT " + json.dumps(worker(json.loads(args.worker))), flush=True)
        return
    try:
        batches = ([int(b) for b in args.inference_batches.split(",")] if args.inference_batches
                   else sorted({max(1, args.envs // 2), args.envs}))
        thread_counts = [int(t) for t in args.threads.split(",")] if args.threads else [len(os.sched_getaffinity(0))]
        offsets = [int(k) for k in args.affinity_offsets.split(",")]
    except ValueError:
        raise SystemExit("error: --inference_batches, --threads and --affinity_offsets take comma-separated "
                         "integers") from None
    if min(offsets) < -1:
        raise SystemExit("error: --affinity_offsets are -1 (no pinning) or a core number")
    if min(batches + thread_counts) < 1:
        raise SystemExit("error: --inference_batches and --threads must be positive")
    pools = args.pools.split(",")
    if not pools or set(pools) - {"shared", "per_actor"}:
        raise SystemExit(f"error: --pools takes shared, per_actor or both, got {args.pools!r}")
    if "per_actor" in pools and (args.actors < 1 or args.envs % args.actors):
        raise SystemExit(f"error: --pools=per_actor splits --envs={args.envs} evenly over --actors={args.actors}")
    rows = []
    for threads in thread_counts:
        for offset in offsets:
            for inference_batch in batches:
                for row in setting_rows(args, inference_batch, threads, offset):
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
    if args.tag:
        from systems.common import hardware

        command = "PYTHONPATH=. python -m benchmarks.host_path " + " ".join(argv if argv is not None else sys.argv[1:])
        lines = [
            "# The actors' host path beside raw EnvPool",
            "",
            f"Machine: {hardware.describe(hardware.card())}. Date: {datetime.date.today()}. Command: `{command}` "
            f"(the module docstring says what each column is). Medians of {args.repeats} runs of {args.seconds:g} s "
            f"each, raw and host path alternated; other processes used a median {rows[0]['background_cores']:.2f} "
            "cores meanwhile.",
            "",
            *table(rows),
        ]
        path = os.path.join(RESULTS, f"host_path_{args.tag}.md")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
