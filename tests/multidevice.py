"""Runs a piece of Python in a fresh interpreter with N forced XLA CPU devices.

The device count of the host platform is fixed when JAX starts (`--xla_force_host_platform_device_count`), so every
test that needs several devices runs its code here, in its own process, from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def device_env(num_devices: int) -> dict:
    """Environment for a child process that sees `num_devices` CPU devices and imports the repository."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={num_devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_python(code: str, num_devices: int, timeout: float = 600.0) -> str:
    """Runs `code` (dedented) with `num_devices` CPU devices; returns stdout, fails with the child's output."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=device_env(num_devices),
        capture_output=True, text=True, timeout=timeout,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"child process failed (exit {result.returncode})\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
        )
    return result.stdout
