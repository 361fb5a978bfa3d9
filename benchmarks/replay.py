"""Replay-buffer micro-benchmark: our PAL `PrioritizedBuffer` (K-ary sum tree, lazy writing, two locks; and with one
global lock) against peer prioritized buffers: cpprb `PrioritizedReplayBuffer`, flashbax's prioritised flat buffer
(jitted functional add/sample/set_priorities), tianshou `PrioritizedReplayBuffer` (if installed).

Transitions {obs: f32[8], action: i32, reward: f32, next_obs: f32[8], done: f32}; each buffer is prefilled to
capacity, then single-threaded median time per call of: insert one transition, insert 256, sample 256 (indices, data
gather and importance weights), update 256 priorities. Plus a K sweep of ours (sample / update latency vs K, the
shape of PAL Fig. 9), and a thread sweep of ours (PAL Fig. 10: lazy writing with two locks vs one global lock, total
throughput of concurrent actor and learner threads; written to its own table, `replay_threads_cpu.*`). Every
(buffer, capacity) measurement and every sweep point runs in its own subprocess with a hard timeout
(`benchmarks.common.run_job`).

    PYTHONPATH=. /tmp/bench-venv/bin/python -m benchmarks.replay [--quick]
    PYTHONPATH=. python -m benchmarks.replay --threads_only [--quick]   # the thread sweep only (no peers needed)

Peers are benchmark-only: install them into a separate venv from `benchmarks/requirements-replay.txt`.
"""

from __future__ import annotations

import csv
import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import sys
import threading
import time

from absl import app, flags

from benchmarks.common import fmt, machine, median, run_job

_QUICK = flags.DEFINE_bool("quick", False, "Capacity 100k only, fewer calls, K in {4, 16}; writes *_quick files.")
_CALLS = flags.DEFINE_integer("calls", 200, "Timed calls per operation (after warm-up).")
_WARMUP = flags.DEFINE_integer("warmup", 20, "Untimed warm-up calls per operation.")
_OUT_DIR = flags.DEFINE_string("out_dir", "benchmarks/results", "Directory for the Markdown table and CSV.")
_NAME = flags.DEFINE_string("name", "replay_cpu", "Base name of the output files (quick mode adds _quick).")
_TIMEOUT = flags.DEFINE_float("timeout", 600.0, "Hard timeout per subprocess (s).")
_WORKER = flags.DEFINE_string("worker", "", "Internal: JSON job for one measurement in this process.")
_THREADS = flags.DEFINE_bool("threads", True, "Run the thread sweep (PAL Fig. 10) after the K sweep.")
_THREADS_ONLY = flags.DEFINE_bool("threads_only", False, "Run only the thread sweep (no peers table, no K sweep).")
_THREADS_SECONDS = flags.DEFINE_float("threads_seconds", 3.0, "Measured seconds per thread-sweep point.")
_THREADS_WARMUP = flags.DEFINE_float("threads_warmup", 0.5, "Unmeasured seconds before each thread-sweep point.")
_THREADS_REPEATS = flags.DEFINE_integer("threads_repeats", 2, "Runs per thread-sweep point (median reported).")
_THREADS_NAME = flags.DEFINE_string("threads_name", "replay_threads_cpu", "Base name of the thread-sweep files.")

BATCH = 256
INSERT_BATCH = 16  # thread sweep: an actor inserts one step of 16 envs per call
THREAD_COUNTS = (1, 2, 4, 8)
LOCKS = ("two_lock", "single_lock")
OPS = ("insert_1", "insert_256", "sample_256", "update_256")
IMPLS = ("ours", "ours_single_lock", "cpprb", "flashbax", "tianshou")
PEERS = ("cpprb", "flashbax", "tianshou")
PEER_PACKAGES = {"cpprb": "cpprb", "flashbax": "flashbax", "tianshou": "tianshou"}
LABELS = {
    "ours": "ours (PrioritizedBuffer, K=16, two locks)",
    "ours_single_lock": "ours, single_lock=True",
    "cpprb": "cpprb PrioritizedReplayBuffer",
    "flashbax": "flashbax prioritised flat buffer (jit)",
    "tianshou": "tianshou PrioritizedReplayBuffer",
}


# ----------------------------------------------------------------------------------------------- data


