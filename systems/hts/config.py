"""HTS-RL's configuration (seed 000, section 4.1): the on-policy fields plus its actor threads, EnvPool and inference
batches, devices and hosts (`HTSConfig`), the sizes derived from them, and their checks (`validate`). The devices a
run chooses are its plan (`systems.hts.system`), recorded beside the config in config.json."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from envs.actor_pools import pool_offsets, pool_threads, split_envs
from envs.cores import usable_cores
from envs.factory import ENVPOOL_FAMILIES, family_of
from envs.step_time import parse_step_time
from systems.common import config as config_lib
from systems.common import layout_rule
from systems.common.config import hyperparameter, setting

SYSTEM = "hts"
ENV_POOLS = ("shared", "per_actor")


@dataclasses.dataclass(frozen=True)
class HTSConfig(config_lib.TrainConfig, config_lib.MultiHostConfig):
    """An HTS-RL run: the on-policy fields plus its actor threads and batches (section 4.1)."""

    num_actors: int = hyperparameter(1, "Actor threads (default: preset or 1).", group="hts")
    layout: str = setting(
        "preset", "auto: fit --num_envs, --sync_interval and --num_actors to this machine when none is given (an "
        "accelerator: 128 envs in 4 actor threads, each forward pass all of them unless --inference_batch is given; "
        "a CPU of more cores than the presets' 2: envs scaled with the cores), keeping the preset's env steps per "
        "update; preset: the literal preset.", "hts",
        choices=layout_rule.CHOICES, flag_default="auto")
    env_pools: str = setting(
        "shared", "shared: one EnvPool for every actor thread, a receiver thread handing each finished env step to "
        "whichever actor is free; per_actor: each actor thread owns a pool of its share of the envs and receives from "
        "it itself (no receiver thread; a forward pass then holds at most the actor's own envs). The parameters are "
        "bit-identical either way.", "hts", choices=ENV_POOLS)
    env_threads: int = setting(
        0, "EnvPool's worker threads in this process (a gymnasium/ env's worker processes; 0: one per usable core, at "
        "most one per env); under --env_pools=per_actor dealt out over the pools, at least one each.", "hts")
    env_thread_affinity: int = setting(
        -1, "Pin EnvPool's worker threads to cores k, k + 1, ... (EnvPool's thread_affinity_offset, the cores before "
        "k left to the actor threads and the learner; -1: the scheduler places them); under --env_pools=per_actor "
        "each pool's after the previous pool's. EnvPool's own tasks only.", "hts")
    env_batch_size: int = setting(
        0, "EnvPool async batch size, of each actor thread's own pool under --env_pools=per_actor (0: half the "
        "pool's envs; classic-control and Box2D tasks without --step_time: one actor thread's share of the envs).",
        "hts")
    inference_batch: int = setting(
        0, "Fixed actor forward-pass batch (0: num_envs // 2; classic-control and Box2D tasks: num_envs). Changing it "
        "changes results' bits.", "hts")
    # Devices: "" is `layout.resolve`'s default.
    actor_devices: str = setting(
        "", "Local device indices of the actors' forward passes, e.g. 0 (default: the first device).", "hts_devices")
    learner_devices: str = setting(
        "", "Local device indices of the learner's data-parallel replicas, e.g. 1,2,3 (default: one device -> shared "
        "with the actors; several -> the rest, as many as split the envs evenly).", "hts_devices")
    debug: bool = setting(False, "Check after every update that all learner replicas are bit-identical.", "hts_devices")
    ordered_reduction: bool = setting(
        False, "Average the replicas' gradients by gathering them and adding them up in replica order: bit-identical "
        "however the replicas are split over processes (R x the memory and traffic of an all-reduce).", "hts_devices")


# The parameters are bit-identical whatever the actor count, EnvPool batch or actor devices (and the coordinator's
# address): a resumed run may change them. It may also change the learner's devices (a resumed run is not
# bit-identical to an uninterrupted one anyway: the envs restart), so a run moves to another machine; the plan in
# config.json records the layout it started with.
MAY_CHANGE_ON_RESUME = frozenset({"num_actors", "env_pools", "env_threads", "env_thread_affinity", "env_batch_size",
                                   "actor_devices", "learner_devices", "coordinator_address", "debug"})


def local_envs(config: HTSConfig) -> int:
    """Envs this process steps (all of them in a single-process run)."""
    return config.num_envs // max(config.num_processes, 1)


# Families whose EnvPool simulators step in microseconds, well under one forward pass of the policy on a CPU. There
# the default halves (the actor steps one half of the envs while it infers for the other, section 4.1's overlap) only
# double the calls: full batches run markedly faster on CartPole-v1, Acrobot-v1 and LunarLander-v2 (to compare,
# `--env_batch_size` and `--inference_batch` at half the envs give the halves back). Pixel simulators and a user's
# own envs keep the halves, and so does EnvPool's batch under an injected `--step_time` (the overlap is what the
# paper's claims measure).
_FULL_BATCH_FAMILIES = frozenset({"classic", "box2d"})


def _microsecond_simulator(config: HTSConfig) -> bool:
    """Whether the env's family is one of `_FULL_BATCH_FAMILIES` (an unknown env id is not: `validate` says so)."""
    try:
        return family_of(config.env_id) in _FULL_BATCH_FAMILIES
    except ValueError:
        return False


