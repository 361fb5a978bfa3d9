"""EnvPool environments: task ids and pools, episode bookkeeping, artificial step times."""

from envs.episodes import EpisodeTracker, recompute_truncation, split_done
from envs.factory import FAMILIES, EnvSpec, family_of, make_pool, make_spec, resolve_env_id
from envs.step_time import StepTimeDistribution, parse_step_time

# The executor's names are re-exported here by the lead (envs/executor.py).

__all__ = [
    "FAMILIES",
    "EnvSpec",
    "EpisodeTracker",
    "StepTimeDistribution",
    "family_of",
    "make_pool",
    "make_spec",
    "parse_step_time",
    "recompute_truncation",
    "resolve_env_id",
    "split_done",
]
