"""`python -m launch.anakin --env=gymnax/CartPole-v1`: PPO / A2C with env steps, inference and updates in one jitted
program (Podracer's Anakin), `--num_seeds` independent agents at once, over the local devices, and over several hosts
with `--num_processes=N --process_id=I --coordinator_address=HOST:PORT` (the same command on every host).

Flags (`--help` lists them with their defaults): launch.sync's, on a JAX env (`--env=gymnax/<id>`), plus the number
of agents, the rounds per call of the program and the devices."""

import dataclasses

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from launch import common, flagsets  # noqa: E402
from systems.anakin import system  # noqa: E402
from systems.common import layout_rule  # noqa: E402

FLAGS = flagsets.flag_values("anakin")


def make_config() -> system.AnakinConfig:
    # Validated by `system.run` once a multi-host job has formed: a gymnax task's check starts JAX's backend.
    config = common.config_from_flags(FLAGS, system.AnakinConfig, validate=False,
                                      extra=dict(common.settings_from_flags(FLAGS, system.AnakinConfig, "anakin"),
                                                 **common.multihost_values(FLAGS)))
    if layout_rule.given_sizes(lambda name: common.flag_given(FLAGS, name), layout_rule.ANAKIN_SIZE_FLAGS):
        config = dataclasses.replace(config, layout="preset")  # the user sized the run: no rule resizes it
    return config


def main(argv):
    del argv
    common.run_main(system.run, make_config)


if __name__ == "__main__":
    common.launch("anakin", FLAGS, main, __doc__)
