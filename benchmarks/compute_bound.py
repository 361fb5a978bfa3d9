"""How close the main job's Breakout learner runs to this CPU's compute bound (issue 29, item 5).

    PYTHONPATH=. python -m benchmarks.compute_bound [--repeats=7]

* Work per env step of HTS-PPO with CleanRL's Atari settings (8 envs x 128 steps, 4 minibatches of 256 frames, 4
  epochs): every frame passes the learner's value and gradient once per epoch, and the actors' forward pass once.
  The useful FLOPs are counted by hand from the Nature CNN's layers (a multiply-add is 2 FLOPs; the backward pass
  costs two products per layer, one for the first layer, whose input needs no gradient); XLA's own count of the
  compiled programs (`cost_analysis`) is shown beside it.
* The machine's rate: the best float32 matmul rate XLA reaches here (square matmuls of 512 to 2048, medians).
* Bounds: the hardware bound is that rate over the FLOPs per env step (SPS if the CPU did nothing but this work at
  matmul speed, with perfect overlap); our compute-limited SPS comes from the measured times of the same programs
  under the run's convolution plan (what the learner and actors would give if env stepping and hand-over were free).
* The main job's whole update: `launch.hts --game=Breakout`'s update program (4 epochs x 4 minibatches of 256, one
  XLA program per round of 1,024 steps) on a round of random frames, timed as the learner calls it.
* Columns (`--compare`): the measurements run in a child process each, under the launchers' XLA flags plus the
  column's environment. `allocator`: glibc's default against `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` (transparent
  huge pages for malloc's large chunks). `xla_libraries`: XLA CPU's own kernels against its flags that hand
  convolutions and dots to oneDNN (PyTorch's CPU library) or XNNPACK. Page faults and kernel CPU time per call are
  counted beside them.

Writes `results/compute_bound_cpu.md` (`results/xla_libraries_cpu.md` for `--compare=xla_libraries`). Run it alone:
a second job on the cores lowers every rate it measures.
"""

from __future__ import annotations

import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from agents import networks
from benchmarks.common import git_commit, timed
from systems.common import conv_tuning, hardware
from systems.common.xla_flags import prefer_memory_saving_cpu_schedule

_REPEATS = flags.DEFINE_integer("repeats", 7, "Timed calls per program (median).")
_OUT = flags.DEFINE_string("out", "benchmarks/results/compute_bound_cpu.md", "Result file.")
_CHILD_OUT = flags.DEFINE_string("child_out", "", "Internal: measure in this process and write the JSON here.")

