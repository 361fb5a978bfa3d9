"""Shared test setup: absl flags marked parsed (so launchers' `main` can run under flagsaver) and
one JAX persistent compilation cache for the whole session.

The cache: many tests start a launcher in a fresh process, and each compiled the same network initializer, policy
and update again (a tiny HTS CartPole run: 17 s cold, 13 s with the programs cached). The directory is set before
JAX starts, so this process and every child inherit it, is empty at the start of each session (so a session
measures cold compiles once) and is removed at its end. Cached executables are the same programs: bit-identity
tests compare like with like. Tests that inspect compilation itself turn it off in their own process."""

import atexit
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from absl import flags  # noqa: E402

flags.FLAGS.mark_as_parsed()

if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _CACHE_DIR = tempfile.mkdtemp(prefix="jax-test-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE_DIR
    # Every program: a tiny run compiles ~24 of ~0.1 s each, which a threshold of 0.3 s never cached.
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)


# XLA compiles quickly rather than well (`multidevice.QUICK_COMPILE_FLAGS`): LLVM at `-O0` and, on recent jaxlib,
# the elemental emitter for fused loops. The HLO programs, their fusions and buffers, and the Eigen / oneDNN kernels
# of dots and convolutions are the same; only the machine code of the fused loops is less optimized. Most test
# programs run for a few steps, so compiling them dominated (measured in benchmarks/results/test_suite_cpu.md). XLA's
# own convolution runs 15x slower at -O0: such a test runs in a child process with
# `multidevice.run_python(optimized=True)`. Runs, benchmarks and fingerprints outside the tests keep XLA's defaults;
# a user's own setting of any of these flags is kept.
from tests.multidevice import QUICK_COMPILE_FLAGS  # noqa: E402

_xla_flags = os.environ.get("XLA_FLAGS", "")
os.environ["XLA_FLAGS"] = " ".join(
    [_xla_flags] + [f"--{name}={value}" for name, value in QUICK_COMPILE_FLAGS.items() if name not in _xla_flags]
).strip()

# The convolution plans of image tasks stay the fixed table's (`systems.common.conv_tuning`): timing them at every
# small batch the tests use would add minutes; tests/systems/common/test_conv_tuning.py turns it on with its own
# cache file.
os.environ.setdefault("HTSRL_CONV_TUNING", "off")


def pytest_collection_modifyitems(items):
    """The `slow` tests first (longest-first scheduling: pytest-xdist hands out tests in this order, so the quick ones
    fill the workers' ends instead of a learning run starting last on one worker while the other idles)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
