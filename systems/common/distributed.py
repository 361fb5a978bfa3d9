"""Multi-host start-up: one process per host joins a `jax.distributed` job, then `jax.devices()` lists every
host's devices and a pmap collective (`pmean`, `ppermute`) spans all of them.

The one place that touches JAX's process-level settings. On CPU the cross-process collectives go through gloo
(`jax_cpu_collectives_implementation`), which is what the 2-process test on 127.0.0.1 uses; on GPU JAX picks NCCL.
Must run before anything else touches a JAX backend."""

from __future__ import annotations

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
    jax.distributed.initialize(
        coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id
    )
    _initialized = True


def pmap_devices(devices: list) -> list | None:
    """`devices` for jax.pmap: the chosen local devices in a single process; None (every device of every process,
    so collectives span hosts) in a multi-process job, where an explicit local list keeps collectives local."""
    return None if jax.process_count() > 1 else devices
