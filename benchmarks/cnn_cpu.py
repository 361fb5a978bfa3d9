"""The Atari and GFootball CNNs on XLA CPU, layer by layer and form by form: which exact formulation of each
convolution (`agents.conv`) is fastest for the actors' forward pass and for the learner's forward+backward pass, and
the whole networks (Nature CNN, GFootball CNN, BA3C's network) against the same networks in PyTorch (the peer, from a
benchmark-only virtual environment).

    PYTHONPATH=. python -m benchmarks.cnn_cpu [--torch_python=/tmp/torch-venv/bin/python] [--repeats=7]

Sizes are the HTS-PPO Atari defaults: the actors' forward pass at the inference batch (8 envs / 2 = 4 frames) and the
learner's forward+backward at the PPO minibatch (8 envs x 128 steps / 4 = 256 frames). Times are medians of
`--repeats` calls of one jitted function, after two warm-up calls (compilation excluded). Per layer the forward
rows time `conv(x)` alone; the forward+backward rows time the value and gradient of `sum(conv(x) * cotangent)` with
respect to the kernel (the first layer: its input is data) and the input (the others). GFLOPS counts the
convolution's multiply-adds x 2 (x 3 with the backward pass's two products). Writes `results/cnn_cpu.md` and
`results/cnn_cpu.csv`.

The PyTorch peer (`--torch_python`, a venv with `pip install torch==2.13.0`): CleanRL's `ppo_atari_envpool.py`
network (Conv 32 8x8/4, 64 4x4/2, 64 3x3/1, Linear 3136 -> 512, policy and value heads), NCHW float input, 2 threads,
the same batch sizes and the same median; run as a child process (`benchmarks/cnn_torch_peer.py`).
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import subprocess
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from agents import conv as conv_lib
from agents import networks
from benchmarks.common import die_with_parent, git_commit, machine, timed

_REPEATS = flags.DEFINE_integer("repeats", 7, "Timed calls per row (median).")
_TORCH = flags.DEFINE_string("torch_python", "/tmp/torch-venv/bin/python", "Python with torch for the peer rows "
                             "('' skips them).")
_OUT = flags.DEFINE_string("out", "benchmarks/results/cnn_cpu", "Result files prefix (.md, .csv).")
_LAYERS_FROM = flags.DEFINE_string("layers_from", "", "Reuse the per-layer rows of this CSV (an earlier run's) and "
                                   "measure only the whole networks.")

ACTOR_BATCH = 4
LEARNER_BATCH = 256
# (network, layer, input [H, W, C], features, kernel, stride)
LAYERS = (
    ("nature", "conv1", (84, 84, 4), 32, 8, 4),
    ("nature", "conv2", (20, 20, 32), 64, 4, 2),
    ("nature", "conv3", (9, 9, 64), 64, 3, 1),
    ("gfootball", "conv1", (72, 96, 4), 32, 8, 4),
    ("gfootball", "conv2", (17, 23, 32), 64, 4, 2),
    ("gfootball", "conv3", (7, 10, 64), 64, 3, 1),
)


# Forms whose gradients are tried under each other's forward passes (the others only with their own gradient: they
# were the slowest in both directions on this machine).
MIXED = {False: ("direct", "slices", "space_to_depth", "shift_add"), True: ("cm_slices", "cm_space_to_depth")}


def _forms(kernel: int, stride: int) -> tuple[str, ...]:
    return tuple(f for f in conv_lib.FORMS if f not in conv_lib.STRIDE_DIVIDES_KERNEL or kernel % stride == 0)


def _pairs(forms: tuple[str, ...]) -> list[tuple[str, str]]:
    """(forward, backward) pairs to time: every form with its own gradient, and the MIXED forms of one layout with
    each other's."""
    pairs = [(f, f) for f in forms]
    for cm, mixed in MIXED.items():
        usable = [f for f in mixed if f in forms]
        pairs += [(f, b) for f in usable for b in usable if f != b and conv_lib.channels_major(f) == cm]
    return pairs


def _layout(x, form: str):
    """NHWC `x` in the layout `form` takes."""
    return conv_lib.to_channels_major(x) if conv_lib.channels_major(form) else x


def forward_seconds(x, kernel, bias, stride: int, form: str, repeats: int) -> float:
    fn = jax.jit(lambda x, kernel: conv_lib.conv(x, kernel, bias, stride, forward=form))
    return timed(fn, x, kernel, repeats=repeats)


def gradient_seconds(x, kernel, bias, stride: int, cotangent, forward: str, backward: str, input_grad: bool,
                     repeats: int) -> float:
    def loss(x, kernel):
        return jnp.sum(conv_lib.conv(x, kernel, bias, stride, forward=forward, backward=backward) * cotangent)

    fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1) if input_grad else (1,)))
    return timed(fn, x, kernel, repeats=repeats)