_LIBRARY_OPS = "LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION,LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"
# --compare -> (column, environment of the measuring process), the launchers' setting first.
COLUMNS = {
    "allocator": (("glibc's default", {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}),
                  ("glibc.malloc.hugetlb=1", {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"})),
    "xla_libraries": (
        ("XLA's own kernels", {}),
        ("oneDNN", {"XLA_FLAGS": "--xla_cpu_use_onednn=true "
                               f"--xla_cpu_experimental_onednn_fusion_type={_LIBRARY_OPS}"}),
        ("XNNPACK", {"XLA_FLAGS": "--xla_cpu_use_xnnpack=true "
                                f"--xla_cpu_experimental_xnn_fusion_type={_LIBRARY_OPS}"}),
    ),
}
_COMPARE = flags.DEFINE_enum("compare", "allocator", list(COLUMNS), "What the columns vary (module docstring).")

NUM_ACTIONS = 4  # Breakout
EPOCHS = 4
MINIBATCH = 256  # 8 envs x 128 steps / 4 minibatches
INFERENCE_BATCH = 4  # HTS's default: num_envs / 2
# The Nature CNN (Mnih et al. 2015; CleanRL's ppo_atari): (name, output positions, multiply-adds per position).
NATURE_LAYERS = (
    ("conv1 8x8/4, 4->32", 20 * 20 * 32, 8 * 8 * 4),
    ("conv2 4x4/2, 32->64", 9 * 9 * 64, 4 * 4 * 32),
    ("conv3 3x3/1, 64->64", 7 * 7 * 64, 3 * 3 * 64),
    ("dense 3136->512", 512, 3136),
    ("heads 512->actions+1", NUM_ACTIONS + 1, 512),
)


def hand_flops() -> tuple[float, float]:
    """Useful FLOPs per frame: (forward, value and gradient)."""
    macs = [positions * per for _, positions, per in NATURE_LAYERS]
    forward = 2.0 * sum(macs)
    backward = 2.0 * (2 * sum(macs) - macs[0])  # weight and input gradients; conv1's input needs none
    return forward, forward + backward


def xla_flops(fn, *args) -> float | None:
    """XLA's FLOP count of the compiled `fn` (None where the backend does not report it)."""
    analysis = fn.lower(*args).compile().cost_analysis()
    if isinstance(analysis, list):
        analysis = analysis[0] if analysis else {}
    flops = (analysis or {}).get("flops")
    return float(flops) if flops else None


def matmul_rate(repeats: int) -> dict:
    """GFLOP/s of float32 square matmuls (n -> rate) and the best."""
    rates = {}
    matmul = jax.jit(lambda a, b: a @ b)
    for n in (512, 1024, 2048):
        a = jnp.asarray(np.random.default_rng(0).standard_normal((n, n)), jnp.float32)
        b = jnp.asarray(np.random.default_rng(1).standard_normal((n, n)), jnp.float32)
        rates[n] = 2.0 * n**3 / timed(matmul, a, b, repeats=repeats) / 1e9
    return rates


def network_programs(plan) -> tuple:
    """(actor forward, learner value-and-gradient, their arguments) of the Breakout ActorCritic under `plan`."""
    model = networks.ActorCritic(torso="nature_cnn", action_dim=NUM_ACTIONS, continuous=False, conv_plan=plan)
    shape = networks.NATURE_CNN_OBS_SHAPE
    rng = np.random.default_rng(0)
    actor_obs = jnp.asarray(rng.integers(0, 255, (INFERENCE_BATCH, *shape)), jnp.uint8)
    learner_obs = jnp.asarray(rng.integers(0, 255, (MINIBATCH, *shape)), jnp.uint8)
    params = model.init(jax.random.PRNGKey(0), actor_obs)

    def loss(p, frames):
        logits, value = model.apply(p, frames)
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0]) + jnp.sum(value**2)

    return jax.jit(model.apply), jax.jit(jax.value_and_grad(loss)), params, actor_obs, learner_obs


def measure(repeats: int) -> dict:
    plan = conv_tuning.plan_for("nature_cnn", networks.NATURE_CNN_OBS_SHAPE, MINIBATCH)
    forward, grad, params, actor_obs, learner_obs = network_programs(plan)
    hand_forward, hand_grad = hand_flops()
    result = dict(
        matmul=matmul_rate(repeats),
        hand_forward=hand_forward, hand_grad=hand_grad,
        xla_forward=xla_flops(forward, params, actor_obs), xla_grad=xla_flops(grad, params, learner_obs),
        actor_s=timed(forward, params, actor_obs, repeats=repeats),
        grad_s=timed(grad, params, learner_obs, repeats=repeats),
        plan=conv_tuning.chosen().get("nature", {"plan": "table", "source": "the fixed table"}),
    )
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(repeats):
        jax.block_until_ready(grad(params, learner_obs))
    after = resource.getrusage(resource.RUSAGE_SELF)
    result["grad_faults"] = (after.ru_minflt - before.ru_minflt) / repeats
    result["grad_sys_s"] = (after.ru_stime - before.ru_stime) / repeats
    result.update(whole_update(max(3, repeats // 2)))
    result["load"] = os.getloadavg()[0]
    return result


def whole_update(repeats: int) -> dict:
    """Seconds, page faults and kernel seconds per call of `launch.hts --game=Breakout`'s update program."""
    from envs.factory import make_spec
    from launch import hts
    from systems.common import learner
    from systems.common.rollout import rollout_shapes

    hts.FLAGS(["compute_bound", "--game=Breakout"])
    config = hts.make_config()
    spec = make_spec(config.env_id)
    setup, state = learner.build(config, spec)
    shapes = rollout_shapes(config.sync_interval, config.num_envs, spec.obs_shape, spec.obs_dtype, setup.action_shape,
                            setup.action_dtype)
    rng = np.random.default_rng(0)
    rollout = shapes._replace(
        obs=jnp.asarray(rng.integers(0, 255, shapes.obs.shape), shapes.obs.dtype),
        actions=jnp.asarray(rng.integers(0, NUM_ACTIONS, shapes.actions.shape), shapes.actions.dtype),
        rewards=jnp.asarray(rng.integers(0, 2, shapes.rewards.shape), jnp.float32),
        terminations=jnp.zeros(shapes.terminations.shape), truncations=jnp.zeros(shapes.truncations.shape),
        valid=jnp.ones(shapes.valid.shape), behaviour_log_probs=jnp.full(shapes.behaviour_log_probs.shape, -1.386),
        behaviour_values=jnp.zeros(shapes.behaviour_values.shape))
    seconds = timed(setup.update, state, state.params, rollout, repeats=repeats)
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(repeats):
        jax.block_until_ready(setup.update(state, state.params, rollout))
    after = resource.getrusage(resource.RUSAGE_SELF)
    return dict(update_s=seconds, update_steps=config.num_envs * config.sync_interval,
                update_faults=(after.ru_minflt - before.ru_minflt) / repeats,
                update_sys_s=(after.ru_stime - before.ru_stime) / repeats)


def measure_in_children(repeats: int, compare: str) -> dict:
    """`measure` in a fresh process per column (glibc reads its tunables, XLA its flags, at start): column ->
    result."""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for column, env in COLUMNS[compare]:
            out = os.path.join(tmp, "result.json")
            subprocess.run([sys.executable, "-m", "benchmarks.compute_bound", f"--repeats={repeats}",
                            f"--child_out={out}"], check=True, env=dict(os.environ, **env))
            with open(out) as f:
                results[column] = json.load(f)
    return results


def _per_frame(flops: float | None, frames: int) -> str:
    return f"{flops / frames / 1e6:.1f}" if flops else "n/a"


def _bounds(r: dict) -> dict:
    """The derived rates of one measurement."""
    rate = max(r["matmul"].values())
    per_step = EPOCHS * r["hand_grad"] + r["hand_forward"]
    grad_rate = r["hand_grad"] * MINIBATCH / r["grad_s"] / 1e9
    serial = EPOCHS * r["grad_s"] / MINIBATCH + r["actor_s"] / INFERENCE_BATCH
    return dict(rate=rate, per_step=per_step, grad_rate=grad_rate, hardware_sps=rate * 1e9 / per_step,
                learner_sps=MINIBATCH / (EPOCHS * r["grad_s"]), compute_sps=1.0 / serial,
                actor_share=r["actor_s"] / INFERENCE_BATCH / serial)


def write(results: dict, out: str, wall: float, compare: str = "allocator") -> None:
    """`results`: column -> `measure`'s result, the launchers' setting first."""
    columns = list(results)
    first = results[columns[0]]
    bounds = {c: _bounds(r) for c, r in results.items()}

    def row(name: str, cell) -> str:
        return f"| {name} | " + " | ".join(cell(results[c], bounds[c]) for c in columns) + " |"

    lines = [
        "# The main job's Breakout learner against this CPU's compute bound (issue 29)",
        "",
        f"- Machine: {hardware.describe(hardware.card())}.",
        f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC. Commit {git_commit()}. "
        f"Wall time {wall / 60:.1f} min. 1-minute load at the end of each measurement: "
        + ", ".join(f"{r['load']:.1f}" for r in results.values()) + ".",
        f"- Command: `PYTHONPATH=. python -m benchmarks.compute_bound --compare={compare}` (module docstring: what "
        "each row counts; each column is a process of its own, with its environment: "
        + "; ".join(f"{column}: `{' '.join(f'{k}={v}' for k, v in env.items()) or 'none added'}`"
                    for column, env in COLUMNS[compare]) + ").",
        f"- Convolution plan: {first['plan'].get('plan')} ({first['plan'].get('source')}).",
        "",
        "## Work per frame (Nature CNN, Breakout's 4 actions)",
        "",
        "| program | hand count MFLOP / frame | XLA's count MFLOP / frame |",
        "| --- | ---: | ---: |",
        f"| actor forward (batch {INFERENCE_BATCH}) | {first['hand_forward'] / 1e6:.1f} | "
        f"{_per_frame(first['xla_forward'], INFERENCE_BATCH)} |",
        f"| learner value and gradient (batch {MINIBATCH}) | {first['hand_grad'] / 1e6:.1f} | "
        f"{_per_frame(first['xla_grad'], MINIBATCH)} |",
        f"| one env step ({EPOCHS} epochs + 1 forward) | {bounds[columns[0]]['per_step'] / 1e6:.1f} | |",
        "",
        "## Rates and bounds",
        "",
        "| quantity | " + " | ".join(columns) + " |",
        "| --- |" + " ---: |" * len(columns),
        *(row(f"float32 matmul {n}x{n}", lambda r, b, n=n: f"{r['matmul'][n]:.1f} GFLOP/s")
          for n in first["matmul"]),
        row("learner value and gradient, measured", lambda r, b: f"{r['grad_s'] * 1e3:.1f} ms per {MINIBATCH} frames "
            f"= {b['grad_rate']:.1f} GFLOP/s ({b['grad_rate'] / b['rate']:.0%} of the matmul rate)"),
        row("its page faults and kernel CPU time per call",
            lambda r, b: f"{r['grad_faults']:,.0f} faults, {r['grad_sys_s'] * 1e3:.0f} ms"),
        row("the main job's whole update (one program per round), measured",
            lambda r, b: f"{r['update_s'] * 1e3:.0f} ms per {r['update_steps']:,} env steps "
            f"({r['update_steps'] / r['update_s']:.0f} SPS alone), {r['update_faults']:,.0f} faults, "
            f"{r['update_sys_s'] * 1e3:.0f} ms kernel"),
        row("actor forward, measured", lambda r, b: f"{r['actor_s'] * 1e3:.2f} ms per {INFERENCE_BATCH} frames"),
        row("**hardware bound** (best matmul rate / FLOPs per env step)",
            lambda r, b: f"**{b['hardware_sps']:.0f} SPS**"),
        row(f"learner alone at the measured speed ({EPOCHS} epochs)", lambda r, b: f"{b['learner_sps']:.0f} SPS"),
        row("learner + actor inference at the measured speeds, serial", lambda r, b: f"{b['compute_sps']:.0f} SPS"),
        "",
        _ALLOCATOR_NOTE.format(grad_share=bounds[columns[-1]]["grad_rate"] / bounds[columns[-1]]["rate"],
                               actor_share=bounds[columns[-1]]["actor_share"]) if compare == "allocator" else
        _LIBRARY_NOTE,
        "",
    ]
    with open(out, "w") as f:
        f.write("\n".join(lines))


_ALLOCATOR_NOTE = (
    "Compare the columns for what huge pages give: the page faults of a single value-and-gradient call and of the "
    "whole update, and the time each takes. With them the value and gradient does {grad_share:.0%} of the work per "
    "second that a matmul does on this CPU; the rest of the distance to the hardware bound is in how the "
    "convolutions run (their lowering: patch copies, layout changes, small matrices), not in the amount of work. The "
    "actors' inference adds {actor_share:.0%} to the serial time. Per layer and per form: `results/cnn_cpu.md`.")
_LIBRARY_NOTE = (
    "The columns differ only in XLA's flags that offer convolutions and dots to a library. Where a column's times "
    "equal the first one's, this jaxlib build did not use the library for these programs.")


def main(argv):
    del argv
    if _CHILD_OUT.value:
        prefer_memory_saving_cpu_schedule()  # the launchers' XLA flags, before the backend starts
        with open(_CHILD_OUT.value, "w") as f:
            json.dump(measure(_REPEATS.value), f)
        return
    start = time.perf_counter()
    out = _OUT.value
    if _COMPARE.value != "allocator" and not _OUT.present:
        out = f"benchmarks/results/{_COMPARE.value}_cpu.md"
    results = measure_in_children(_REPEATS.value, _COMPARE.value)
    write(results, out, time.perf_counter() - start, _COMPARE.value)
    print(open(out).read())


if __name__ == "__main__":
    app.run(main)
