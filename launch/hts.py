"""`python -m launch.hts --game=Breakout`: train with High-Throughput Synchronous RL (seed 000).

Flags (`--help` lists them with their defaults): the run group, PPO / A2C hyperparameters, observation and reward
normalization, and HTS-RL's actor threads and batches (`launch.flagsets`)."""

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from launch import common, flagsets  # noqa: E402
from systems.hts import system  # noqa: E402

FLAGS = flagsets.flag_values("hts")


def make_config() -> system.HTSConfig:
    config = common.config_from_flags(FLAGS, system.HTSConfig, validate=False)
    system.validate(config)
    return config


def main(argv):
    del argv
    common.run_main(system.run, make_config)


if __name__ == "__main__":
    common.launch("hts", FLAGS, main, __doc__)
