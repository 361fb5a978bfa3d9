"""The learner ideas issue 29 lists as untried, and matrix products in bfloat16, on the main job's Breakout minibatch.

    PYTHONPATH=. python -m benchmarks.input_path [--repeats=30] [--out=benchmarks/results/input_path_cpu.md]

* Layer 1's space-to-depth on the uint8 frames before the float conversion, and the observation scaling folded into
  the first layer's kernel: the Nature CNN trunk's value and gradient (conv 8x8/4, 4x4/2, 3x3/1, dense 512; the
  CPU table's learner forms: `cm_space_to_depth`, `cm_space_to_depth`, `cm_slices`) in three variants that differ
  only in how layer 1's input is made: the network's own path (frames transposed, converted and scaled to [0, 1],
  then cut into 4x4 blocks), the blocks cut from the uint8 frames and converted after, with 1/255 folded into the
  block kernel, and the same scaling the converted blocks instead.
* The network's path with every matrix product (the three convolutions' and the dense layer's, forward and
  gradient) in bfloat16 with float32 accumulation: on a CPU with AMX or AVX512-BF16, XLA hands a bfloat16 dot in
  row-major form (the left operand contracted on its last axis) to YNNPACK, several times the float32 rate; a dot in
  another form is converted to float32 instead. So the products are written in those forms (`_bf16_product`), and
  the patches stay float32 until the product (XLA CPU slices and stacks bfloat16 arrays slower than float32 ones).
  A departure from float32 training, measured here only.
* Overlapping the next minibatch's gather with the current gradient: what there is to hide, the gather of 256
  frames from a 1,024-step round as the update does it (uint8), beside the value and gradient it would hide behind.

Each variant's program runs the value and gradient over a round's four minibatches in one XLA loop, as the update
does (a lone call allocates its buffers afresh and pays ~54,000 page faults, `results/compute_bound_cpu.md`, that
the update's loop does not); times are per minibatch. The variants are called in turn, so a change of the machine's
speed reaches all of them alike; the outputs are checked against the network's path.

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
            "uint8 frames cut into blocks, the blocks scaled",
            "the network's path, matrix products in bfloat16")
BF16 = 3  # the variant whose products run in bfloat16


def _params(rng):
    import jax.numpy as jnp

    def normal(shape, scale):
        return jnp.asarray(rng.standard_normal(shape) * scale, jnp.float32)

    return dict(k1=normal((8, 8, 4, 32), 0.05), b1=jnp.zeros(32), k2=normal((4, 4, 32, 64), 0.05), b2=jnp.zeros(64),
                k3=normal((3, 3, 64, 64), 0.05), b3=jnp.zeros(64), wd=normal((64 * 7 * 7, 512), 0.01),
                bd=jnp.zeros(512))


def _materialized_t(x):
    """`x.T` copied to row-major (XLA folds a plain transpose into a product's form instead)."""
    import jax.numpy as jnp

    return jnp.flip(jnp.flip(x, 0).T, 1)


def _bf16_product(a, b):
    """`a @ b` ([M, K] x [K, N] -> float32 [M, N]) from bfloat16 operands, each of its three products (forward,
    gradients) in the row-major form XLA hands to YNNPACK: the left operand contracted on its last axis."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def product(x, y, contract_y: int):
        return lax.dot_general(x.astype(jnp.bfloat16), y.astype(jnp.bfloat16), (((1,), (contract_y,)), ((), ())),
                               preferred_element_type=jnp.float32)

    @jax.custom_vjp
    def f(a, b):
        return product(a, b, 0)

    def f_bwd(residuals, grad):
        a, b = residuals
        return product(grad, b, 1), product(_materialized_t(a), grad, 0)  # dA = g B^T, dB = A^T g

    f.defvjp(lambda a, b: (product(a, b, 0), (a, b)), f_bwd)
    return f(a, b)


def _cm_conv(x, kernel, stride: int, bf16: bool):
    """`conv.cm_space_to_depth` (stride > 1) or `conv.cm_slices`, with the product in bfloat16 if `bf16`."""
    from agents import conv

    if not bf16:
        return conv.cm_space_to_depth(x, kernel, stride) if stride > 1 else conv.cm_slices(x, kernel, 1)
    if stride > 1:
        x, kernel = conv.cm_blocks(x, kernel.shape[0], stride), conv.block_kernel(kernel, stride)
    k, _, channels, features = kernel.shape
    _, batch, height, width = x.shape
    matrix = kernel.reshape(k * k * channels, features)
    out = _bf16_product(_materialized_t(matrix), conv.cm_patches(x, k, 1))
    return out.reshape(features, batch, conv.out_size(height, k, 1), conv.out_size(width, k, 1))


def trunk(p, obs, variant: int):
    """The Nature CNN trunk, channels-major, on uint8 frames [B, 4, 84, 84]; `variant` indexes VARIANTS."""
    import jax
    import jax.numpy as jnp

    from agents import conv

    bf16 = variant == BF16
    frames = jnp.transpose(obs, (1, 0, 2, 3))  # [C, B, H, W], uint8
    if variant in (0, BF16):
        x = _cm_conv(frames.astype(jnp.float32) / 255.0, p["k1"], 4, bf16)
    else:
        blocks = conv.cm_blocks(frames, 8, 4).astype(jnp.float32)
        kernel = conv.block_kernel(p["k1"], 4)
        x = conv.cm_slices(blocks, kernel / 255.0, 1) if variant == 1 else conv.cm_slices(blocks / 255.0, kernel, 1)
    x = jax.nn.relu(x + p["b1"][:, None, None, None])
    x = jax.nn.relu(_cm_conv(x, p["k2"], 2, bf16) + p["b2"][:, None, None, None])
    x = jax.nn.relu(_cm_conv(x, p["k3"], 1, bf16) + p["b3"][:, None, None, None])
    x = conv.from_channels_major(x).reshape(obs.shape[0], -1)
    return jax.nn.relu((_bf16_product(x, p["wd"]) if bf16 else x @ p["wd"]) + p["bd"])


def round_program(variant: int):
    """The value and gradient over a round's minibatches in one XLA loop (as the update runs them): the loss summed
    and the gradients accumulated over `ROUND // MINIBATCH` minibatches of `MINIBATCH` frames."""
    import jax
    import jax.numpy as jnp

    grad_fn = jax.value_and_grad(lambda p, o: jnp.sum(trunk(p, o, variant) ** 2) * 1e-3)

    def run(params, round_obs, order):
        def step(total, indices):
            value, grads = grad_fn(params, round_obs[indices])
            return jax.tree.map(jnp.add, total, (value, grads)), None

        zero = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
        return jax.lax.scan(step, zero, order.reshape(ROUND // MINIBATCH, MINIBATCH))[0]

    return jax.jit(run)


def dot_rates(repeats: int) -> dict:
    """GFLOP/s of layer 2's forward product ([64, 512] x [512, 20,736], row-major) in float32 and in bfloat16."""
    import jax
    import jax.numpy as jnp

    rates = {}
    for dtype in (jnp.float32, jnp.bfloat16):
        a, b = jnp.ones((64, 512), dtype), jnp.ones((512, 20736), dtype)
        product = jax.jit(lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32))
        rates[jnp.dtype(dtype).name] = 2 * 64 * 512 * 20736 / timed(product, a, b, repeats=repeats) / 1e9
    return rates


