"""EnvPool environments: task ids and pools, episode bookkeeping, artificial step times.

The names below are loaded on first use (PEP 562): a process that needs one module of this package (a Gymnasium
env worker imports `envs.gymnasium_pool`) does not import EnvPool and JAX with it."""

import importlib

_EXPORTS = {
    "EpisodeTracker": "envs.episodes", "recompute_truncation": "envs.episodes", "split_done": "envs.episodes",
    "FAMILIES": "envs.factory", "EnvSpec": "envs.factory", "family_of": "envs.factory", "make_pool": "envs.factory",
    "make_spec": "envs.factory", "resolve_env_id": "envs.factory",
    "StepTimeDistribution": "envs.step_time", "parse_step_time": "envs.step_time",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'envs' has no attribute {name!r}")
