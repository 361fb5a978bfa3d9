"""Fault-injection helpers shared by the reliability tests (tests/integration/test_reliability.py,
tests/launch/test_sweep.py, and the video write failures of tests/systems/common/test_video.py and
tests/launch/test_evaluate.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

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


def wait_for_checkpoints(run_dir: str, proc: subprocess.Popen | None = None, count: int = 1,
                         timeout: float = 120) -> None:
    """Returns once `run_dir` holds `count` checkpoints; fails if `proc` (the run, if given) exits first or none
    appears within `timeout` s (with the run's stderr when it was piped)."""
    from systems.common.checkpoint import list_checkpoints

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (proc is None or proc.poll() is None):
        if len(list_checkpoints(run_dir)) >= count:
            return
        time.sleep(0.1)
    err = proc.stderr.read()[-2000:] if proc is not None and proc.stderr is not None else ""
    raise AssertionError(f"no checkpoint appeared (exit {None if proc is None else proc.poll()}): {err}")


def failing_ffmpeg(directory) -> str:
    """The path of a stand-in ffmpeg (for IMAGEIO_FFMPEG_EXE) that answers `-version` and fails every encode at
    once, as ffmpeg does on a full disk."""
    path = os.path.join(str(directory), "ffmpeg")
    with open(path, "w") as f:
        f.write('#!/bin/sh\nfor a in "$@"; do [ "$a" = "-version" ] && echo "ffmpeg version 6.0" && exit 0; done\n'
                "exit 1\n")
    os.chmod(path, 0o755)
    return path
