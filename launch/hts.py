"""`python -m launch.hts --game=Breakout`: train with High-Throughput Synchronous RL (seed 000).

Flags: launch/common.py."""

from absl import app

from launch import common  # noqa: F401 - defines the flags
from systems.hts import system


def main(argv):
    del argv
    common.run_main(system.run)


if __name__ == "__main__":
    app.run(main)
