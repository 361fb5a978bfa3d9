"""Multi-host start-up: one process per host joins a `jax.distributed` job, then `jax.devices()` lists every
host's devices and a pmap collective (`pmean`, `ppermute`) spans all of them.

The one place that touches JAX's process-level settings. On CPU the cross-process collectives go through gloo
(`jax_cpu_collectives_implementation`), which is what the 2-process test on 127.0.0.1 uses; on GPU JAX picks NCCL.
Must run before anything else touches a JAX backend."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading

import jax

from systems.common.config import ConfigError

_initialized = False


def initialize(coordinator_address: str, num_processes: int, process_id: int) -> None:
    """Joins the job (no-op for a single process). Raises ConfigError (one line) on inconsistent flags."""
    global _initialized
    if num_processes <= 1:
        if process_id != 0:
            raise ConfigError(f"--process_id={process_id} needs --num_processes > 1")
        return
    if not coordinator_address:
        raise ConfigError("--num_processes > 1 needs --coordinator_address=HOST:PORT (the address of process 0)")
    if not 0 <= process_id < num_processes:
        raise ConfigError(f"--process_id must be in [0, {num_processes}), got {process_id}")
    if _initialized:
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    sigterm = signal.getsignal(signal.SIGTERM)
    jax.distributed.initialize(
        coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id
    )
    if sigterm is not None and threading.current_thread() is threading.main_thread():
        # JAX's preemption notifier takes SIGTERM over (and the run went on to its end): give it back to the
        # launcher's handler, which checkpoints and exits 143 as in a single-process run.
        signal.signal(signal.SIGTERM, sigterm)
    _initialized = True


def pmap_devices(devices: list) -> list | None:
    """`devices` for jax.pmap: the chosen local devices in a single process; None (every device of every process,
    so collectives span hosts) in a multi-process job, where an explicit local list keeps collectives local."""
    return None if jax.process_count() > 1 else devices


def per_process_config(config):
    """`config` as process p of a multi-process job runs it: process 0 owns the run directory and the evaluations;
    process p > 0 writes `<logdir>/process-<p>` (its own checkpoints and progress), evaluates nothing and prints
    nothing. Unchanged in a single-process run."""
    process = jax.process_index()
    if process == 0:
        return config
    run_dir = os.path.join(config.logdir or "runs", f"process-{process}")
    values = dict(logdir=run_dir, eval_episodes=0, quiet=True)
    if hasattr(config, "track"):
        values["track"] = False  # one W&B run per job: process 0's
    return dataclasses.replace(config, **values)


def make_replica_check(devices: list | None, axis_name: str):
    """A pmap over `devices` (`pmap_devices`) taking replicated params -> the largest pmax - pmin over every leaf
    and every replica: 0.0 exactly when the replicas hold bit-identical parameters (`--debug`)."""

    def spread(params):
        leaves = jax.tree_util.tree_leaves(params)
        gaps = [jax.numpy.max(jax.lax.pmax(x, axis_name) - jax.lax.pmin(x, axis_name)) for x in leaves]
        return jax.numpy.max(jax.numpy.stack(gaps))

    return jax.pmap(spread, axis_name=axis_name, devices=devices)
