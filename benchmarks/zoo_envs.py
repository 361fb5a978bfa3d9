"""rl-zoo3's own env definitions for our side of the learning table: importing this module registers its tasks
(the masked-velocity `CartPoleNoVel-v1`, `PendulumNoVel-v1`, `LunarLanderNoVel-v3`: rl-zoo3's `MaskVelocityWrapper`
zeroes the velocities, so only a policy with memory can infer them) in gymnasium, so that our launchers step the very
envs the peer steps: `--env=gymnasium/benchmarks.zoo_envs:CartPoleNoVel-v1`.

rl-zoo3 is not a project dependency: it is imported, unmodified, from the peer's benchmark-only venv
(`benchmarks/requirements-learning.txt`, `PEER_SITE_PACKAGES`), whose packages come after ours on the path so that
ours (gymnasium, NumPy) stay the ones our side runs with; rl-zoo3 brings PyTorch and Stable-Baselines3 with it.
"""

import glob
import os
import sys

PEER_VENV = os.environ.get("HTSRL_PEER_VENV", "/tmp/learn-venv")


def _peer_site_packages() -> str:
    found = sorted(glob.glob(os.path.join(PEER_VENV, "lib", "python3*", "site-packages")))
    if not found:
        raise ImportError(f"rl-zoo3's env definitions come from the peer's venv, not found at {PEER_VENV}: "
                          "python -m venv /tmp/learn-venv && /tmp/learn-venv/bin/pip install -r "
                          "benchmarks/requirements-learning.txt (or set HTSRL_PEER_VENV)")
    return found[-1]


PEER_SITE_PACKAGES = _peer_site_packages()
if PEER_SITE_PACKAGES not in sys.path:
    sys.path.append(PEER_SITE_PACKAGES)

import rl_zoo3.import_envs  # noqa: E402,F401  (registers rl-zoo3's envs in gymnasium)
