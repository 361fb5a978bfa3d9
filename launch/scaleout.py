"""absl flags shared by the scale-out launchers `launch.ba3c` and `launch.gala`: multi-host start-up
(`jax.distributed`) and learning-rate scaling.

For a multi-host run start the same command on every host with its own `--process_id`; process 0's address is the
coordinator."""

from absl import flags

from agents.optim import LR_SCALING_RULES
from launch import common

COORDINATOR = flags.DEFINE_string(
    "coordinator_address", "", "host:port of process 0 for jax.distributed (multi-host runs only)."
)
NUM_PROCESSES = flags.DEFINE_integer("num_processes", 1, "Processes (hosts) in the job; 1 runs on this host only.")
PROCESS_ID = flags.DEFINE_integer("process_id", 0, "This process's index in [0, num_processes).")
LR_SCALING = flags.DEFINE_enum(
    "lr_scaling", None, list(LR_SCALING_RULES),
    "Scale the learning rate by the batch multiplier (devices for ba3c, learners for gala): none, linear or sqrt "
    "(default: none for ba3c as the BA3C paper, sqrt for gala as the GALA paper).",
)


def multihost_values() -> dict:
    return dict(
        coordinator_address=COORDINATOR.value, num_processes=NUM_PROCESSES.value, process_id=PROCESS_ID.value
    )


def reject_hts_sizing(launcher: str, sizing_flag: str) -> None:
    """The scale-out launchers train A2C and size their envs with their own flag: refuse `--algo=ppo` and
    `--num_envs` with one clear line (ValueError) instead of ignoring them."""
    if common.flag_given("algo") and flags.FLAGS.algo != "a2c":
        raise ValueError(f"{launcher} trains A2C; drop --algo or use --algo=a2c")
    if common.flag_given("num_envs"):
        raise ValueError(f"{launcher} sizes envs with {sizing_flag}, not --num_envs")