def _transitions(rng, n):
    import numpy as np

    return {
        "obs": rng.standard_normal((n, 8), dtype=np.float32),
        "action": rng.integers(0, 4, n, dtype=np.int32),
        "reward": rng.standard_normal(n, dtype=np.float32),
        "next_obs": rng.standard_normal((n, 8), dtype=np.float32),
        "done": (rng.random(n) < 0.01).astype(np.float32),
    }


def _time_calls(fn, args_list, warmup):
    """Calls fn(*args) for every args in args_list; returns the median seconds per call over all but the first
    `warmup` calls (each call timed on its own)."""
    times = []
    for i, args in enumerate(args_list):
        t0 = time.perf_counter()
        fn(*args)
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
    return median(times)


# ----------------------------------------------------------------------------------------------- adapters
# Each returns {op: (fn, make_args(i))}; the prefill happens inside.


def _prefilled(capacity, k, single_lock, rng):
    """Our PrioritizedBuffer of the benchmark transitions (seed 0), filled to capacity 100k rows at a time."""
    from systems.replay.buffers import PrioritizedBuffer

    example = {name: value[0] for name, value in _transitions(rng, 1).items()}
    buf = PrioritizedBuffer(capacity, example, k=k, seed=0, single_lock=single_lock)
    chunk = min(capacity, 100_000)
    for start in range(0, capacity, chunk):
        buf.insert(_transitions(rng, min(chunk, capacity - start)))
    return buf


def _ours(capacity, k, single_lock, rng):
    import numpy as np

    buf = _prefilled(capacity, k, single_lock, rng)
    sample_rng = np.random.default_rng(1)

    def sample():
        return buf.sample(BATCH, sample_rng)

    return {
        "insert_1": (buf.insert, lambda: (_transitions(rng, 1),)),
        "insert_256": (buf.insert, lambda: (_transitions(rng, BATCH),)),
        "sample_256": (sample, lambda: ()),
        "update_256": (
            buf.update_priorities,
            lambda: (rng.integers(0, capacity, BATCH), rng.random(BATCH) * 2.0),
        ),
    }


def _cpprb(capacity, rng):
    import cpprb
    import numpy as np

    env_dict = {
        "obs": {"shape": 8, "dtype": np.float32},
        "action": {"dtype": np.int32},
        "reward": {"dtype": np.float32},
        "next_obs": {"shape": 8, "dtype": np.float32},
        "done": {"dtype": np.float32},
    }
    buf = cpprb.PrioritizedReplayBuffer(capacity, env_dict, alpha=0.6)
    chunk = min(capacity, 100_000)
    for start in range(0, capacity, chunk):
        buf.add(**_transitions(rng, min(chunk, capacity - start)))

    def one():
        t = _transitions(rng, 1)
        return ({name: value[0] for name, value in t.items()},)

    return {
        "insert_1": (lambda t: buf.add(**t), one),
        "insert_256": (lambda t: buf.add(**t), lambda: (_transitions(rng, BATCH),)),
        "sample_256": (lambda: buf.sample(BATCH, beta=0.4), lambda: ()),
        "update_256": (
            buf.update_priorities,
            lambda: (rng.integers(0, capacity, BATCH), rng.random(BATCH) * 2.0 + 1e-6),
        ),
    }


def _flashbax(capacity, rng):
    """Functional state: every call takes the state and returns the new one; jitted with the state donated (so the
    1M-slot arrays are updated in place, not copied), and every timed call ends in block_until_ready."""
    import flashbax
    import jax
    import jax.numpy as jnp

    buf = flashbax.make_prioritised_flat_buffer(
        max_length=capacity,
        min_length=BATCH,
        sample_batch_size=BATCH,
        add_sequences=True,  # add takes [T, ...]: T=1 for one transition, T=256 for a batch
        add_batch_size=None,
        priority_exponent=0.6,
        device="cpu",
    )
    example = {name: jnp.asarray(value[0]) for name, value in _transitions(rng, 1).items()}
    holder = {"state": buf.init(example)}
    add = jax.jit(buf.add, donate_argnums=0)
    set_priorities = jax.jit(buf.set_priorities, donate_argnums=0)

    @jax.jit
    def sample(state, key):
        s = buf.sample(state, key)
        weights = (s.probabilities / jnp.min(s.probabilities)) ** -0.4  # PER weights, batch-max normalised
        return s.experience, s.indices, weights

    chunk = min(capacity, 100_000)
    for start in range(0, capacity, chunk):
        holder["state"] = add(holder["state"], _transitions(rng, min(chunk, capacity - start)))
    jax.block_until_ready(holder["state"])

    def do_add(t):
        holder["state"] = add(holder["state"], t)
        jax.block_until_ready(holder["state"])

    def do_sample(key):
        jax.block_until_ready(sample(holder["state"], key))

    def do_update(indices, priorities):
        holder["state"] = set_priorities(holder["state"], indices, priorities)
        jax.block_until_ready(holder["state"])

    keys = iter(jax.random.split(jax.random.PRNGKey(0), 100_000))
    return {
        "insert_1": (do_add, lambda: (_transitions(rng, 1),)),
        "insert_256": (do_add, lambda: (_transitions(rng, BATCH),)),
        "sample_256": (do_sample, lambda: (next(keys),)),
        "update_256": (
            do_update,
            lambda: (rng.integers(0, capacity, BATCH).astype("int32"), rng.random(BATCH).astype("float32") * 2.0),
        ),
    }


