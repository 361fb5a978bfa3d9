"""The layout rule: how many envs, steps per round and actor threads a run gets on the machine it runs on, when the
user sized none of them.

The presets are sized for a 2-core CPU (`PRESET_CORES`): the main job's Breakout preset is CleanRL's 8 envs x 128
steps with one actor thread. Elsewhere that leaves the machine idle:

* **on an accelerator** each forward pass is a host-device round trip for a handful of observations, so the actor
  threads, not the device, bound the run. The rule gives the actors `ACCELERATOR_ENVS` envs in
  `ACCELERATOR_ACTORS` threads and shortens the round to keep the preset's env steps per update (Breakout: 128
  envs x 8 steps, 4 threads: the layout measured on a GPU in `benchmarks/gpu_check.sh`). Every forward pass then
  takes a chunk of all the envs (HTS's `--inference_batch`, whose default is half of them): env e sits in row
  e mod chunk (`systems.common.rollout`), so a ready batch that holds two envs of one row needs two passes, which
  half-sized chunks make the rule, and on an accelerator each pass is a host-device round trip that costs about as
  much for twice the rows;
* **on a CPU with more cores** than the preset's, the envs (and EnvPool's threads, one per env up to the cores:
  `envs.factory.make_pool`) grow with the cores, one actor thread per `CORES_PER_ACTOR` cores, the round again kept;
* **on a CPU of `PRESET_CORES` cores or fewer** the preset stays, bit for bit.

The round's env steps (num_envs x sync_interval) are kept exactly: the rule only picks env counts that divide it,
so the updates per env step, the PPO minibatch sizes and the learning-rate schedule are the preset's. Shorter
rollouts change what GAE sees per round; the rule departs from the preset there and nowhere else.

The other systems apply the rule along their own axes:

* **Anakin** (`launch.anakin`) takes the accelerator branch as it is (each of its steps is one device program over
  all its envs, so a few envs leave the device as idle as HTS's few-observation forward passes), with the envs split
  evenly over its devices, and keeps the preset on any CPU (`fit(..., scale_on_cpu=False)`): the CPU branch's reason,
  EnvPool's threads stepping more envs at once, does not apply to envs inside an XLA program;
* **BA3C** (`launch.ba3c`, `fit_batch`) grows the envs per device on the same two branches but keeps the rollout:
  it is the n-step return the A2C loss bootstraps over (A3C's t_max, 5 in the preset), so shortening it would change
  the algorithm's targets, not only the machine's fit. The local batch grows with the envs, which is the paper's own
  axis: Distributed BA3C trains with Adam at effective batches up to 2048 (abstract, Sec. 2.4; its one-node baseline
  is a 12-core CPU at batch 512, Sec. 3.1), with the learning rate unscaled. `BATCH_MOST` caps the effective batch
  (all devices) there;
* **GALA** keeps its preset everywhere (`GALA_PRESET_WHY`): its 4 learners x 16 envs are the paper's layout for one
  GPU (seed 004, Sec. 5 and Appendix C), and its scaling axis is more learners, each of 16 envs, which changes the
  algorithm (the gossip graph, the learning-rate scaling), not the machine's fit.

A size given on the command line, or `--layout=preset`, keeps the literal preset (and the given sizes): the
launcher turns `--layout=auto`, its default, into `preset` when the user gave a size (`given_sizes`). A config
made in code keeps its sizes unless it asks for `layout="auto"`. A resumed run keeps the sizes its config.json
records, whatever machine it resumes on (rule "resumed"): the sizes are part of what it learns. The choice is
printed in the run's start line and recorded in config.json's plan (`Fit.record`).
"""

from __future__ import annotations

import dataclasses

from envs.cores import usable_cores
from systems.common import rundir

PRESET_CORES = 2  # the machine the presets are sized for
ACCELERATOR_ENVS = 128
ACCELERATOR_ACTORS = 4
CORES_PER_ACTOR = 8
MAX_ACTORS = 4
BATCH_MOST = 2048  # BA3C's largest effective batch: seed 001 trains with Adam at batches up to 2048
SIZE_FLAGS = ("num_envs", "sync_interval", "num_actors")
BA3C_SIZE_FLAGS = ("sync_interval", "local_batch")
ANAKIN_SIZE_FLAGS = ("num_envs", "sync_interval")
ANAKIN_CPU_WHY = "Anakin's envs step inside one XLA program, not in EnvPool threads that more cores would run"
GALA_PRESET_WHY = ("GALA keeps its sizes on every machine: seed 004 runs 16 envs a learner, on one GPU too, and grows "
                   "by learners, which changes the algorithm")
CHOICES = ("auto", "preset")


@dataclasses.dataclass(frozen=True)
class Machine:
    backend: str  # JAX's default backend: "cpu", "gpu", "tpu"
    cores: int  # the CPU cores this process may use

    def describe(self) -> str:
        return f"{self.backend}, {self.cores} cores"