def _full_batches(config: HTSConfig) -> bool:
    """Whether EnvPool's default batch is a whole actor's share of the envs (a microsecond simulator without an
    injected step time) rather than half of them."""
    try:
        injected = parse_step_time(config.step_time).kind != "none"
    except ValueError:  # `validate` says so
        injected = False
    return _microsecond_simulator(config) and not injected


def env_batch_size(config: HTSConfig) -> int:
    """EnvPool's batch: each actor thread's share of this process's envs, or half of them (section 4.1's overlap)."""
    if config.env_batch_size:
        return config.env_batch_size
    return max(1, local_envs(config) // (config.num_actors if _full_batches(config) else 2))


def pool_batch_size(config: HTSConfig, pool_envs: int) -> int:
    """EnvPool's batch of one actor's own pool (`--env_pools=per_actor`): `--env_batch_size`, else the pool's envs
    (the actor steps them all at once, as one actor's share of a shared pool) or half of them (the overlap)."""
    if config.env_batch_size:
        return config.env_batch_size
    return pool_envs if _full_batches(config) else max(1, pool_envs // 2)


class EnvPlan(NamedTuple):
    """EnvPool as this process runs it, one entry per pool (the shared pool, or actor thread k's own at k): its envs,
    its async batch, its worker threads and the core its pinned threads start from (-1: not pinned)."""

    envs: list[int]
    batches: list[int]
    threads: list[int]
    pinned_from: list[int]


def env_plan(config: HTSConfig) -> EnvPlan:
    """`--env_pools`, `--env_batch_size`, `--env_threads` and `--env_thread_affinity` on this process's envs: the
    threads (default one per usable core) at most one per env, and under `per_actor` dealt out over the pools, at
    least one each, pinned pools one after another."""
    envs = local_envs(config)
    threads = min(config.env_threads or usable_cores(), envs)
    if config.env_pools == "shared":
        return EnvPlan([envs], [env_batch_size(config)], [threads], [config.env_thread_affinity])
    sizes = split_envs(envs, config.num_actors)
    counts = [min(size, count) for size, count in zip(sizes, pool_threads(threads, len(sizes)), strict=True)]
    return EnvPlan(sizes, [pool_batch_size(config, size) for size in sizes], counts,
                   pool_offsets(config.env_thread_affinity, counts))


def smallest_pool(config: HTSConfig) -> int:
    """The envs of the smallest pool this process steps: all of its envs, or (per actor) its envs // actors."""
    return local_envs(config) // (config.num_actors if config.env_pools == "per_actor" else 1)


def inference_batch(config: HTSConfig) -> int:
    """The forward pass's fixed batch, from the run's envs (not the process's, not the step time: bits depend on it)."""
    if config.inference_batch:
        return config.inference_batch
    return config.num_envs if _microsecond_simulator(config) else max(1, config.num_envs // 2)


def _validate_env_threads(config: HTSConfig) -> None:
    """`--env_thread_affinity` is -1 or a core and needs EnvPool's own threads; a JAX env (one jitted call steps
    every env) has no threads to size."""
    if config.env_thread_affinity < -1:
        raise config_lib.ConfigError(
            f"--env_thread_affinity must be -1 (no pinning) or a core number, got {config.env_thread_affinity}")
    try:
        family = family_of(config.env_id)
    except ValueError:  # `config_lib.validate` names an unknown env
        return
    if config.env_thread_affinity >= 0 and family not in ENVPOOL_FAMILIES:
        raise config_lib.ConfigError(
            f"--env_thread_affinity pins EnvPool's worker threads; a {family}/ env has none: leave it at -1")
    if config.env_threads and family in ("gymnax", "brax"):
        raise config_lib.ConfigError(
            f"--env_threads sizes EnvPool's worker threads; a {family}/ env steps every env in one jitted call: "
            "leave it at 0")


def validate(config: HTSConfig) -> None:
    """The on-policy checks (`config.validate`) and HTS's own; ConfigError with one clear line for the first."""
    config_lib.validate(config)
    if config.num_actors <= 0:
        raise config_lib.ConfigError(f"--num_actors must be positive, got {config.num_actors}")
    if config.env_pools not in ENV_POOLS:
        raise config_lib.ConfigError(f"--env_pools must be one of {', '.join(ENV_POOLS)}, got '{config.env_pools}'")
    for name in ("env_threads", "env_batch_size", "inference_batch"):
        if getattr(config, name) < 0:
            raise config_lib.ConfigError(f"--{name} must be non-negative, got {getattr(config, name)}")
    _validate_env_threads(config)
    if config.num_processes < 1:
        raise config_lib.ConfigError(f"--num_processes must be >= 1, got {config.num_processes}")
    if config.num_envs % config.num_processes:
        raise config_lib.ConfigError(
            f"--num_envs={config.num_envs} does not split evenly over --num_processes={config.num_processes}"
        )
    if config.num_processes > 1 and config.time_limit:
        raise config_lib.ConfigError(
            "--time_limit with several processes would stop them at different rounds (their learners must take "
            "the same number of updates): set --total_steps instead"
        )
    if config.layout == "auto":
        return  # the batches against the envs: once the layout rule has sized them (`system._resolve_layout`)
    if config.env_pools == "per_actor" and config.num_actors > local_envs(config):
        raise config_lib.ConfigError(
            f"--env_pools=per_actor gives each of --num_actors={config.num_actors} threads a pool of its own, but "
            f"there are {local_envs(config)} envs{' a process' if config.num_processes > 1 else ''}: pass at most "
            f"{local_envs(config)} actors or --env_pools=shared"
        )
    if config.env_pools == "per_actor" and config.env_batch_size > smallest_pool(config):
        raise config_lib.ConfigError(
            f"--env_batch_size={config.env_batch_size} exceeds the {smallest_pool(config)} envs of the smallest "
            f"actor's pool (--env_pools=per_actor)"
        )
    if env_batch_size(config) > local_envs(config):
        raise config_lib.ConfigError(
            f"--env_batch_size={config.env_batch_size} exceeds the {local_envs(config)} envs of each process"
            if config.num_processes > 1 else
            f"--env_batch_size={config.env_batch_size} exceeds --num_envs={config.num_envs}"
        )
    if config.inference_batch > config.num_envs:
        raise config_lib.ConfigError(
            f"--inference_batch={config.inference_batch} exceeds --num_envs={config.num_envs}"
        )