def measure(repeats: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    params = _params(rng)
    round_obs = jnp.asarray(rng.integers(0, 255, (ROUND, 4, 84, 84)), jnp.uint8)
    order = jnp.asarray(rng.permutation(ROUND))
    programs = [round_program(v) for v in range(len(VARIANTS))]
    outputs = [program(params, round_obs, order) for program in programs]  # each compiled and checked once
    errors = [max(float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-12))
                  for a, b in zip(jax.tree.leaves(output), jax.tree.leaves(outputs[0]), strict=True))
              for output in outputs]
    times: list[list[float]] = [[] for _ in programs]
    for _ in range(repeats):
        for program, spent in zip(programs, times, strict=True):
            start = time.perf_counter()
            jax.block_until_ready(program(params, round_obs, order))
            spent.append((time.perf_counter() - start) / (ROUND // MINIBATCH))
    gather = jax.jit(lambda frames, i: frames[i])
    return dict(times=times, errors=errors, gather_s=timed(gather, round_obs, order[:MINIBATCH], repeats=repeats),
                dot_rates=dot_rates(repeats), load=os.getloadavg()[0])


def write(result: dict, out: str, wall: float) -> None:
    base = statistics.median(result["times"][0])
    lines = [
        "# Layer 1's input path, bfloat16 products and the minibatch gather of the main job's learner (issue 29)",
        "",
        f"- Machine: {hardware.describe(hardware.card())}.",
        f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC. Commit {git_commit()}. "
        f"Wall time {wall / 60:.1f} min. 1-minute load at the end: {result['load']:.1f}.",
        f"- Command: `PYTHONPATH=. python -m benchmarks.input_path --repeats={_REPEATS.value}"
        f"{f' --out={out}' if _OUT.present else ''}` (module docstring: what each row times).",
        "",
        "| Nature CNN trunk, value and gradient per 256-frame minibatch (a round's 4 in one loop) | median ms | "
        "min ms | against the network's path | "
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
        "Layer 2's forward product alone ([64, 512] x [512, 20,736], row-major): "
        + ", ".join(f"{name} {rate:.0f} GFLOP/s" for name, rate in result["dot_rates"].items()) + ".",
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