def _tianshou_guard(capacity, rng):
    raise NotImplementedError("no tianshou adapter: tianshou requires torch, which is not installed here")


def worker(job):
    import numpy as np

    if job.get("kind") == "threads":
        return _threads_worker(job)
    rng = np.random.default_rng(job.get("seed", 0))
    t0 = time.perf_counter()
    impl, capacity = job["impl"], job["capacity"]
    if impl == "ours":
        ops = _ours(capacity, job.get("k", 16), False, rng)
    elif impl == "ours_single_lock":
        ops = _ours(capacity, job.get("k", 16), True, rng)
    elif impl == "cpprb":
        ops = _cpprb(capacity, rng)
    elif impl == "flashbax":
        ops = _flashbax(capacity, rng)
    else:
        ops = _tianshou_guard(capacity, rng)
    prefill_s = time.perf_counter() - t0
    result = {"prefill_s": prefill_s}
    for op in job["ops"]:
        fn, make_args = ops[op]
        args_list = [make_args() for _ in range(job["warmup"] + job["calls"])]
        result[op] = _time_calls(fn, args_list, job["warmup"])
    return result


# ----------------------------------------------------------------------------------------------- thread sweep


def _threads_worker(job):
    """PAL Fig. 10 shape: `threads` threads share one prefilled PrioritizedBuffer (two locks or one global lock).
    threads = 1: one thread alternates insert 16 / sample 256 / update 256. threads = T >= 2: T // 2 actor threads
    (insert 16, repeatedly) and T // 2 learner threads (sample 256, then update the 256 priorities to random
    values, repeatedly), all free-running. After `warmup` seconds, counts transitions inserted and sampled over
    `seconds`; also the CPU cores the process used meanwhile (above 1: work outside the GIL ran in parallel)."""
    import numpy as np

    capacity, n_threads = job["capacity"], job["threads"]
    rng = np.random.default_rng(job.get("seed", 0))
    buf = _prefilled(capacity, 16, job["lock"] == "single_lock", rng)
    pool = 64  # arguments made beforehand, cycled, so the loops time the buffer only
    inserts = [_transitions(rng, INSERT_BATCH) for _ in range(pool)]
    priorities = [rng.random(BATCH) * 2.0 for _ in range(pool)]
    stop = threading.Event()
    counts = [[0, 0] for _ in range(n_threads)]  # per thread: transitions inserted, sampled
    errors = []
    targets = _thread_targets(buf, n_threads, inserts, priorities, stop, counts, errors)
    return _run_threads(targets, counts, stop, errors, job["warmup"], job["seconds"])


