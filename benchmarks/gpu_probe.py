"""Where an accelerator spends the main job's time, measured before a long run (issue 29's device check).

Two questions the first GPU runs (`results/gpu_first_run.md`) left open, for the Atari PPO preset (Nature CNN,
Breakout's shapes):
- the learner's first update took ~33 s on an H200: how much of it is the compile, and does the CPU's loop plan
  (`systems.common.learner.ppo_loop_plan`: 4 x 4 optimizer steps unrolled) cost it? The update is compiled and
  timed with the loops unrolled and rolled, at the preset's round (8 x 128) and at a larger one.
- the actor thread spent 80% of its time in inference at 8 envs: how does one forward pass's latency grow with the
  batch, and what do the three outputs' separate device-to-host copies cost against one `jax.device_get`?

    PYTHONPATH=. python -m benchmarks.gpu_probe --out=/tmp/gpu_probe.json

Prints one line per measurement and writes them all to `--out` as JSON. On a CPU it runs too (slowly: pass
`--rounds=8x128 --batches=8,64` to keep it short).
"""

from __future__ import annotations

import functools
import json
import statistics
import time

import jax
import numpy as np
from absl import app, flags

from envs.factory import make_spec
from systems.common import config as config_lib
from systems.common import learner, presets
from systems.common.rollout import rollout_shapes

_OUT = flags.DEFINE_string("out", "/tmp/gpu_probe.json", "JSON file for the measurements.")
_ROUNDS = flags.DEFINE_list("rounds", ["8x128", "64x128"], "Round sizes (envs x alpha) whose update is timed.")
_BATCHES = flags.DEFINE_list("batches", ["8", "16", "32", "64", "128", "256"], "Forward-pass batches timed.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed updates per plan (after one warm-up).")
_CALLS = flags.DEFINE_integer("calls", 200, "Timed forward passes per batch and fetch form.")
_ENV = "Breakout-v5"


def _config(num_envs: int, alpha: int) -> config_lib.TrainConfig:
    values = dict(presets.preset("atari", "ppo"), num_envs=num_envs, sync_interval=alpha)
    return config_lib.TrainConfig(env_id=_ENV, **values)


def _random_rollout(config, spec, setup, rng: np.random.Generator):
    shapes = rollout_shapes(config.sync_interval, config.num_envs, spec.obs_shape, spec.obs_dtype,
                            setup.action_shape, setup.action_dtype)
    obs = rng.integers(0, 255, shapes.obs.shape, dtype=np.uint8)
    actions = rng.integers(0, spec.action_dim, shapes.actions.shape).astype(shapes.actions.dtype)
    floats = {name: rng.standard_normal(getattr(shapes, name).shape).astype(np.float32) * 0.1
              for name in ("rewards", "behaviour_values")}
    zeros = {name: np.zeros(getattr(shapes, name).shape, np.float32) for name in ("terminations", "truncations")}
    return type(shapes)(obs=obs, actions=actions, valid=np.ones(shapes.valid.shape, np.float32),
                        behaviour_log_probs=np.full(shapes.behaviour_log_probs.shape, -np.log(spec.action_dim),
                                                    np.float32), **floats, **zeros)


def time_update(num_envs: int, alpha: int, unrolled: bool) -> dict:
    """Compile seconds and median seconds per update of the Atari PPO update with the given loop plan."""
    config = _config(num_envs, alpha)
    spec = make_spec(_ENV)
    plan_backend = "cpu" if unrolled else "gpu"  # the plan CPU / other backends get (the program runs here)
    original = learner.ppo_loop_plan
    learner.ppo_loop_plan = functools.partial(original, backend=plan_backend)
    try:
        setup, state = learner.build(config, spec)
    finally:
        learner.ppo_loop_plan = original
    rollout = jax.device_put(_random_rollout(config, spec, setup, np.random.default_rng(0)))
    start = time.perf_counter()
    compiled = setup.update.lower(state, state.params, rollout).compile()
    compile_s = time.perf_counter() - start
    state, metrics = compiled(state, state.params, rollout)
    jax.block_until_ready(metrics)
    times = []
    for _ in range(_REPEATS.value):
        start = time.perf_counter()
        state, metrics = compiled(state, state.params, rollout)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
    update_s = statistics.median(times)
    return dict(kind="update", round=f"{num_envs}x{alpha}", loops="unrolled" if unrolled else "rolled",
                compile_s=round(compile_s, 2), update_s=round(update_s, 4),
                learner_sps=round(num_envs * alpha / update_s))


def time_forward(batch: int, setup, params) -> list[dict]:
    """Median seconds of one actor forward pass (policy, keys, sampling) at `batch` rows, outputs fetched as the
    actors did (one `np.asarray` per output) and with one `jax.device_get`."""
    spec = make_spec(_ENV)
    rng = np.random.default_rng(batch)
    obs = rng.integers(0, 255, (batch, *spec.obs_shape), dtype=np.uint8)
    ids = np.arange(batch, dtype=np.int32)
    fetches = {"asarray_each": lambda out: [np.asarray(x) for x in out], "device_get": jax.device_get}
    rows = []
    for name, fetch in fetches.items():
        for _ in range(5):  # warm-up (the first call compiles)
            fetch(setup.policy(params, obs, ids, ids, setup.action_key))
        times = []
        for step in range(_CALLS.value):
            steps = np.full(batch, step, np.int32)
            start = time.perf_counter()
            fetch(setup.policy(params, obs, ids, steps, setup.action_key))
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        rows.append(dict(kind="forward", batch=batch, fetch=name, ms=round(median * 1e3, 3),
                         rows_per_s=round(batch / median)))
    return rows


def main(argv):
    del argv
    rows = [dict(kind="machine", backend=jax.default_backend(), devices=[str(d) for d in jax.devices()],
                 jax=jax.__version__)]
    print(json.dumps(rows[0]), flush=True)

    def record(new: list[dict]) -> None:
        for row in new:
            print(json.dumps(row), flush=True)
        rows.extend(new)
        with open(_OUT.value, "w") as f:
            json.dump(rows, f, indent=1)

    setup, state = learner.build(_config(8, 128), make_spec(_ENV))
    for batch in _BATCHES.value:
        record(time_forward(int(batch), setup, state.params))
    for unrolled in (False, True):  # rolled first: the unrolled builds are the slow ones
        for size in _ROUNDS.value:
            num_envs, alpha = (int(x) for x in size.split("x"))
            record([time_update(num_envs, alpha, unrolled)])


if __name__ == "__main__":
    app.run(main)
