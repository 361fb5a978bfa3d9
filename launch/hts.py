"""`python -m launch.hts --game=Breakout`: train with High-Throughput Synchronous RL (seed 000).

Flags (`--help` lists them with their defaults): the run group, PPO / A2C hyperparameters, observation and reward
normalization, HTS-RL's actor threads and batches, its devices and the multi-host start-up (`launch.flagsets`).

Devices: one device -> actors and learner share it; several -> actors on the first, the learner's data-parallel
replicas on the rest (`--actor_devices=0 --learner_devices=1,2,3` chooses). Several hosts: the same command on every
host with `--num_processes=N --process_id=I --coordinator_address=HOST:PORT`."""

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from launch import common, flagsets  # noqa: E402
from systems.common import layout_rule  # noqa: E402
from systems.hts import system  # noqa: E402

FLAGS = flagsets.flag_values("hts")


def make_config() -> system.HTSConfig:
    settings = common.settings_from_flags(FLAGS, system.HTSConfig, "hts")
    if layout_rule.given_sizes(lambda name: common.flag_given(FLAGS, name)):
        settings["layout"] = "preset"  # the user sized the run: no rule resizes it
    config = common.config_from_flags(
        FLAGS, system.HTSConfig, validate=False,
        extra=dict(settings, **common.settings_from_flags(FLAGS, system.HTSConfig, "hts_devices"),
                   **common.multihost_values(FLAGS)),
    )
    system.validate(config)
    return config


def main(argv):
    del argv
    common.run_main(system.run, make_config)


if __name__ == "__main__":
    common.launch("hts", FLAGS, main, __doc__)
