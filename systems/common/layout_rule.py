"""The layout rule: how many envs, steps per round and actor threads a run gets on the machine it runs on, when the
user sized none of them.

The presets are sized for a 2-core CPU (`PRESET_CORES`): the main job's Breakout preset is CleanRL's 8 envs x 128
steps with one actor thread. Elsewhere that leaves the machine idle:

* **on an accelerator** each forward pass is a host-device round trip for a handful of observations, so the actor
  threads, not the device, bound the run. The rule gives the actors `ACCELERATOR_ENVS` envs in
  `ACCELERATOR_ACTORS` threads and shortens the round to keep the preset's env steps per update (Breakout: 128
  envs x 8 steps, 4 threads: the layout measured on a GPU in `benchmarks/gpu_check.sh`);
* **on a CPU with more cores** than the preset's, the envs (and EnvPool's threads, one per env up to the cores:
  `envs.factory.make_pool`) grow with the cores, one actor thread per `CORES_PER_ACTOR` cores, the round again kept;
* **on a CPU of `PRESET_CORES` cores or fewer** the preset stays, bit for bit.

The round's env steps (num_envs x sync_interval) are kept exactly: the rule only picks env counts that divide it,
so the updates per env step, the PPO minibatch sizes and the learning-rate schedule are the preset's. Shorter
rollouts change what GAE sees per round; the rule departs from the preset there and nowhere else.

A size given on the command line, or `--layout=preset`, keeps the literal preset (and the given sizes): the
launcher turns `--layout=auto`, its default, into `preset` when the user gave a size (`given_sizes`). A config
made in code keeps its sizes unless it asks for `layout="auto"`. The choice is printed in the run's start line and
recorded in config.json's plan (`Fit.record`).
"""

from __future__ import annotations

import dataclasses
import os

PRESET_CORES = 2  # the machine the presets are sized for
ACCELERATOR_ENVS = 128
ACCELERATOR_ACTORS = 4
CORES_PER_ACTOR = 8
MAX_ACTORS = 4
SIZE_FLAGS = ("num_envs", "sync_interval", "num_actors")
CHOICES = ("auto", "preset")


@dataclasses.dataclass(frozen=True)
class Machine:
    backend: str  # JAX's default backend: "cpu", "gpu", "tpu"
    cores: int  # the CPU cores this process may use

    def describe(self) -> str:
        return f"{self.backend}, {self.cores} cores"


def this_machine() -> Machine:
    import jax

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return Machine(jax.default_backend(), cores)


@dataclasses.dataclass(frozen=True)
class Sizes:
    num_envs: int
    sync_interval: int
    num_actors: int

    def describe(self) -> str:
        threads = "thread" if self.num_actors == 1 else "threads"
        return f"{self.num_envs} envs x {self.sync_interval} steps, {self.num_actors} actor {threads}"


@dataclasses.dataclass(frozen=True)
class Fit:
    rule: str  # "accelerator", "many-core cpu", "preset"
    sizes: Sizes
    why: str  # one line
    machine: Machine

    def describe(self) -> str:
        return f"layout: {self.sizes.describe()} ({self.rule}: {self.why})"

    def record(self) -> dict:
        """config.json's record of the layout (its plan's `layout`)."""
        return {"machine": self.machine.describe(), "rule": self.rule, "sizes": self.sizes.describe(),
                "why": self.why}


def _envs_dividing(round_steps: int, base: int, most: int) -> int:
    """The largest multiple of `base` up to `most` that divides `round_steps` (at least `base`)."""
    best = base
    for envs in range(base, most + 1, base):
        if round_steps % envs == 0:
            best = envs
    return best


def fit(preset: Sizes, machine: Machine, choice: str = "auto") -> Fit:
    """The layout of a run whose preset is `preset` on `machine` (module docstring); `choice` "preset" keeps it."""

    def chosen(rule: str, sizes: Sizes, why: str) -> Fit:
        return Fit(rule, sizes, why, machine)

    if choice == "preset":
        return chosen("preset", preset, "--layout=preset, or a size flag given")
    round_steps = preset.num_envs * preset.sync_interval
    if machine.backend != "cpu":
        if preset.num_envs >= ACCELERATOR_ENVS:
            return chosen("preset", preset, f"{preset.num_envs} envs already feed the {machine.backend}")
        envs = _envs_dividing(round_steps, preset.num_envs, ACCELERATOR_ENVS)
        actors = max(preset.num_actors, min(ACCELERATOR_ACTORS, envs))
        return chosen("accelerator", Sizes(envs, round_steps // envs, actors),
                      f"the actors' forward passes on a {machine.backend} need many envs each; the round keeps its "
                      f"{round_steps:,} env steps")
    if machine.cores <= PRESET_CORES:
        return chosen("preset", preset, f"a CPU of {machine.cores} cores, the presets' size")
    scale = machine.cores // PRESET_CORES
    envs = _envs_dividing(round_steps, preset.num_envs, preset.num_envs * scale)
    actors = max(preset.num_actors, min(MAX_ACTORS, machine.cores // CORES_PER_ACTOR, envs))
    if envs == preset.num_envs and actors == preset.num_actors:
        return chosen("preset", preset, f"no larger env count divides the {round_steps:,}-step round")
    return chosen("many-core cpu", Sizes(envs, round_steps // envs, actors),
                  f"{machine.cores} cores step {scale}x the presets' envs; the round keeps its {round_steps:,} env "
                  "steps")


def sizes_of(config) -> Sizes:
    return Sizes(config.num_envs, config.sync_interval, getattr(config, "num_actors", 1))


def given_sizes(flag_given) -> frozenset:
    """The size flags (`SIZE_FLAGS`) for which `flag_given(name)` is true."""
    return frozenset(name for name in SIZE_FLAGS if flag_given(name))


def applied(config, machine: Machine, processes: int = 1):
    """(`config` with its sizes fitted to `machine` under `config.layout`, the fit). A multi-process job keeps the
    preset: every process must train the same sizes, and their machines may differ."""
    choice = config.layout if processes == 1 else "preset"
    result = fit(sizes_of(config), machine, choice=choice)
    if processes > 1 and config.layout == "auto":
        result = dataclasses.replace(result, why=f"a job of {processes} processes keeps the preset")
    changes = dict(num_envs=result.sizes.num_envs, sync_interval=result.sizes.sync_interval)
    if hasattr(config, "num_actors"):
        changes["num_actors"] = result.sizes.num_actors
    return dataclasses.replace(config, **changes), result
