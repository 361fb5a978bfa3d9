"""`python -m launch.sync --game=Breakout`: the synchronous A2C/PPO baseline. Same flags as launch.hts."""

from absl import app

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from launch import common  # noqa: E402, F401 - common defines the flags
from systems.sync import system  # noqa: E402


def main(argv):
    del argv
    common.run_main(system.run)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
