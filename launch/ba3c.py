"""`python -m launch.ba3c --game=Breakout`: synchronous data-parallel A2C with large-batch Adam (Distributed BA3C,
seed 001) over `--num_devices` devices, or over several hosts with `--num_processes/--process_id/
--coordinator_address`. Envs are sized by `--local_batch` (there is no `--num_envs`); without it or
`--sync_interval`, `--layout=auto` grows the envs per device on an accelerator or a many-core CPU, the rollout kept
(`systems.common.layout_rule.fit_batch`).

Defaults follow the paper: Adam with epsilon inside the square root, beta1 0.8, beta2 0.75, learning rate 1e-3 not
scaled with the batch, epsilon 1e-8 (Table 1), FC width 256 (`--hidden`,
128 is the paper's final choice). `--help` lists the flags with their defaults (`launch.flagsets`)."""

import dataclasses

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from launch import common, flagsets  # noqa: E402
from systems.ba3c import system  # noqa: E402
from systems.common import layout_rule, presets  # noqa: E402

FLAGS = flagsets.flag_values("ba3c")



def make_config() -> system.BA3CConfig:
    uses_ba3c_adam = not common.flag_given(FLAGS, "optimizer") or FLAGS.optimizer == "adam_large_batch"
    config = common.config_from_flags(
        FLAGS, system.BA3CConfig, validate=False, algo="a2c",
        defaults=dict(presets.BA3C_OPTIMIZER if uses_ba3c_adam else {}, **presets.NO_NORMALIZATION),
        extra=dict(common.settings_from_flags(FLAGS, system.BA3CConfig, "ba3c"),
                   lr_scaling=FLAGS.lr_scaling or system.BA3CConfig.lr_scaling, **common.multihost_values(FLAGS)),
    )
    local_batch = FLAGS.local_batch if FLAGS.local_batch is not None else config.num_envs * config.sync_interval
    config = dataclasses.replace(config, local_batch=local_batch, num_envs=0)  # num_envs: the plan's
    if layout_rule.given_sizes(lambda name: common.flag_given(FLAGS, name), layout_rule.BA3C_SIZE_FLAGS):
        config = dataclasses.replace(config, layout="preset")  # the user sized the run: no rule resizes it
    system.validate(config)
    return config


def main(argv):
    del argv
    common.run_main(system.run, make_config)


if __name__ == "__main__":
    common.launch("ba3c", FLAGS, main, __doc__)
