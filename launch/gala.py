"""`python -m launch.gala --game=Breakout`: GALA-A2C (seed 004), `--num_learners` A2C learners with their own envs
mixing parameters by gossip over a directed ring (`--num_peers`) or a time-varying exponential graph.

`--gossip=async` (default): a thread per learner, non-blocking messages, optional staleness bound
`--max_staleness`; timing-dependent by design. `--gossip=pmap`: lock-step learners on a pmap axis (one per device),
`ppermute` with one-iteration-old messages; bit-reproducible, multi-host with `--num_processes`. Takes the shared
flags of launch.hts except `--num_envs` (use `--envs_per_learner`). Hyperparameters default to seed 004's Table 2
(A2C, RMSProp, 16 envs per learner (GFootball 4), horizon 5, learning rate 7e-4 x sqrt(learners))."""

import dataclasses

from absl import app, flags

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from envs.factory import family_of  # noqa: E402
from launch import common, scaleout  # noqa: E402
from systems.gossip import system  # noqa: E402

_ENVS_PER_LEARNER = flags.DEFINE_integer(
    "envs_per_learner", 0, "Training envs of each learner (0: the preset, 16 as in seed 004; GFootball 4)."
)
# GFootball's engine costs about 80 MB per env: 4 learners x 16 envs peaked at 4.3 GB on the 2-core machine
# (benchmarks/results/presets_cpu.md), so its preset keeps HTS's GFootball total of 16 envs.
_PRESET_ENVS_PER_LEARNER = {"gfootball": 4}
_TOPOLOGY = flags.DEFINE_enum(
    "topology", "ring", ["ring", "exponential"], "Peer graph: directed ring, or time-varying exponential (pmap)."
)
_NUM_PEERS = flags.DEFINE_integer("num_peers", 1, "Out-peers of each learner (paper: 1).")
_GOSSIP = flags.DEFINE_enum("gossip", "async", ["async", "pmap"], "Execution: learner threads, or lock-step pmap.")
_MAX_STALENESS = flags.DEFINE_integer(
    "max_staleness", -1, "tau: wait when the newest in-peer message is more than tau local iterations old (-1: never)."
)
_COSINE = flags.DEFINE_boolean("log_grad_cosine", False, "Log the learners' pairwise gradient cosine similarity.")


def make_config() -> system.GossipConfig:
    common.reject_normalization("launch.gala")
    scaleout.reject_hts_sizing("launch.gala", "--envs_per_learner")
    config = common.config_from_flags(
        system.GossipConfig, validate=False, algo="a2c", defaults=common.NO_NORMALIZATION,
        extra=dict(num_learners=common.num_learners(4), topology=_TOPOLOGY.value, num_peers=_NUM_PEERS.value,
                   gossip=_GOSSIP.value, max_staleness=_MAX_STALENESS.value, log_grad_cosine=_COSINE.value,
                   lr_scaling=scaleout.LR_SCALING.value or "sqrt", **scaleout.multihost_values()),
    )
    envs = _ENVS_PER_LEARNER.value or _PRESET_ENVS_PER_LEARNER.get(family_of(config.env_id), 16)
    config = dataclasses.replace(config, envs_per_learner=envs)
    system.validate(config)
    return config


def main(argv):
    del argv
    common.run_main(system.run, make_config)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
