"""Replay-buffer micro-benchmark: our PAL `PrioritizedBuffer` (K-ary sum tree, lazy writing, two locks; and with one
global lock) against peer prioritized buffers: cpprb `PrioritizedReplayBuffer`, flashbax's prioritised flat buffer
(jitted functional add/sample/set_priorities), tianshou `PrioritizedReplayBuffer` (if installed).

Transitions {obs: f32[8], action: i32, reward: f32, next_obs: f32[8], done: f32}; each buffer is prefilled to
capacity, then single-threaded median time per call of: insert one transition, insert 256, sample 256 (indices, data
gather and importance weights), update 256 priorities. Plus a K sweep of ours (sample / update latency vs K, the
shape of PAL Fig. 9). Every (buffer, capacity) measurement and every sweep point runs in its own subprocess with a
hard timeout (`benchmarks.common.run_job`).

    PYTHONPATH=. /tmp/bench-venv/bin/python -m benchmarks.replay [--quick]

Peers are benchmark-only: install them into a separate venv from `benchmarks/requirements-replay.txt`.
"""

from __future__ import annotations

import csv
import datetime
import importlib.metadata
import json
import os
import shlex
import sys
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

BATCH = 256
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


def _ours(capacity, k, single_lock, rng):
    import numpy as np

    from systems.replay.buffers import PrioritizedBuffer

    example = {name: value[0] for name, value in _transitions(rng, 1).items()}
    buf = PrioritizedBuffer(capacity, example, k=k, seed=0, single_lock=single_lock)
    chunk = min(capacity, 100_000)
    for start in range(0, capacity, chunk):
        buf.insert(_transitions(rng, min(chunk, capacity - start)))
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
    with open(os.path.join(_OUT_DIR.value, name + ".csv"), "w", newline="") as f:
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
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    versions = ", ".join(f"{p} {_version(p)}" for p in ("cpprb", "flashbax", "jax", "tianshou", "numpy"))
    lines = [
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
    for capacity in capacities:
        lines += [
            f"## Capacity {capacity:,}",
            "",
            "| buffer | " + " | ".join(f"{op} (us)" for op in OPS) + " |",
            "| --- |" + " ---: |" * len(OPS),
        ]
        by_impl = {r["impl"]: r for r in rows if r["table"] == "peers" and r["capacity"] == capacity}
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
        lines.append("")
    lines += [
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
    lines.append("")
    with open(os.path.join(_OUT_DIR.value, name + ".md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    app.run(main)
