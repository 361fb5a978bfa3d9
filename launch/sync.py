"""`python -m launch.sync --game=Breakout`: the synchronous A2C/PPO baseline (roll out, then learn).

Flags (`--help` lists them with their defaults): launch.hts's without its actor threads and batches."""

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from launch import common, flagsets  # noqa: E402
from systems.sync import system  # noqa: E402

FLAGS = flagsets.flag_values("sync")


def make_config() -> system.SyncConfig:
    return common.config_from_flags(FLAGS, system.SyncConfig)


def main(argv):
    del argv
    common.run_main(system.run, make_config)


if __name__ == "__main__":
    common.launch("sync", FLAGS, main, __doc__)
