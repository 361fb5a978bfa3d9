"""XLA settings the launchers apply before JAX starts its backend (XLA reads `XLA_FLAGS` once, at that moment).

XLA CPU's default scheduler favours concurrency over memory. On the unrolled convolutional PPO update
(`systems.common.learner.ppo_loop_plan`) it keeps every minibatch's input patches of the first convolution alive at
once, several times the memory the update needs otherwise. XLA's memory-minimizing scheduler
(`--xla_cpu_enable_concurrency_optimized_scheduler=false`) builds the same program with a fraction of the temporaries
at about the same speed (`benchmarks/presets.py` measures both). Passing the option through
`jax.jit(compiler_options=...)` does not change the schedule with jax 0.10, so it goes into `XLA_FLAGS`. The flag
only concerns the CPU backend; a user's own setting of it is kept.
"""

from __future__ import annotations

import os

CPU_SCHEDULER_OPTION = "xla_cpu_enable_concurrency_optimized_scheduler"


def prefer_memory_saving_cpu_schedule() -> None:
    """Adds `--xla_cpu_enable_concurrency_optimized_scheduler=false` to `XLA_FLAGS` unless already set there.

    Has no effect once JAX has initialised its backend in this process: call it before the first computation.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if CPU_SCHEDULER_OPTION not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --{CPU_SCHEDULER_OPTION}=false".strip()
