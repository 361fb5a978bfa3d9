"""The synchronous baseline's configuration (seed 000, Fig. 2(a)): the on-policy fields and nothing of its own, since
one EnvPool steps every env in lock step (its batch is `num_envs`) and the learner waits for the whole round. It
derives no plan."""

from __future__ import annotations

import dataclasses

from systems.common import config as config_lib

SYSTEM = "sync"


@dataclasses.dataclass(frozen=True)
class SyncConfig(config_lib.TrainConfig):
    """A synchronous-baseline run: `TrainConfig`'s fields (PPO / A2C, envs, rounds, run)."""


def own_config(config: config_lib.TrainConfig) -> SyncConfig:
    """The baseline's config of any on-policy config: a subclass's own fields (an `HTSConfig`'s actors and devices)
    mean nothing to one lock-step pool, and the run's config.json records only what it ran."""
    return SyncConfig(**{field.name: getattr(config, field.name) for field in dataclasses.fields(SyncConfig)})


validate = config_lib.validate
