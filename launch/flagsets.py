"""Each launcher's own flags, by group, in its own `absl.flags.FlagValues` (`launch.<name>.FLAGS`): `--help` lists
exactly the flags that launcher takes, grouped, with their defaults, and a flag of another launcher is refused with
one line naming who takes it.

Which groups a launcher offers, under which --help titles, and its --algo choices come from its system's registry
entry (`systems.registry`, `SystemEntry.flag_groups` and `algos`). The groups (`GROUPS`): run (every training
launcher; Spreeze's without checkpoints), on_policy / ppo / normalization (the PPO / A2C launchers; BA3C's and
GALA's on_policy without --num_envs), multi_host, scale_out (launch.ba3c and launch.gala, multi-host within it),
off_policy (launch.pal and launch.spreeze), and "fields:<group>" for what only one system takes (its config's fields
of that group). Hyperparameter flags default to None: the preset of the env family and algorithm
(`systems.common.presets`, `systems.offpolicy.presets`).

Every group's flags are generated from their configs' `hyperparameter` / `setting` fields (`from_fields`; the
multi-host ones from `MultiHostConfig`): help text, choices, group and kind are declared once, in the field; a
hyperparameter's flag defaults to None (the preset), a setting's to the field's value. (ml_collections'
`config_flags` would rename every flag to `--config.<name>`.) Only --game / --env (read into `env_id`) are written
here, and the launchers' own few (--preset, --eval_deterministic, --step_time)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from absl import flags

from systems.common.config import MultiHostConfig, TrainConfig, hyperparameters
from systems.common.presets import PRESET_CHOICES, TASK_PRESETS
from systems.common.registry import SystemEntry
from systems.registry import ENTRIES


@dataclasses.dataclass(frozen=True)
class Spec:
    """One flag: its absl kind ('string', 'integer', 'float', 'boolean', 'enum' or 'list'), name, default, help."""

    kind: str
    name: str
    default: Any
    help: str
    choices: tuple = ()


def _s(name, default, help_):
    return Spec("string", name, default, help_)


def _b(name, default, help_):
    return Spec("boolean", name, default, help_)


def _e(name, default, choices, help_):
    return Spec("enum", name, default, help_, tuple(choices))


def run_group(config_cls: type, *, checkpoints: bool = True) -> list[Spec]:
    """What every training run has: the task (--game / --env, read into `env_id`) and `RunConfig`'s "run" fields
    (seed, length, run directory, evaluation, checkpoints unless the system has none, time limit, outputs)."""
    names = [name for name in hyperparameters(config_cls, "run") if checkpoints or name != "checkpoint_every"]
    return [
        _s("game", None, "Atari game name, e.g. Breakout (EnvPool id Breakout-v5)."),
        _s("env", None, "Task id instead of --game: EnvPool's (e.g. CartPole-v1, "
           "gfootball/academy_empty_goal_close-v1), gymnasium/<id>, gymnax/<id> (e.g. gymnax/Breakout-MinAtar), "
           "brax/<name> or jax/<module>:<callable> (a JAX env with gymnax's interface)."),
        *from_fields(config_cls, tuple(names)),
    ]


# The on-policy hyperparameters: the `hyperparameter` fields of `TrainConfig` (help text, choices and group there),
# offered as flags whose default is the preset. A new one is declared in the config only.
ON_POLICY_HYPERPARAMETERS = hyperparameters(TrainConfig, "on_policy")
PPO_HYPERPARAMETERS = hyperparameters(TrainConfig, "ppo")
NORMALIZATION_HYPERPARAMETERS = hyperparameters(TrainConfig, "normalization")
RECURRENT_HYPERPARAMETERS = hyperparameters(TrainConfig, "recurrent")
_KINDS = {"float": "float", "int": "integer", "bool": "boolean", "str": "string", "tuple": "list"}


def from_fields(config_cls: type, names: tuple[str, ...]) -> list[Spec]:
    """The flags of `config_cls`'s `hyperparameter` / `setting` fields `names`, in that order: the kind from the
    field's type (an enum where it has choices), the help from its metadata, and the default None (the preset) or,
    for a setting, the field's."""
    fields = {field.name: field for field in dataclasses.fields(config_cls)}
    specs = []
    for name in names:
        field = fields[name]
        if "help" not in field.metadata:
            raise TypeError(f"{config_cls.__name__}.{name} is not declared with systems.common.config.hyperparameter")
        choices = field.metadata["choices"]
        type_name = field.type if isinstance(field.type, str) else field.type.__name__  # postponed or not
        kind = field.metadata.get("flag_kind") or (
            "enum" if choices else _KINDS[type_name.split("|")[0].split("[")[0].strip()])
        specs.append(Spec(kind, name, field.metadata["flag_default"], field.metadata["help"], choices))
    return specs