def _thread_targets(buf, n_threads, inserts, priorities, stop, counts, errors):
    """The `_threads_worker` thread bodies, free-running until `stop` is set: one alternating thread for
    n_threads = 1, else n_threads // 2 actors then n_threads // 2 learners. Thread `slot` keeps its running totals
    in counts[slot]; a failing thread appends its error to `errors` and sets `stop`."""
    import numpy as np

    pool = len(inserts)

    def actor(slot):
        i = 0
        while not stop.is_set():
            buf.insert(inserts[i % pool])
            i += 1
            counts[slot][0] = i * INSERT_BATCH

    def learner(slot, sample_rng):
        i = 0
        while not stop.is_set():
            indices, _, _ = buf.sample(BATCH, sample_rng)
            buf.update_priorities(indices, priorities[i % pool])
            i += 1
            counts[slot][1] = i * BATCH

    def both(slot, sample_rng):
        i = 0
        while not stop.is_set():
            buf.insert(inserts[i % pool])
            indices, _, _ = buf.sample(BATCH, sample_rng)
            buf.update_priorities(indices, priorities[i % pool])
            i += 1
            counts[slot][0] = i * INSERT_BATCH
            counts[slot][1] = i * BATCH

    def guarded(fn, *args):
        def body():
            try:
                fn(*args)
            except BaseException as error:  # reported in the result
                errors.append(repr(error))
                stop.set()

        return body

    if n_threads == 1:
        return [guarded(both, 0, np.random.default_rng(100))]
    actors = n_threads // 2
    targets = [guarded(actor, i) for i in range(actors)]
    targets += [guarded(learner, i, np.random.default_rng(100 + i)) for i in range(actors, n_threads)]
    return targets


def _run_threads(targets, counts, stop, errors, warmup, seconds):
    """Runs `targets` in daemon threads; after `warmup` seconds, the transitions inserted and sampled per second
    over `seconds` and the CPU cores the process used meanwhile. Raises the first thread error."""
    threads = [threading.Thread(target=target, daemon=True) for target in targets]
    for thread in threads:
        thread.start()
    time.sleep(warmup)
    before, cpu0, t0 = [list(c) for c in counts], time.process_time(), time.perf_counter()
    time.sleep(seconds)
    after, cpu1, t1 = [list(c) for c in counts], time.process_time(), time.perf_counter()
    stop.set()
    for thread in threads:
        thread.join(30)
    if errors:
        raise RuntimeError(errors[0])
    elapsed = t1 - t0
    return {
        "inserted_per_s": sum(a[0] - b[0] for a, b in zip(after, before, strict=True)) / elapsed,
        "sampled_per_s": sum(a[1] - b[1] for a, b in zip(after, before, strict=True)) / elapsed,
        "cpu_cores": (cpu1 - cpu0) / elapsed,
    }


def _thread_sweep(quick, env):
    """Every (capacity, threads, lock, repeat) in its own subprocess; the locks alternate within a repeat so drift
    on a shared machine hits both."""
    capacities = (100_000,) if quick else (1_000_000, 100_000)
    counts = (1, 2, 4) if quick else THREAD_COUNTS
    seconds = 1.0 if quick else _THREADS_SECONDS.value
    warmup = 0.2 if quick else _THREADS_WARMUP.value
    repeats = 1 if quick else _THREADS_REPEATS.value
    rows = []
    for capacity in capacities:
        for n_threads in counts:
            for repeat in range(repeats):
                for lock in LOCKS:
                    job = {
                        "kind": "threads",
                        "capacity": capacity,
                        "threads": n_threads,
                        "lock": lock,
                        "seconds": seconds,
                        "warmup": warmup,
                        "seed": repeat,
                    }
                    res = run_job("benchmarks.replay", job, _TIMEOUT.value, env)
                    row = {"capacity": capacity, "threads": n_threads, "lock": lock, "repeat": repeat, **res}
                    rows.append(row)
                    print(
                        f"threads cap={capacity} T={n_threads} {lock} #{repeat}: "
                        f"insert={fmt(row.get('inserted_per_s'))}/s sample={fmt(row.get('sampled_per_s'))}/s "
                        f"cores={fmt(row.get('cpu_cores'), 2)} wall={res['wall_s']:.1f}s {res.get('error', '')}",
                        flush=True,
                    )
    return rows, {"capacities": capacities, "counts": counts, "seconds": seconds, "warmup": warmup, "repeats": repeats}


