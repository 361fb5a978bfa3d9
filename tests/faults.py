"""Fault-injection helpers shared by the reliability tests (tests/test_reliability.py, tests/test_sweep.py)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_run_dir_holder(run_dir: str) -> subprocess.Popen:
    """A process that claims `run_dir` (as a run does: `systems.common.rundir.claim`) and sleeps; returns once it
    holds the lock. Kill it (SIGKILL is fine: the kernel releases the lock)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; from systems.common import rundir, config as c; "
         f"rundir.claim({run_dir!r}, c.TrainConfig(env_id='CartPole-v1')); print('held', flush=True); time.sleep(300)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    if holder.stdout.readline().strip() != "held":
        holder.kill()
        raise AssertionError(f"the holder of {run_dir} did not start (exit {holder.wait()})")
    return holder
