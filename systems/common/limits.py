"""What this machine can hold, so a size flag beyond it is one `error:` line before anything is written, instead of a
MemoryError traceback (a replay buffer of 10^11 rows) or a fork storm (100,000 sampler processes).

Estimates, not guarantees: memory is the kernel's `MemAvailable` (what can be allocated without swapping), and a
worker process is counted at `PROCESS_BYTES`, about what one of Spreeze's forked samplers holds (JAX, EnvPool and a
policy copy)."""

from __future__ import annotations

import os

from envs.cores import usable_cores
from systems.common.config import ConfigError

PROCESS_BYTES = 300 * 2**20
PROCESSES_PER_CORE = 8  # beyond this, more processes only contend for the cores
MAX_THREADS = 1_024  # actor / learner threads of one process (PAL)


def available_memory_bytes() -> int:
    """`MemAvailable` from /proc/meminfo; the physical memory where that file is missing."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def gib(num_bytes: float) -> str:
    return f"{num_bytes / 2**40:.2f} TiB" if num_bytes >= 2**40 else f"{num_bytes / 2**30:.2f} GiB"


def require_memory(needed: int, what: str) -> None:
    """Raises ConfigError when `needed` bytes exceed the memory available now; `what` names the flag and its use,
    e.g. "--buffer_size=100,000,000,000 (the replay buffer)"."""
    available = available_memory_bytes()
    if needed > available:
        raise ConfigError(f"{what} needs {gib(needed)}, more than the {gib(available)} of memory this machine has "
                          "available")


def max_processes() -> int:
    """Worker processes this machine holds: `PROCESSES_PER_CORE` per core, and no more than fit in the available
    memory at `PROCESS_BYTES` each."""
    cores = usable_cores()
    return max(1, min(PROCESSES_PER_CORE * cores, available_memory_bytes() // PROCESS_BYTES))


def require_processes(count: int, flag: str) -> None:
    limit = max_processes()
    if count > limit:
        raise ConfigError(
            f"--{flag}={count:,} is more processes than this machine holds: at most {limit:,} ({usable_cores()} "
            f"cores x {PROCESSES_PER_CORE}, and {gib(available_memory_bytes())} available at about "
            f"{PROCESS_BYTES // 2**20} MiB each)")


def require_threads(count: int, flag: str) -> None:
    if count > MAX_THREADS:
        raise ConfigError(f"--{flag}={count:,} is above the limit of {MAX_THREADS:,} threads per process")
