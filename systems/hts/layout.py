"""Where HTS-RL runs: which local devices run the actors' forward passes and which hold the learner's replicas.

Seed 000 trains on one desktop (4 GPUs, section 5) and leaves training across machines to future work (section 2).
Here the same command scales out as Cleanba does (actor and learner devices chosen by index, several hosts joined by
`jax.distributed`), and keeps HTS-RL's determinism:

* `--actor_devices` (local indices): actor thread i runs its forward passes on actor device i mod k, always on the
  same fixed padded batch shape, so the actions do not depend on which device or thread computed them.
* `--learner_devices` (local indices): the learner's data-parallel replicas. With R replicas over all processes the
  round's storage is split by env (replica r learns from global envs r*N/R .. (r+1)*N/R - 1) and the gradients are
  averaged over the replicas before each optimizer step (`agents.parallel.mean_over_axis` on `DEVICE_AXIS`).
* Defaults: one local device -> both roles share it (the single-device HTS-RL, same bits); several -> actors on the
  first, learners over the rest, as many of them as split the envs (and PPO's minibatches) evenly.
* Processes: process p owns global envs p*N/P .. (p+1)*N/P - 1 (its executor, actors and storages) and learner
  replicas p*L .. (p+1)*L - 1, where L is its number of learner devices (the same on every process).
"""

from __future__ import annotations

import dataclasses

import jax

from systems.common.config import ConfigError


@dataclasses.dataclass(frozen=True)
class Layout:
    """The resolved device roles of one process."""

    actor_devices: tuple  # local jax devices of the actors' forward passes
    learner_devices: tuple  # local jax devices of this process's learner replicas
    pmap_devices: tuple  # every process's learner devices, in replica order (jax.pmap's `devices`)
    process_index: int
    process_count: int
    num_envs: int  # all processes' envs

    @property
    def num_replicas(self) -> int:
        """Learner replicas over all processes (1: the plain jitted update, no collective)."""
        return len(self.learner_devices) * self.process_count

    @property
    def local_envs(self) -> int:
        return self.num_envs // self.process_count

    @property
    def first_env(self) -> int:
        """Global id of this process's first env (env seeds and action keys use global ids)."""
        return self.process_index * self.local_envs

    def describe(self) -> str:
        """One line for the start of a run."""
        names = lambda devices: ",".join(f"{d.platform}:{d.id}" for d in devices)  # noqa: E731
        shared = " (shared)" if self.actor_devices == self.learner_devices else ""
        hosts = f", {self.process_count} processes" if self.process_count > 1 else ""
        return (f"  devices: actors on {names(self.actor_devices)}; {self.num_replicas} learner replica(s) on "
                f"{names(self.learner_devices)}{shared}{hosts}; {self.local_envs // len(self.learner_devices)} "
                f"envs per replica")


def parse_indices(flag: str, text: str, num_local: int) -> tuple[int, ...]:
    """'0,2' -> (0, 2); ConfigError (one line) for anything that is not distinct local device indices."""
    try:
        indices = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"--{flag} must be comma-separated device indices such as 0 or 1,2,3, got '{text}'") from None
    if len(set(indices)) != len(indices):
        raise ConfigError(f"--{flag}={text} names a device twice")
    bad = [i for i in indices if not 0 <= i < num_local]
    if bad:
        raise ConfigError(
            f"--{flag}={text}: device {bad[0]} does not exist; this process has {num_local} device(s) (0.."
            f"{num_local - 1}; on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N gives N)"
        )
    return indices


def replicas_fit(num_replicas: int, config) -> str | None:
    """Why `num_replicas` learner replicas cannot split `config`'s rounds evenly, or None when they can."""
    if config.num_envs % num_replicas:
        return f"{config.num_envs} envs do not split evenly over {num_replicas} learner replicas"
    rows = config.sync_interval * config.num_envs // num_replicas
    if config.algo == "ppo" and rows % config.num_minibatches:
        return (f"each of {num_replicas} learner replicas holds {rows} rows per round, not divisible by "
                f"--num_minibatches={config.num_minibatches}")
    return None


def default_roles(num_local: int, num_processes: int, config) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(actor indices, learner indices) when neither flag is given: one device -> shared; several -> actors on the
    first, learners on as many of the rest as split the rounds evenly (at least one)."""
    if num_local == 1:
        return (0,), (0,)
    spare = num_local - 1
    count = next((k for k in range(spare, 0, -1) if replicas_fit(k * num_processes, config) is None), 1)
    return (0,), tuple(range(1, 1 + count))


def resolve(config, local_devices: list | None = None) -> Layout:
    """The layout of `config` (an `HTSConfig`) on this process's devices; ConfigError for a layout that cannot run.

    An empty `--actor_devices` with `--learner_devices` given takes the first device no learner uses (or device 0 when
    learners use all of them); an empty `--learner_devices` with `--actor_devices` given takes every other device (or
    the actors' devices when there is no other)."""
    local = sorted(local_devices if local_devices is not None else jax.local_devices(), key=lambda d: d.id)
    num_processes = jax.process_count() if local_devices is None else 1
    n = len(local)
    if config.actor_devices or config.learner_devices:
        actors = parse_indices("actor_devices", config.actor_devices, n) if config.actor_devices else None
        learners = parse_indices("learner_devices", config.learner_devices, n) if config.learner_devices else None
        if actors is None:
            actors = (next((i for i in range(n) if i not in learners), 0),)
        if learners is None:
            learners = tuple(i for i in range(n) if i not in actors) or actors
    else:
        actors, learners = default_roles(n, num_processes, config)
    problem = replicas_fit(len(learners) * num_processes, config)
    if problem is not None:
        raise ConfigError(f"{problem}: choose --learner_devices (or --num_envs) so that they do")
    if config.num_envs % num_processes:
        raise ConfigError(f"--num_envs={config.num_envs} does not split evenly over {num_processes} processes")
    if num_processes > 1:
        by_process = [sorted((d for d in jax.devices() if d.process_index == p), key=lambda d: d.id)
                      for p in range(num_processes)]
        pmap_devices = tuple(devices[i] for devices in by_process for i in learners)
    else:
        pmap_devices = tuple(local[i] for i in learners)
    return Layout(
        actor_devices=tuple(local[i] for i in actors), learner_devices=tuple(local[i] for i in learners),
        pmap_devices=pmap_devices, process_index=jax.process_index() if local_devices is None else 0,
        process_count=num_processes, num_envs=config.num_envs,
    )


def indices_text(devices: tuple, local_devices: list | None = None) -> str:
    """The local indices of `devices` as a flag value ('1,2,3'): what a run's config.json records."""
    local = sorted(local_devices if local_devices is not None else jax.local_devices(), key=lambda d: d.id)
    return ",".join(str(local.index(d)) for d in devices)
