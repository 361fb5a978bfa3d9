"""Multi-host start-up: one process per host joins a `jax.distributed` job, then `jax.devices()` lists every
host's devices and a pmap collective (`pmean`, `ppermute`) spans all of them.

The one place that touches JAX's process-level settings. On CPU the cross-process collectives go through gloo
(`jax_cpu_collectives_implementation`), which is what the 2-process test on 127.0.0.1 uses; on GPU JAX picks NCCL.
Must run before anything else touches a JAX backend."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time

import jax
import numpy as np

from systems.common.config import ConfigError, first_line

_initialized = False


class JobDidNotStart(RuntimeError):
    """The multi-host job did not form within `--startup_timeout` (a missing peer, an unreachable coordinator) or
    JAX refused to join it; one line. The launchers exit 69 (sysexits.h EX_UNAVAILABLE) without finalizing: the
    thread still waiting inside JAX cannot be stopped."""


class PeerStopped(KeyboardInterrupt):
    """Another process of the job stopped (Ctrl-C, SIGTERM, a failure) and this one's collective with it failed: this
    process stops as after a Ctrl-C (newest checkpoint, exit 130), and the launcher's last line names the cause."""


def check_address(address: str) -> None:
    """HOST:PORT with a port in 1-65535 (JAX takes `nohostport` to an IndexError and `localhost:notaport` to a
    segmentation fault)."""
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--coordinator_address must be HOST:PORT with a port in 1-65535, got {address!r}")


def initialize(coordinator_address: str, num_processes: int, process_id: int, timeout_s: int = 120) -> None:
    """Joins the job (no-op for a single process), saying so on stderr first. Raises ConfigError (one line) on
    inconsistent flags and `JobDidNotStart` when the job has not formed after `timeout_s`. JAX's own timeout aborts
    the process (SIGABRT and a C++ stack trace) and its wait ignores Ctrl-C, so the join runs in a thread while
    the main thread waits, handling signals and the deadline; JAX's deadline is set past ours."""
    global _initialized
    if num_processes <= 1:
        if process_id != 0:
            raise ConfigError(f"--process_id={process_id} needs --num_processes > 1")
        if coordinator_address:
            raise ConfigError("--coordinator_address needs --num_processes > 1 (the processes in the job); without "
                              "it this process would train alone")
        return
    if not coordinator_address:
        raise ConfigError("--num_processes > 1 needs --coordinator_address=HOST:PORT (the address of process 0)")
    check_address(coordinator_address)
    if not 0 <= process_id < num_processes:
        raise ConfigError(f"--process_id must be in [0, {num_processes}), got {process_id}")
    if timeout_s < 1:
        raise ConfigError(f"--startup_timeout must be >= 1 second, got {timeout_s}")
    if _initialized:
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    sigterm = signal.getsignal(signal.SIGTERM)
    print(f"process {process_id} of {num_processes}: joining the job at {coordinator_address} (waiting up to "
          f"{timeout_s} s for every process, --startup_timeout)", file=sys.stderr, flush=True)
    _join_in_thread(coordinator_address, num_processes, process_id, timeout_s)
    if sigterm is not None and threading.current_thread() is threading.main_thread():
        # JAX's preemption notifier takes SIGTERM over (and the run went on to its end): give it back to the
        # launcher's handler, which checkpoints and exits 143 as in a single-process run.
        signal.signal(signal.SIGTERM, sigterm)
    _initialized = True


def _join_in_thread(coordinator_address: str, num_processes: int, process_id: int, timeout_s: int) -> None:
    errors: list[BaseException] = []

    def join() -> None:
        try:
            jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                                       process_id=process_id, initialization_timeout=timeout_s + 600)
        except BaseException as error:  # handed to the main thread
            errors.append(error)

    thread = threading.Thread(target=join, name="jax-distributed-initialize", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while thread.is_alive():  # short joins: Ctrl-C and SIGTERM reach the launcher's handlers while it waits
        if time.monotonic() >= deadline:
            who = ("the other processes did not all join" if process_id == 0
                   else f"the coordinator at {coordinator_address} (process 0) did not answer or a peer is missing")
            raise JobDidNotStart(f"the {num_processes}-process job did not start within {timeout_s} s: {who}; start "
                                 "every process with the same --coordinator_address and --num_processes, or raise "
                                 "--startup_timeout")
        thread.join(0.25)
    if errors:
        raise JobDidNotStart(f"could not join the {num_processes}-process job at {coordinator_address}: "
                             f"{first_line(errors[0])}")


def pmap_devices(devices: list) -> list | None:
    """`devices` for jax.pmap: the chosen local devices in a single process; None (every device of every process,
    so collectives span hosts) in a multi-process job, where an explicit local list keeps collectives local."""
    return None if jax.process_count() > 1 else devices


def check_same_start(start_round: int) -> None:
    """Multi-process: every process must start from the same round (their programs join the same collectives);
    ConfigError otherwise, e.g. `--resume` of process directories whose newest checkpoints differ."""
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    rounds = multihost_utils.process_allgather(np.int32(start_round))
    if len(set(rounds.tolist())) > 1:
        raise ConfigError(
            f"the processes start from different rounds {rounds.tolist()} (their newest checkpoints differ): resume "
            "every process directory from the same round"
        )


def agreed(value: int) -> int:
    """Process 0's `value` on every process of a multi-process job (one small collective); `value` alone otherwise.
    For choices that every process must make alike, such as how many rounds the next call of a program runs."""
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    return int(multihost_utils.broadcast_one_to_all(np.int32(value)))


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