def this_machine() -> Machine:
    import jax

    return Machine(jax.default_backend(), usable_cores())


@dataclasses.dataclass(frozen=True)
class Sizes:
    num_envs: int
    sync_interval: int
    num_actors: int  # 0: a system without actor threads (Anakin, BA3C)
    inference_batch: int = 0  # the actors' forward-pass chunk; 0: the system's default

    def describe(self) -> str:
        envs = f"{self.num_envs} envs x {self.sync_interval} steps"
        if self.num_actors:
            envs += f", {self.num_actors} actor {'thread' if self.num_actors == 1 else 'threads'}"
        if self.inference_batch:
            envs += f", forward passes of {self.inference_batch}"
        return envs


@dataclasses.dataclass(frozen=True)
class Fit:
    rule: str  # "accelerator", "many-core cpu", "preset", "resumed"
    sizes: Sizes
    why: str  # one line
    machine: Machine

    def describe(self) -> str:
        return f"layout: {self.sizes.describe()} ({self.rule}: {self.why})"

    def record(self) -> dict:
        """config.json's record of the layout (its plan's `layout`)."""
        return {"machine": self.machine.describe(), "rule": self.rule, "sizes": self.sizes.describe(),
                "why": self.why}


def _envs_dividing(round_steps: int, base: int, most: int, split_over: int = 1) -> int:
    """The largest multiple of `base` up to `most` that divides `round_steps` and splits evenly over `split_over`
    devices (at least `base`)."""
    best = base
    for envs in range(base, most + 1, base):
        if round_steps % envs == 0 and envs % split_over == 0:
            best = envs
    return best


