"""Convolution plans chosen on the machine that runs them, as cuDNN's autotuner does.

`agents.networks.CPU_CONV_PLANS` were timed on one processor (`benchmarks/cnn_cpu.py`); on another (a Zen 3
without AVX-512) their gain is not the same. At the first run of an image task on a CPU, `choose_plan` times the
learner's value and gradient of the whole torso at the learner's batch under each candidate plan (the fixed table's,
XLA's own convolution, and the earlier space-to-depth plan) and keeps the fastest. Whole networks, not layers, are
timed: per-layer winners in different layouts did not add up to a fast network (the table's comment). The choice is
cached per processor model, JAX version, network, observation shape and batch in a small JSON file
(`~/.cache/htsrl/conv_plans.json`, or `$HTSRL_CONV_CACHE`; delete it to time again) and recorded in the run's
hardware card. The actors' small-batch forms are the table's in every candidate. Accelerators keep XLA's
convolution; the fixed table stays the fallback when timing fails (a plan that does not fit the machine's memory).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable

from agents import networks
from systems.common import atomic, hardware

# network name -> the ActorCritic torso of it
_TORSOS = {"nature": "nature_cnn", "gfootball": "gfootball_cnn", "ba3c": "ba3c"}
_chosen: dict[str, dict] = {}  # network -> what this process chose and why (the hardware card's "conv_plans")


def cache_path() -> str:
    return os.environ.get("HTSRL_CONV_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "htsrl",
                                                             "conv_plans.json")


def candidates(network: str) -> dict[str, networks.ConvPlan]:
    """The plans timed for `network`: the fixed table's first, then XLA's convolution (and, for the Nature and
    GFootball CNNs, the first layer as space-to-depth), each with the table's actor forms."""
    table = networks.CPU_CONV_PLANS[network]
    layers = len(table)
    plans = {"table": table, "direct": networks.uniform_conv_plan("direct", layers)}
    if network != "ba3c":
        plans["space_to_depth"] = networks.SPACE_TO_DEPTH_FIRST_PLAN
    return {name: tuple(networks.LayerForms(t.actor, p.forward, p.backward) for t, p in zip(table, plan, strict=True))
            for name, plan in plans.items()}


def _key(network: str, obs_shape: tuple, batch: int) -> str:
    import jax

    return (f"{hardware.cpu_model()} | jax {jax.__version__} | {network} | obs {'x'.join(map(str, obs_shape))} | "
            f"batch {batch}")