def layer_rows(repeats: int) -> list[dict]:
    rows = []
    key = jax.random.PRNGKey(0)
    for network, layer, (height, width, channels), features, k, stride in LAYERS:
        kernel = jax.random.normal(key, (k, k, channels, features)) * 0.05
        bias = jnp.zeros(features)
        oh, ow = conv_lib.out_size(height, k, stride), conv_lib.out_size(width, k, stride)
        flops = 2 * oh * ow * k * k * channels * features
        forms = _forms(k, stride)
        common = dict(network=network, layer=layer)
        x = jax.random.uniform(key, (ACTOR_BATCH, height, width, channels))
        for form in forms:
            seconds = forward_seconds(_layout(x, form), kernel, bias, stride, form, repeats)
            rows.append(dict(common, direction="forward", batch=ACTOR_BATCH, forward=form, backward="",
                             ms=1e3 * seconds, gflops=flops * ACTOR_BATCH / seconds / 1e9))
        x = jax.random.uniform(key, (LEARNER_BATCH, height, width, channels))
        cotangent = jax.random.normal(key, (LEARNER_BATCH, oh, ow, features))
        input_grad = layer != "conv1"  # the first layer's input is data
        for forward, backward in _pairs(forms):
            seconds = gradient_seconds(_layout(x, forward), kernel, bias, stride, _layout(cotangent, forward), forward,
                                       backward, input_grad, repeats)
            rows.append(dict(common, direction="forward+backward", batch=LEARNER_BATCH, forward=forward,
                             backward=backward, ms=1e3 * seconds,
                             gflops=(3 if input_grad else 2) * flops * LEARNER_BATCH / seconds / 1e9))
        print(f"  {network} {layer}: done", flush=True)
    return rows


def read_layer_rows(path: str) -> list[dict]:
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row.update(batch=int(row["batch"]), ms=float(row["ms"]), gflops=float(row["gflops"]))
    return rows


def best_plan(rows: list[dict], network: str, channels_major: bool | None = None) -> networks.ConvPlan:
    """Per layer, the fastest forward form at the actor batch and the fastest (forward, backward) pair at the learner
    batch, each regime in the one layout whose per-layer times add up to less (or in the given layout)."""
    mine = [r for r in rows if r["network"] == network]

    def fastest(direction: str, cm: bool) -> list[dict]:
        return [min((r for r in mine if r["layer"] == layer and r["direction"] == direction
                     and conv_lib.channels_major(r["forward"]) == cm), key=lambda r: r["ms"])
                for layer in ("conv1", "conv2", "conv3")]

    def regime(direction: str) -> list[dict]:
        if channels_major is not None:
            return fastest(direction, channels_major)
        return min((fastest(direction, cm) for cm in (False, True)), key=lambda best: sum(r["ms"] for r in best))

    actor, learner = regime("forward"), regime("forward+backward")
    return tuple(networks.LayerForms(a["forward"], lr["forward"], lr["backward"] or lr["forward"])
                 for a, lr in zip(actor, learner, strict=True))


def describe_plan(plan: networks.ConvPlan) -> str:
    """conv1 actor/forward/backward, ... as one short string."""
    return ", ".join(f"conv{i + 1} {f.actor}/{f.forward}/{f.backward}" for i, f in enumerate(plan))


def network_seconds(model, shape: tuple, repeats: int) -> dict:
    """Actor forward, learner forward and learner value+gradient of one `networks.ActorCritic`."""
    obs_actor = jnp.asarray(np.random.default_rng(0).integers(0, 255, (ACTOR_BATCH, *shape)), jnp.uint8)
    obs_learner = jnp.asarray(np.random.default_rng(1).integers(0, 255, (LEARNER_BATCH, *shape)), jnp.uint8)
    params = model.init(jax.random.PRNGKey(0), obs_actor)
    forward = jax.jit(model.apply)

    def loss(params, obs):
        logits, value = model.apply(params, obs)
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0]) + jnp.sum(value**2)

    grad = jax.jit(jax.value_and_grad(loss))
    return dict(actor_forward_ms=1e3 * timed(forward, params, obs_actor, repeats=repeats),
                learner_forward_ms=1e3 * timed(forward, params, obs_learner, repeats=repeats),
                learner_grad_ms=1e3 * timed(grad, params, obs_learner, repeats=repeats))


