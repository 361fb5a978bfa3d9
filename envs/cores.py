"""The CPU cores a process may run on, which sizes the env workers (EnvPool's threads, a Gymnasium pool's
processes) and the layout rule's many-core branch."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """Cores this process may run on: its affinity mask, which is a container's, a Slurm allocation's or taskset's
    limit, not the host's core count (`os.cpu_count()`); more env workers than these only time-share them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
