"""Shared test setup: absl flags marked parsed (so launchers' `main` can run under flagsaver), quiet warnings, and
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
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from absl import flags  # noqa: E402

warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
flags.FLAGS.mark_as_parsed()

if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _CACHE_DIR = tempfile.mkdtemp(prefix="jax-test-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE_DIR
    # Every program: a tiny run compiles ~24 of ~0.1 s each, which a threshold of 0.3 s never cached.
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)


# XLA's compiles without LLVM's backend optimizations (`-O0` machine code for the fused loops; the HLO programs,
# their fusions and buffers, and the Eigen / oneDNN library kernels of dots and convolutions are the same). Most
# test programs run for a few steps, so compiling them dominated: on two cores test_anakin.py and test_learning.py
# took 143 s (189 CPU-s) at the default and 117 s (138 CPU-s) at -O0, the whole suite 13:10 against 15:54 (2026-11-28,
# WORKSPACE.md). XLA's own convolution runs 15x slower at -O0: such a test runs in a child process with
# `multidevice.run_python(optimized=True)`. Runs, benchmarks and fingerprints outside the tests keep the default; a
# user's own setting of the flag is kept.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0".strip()

# The convolution plans of image tasks stay the fixed table's (`systems.common.conv_tuning`): timing them at every
# small batch the tests use would add minutes; tests/test_conv_tuning.py turns it on with its own cache file.
os.environ.setdefault("HTSRL_CONV_TUNING", "off")