def on_policy_group(*, algos: tuple[str, ...], num_envs: bool = True) -> list[Spec]:
    """PPO / A2C hyperparameters shared by launch.hts, launch.sync, launch.ba3c and launch.gala."""
    return [
        _e("algo", None, algos, "Algorithm (default: " + algos[0] + ")."),
        *(from_fields(TrainConfig, ("num_envs",)) if num_envs else []),
        _e("preset", "task", PRESET_CHOICES,
           "Hyperparameters no flag gives: task = the task's own tuned preset where there is one (rl-zoo3's; "
           "GFootball's empty goal: measured here; for "
           + "; ".join(f"{algo.upper()}: " + ", ".join(sorted(env for env, a in TASK_PRESETS if a == algo))
                       for algo in sorted({a for _, a in TASK_PRESETS}, reverse=True))
           + "), else its env family's; family = the family's (CleanRL's, the papers'). config.json records "
           "which."),
        *from_fields(TrainConfig, ON_POLICY_HYPERPARAMETERS),
        _b("eval_deterministic", False, "Evaluate the greedy policy instead of sampling."),
        _s("step_time", "none",
           "Simulated env step time: none, const:SECONDS, exp:MEAN or gamma:SHAPE:MEAN (seconds)."),
    ]


PPO = from_fields(TrainConfig, PPO_HYPERPARAMETERS)
NORMALIZATION = from_fields(TrainConfig, NORMALIZATION_HYPERPARAMETERS)
MULTI_HOST = from_fields(MultiHostConfig, hyperparameters(MultiHostConfig, "multi_host"))


def scale_out_group(config_cls: type) -> list[Spec]:
    """Multi-host start-up (`jax.distributed`) and learning-rate scaling of launch.ba3c and launch.gala. For a
    multi-host run start the same command on every host with its own --process_id; process 0's address is the
    coordinator."""
    return [*MULTI_HOST, *from_fields(config_cls, hyperparameters(config_cls, "scale_out"))]


def off_policy_group(config_cls: type, *, algos: tuple[str, ...]) -> list[Spec]:
    """The off-policy algorithm's flags of launch.pal and launch.spreeze: `--algo` (each its own choices) and
    `config_cls`'s "off_policy" fields (`OffPolicyConfig`; Spreeze's `batch_size` also takes 'auto')."""
    return [_e("algo", None, algos, "Algorithm (default: " + algos[0] + ")."),
            *from_fields(config_cls, hyperparameters(config_cls, "off_policy"))]


def define(flag_values: flags.FlagValues, section: str, specs: list[Spec]) -> None:
    """Defines `specs` in `flag_values` under the help section `section`."""
    for spec in specs:
        common = dict(flag_values=flag_values, module_name=section)
        if spec.kind == "enum":
            flags.DEFINE_enum(spec.name, spec.default, list(spec.choices), spec.help, **common)
        else:
            define_fn = getattr(flags, f"DEFINE_{spec.kind}")
            define_fn(spec.name, spec.default, spec.help, **common)


# The groups a system's registry entry names (`SystemEntry.flag_groups`): group -> (config class, algos) -> flags.
GROUPS = {
    "run": lambda config_cls, algos: run_group(config_cls),
    "run_without_checkpoints": lambda config_cls, algos: run_group(config_cls, checkpoints=False),
    "on_policy": lambda config_cls, algos: on_policy_group(algos=algos),
    "on_policy_without_num_envs": lambda config_cls, algos: on_policy_group(algos=algos, num_envs=False),
    "ppo": lambda config_cls, algos: PPO,
    "normalization": lambda config_cls, algos: NORMALIZATION,
    "multi_host": lambda config_cls, algos: MULTI_HOST,
    "scale_out": lambda config_cls, algos: scale_out_group(config_cls),
    "off_policy": lambda config_cls, algos: off_policy_group(config_cls, algos=algos),
}


def groups_of(entry: SystemEntry) -> list[tuple[str, list[Spec]]]:
    """The launcher's flag groups, in --help order, as its registry entry names them: (section title, flags)."""
    config_cls = entry.config_class()
    sections = []
    for title, group in entry.flag_groups:
        if group.startswith("fields:"):
            names = [name for g in group[len("fields:"):].split(",") for name in hyperparameters(config_cls, g)]
            specs = from_fields(config_cls, tuple(names))
        else:
            specs = GROUPS[group](config_cls, entry.algos)
        sections.append((title, specs))
    return sections


@functools.cache
def sections(launcher: str) -> list[tuple[str, list[Spec]]]:
    """`launcher`'s flag groups (`groups_of` its registry entry), built when first asked for: a launcher imports only
    its own system's config (another's only to name who takes a stray flag)."""
    return groups_of(next(entry for entry in ENTRIES.values() if entry.launcher == launcher))


def flag_values(launcher: str) -> flags.FlagValues:
    """A new `FlagValues` holding exactly `launcher`'s flags, grouped by section for --help."""
    flag_values_ = flags.FlagValues()
    for section, specs in sections(launcher):
        define(flag_values_, section, specs)
    return flag_values_


def taken_by(name: str) -> list[str]:
    """The launchers that take `--name` (with or without a `no` prefix of a boolean)."""
    found = []
    for launcher in (entry.launcher for entry in ENTRIES.values()):
        for _, specs in sections(launcher):
            if any(spec.name == name or (spec.kind == "boolean" and name == f"no{spec.name}") for spec in specs):
                found.append(launcher)
                break
    return found


def algos_of(launcher: str) -> tuple[str, ...]:
    return next(e.algos for e in ENTRIES.values() if e.launcher == launcher)


def launchers_training(algo: str) -> list[str]:
    return [entry.launcher for entry in ENTRIES.values() if algo in entry.algos]


def help_text(launcher: str, flag_values_: flags.FlagValues) -> str:
    """The launcher's flags, section by section in definition order, with their defaults (absl's format)."""
    return "\n\n".join(flag_values_.module_help(section).strip("\n") for section, _ in sections(launcher))
