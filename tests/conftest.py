"""Shared test setup: absl flags marked parsed (so launchers' `main` can run under flagsaver) and quiet warnings."""

import os
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from absl import flags  # noqa: E402

warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
flags.FLAGS.mark_as_parsed()
