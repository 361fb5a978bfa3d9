"""`python -m launch.gala --game=Breakout`: GALA-A2C (seed 004), `--num_learners` A2C learners with their own envs
mixing parameters by gossip over a directed ring (`--num_peers`) or a time-varying exponential graph.

`--gossip=async` (default): a thread per learner, non-blocking messages, optional staleness bound
`--max_staleness`; timing-dependent by design. `--gossip=pmap`: lock-step learners on a pmap axis (one per device),
`ppermute` with one-iteration-old messages; bit-reproducible, multi-host with `--num_processes`. Envs are sized by
`--envs_per_learner` (there is no `--num_envs`). Hyperparameters default to seed 004's Table 2 (A2C, RMSProp, 16
envs per learner (GFootball 4), horizon 5, learning rate 7e-4 x sqrt(learners); CartPole-v1: x learners,
`presets.GALA_LR_SCALING`). `--help` lists the flags with their defaults (`launch.flagsets`)."""

import dataclasses

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from envs.factory import family_of  # noqa: E402
from launch import common, flagsets  # noqa: E402
from systems.common import presets  # noqa: E402
from systems.gala import system  # noqa: E402

FLAGS = flagsets.flag_values("gala")



def make_config() -> system.GALAConfig:
    config = common.config_from_flags(
        FLAGS, system.GALAConfig, validate=False, algo="a2c", defaults=presets.NO_NORMALIZATION,
        extra=dict(common.settings_from_flags(FLAGS, system.GALAConfig, "gala"),
                   num_learners=system.GALAConfig.num_learners if FLAGS.num_learners is None else FLAGS.num_learners,
                   **common.multihost_values(FLAGS)),
    )
    envs = FLAGS.envs_per_learner or presets.GALA_ENVS_PER_LEARNER.get(family_of(config.env_id),
                                                                      system.GALAConfig.envs_per_learner)
    scaling = FLAGS.lr_scaling or presets.GALA_LR_SCALING.get(config.env_id, system.GALAConfig.lr_scaling)
    config = dataclasses.replace(config, envs_per_learner=envs, lr_scaling=scaling, num_envs=0)  # num_envs: the plan's
    system.validate(config)
    return config


def main(argv):
    del argv
    common.run_main(system.run, make_config)


if __name__ == "__main__":
    common.launch("gala", FLAGS, main, __doc__)