def _write_threads(rows, settings, name, command, wall):
    os.makedirs(_OUT_DIR.value, exist_ok=True)
    _write_threads_csv(rows, os.path.join(_OUT_DIR.value, name + ".csv"))
    lines = _threads_header_lines(settings, name, command, wall)
    for capacity in settings["capacities"]:
        lines += [
            f"## Capacity {capacity:,}",
            "",
            "| T (actors + learners) | two_lock insert/s | two_lock sample/s | single_lock insert/s | "
            "single_lock sample/s | two/single insert | two/single sample | two/single total | cores two / single | "
            "background |",
            "| --- |" + " ---: |" * 9,
        ]
        lines += [_threads_table_row(rows, capacity, n_threads) for n_threads in settings["counts"]]
        lines.append("")
    with open(os.path.join(_OUT_DIR.value, name + ".md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def _write_threads_csv(rows, path):
    fields = [
        "capacity",
        "threads",
        "lock",
        "repeat",
        "inserted_per_s",
        "sampled_per_s",
        "cpu_cores",
        "wall_s",
        "background_cores",
        "error",
    ]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow(
                {
                    **{key: r[key] for key in ("capacity", "threads", "lock", "repeat")},
                    **{
                        key: "" if r.get(key) is None else f"{r[key]:.{digits}f}"
                        for key, digits in (
                            ("inserted_per_s", 0),
                            ("sampled_per_s", 0),
                            ("cpu_cores", 2),
                            ("wall_s", 1),
                            ("background_cores", 2),
                        )
                    },
                    "error": r.get("error", ""),
                }
            )


def _threads_header_lines(settings, name, command, wall):
    """Title and the thread sweep's machine, versions, workload and method."""
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    versions = ", ".join(f"{p} {_version(p)}" for p in ("numpy", "numba"))
    return [
        f"# Replay buffer thread scaling: lazy writing (two locks) vs one global lock ({name})",
        "",
        f"- Machine: {machine()}. **Only {os.cpu_count()} cores**: threads beyond that time-share them, so this "
        "measures contention, not scaling; PAL's Fig. 10 used 56 cores and C++ threads.",
        f"- Date: {date}",
        f"- Command: `{command}`",
        f"- Versions: Python {platform.python_version()}, {versions}; sum tree on its default backend (numba "
        "kernels that release the GIL; the rest of each call holds it).",
        "- Our `PrioritizedBuffer` (K=16), prefilled to capacity with transitions {obs f32[8], action i32, reward "
        "f32, next_obs f32[8], done f32}; `two_lock` = lazy writing (Algorithm 3), `single_lock` = "
        "`single_lock=True`, one global lock around every operation.",
        f"- Threads T: T = 1 is one thread alternating insert {INSERT_BATCH} / sample {BATCH} / update {BATCH}; "
        f"T >= 2 is T/2 actor threads (insert {INSERT_BATCH} transitions per call, as one step of {INSERT_BATCH} "
        f"envs) and T/2 learner threads (sample {BATCH}, then update those {BATCH} priorities to random values), "
        "all free-running, no env and no network.",
        f"- Each point: {settings['warmup']} s warm-up, then transitions inserted and sampled per second over "
        f"{settings['seconds']} s; median of {settings['repeats']} run(s), each in its own process, the two lock "
        "modes alternating. `cores` = process CPU time / wall time (above 1: work outside the GIL ran in "
        "parallel). `two/single` = two-lock throughput / single-lock throughput (> 1: lazy writing keeps more); "
        "`total` compares inserted + sampled transitions per second. `background` = median CPU cores other "
        "processes used during the point's runs (well above 0: a loaded machine, numbers unreliable).",
        f"- Wall time: {wall:.0f} s.",
        "",
    ]


def _threads_table_row(rows, capacity, n_threads):
    """One table row: the medians over the point's runs of both lock modes, their ratios, load and errors."""

    def med(lock, key):
        return median(
            [r.get(key) for r in rows if (r["capacity"], r["threads"], r["lock"]) == (capacity, n_threads, lock)]
        )

    cells = {(lock, key): med(lock, key) for lock in LOCKS for key in ("inserted_per_s", "sampled_per_s", "cpu_cores")}
    totals = {
        lock: None
        if cells[(lock, "inserted_per_s")] is None or cells[(lock, "sampled_per_s")] is None
        else cells[(lock, "inserted_per_s")] + cells[(lock, "sampled_per_s")]
        for lock in LOCKS
    }
    point = [r for r in rows if r["capacity"] == capacity and r["threads"] == n_threads]
    background = median([r.get("background_cores") for r in point])
    who = "1 (alternating)" if n_threads == 1 else f"{n_threads} ({n_threads // 2} + {n_threads // 2})"
    errors = sorted({r["error"] for r in point if r.get("error")})
    return (
        f"| {who} | {fmt(cells[('two_lock', 'inserted_per_s')])} | {fmt(cells[('two_lock', 'sampled_per_s')])}"
        f" | {fmt(cells[('single_lock', 'inserted_per_s')])} | {fmt(cells[('single_lock', 'sampled_per_s')])}"
        f" | {_ratio(cells[('two_lock', 'inserted_per_s')], cells[('single_lock', 'inserted_per_s')])}"
        f" | {_ratio(cells[('two_lock', 'sampled_per_s')], cells[('single_lock', 'sampled_per_s')])}"
        f" | {_ratio(totals['two_lock'], totals['single_lock'])}"
        f" | {fmt(cells[('two_lock', 'cpu_cores')], 2)} / {fmt(cells[('single_lock', 'cpu_cores')], 2)}"
        f" | {fmt(background, 2)} |" + (f" {'; '.join(errors)}" if errors else "")
    )


def _ratio(a, b):
    return "n/a" if not a or not b else f"x{a / b:.2f}"


# ----------------------------------------------------------------------------------------------- driver


def _installed(impl):
    if impl.startswith("ours"):
        return True
    try:
        importlib.metadata.version(PEER_PACKAGES[impl])
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _version(pkg):
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def main(argv):
    del argv
    if _WORKER.value:
        print("RESULT " + json.dumps(worker(json.loads(_WORKER.value))), flush=True)
        return
    quick = _QUICK.value
    capacities = (100_000,) if quick else (1_000_000, 100_000)
    calls = 50 if quick else _CALLS.value
    warmup = 5 if quick else _WARMUP.value
    ks = (4, 16) if quick else (2, 4, 8, 16, 32, 64)
    name = _NAME.value + ("_quick" if quick else "")
    command = "PYTHONPATH=. " + shlex.join([sys.executable, "-m", "benchmarks.replay", *sys.argv[1:]])
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])),
        JAX_PLATFORMS="cpu",
    )
    if not _THREADS_ONLY.value:
        _peers_and_sweep(quick, capacities, calls, warmup, ks, name, command, env)
    if _THREADS.value or _THREADS_ONLY.value:
        t_threads = time.perf_counter()
        rows, settings = _thread_sweep(quick, env)
        threads_name = _THREADS_NAME.value + ("_quick" if quick else "")
        _write_threads(rows, settings, threads_name, command, time.perf_counter() - t_threads)


