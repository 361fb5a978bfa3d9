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

Writes `results/compute_bound_cpu.md`. Run it alone: a second job on the cores lowers every rate it measures.
"""

from __future__ import annotations

import datetime
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from agents import networks
from benchmarks.common import git_commit, timed
from systems.common import conv_tuning, hardware

_REPEATS = flags.DEFINE_integer("repeats", 7, "Timed calls per program (median).")
_OUT = flags.DEFINE_string("out", "benchmarks/results/compute_bound_cpu.md", "Result file.")

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
    result["load"] = os.getloadavg()[0]
    return result


def _per_frame(flops: float | None, frames: int) -> str:
    return f"{flops / frames / 1e6:.1f}" if flops else "n/a"


def write(r: dict, out: str, wall: float) -> None:
    rate = max(r["matmul"].values())
    per_step = EPOCHS * r["hand_grad"] + r["hand_forward"]
    hardware_sps = rate * 1e9 / per_step
    learner_sps = MINIBATCH / (EPOCHS * r["grad_s"])
    compute_sps = 1.0 / (EPOCHS * r["grad_s"] / MINIBATCH + r["actor_s"] / INFERENCE_BATCH)
    grad_rate = r["hand_grad"] * MINIBATCH / r["grad_s"] / 1e9
    lines = [
        "# The main job's Breakout learner against this CPU's compute bound (issue 29)",
        "",
        f"- Machine: {hardware.describe(hardware.card())}.",
        f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC. Commit {git_commit()}. "
        f"Wall time {wall / 60:.1f} min. 1-minute load at the end: {r['load']:.1f}.",
        "- Command: `PYTHONPATH=. python -m benchmarks.compute_bound` (module docstring: what each row counts).",
        f"- Convolution plan: {r['plan'].get('plan')} ({r['plan'].get('source')}).",
        "",
        "## Work per frame (Nature CNN, Breakout's 4 actions)",
        "",
        "| program | hand count MFLOP / frame | XLA's count MFLOP / frame |",
        "| --- | ---: | ---: |",
        f"| actor forward (batch {INFERENCE_BATCH}) | {r['hand_forward'] / 1e6:.1f} | "
        f"{_per_frame(r['xla_forward'], INFERENCE_BATCH)} |",
        f"| learner value and gradient (batch {MINIBATCH}) | {r['hand_grad'] / 1e6:.1f} | "
        f"{_per_frame(r['xla_grad'], MINIBATCH)} |",
        f"| one env step ({EPOCHS} epochs + 1 forward) | {per_step / 1e6:.1f} | |",
        "",
        "## Rates and bounds",
        "",
        "| quantity | value |",
        "| --- | ---: |",
        *(f"| float32 matmul {n}x{n} | {v:.1f} GFLOP/s |" for n, v in r["matmul"].items()),
        f"| learner value and gradient, measured | {r['grad_s'] * 1e3:.1f} ms per {MINIBATCH} frames = "
        f"{grad_rate:.1f} GFLOP/s ({grad_rate / rate:.0%} of the matmul rate) |",
        f"| actor forward, measured | {r['actor_s'] * 1e3:.2f} ms per {INFERENCE_BATCH} frames |",
        f"| **hardware bound** (best matmul rate / FLOPs per env step) | **{hardware_sps:.0f} SPS** |",
        f"| learner alone at the measured speed ({EPOCHS} epochs) | {learner_sps:.0f} SPS |",
        f"| learner + actor inference at the measured speeds, serial | {compute_sps:.0f} SPS |",
        "",
        f"The learner's value and gradient does {grad_rate / rate:.0%} of the work per second that a matmul does on "
        "this CPU, so the distance to the hardware bound is in how the convolutions run (their lowering: patch "
        "copies, layout changes, small matrices), not in the amount of work; the actors' inference adds "
        f"{r['actor_s'] / INFERENCE_BATCH / (EPOCHS * r['grad_s'] / MINIBATCH + r['actor_s'] / INFERENCE_BATCH):.0%} "
        "to the serial time. Per layer and per form: `results/cnn_cpu.md`.",
        "",
    ]
    with open(out, "w") as f:
        f.write("\n".join(lines))


def main(argv):
    del argv
    start = time.perf_counter()
    result = measure(_REPEATS.value)
    write(result, _OUT.value, time.perf_counter() - start)
    print(open(_OUT.value).read())


if __name__ == "__main__":
    app.run(main)
