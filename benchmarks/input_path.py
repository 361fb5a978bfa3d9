"""The three learner ideas issue 29 lists as untried, measured on the main job's Breakout minibatch (256 frames).

    PYTHONPATH=. python -m benchmarks.input_path [--repeats=30] [--out=benchmarks/results/input_path_cpu.md]

* Layer 1's space-to-depth on the uint8 frames before the float conversion, and the observation scaling folded into
  the first layer's kernel: the Nature CNN trunk's value and gradient (conv 8x8/4, 4x4/2, 3x3/1, dense 512; the
  CPU table's learner forms: `cm_space_to_depth`, `cm_space_to_depth`, `cm_slices`) in three variants that differ
  only in how layer 1's input is made: the network's own path (frames transposed, converted and scaled to [0, 1],
  then cut into 4x4 blocks), the blocks cut from the uint8 frames and converted after, with 1/255 folded into the
  block kernel, and the same scaling the converted blocks instead. The variants are called in turn, so a change of
  the machine's speed reaches all three alike; the outputs are checked against the network's path.
* Overlapping the next minibatch's gather with the current gradient: what there is to hide, the gather of 256
  frames from a 1,024-step round as the update does it (uint8), beside the value and gradient it would hide behind.

Run it alone: a second job on the cores slows every call."""

from __future__ import annotations

import datetime
import os
import statistics
import time

from absl import app, flags

from benchmarks.common import git_commit, timed
from systems.common import hardware
from systems.common.xla_flags import prefer_memory_saving_cpu_schedule

_REPEATS = flags.DEFINE_integer("repeats", 30, "Calls of each variant, in turn (medians and minima).")
_OUT = flags.DEFINE_string("out", "benchmarks/results/input_path_cpu.md", "Result file.")

MINIBATCH = 256
ROUND = 1024  # 8 envs x 128 steps
VARIANTS = ("the network's path: float frames cut into blocks",
            "uint8 frames cut into blocks, 1/255 folded into the kernel",
            "uint8 frames cut into blocks, the blocks scaled")


def _params(rng):
    import jax.numpy as jnp

    def normal(shape, scale):
        return jnp.asarray(rng.standard_normal(shape) * scale, jnp.float32)

    return dict(k1=normal((8, 8, 4, 32), 0.05), b1=jnp.zeros(32), k2=normal((4, 4, 32, 64), 0.05), b2=jnp.zeros(64),
                k3=normal((3, 3, 64, 64), 0.05), b3=jnp.zeros(64), wd=normal((64 * 7 * 7, 512), 0.01),
                bd=jnp.zeros(512))


def trunk(p, obs, variant: int):
    """The Nature CNN trunk, channels-major, on uint8 frames [B, 4, 84, 84]; `variant` indexes VARIANTS."""
    import jax
    import jax.numpy as jnp

    from agents import conv

    frames = jnp.transpose(obs, (1, 0, 2, 3))  # [C, B, H, W], uint8
    if variant == 0:
        x = conv.cm_space_to_depth(frames.astype(jnp.float32) / 255.0, p["k1"], 4)
    else:
        blocks = conv.cm_blocks(frames, 8, 4).astype(jnp.float32)
        kernel = conv.block_kernel(p["k1"], 4)
        x = conv.cm_slices(blocks, kernel / 255.0, 1) if variant == 1 else conv.cm_slices(blocks / 255.0, kernel, 1)
    x = jax.nn.relu(x + p["b1"][:, None, None, None])
    x = jax.nn.relu(conv.cm_space_to_depth(x, p["k2"], 2) + p["b2"][:, None, None, None])
    x = jax.nn.relu(conv.cm_slices(x, p["k3"], 1) + p["b3"][:, None, None, None])
    x = conv.from_channels_major(x).reshape(obs.shape[0], -1)
    return jax.nn.relu(x @ p["wd"] + p["bd"])


def measure(repeats: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    params = _params(rng)
    round_obs = jnp.asarray(rng.integers(0, 255, (ROUND, 4, 84, 84)), jnp.uint8)
    indices = jnp.asarray(rng.permutation(ROUND)[:MINIBATCH])
    obs = round_obs[indices]
    programs = [jax.jit(jax.value_and_grad(lambda p, o, v=v: jnp.sum(trunk(p, o, v) ** 2) * 1e-3))
                for v in range(len(VARIANTS))]
    outputs = [program(params, obs) for program in programs]  # each compiled and checked once
    errors = [max(float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-12))
                  for a, b in zip(jax.tree.leaves(output), jax.tree.leaves(outputs[0]), strict=True))
              for output in outputs]
    times: list[list[float]] = [[] for _ in programs]
    for _ in range(repeats):
        for program, spent in zip(programs, times, strict=True):
            start = time.perf_counter()
            jax.block_until_ready(program(params, obs))
            spent.append(time.perf_counter() - start)
    gather = jax.jit(lambda frames, i: frames[i])
    return dict(times=times, errors=errors, gather_s=timed(gather, round_obs, indices, repeats=repeats),
                load=os.getloadavg()[0])


def write(result: dict, out: str, wall: float) -> None:
    base = statistics.median(result["times"][0])
    lines = [
        "# Layer 1's input path and the minibatch gather of the main job's learner (issue 29's untried ideas)",
        "",
        f"- Machine: {hardware.describe(hardware.card())}.",
        f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC. Commit {git_commit()}. "
        f"Wall time {wall / 60:.1f} min. 1-minute load at the end: {result['load']:.1f}.",
        f"- Command: `PYTHONPATH=. python -m benchmarks.input_path --repeats={_REPEATS.value}"
        f"{f' --out={out}' if _OUT.present else ''}` (module docstring: what each row times).",
        "",
        "| Nature CNN trunk, value and gradient at 256 frames | median ms | min ms | against the network's path | "
        "largest relative difference |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, spent, error in zip(VARIANTS, result["times"], result["errors"], strict=True):
        median = statistics.median(spent)
        lines.append(f"| {name} | {1e3 * median:.1f} | {1e3 * min(spent):.1f} | {median / base:.3f}x | "
                     f"{error:.1e} |")
    lines += [
        "",
        f"The gather of one minibatch (256 of a round's 1,024 uint8 frames): {1e3 * result['gather_s']:.2f} ms, "
        f"{100 * result['gather_s'] / base:.1f}% of the value and gradient it would overlap with.",
        "",
    ]
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        f.write("\n".join(lines))


def main(argv):
    del argv
    prefer_memory_saving_cpu_schedule()  # the launchers' XLA flags, before the backend starts
    start = time.perf_counter()
    result = measure(_REPEATS.value)
    write(result, _OUT.value, time.perf_counter() - start)
    print(open(_OUT.value).read())


if __name__ == "__main__":
    app.run(main)
