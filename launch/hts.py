"""`python -m launch.hts --game=Breakout`: train with High-Throughput Synchronous RL (seed 000).

Flags: launch/common.py."""

from absl import app

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from launch import common  # noqa: E402, F401 - common defines the flags
from systems.hts import system  # noqa: E402


def main(argv):
    del argv
    common.run_main(system.run)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
