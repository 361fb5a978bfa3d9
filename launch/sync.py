"""`python -m launch.sync --game=Breakout`: the synchronous A2C/PPO baseline. Same flags as launch.hts."""

from absl import app

from launch import common  # noqa: F401 - defines the flags
from systems.sync import system


def main(argv):
    del argv
    common.run_main(system.run)


if __name__ == "__main__":
    app.run(main)