def _peers_and_sweep(quick, capacities, calls, warmup, ks, name, command, env):
    rows = []
    t_main = time.perf_counter()
    for capacity in capacities:
        for impl in IMPLS:
            if impl == "tianshou" or not _installed(impl):
                why = "not installed (needs torch)" if impl == "tianshou" else "not installed"
                rows.append({"table": "peers", "impl": impl, "capacity": capacity, "k": "", "error": why})
                print(f"{impl} cap={capacity}: not installed", flush=True)
                continue
            job = {"impl": impl, "capacity": capacity, "ops": list(OPS), "calls": calls, "warmup": warmup}
            res = run_job("benchmarks.replay", job, _TIMEOUT.value, env)
            row = {
                "table": "peers",
                "impl": impl,
                "capacity": capacity,
                "k": 16 if impl.startswith("ours") else "",
                **res,
            }
            rows.append(row)
            print(
                f"{impl} cap={capacity}: "
                + ", ".join(f"{op}={fmt(_us(row.get(op)), 1)}us" for op in OPS)
                + f" wall={res['wall_s']:.1f}s {res.get('error', '')}",
                flush=True,
            )
    peers_wall = time.perf_counter() - t_main
    t_sweep = time.perf_counter()
    for capacity in capacities:
        for k in ks:
            job = {
                "impl": "ours",
                "capacity": capacity,
                "k": k,
                "ops": ["sample_256", "update_256"],
                "calls": calls,
                "warmup": warmup,
            }
            res = run_job("benchmarks.replay", job, _TIMEOUT.value, env)
            rows.append({"table": "k_sweep", "impl": "ours", "capacity": capacity, "k": k, **res})
            print(
                f"sweep cap={capacity} K={k}: sample={fmt(_us(res.get('sample_256')), 1)}us "
                f"update={fmt(_us(res.get('update_256')), 1)}us {res.get('error', '')}",
                flush=True,
            )
    sweep_wall = time.perf_counter() - t_sweep
    _write(rows, name, command, capacities, calls, warmup, peers_wall, sweep_wall)


def _us(seconds):
    return None if seconds is None else seconds * 1e6


