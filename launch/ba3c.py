"""`python -m launch.ba3c --game=Breakout`: synchronous data-parallel A2C with large-batch Adam (Distributed BA3C,
seed 001) over `--num_devices` devices, or over several hosts with `--num_processes/--process_id/
--coordinator_address`. Takes the shared flags of launch.hts except `--num_envs` (sized by `--local_batch`).

Defaults follow the paper: Adam with epsilon inside the square root, beta1 0.8, beta2 0.75, learning rate 1e-3 not
scaled with the batch, epsilon 1e-8 once the effective batch is 512 or more (else 1e-3), FC width 256 (`--hidden`,
128 is the paper's final choice)."""

import dataclasses

from absl import app, flags

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from launch import common, scaleout  # noqa: E402
from systems.datapar import system  # noqa: E402

_NUM_DEVICES = flags.DEFINE_integer("num_devices", 0, "Devices per process on the pmap axis (0: all local ones).")
_LOCAL_BATCH = flags.DEFINE_integer(
    "local_batch", None,
    "Data points per device per update = envs per device x sync_interval (default: the preset's 16 envs x 5).",
)
_HIDDEN = flags.DEFINE_integer("hidden", 256, "Width of the BA3C fully connected layer (Atari; Table 2).")
_B1 = flags.DEFINE_float("adam_b1", 0.8, "Adam beta1 (paper: 0.8).")
_B2 = flags.DEFINE_float("adam_b2", 0.75, "Adam beta2 (paper: 0.75).")
_DEBUG = flags.DEFINE_boolean("debug", False, "Check after every update that all replicas are bit-identical.")

# BA3C's optimizer unless --optimizer says otherwise (then the family preset's learning rate and epsilon apply).
_BA3C_DEFAULTS = dict(optimizer="adam_large_batch", learning_rate=1e-3, anneal_lr=False, opt_eps=None)


def make_config() -> system.DataParallelConfig:
    common.reject_normalization("launch.ba3c")
    scaleout.reject_hts_sizing("launch.ba3c", "--local_batch (envs per device = local_batch / sync_interval)")
    uses_ba3c_adam = not common.flag_given("optimizer") or flags.FLAGS.optimizer == "adam_large_batch"
    config = common.config_from_flags(
        system.DataParallelConfig, validate=False, algo="a2c",
        defaults=dict(_BA3C_DEFAULTS if uses_ba3c_adam else {}, **common.NO_NORMALIZATION),
        extra=dict(num_devices=_NUM_DEVICES.value, hidden=_HIDDEN.value, adam_b1=_B1.value, adam_b2=_B2.value,
                   lr_scaling=scaleout.LR_SCALING.value or "none", debug=_DEBUG.value,
                   **scaleout.multihost_values()),
    )
    local_batch = _LOCAL_BATCH.value if _LOCAL_BATCH.value is not None else config.num_envs * config.sync_interval
    config = dataclasses.replace(config, local_batch=local_batch)
    system.validate(config)
    return config


def main(argv):
    del argv
    common.run_main(system.run, make_config)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