def network_rows(plans: dict, repeats: int) -> list[dict]:
    """Whole torsos + heads (`networks.ActorCritic`, 6 actions) under each conv plan."""
    rows = []
    for network, torso, shape in (("nature", "nature_cnn", networks.NATURE_CNN_OBS_SHAPE),
                                  ("gfootball", "gfootball_cnn", networks.GFOOTBALL_SMM_OBS_SHAPE),
                                  ("ba3c", "ba3c", networks.NATURE_CNN_OBS_SHAPE)):
        for name, plan in plans[network].items():
            model = networks.ActorCritic(torso=torso, action_dim=6, continuous=False, conv_plan=plan)
            rows.append(dict(network=network, plan=name, **network_seconds(model, shape, repeats)))
            print(f"  {network} {name}: {rows[-1]}", flush=True)
    return rows


def torch_rows(python: str, repeats: int) -> list[dict]:
    if not python or not os.path.exists(python):
        return []
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cnn_torch_peer.py")
    done = subprocess.run([python, script, str(ACTOR_BATCH), str(LEARNER_BATCH), str(repeats)], capture_output=True,
                          text=True, timeout=1800, check=True, preexec_fn=die_with_parent)
    return json.loads(done.stdout.strip().splitlines()[-1])


def write(rows: list[dict], nets: list[dict], peer: list[dict], plans: dict, out: str, wall: float) -> None:
    with open(out + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        "# The Atari and GFootball CNNs on XLA CPU: convolution forms, layer by layer", "",
        f"- Machine: {machine()} (no GPU). Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC. "
        f"JAX {jax.__version__}. Commit {git_commit()}. Wall time {wall / 60:.1f} min."
        + (f" Per-layer rows from an earlier run (`{_LAYERS_FROM.value}`), whole networks measured now."
           if _LAYERS_FROM.value else ""),
        "- Command: `PYTHONPATH=. python -m benchmarks.cnn_cpu` (from the repository root).",
        f"- Medians of {_REPEATS.value} calls after 2 warm-up calls. Actor forward at batch {ACTOR_BATCH} (HTS "
        f"inference batch), learner forward+backward at batch {LEARNER_BATCH} (PPO minibatch). See the module "
        "docstring for what each row times.", "",
        "## Whole networks (ActorCritic: torso, policy and value heads; uint8 observations)", "",
        "| network | plan | actor forward ms | learner forward ms | learner forward+backward ms |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for r in nets + peer:
        lines.append(f"| {r['network']} | {r['plan']} | {r['actor_forward_ms']:.2f} | {r['learner_forward_ms']:.1f} | "
                     f"{r['learner_grad_ms']:.1f} |")
    lines += ["", "Plans (per layer: actor forward / learner forward / learner backward form):", ""]
    lines += [f"- {network}, {name}: {describe_plan(plan)}" for network, named in plans.items()
              for name, plan in named.items()]
    lines += ["",
              "## Layers", "", "| network | layer | direction | batch | forward form | backward form | ms | GFLOPS |",
              "| --- | --- | --- | ---: | --- | --- | ---: | ---: |"]
    for r in rows:
        backward = "" if r["direction"] == "forward" else ("(same)" if r["backward"] == r["forward"] else r["backward"])
        lines.append(f"| {r['network']} | {r['layer']} | {r['direction']} | {r['batch']} | {r['forward']} | "
                     f"{backward} | {r['ms']:.2f} | {r['gflops']:.0f} |")
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv):
    del argv
    start = time.perf_counter()
    rows = read_layer_rows(_LAYERS_FROM.value) if _LAYERS_FROM.value else layer_rows(_REPEATS.value)
    plans = {}
    for network in ("nature", "gfootball"):
        plans[network] = {"direct (nn.Conv)": networks.uniform_conv_plan("direct"),
                          "before (space_to_depth conv1)": networks.SPACE_TO_DEPTH_FIRST_PLAN,
                          "fastest NHWC per layer": best_plan(rows, network, channels_major=False),
                          "fastest channels-major per layer": best_plan(rows, network, channels_major=True),
                          "fastest per layer": best_plan(rows, network),
                          "default on CPU": networks.CPU_CONV_PLANS[network]}
    # BA3C (seed 001): stride-1 SAME convolutions between max pools, no per-layer search; XLA's convolution against
    # channels-major im2col in the learner, and NHWC im2col.
    plans["ba3c"] = {"direct (nn.Conv)": networks.uniform_conv_plan("direct", layers=4),
                     "channels-major learner": (networks.LayerForms("direct", "cm_slices", "cm_slices"),) * 4,
                     "NHWC slices learner": (networks.LayerForms("direct", "slices", "slices"),) * 4,
                     "XLA forward, slices gradient": (networks.LayerForms("direct", "direct", "slices"),) * 4,
                     "default on CPU": networks.CPU_CONV_PLANS["ba3c"]}
    nets = network_rows(plans, _REPEATS.value)
    peer = torch_rows(_TORCH.value, _REPEATS.value)
    write(rows, nets, peer, plans, _OUT.value, time.perf_counter() - start)
    print(f"written: {_OUT.value}.md", flush=True)


if __name__ == "__main__":
    app.run(main)