def fit(preset: Sizes, machine: Machine, choice: str = "auto", scale_on_cpu: bool = True, split_over: int = 1) -> Fit:
    """The layout of a run whose preset is `preset` on `machine` (module docstring); `choice` "preset" keeps it,
    `scale_on_cpu` False keeps it on every CPU (Anakin), and the envs split evenly over `split_over` devices."""

    def chosen(rule: str, sizes: Sizes, why: str) -> Fit:
        return Fit(rule, sizes, why, machine)

    if choice == "preset":
        return chosen("preset", preset, "--layout=preset, or a size flag given")
    if machine.backend == "cpu" and not scale_on_cpu and machine.cores > PRESET_CORES:
        return chosen("preset", preset, ANAKIN_CPU_WHY)
    round_steps = preset.num_envs * preset.sync_interval
    if machine.backend != "cpu":
        if preset.num_envs >= ACCELERATOR_ENVS:
            return chosen("preset", preset, f"{preset.num_envs} envs already feed the {machine.backend}")
        envs = _envs_dividing(round_steps, preset.num_envs, ACCELERATOR_ENVS, split_over)
        actors = max(preset.num_actors, min(ACCELERATOR_ACTORS, envs)) if preset.num_actors else 0
        if envs == preset.num_envs and actors == preset.num_actors:
            return chosen("preset", preset, f"no larger env count divides the {round_steps:,}-step round")
        return chosen("accelerator", Sizes(envs, round_steps // envs, actors, envs if actors else 0),
                      f"the actors' forward passes on a {machine.backend} need many envs each; the round keeps its "
                      f"{round_steps:,} env steps")
    if machine.cores <= PRESET_CORES:
        return chosen("preset", preset, f"a CPU of {machine.cores} cores, the presets' size")
    scale = machine.cores // PRESET_CORES
    envs = _envs_dividing(round_steps, preset.num_envs, preset.num_envs * scale, split_over)
    actors = max(preset.num_actors, min(MAX_ACTORS, machine.cores // CORES_PER_ACTOR, envs)) if preset.num_actors else 0
    if envs == preset.num_envs and actors == preset.num_actors:
        return chosen("preset", preset, f"no larger env count divides the {round_steps:,}-step round")
    return chosen("many-core cpu", Sizes(envs, round_steps // envs, actors),
                  f"{machine.cores} cores step {scale}x the presets' envs; the round keeps its {round_steps:,} env "
                  "steps")


def fit_batch(preset: Sizes, machine: Machine, choice: str = "auto", devices: int = 1) -> Fit:
    """BA3C's layout (module docstring): `preset` is one device's envs and rollout; the envs per device grow on an
    accelerator (to `ACCELERATOR_ENVS`) or with a CPU's cores, by multiples of the preset's, the rollout kept and
    the effective batch (`devices` x envs x rollout) at most `BATCH_MOST`, else the preset's own."""
    if choice == "preset":
        return Fit("preset", preset, "--layout=preset, or a size flag given", machine)
    if machine.backend != "cpu":
        rule, wanted = "accelerator", max(preset.num_envs, ACCELERATOR_ENVS)
        why = f"the forward passes on a {machine.backend} need many envs each"
    elif machine.cores > PRESET_CORES:
        rule, wanted = "many-core cpu", preset.num_envs * (machine.cores // PRESET_CORES)
        why = f"{machine.cores} cores step {machine.cores // PRESET_CORES}x the presets' envs"
    else:
        return Fit("preset", preset, f"a CPU of {machine.cores} cores, the presets' size", machine)
    if wanted < 2 * preset.num_envs:
        return Fit("preset", preset, f"{preset.num_envs} envs per device already fit this machine", machine)
    most = BATCH_MOST // (devices * preset.sync_interval)
    envs = min(wanted, most) // preset.num_envs * preset.num_envs
    if envs <= preset.num_envs:
        return Fit("preset", preset, f"a larger env count would pass the effective batch of {BATCH_MOST:,}", machine)
    batch = devices * envs * preset.sync_interval
    return Fit(rule, Sizes(envs, preset.sync_interval, preset.num_actors),
               f"{why}; the {preset.sync_interval}-step rollout kept, so the effective batch grows to {batch:,} "
               f"(seed 001: Adam at batches up to {BATCH_MOST:,})", machine)


def sizes_of(config) -> Sizes:
    return Sizes(config.num_envs, config.sync_interval, getattr(config, "num_actors", 0))


def given_sizes(flag_given, names: tuple = SIZE_FLAGS) -> frozenset:
    """The size flags among `names` for which `flag_given(name)` is true."""
    return frozenset(name for name in names if flag_given(name))


def _choice(config, processes: int) -> str:
    return config.layout if processes == 1 else "preset"


def _said_for_processes(result: Fit, config, processes: int) -> Fit:
    if processes > 1 and config.layout == "auto":
        return dataclasses.replace(result, why=f"a job of {processes} processes keeps the preset")
    return result


def _recorded(config, fields: tuple, run_dir: str | None) -> dict | None:
    """The `fields` that the config.json of the run `config` resumes (in `run_dir`, else its logdir) records; None
    for a run that starts afresh, or with `--layout=preset` (its sizes are the flags')."""
    run_dir = run_dir or config.logdir
    if not (config.resume and config.layout == "auto" and run_dir):
        return None
    previous = rundir.read_config(run_dir)
    if previous is None or not all(name in previous for name in fields):
        return None  # no run there: the run directory's check says so
    return {name: previous[name] for name in fields}


RESUMED_WHY = "a resumed run keeps the sizes it started with"


def applied(config, machine: Machine, processes: int = 1, scale_on_cpu: bool = True, split_over: int = 1,
            run_dir: str | None = None):
    """(`config` with its sizes fitted to `machine` under `config.layout`, the fit). A multi-process job keeps the
    preset: every process must train the same sizes, and their machines may differ. A resumed run keeps the sizes
    recorded in `run_dir` (default: its logdir)."""
    fields = SIZE_FLAGS if hasattr(config, "num_actors") else SIZE_FLAGS[:2]
    fields += ("inference_batch",) if hasattr(config, "inference_batch") else ()
    recorded = _recorded(config, fields, run_dir)
    if recorded is not None:
        result = Fit("resumed", Sizes(**{"num_actors": 0, **recorded}), RESUMED_WHY, machine)
    else:
        result = fit(sizes_of(config), machine, choice=_choice(config, processes), scale_on_cpu=scale_on_cpu,
                     split_over=split_over)
        result = _said_for_processes(result, config, processes)
    changes = dict(num_envs=result.sizes.num_envs, sync_interval=result.sizes.sync_interval)
    if hasattr(config, "num_actors"):
        changes["num_actors"] = result.sizes.num_actors
    if hasattr(config, "inference_batch") and result.sizes.inference_batch:
        if config.inference_batch:  # the user's --inference_batch stands (and a resumed run checks it)
            result = dataclasses.replace(result, sizes=dataclasses.replace(result.sizes, inference_batch=0))
        else:
            changes["inference_batch"] = result.sizes.inference_batch
    return dataclasses.replace(config, **changes), result


def applied_batch(config, machine: Machine, devices: int, processes: int = 1):
    """BA3C's `applied`: (`config` with its local batch fitted by `fit_batch` over `devices` devices of every
    process, the fit). `config.local_batch / config.sync_interval` are one device's envs."""
    recorded = _recorded(config, ("local_batch", "sync_interval"), None)
    if recorded is not None:
        sizes = Sizes(recorded["local_batch"] // recorded["sync_interval"], recorded["sync_interval"], 0)
        return dataclasses.replace(config, **recorded), Fit("resumed", sizes, RESUMED_WHY, machine)
    preset = Sizes(config.local_batch // config.sync_interval, config.sync_interval, 0)
    result = fit_batch(preset, machine, choice=_choice(config, processes), devices=devices)
    result = _said_for_processes(result, config, processes)
    return dataclasses.replace(config, local_batch=result.sizes.num_envs * result.sizes.sync_interval), result


def preset_fit(sizes: Sizes, machine: Machine, why: str) -> Fit:
    """A system whose preset fits every machine (GALA): its sizes, recorded and printed as the others' fits."""
    return Fit("preset", sizes, why, machine)