def time_value_and_grad(network: str, plan: networks.ConvPlan, obs_shape: tuple, batch: int,
                        repeats: int = 3) -> float:
    """Median seconds of the torso's value and gradient at `batch` frames under `plan` (compiled first)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    model = networks.ActorCritic(torso=_TORSOS[network], action_dim=4, continuous=False, conv_plan=plan)
    obs = jnp.asarray(np.random.default_rng(0).integers(0, 255, (batch, *obs_shape)), jnp.uint8)
    params = model.init(jax.random.PRNGKey(0), obs[:1])

    def loss(p, frames):  # the frames are an argument: a closed-over batch would be constant-folded by XLA
        logits, value = model.apply(p, frames)
        return jnp.sum(logits) + jnp.sum(value)

    step = jax.jit(jax.value_and_grad(loss))
    jax.block_until_ready(step(params, obs))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(step(params, obs))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def choose_plan(network: str, obs_shape: tuple, batch: int, *,
                timer: Callable[[str, networks.ConvPlan], float] | None = None,
                say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> networks.ConvPlan:
    """The plan of `network` for a learner batch of `batch` frames on this machine: cached, else timed (`timer(name,
    plan)` -> seconds; default `time_value_and_grad`) and cached. Not a CPU: XLA's convolution, untimed."""
    import jax

    if jax.default_backend() != "cpu":
        plan = networks.default_conv_plan(network)
        _chosen[network] = {"plan": "direct", "source": f"{jax.default_backend()} backend (XLA's convolution)"}
        return plan
    plans = candidates(network)
    key, path = _key(network, tuple(obs_shape), batch), cache_path()
    cached = _read(path).get(key)
    if cached and cached.get("plan") in plans:
        _chosen[network] = {**cached, "source": f"cached in {path}"}
        return plans[cached["plan"]]
    timer = timer or (lambda name, plan: time_value_and_grad(network, plan, tuple(obs_shape), batch))
    say(f"[conv] timing {len(plans)} convolution plans of the {network} network at {batch} frames on this machine "
        f"(once; cached in {path})")
    seconds = {}
    for name, plan in plans.items():
        try:
            seconds[name] = float(timer(name, plan))
        except (RuntimeError, MemoryError, ValueError) as error:  # e.g. XLA out of memory: that plan is out
            say(f"[conv] plan '{name}' failed ({str(error).splitlines()[0][:120]}); skipped")
    if not seconds:
        _chosen[network] = {"plan": "table", "source": "every timing failed: the fixed table"}
        return plans["table"]
    best = min(seconds, key=seconds.get)
    record = {"plan": best, "ms": {name: round(s * 1e3, 2) for name, s in seconds.items()}, "batch": batch}
    say("[conv] " + ", ".join(f"{name} {ms:.0f} ms" for name, ms in record["ms"].items()) + f": using '{best}'")
    _write(path, key, record)
    _chosen[network] = {**record, "source": "timed on this machine"}
    return plans[best]


def tuning_enabled() -> bool:
    """`$HTSRL_CONV_TUNING=off` (or 0 / false) keeps the fixed table (the test suite sets it: its many small runs
    would each time the plans of their own batch)."""
    return os.environ.get("HTSRL_CONV_TUNING", "on").strip().lower() not in ("off", "0", "false", "no")


def plan_for(torso: str, obs_shape: tuple, batch: int, choice: str = "auto",
             say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> networks.ConvPlan | None:
    """The convolution plan of a run's `torso` at a learner batch of `batch` frames under `--conv_plan=choice`:
    None (the backend's default) for the MLP; `table` / `xla` the fixed table's or XLA's own convolution (with the
    table's actor forms), said and recorded; `auto` the backend's default with tuning off or in a multi-process job
    (every process must run the same plan, so that the replicas agree bit for bit: an explicit choice is the same
    in every process), else `choose_plan`."""
    import jax

    network = networks.torso_network(torso)
    if network is None:
        return None
    if choice != "auto":
        name = {"table": "table", "xla": "direct"}[choice]
        _chosen[network] = {"plan": name, "source": f"--conv_plan={choice}"}
        say(f"[conv] --conv_plan={choice}: the {network} network's learner runs the '{name}' plan")
        return candidates(network)[name]
    if not tuning_enabled() or jax.process_count() > 1:
        return None
    return choose_plan(network, obs_shape, batch, say=say)


def with_plan(network, obs_shape: tuple, batch: int, choice: str = "auto"):
    """`network` (an `agents.networks.ActorCritic`) running the convolution plan `plan_for` picks for its torso (on
    its packed image, where the observation packs one)."""
    plan = plan_for(network.torso, network.image_shape or obs_shape, batch, choice)
    return network if plan is None else network.clone(conv_plan=plan)


def chosen() -> dict:
    """{network: {plan, source, ms?}} of the plans this process chose (for the hardware card)."""
    return dict(_chosen)


def _read(path: str) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write(path: str, key: str, record: dict) -> None:
    """Adds `key` to the cache file atomically; a cache that cannot be written is only said, never fatal."""
    data = _read(path)
    data[key] = record
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic.write_atomic(path, json.dumps(data, indent=1, sort_keys=True))
    except OSError as error:
        print(f"[conv] could not cache the choice in {path}: {error}", file=sys.stderr)