def _write(rows, name, command, capacities, calls, warmup, peers_wall, sweep_wall):
    os.makedirs(_OUT_DIR.value, exist_ok=True)
    _write_peers_csv(rows, os.path.join(_OUT_DIR.value, name + ".csv"))
    lines = _peers_header_lines(name, command, calls, warmup, peers_wall, sweep_wall)
    for capacity in capacities:
        lines += [
            f"## Capacity {capacity:,}",
            "",
            "| buffer | " + " | ".join(f"{op} (us)" for op in OPS) + " |",
            "| --- |" + " ---: |" * len(OPS),
        ]
        lines += _peers_table_rows([r for r in rows if r["table"] == "peers" and r["capacity"] == capacity])
        lines.append("")
    lines += _k_sweep_lines(rows)
    lines.append("")
    with open(os.path.join(_OUT_DIR.value, name + ".md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def _write_peers_csv(rows, path):
    fields = [
        "table",
        "impl",
        "capacity",
        "k",
        *[f"{op}_us" for op in OPS],
        "prefill_s",
        "wall_s",
        "background_cores",
        "error",
    ]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow(
                {
                    "table": r["table"],
                    "impl": r["impl"],
                    "capacity": r["capacity"],
                    "k": r["k"],
                    **{f"{op}_us": ("" if r.get(op) is None else f"{r[op] * 1e6:.2f}") for op in OPS},
                    "prefill_s": "" if r.get("prefill_s") is None else f"{r['prefill_s']:.2f}",
                    "wall_s": "" if r.get("wall_s") is None else f"{r['wall_s']:.1f}",
                    "background_cores": "" if r.get("background_cores") is None else f"{r['background_cores']:.2f}",
                    "error": r.get("error", ""),
                }
            )


def _peers_header_lines(name, command, calls, warmup, peers_wall, sweep_wall):
    """Title, machine, versions and method of the peers table and the K sweep."""
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    versions = ", ".join(f"{p} {_version(p)}" for p in ("cpprb", "flashbax", "jax", "tianshou", "numpy"))
    return [
        f"# Replay buffers: ours vs peers ({name})",
        "",
        f"- Machine: {machine()}",
        f"- Date: {date}",
        f"- Command: `{command}`",
        f"- Versions: {versions}",
        f"- Median microseconds per call over {calls} calls after {warmup} warm-up calls, single thread, buffer "
        f"prefilled to capacity; batch {BATCH}; transition {{obs f32[8], action i32, reward f32, next_obs f32[8], "
        "done f32}. Lower is better.",
        "- `xN vs best peer` = (fastest installed peer's time) / (our time): > 1 means ours is faster.",
        f"- Wall time: peers table {peers_wall:.0f} s, K sweep {sweep_wall:.0f} s.",
        "",
    ]


def _peers_table_rows(peer_rows):
    """One capacity's rows: every buffer's time per op, then ours against the fastest installed peer."""
    lines = []
    by_impl = {r["impl"]: r for r in peer_rows}
    for impl in IMPLS:
        r = by_impl.get(impl, {})
        if r.get("error"):
            lines.append(f"| {LABELS[impl]} | " + " | ".join([r["error"]] * len(OPS)) + " |")
        else:
            lines.append(f"| {LABELS[impl]} | " + " | ".join(fmt(_us(r.get(op)), 1) for op in OPS) + " |")
    for impl in ("ours", "ours_single_lock"):
        cells = []
        for op in OPS:
            peer_times = [by_impl[p][op] for p in PEERS if p in by_impl and by_impl[p].get(op)]
            ours = by_impl.get(impl, {}).get(op)
            cells.append("n/a" if not peer_times or not ours else f"x{min(peer_times) / ours:.2f}")
        lines.append(f"| {LABELS[impl]}: xN vs best peer | " + " | ".join(cells) + " |")
    return lines


def _k_sweep_lines(rows):
    """The K sweep table of ours (two locks)."""
    lines = [
        "## K sweep (ours, two locks): sample 256 / update 256, microseconds per call",
        "",
        "| capacity | K | sample_256 (us) | update_256 (us) |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        if r["table"] == "k_sweep":
            lines.append(
                f"| {r['capacity']:,} | {r['k']} | {fmt(_us(r.get('sample_256')), 1)} | "
                f"{fmt(_us(r.get('update_256')), 1)} |" + (f" {r['error']}" if r.get("error") else "")
            )
    return lines


if __name__ == "__main__":
    app.run(main)
