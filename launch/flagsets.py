"""Each launcher's own flags, by group, in its own `absl.flags.FlagValues` (`launch.<name>.FLAGS`): `--help` lists
exactly the flags that launcher takes, grouped, with their defaults, and a flag of another launcher is refused with
one line naming who takes it.

Groups: RUN (every training launcher), ON_POLICY / PPO / NORMALIZATION (the PPO / A2C launchers), HTS (actor
threads and batches of launch.hts), HTS_DEVICES (its actor and learner devices), MULTI_HOST (launch.hts, and within
the scale-out group launch.ba3c and launch.gala), SCALE_OUT (launch.ba3c and launch.gala), OFF_POLICY (launch.pal and
launch.spreeze), and one group per launcher for what only it takes. Hyperparameter flags default to None: the
preset of the env family and algorithm (`systems.common.presets`, `systems.offpolicy.presets`).

Every group's flags are generated from their configs' `hyperparameter` / `setting` fields (`from_fields`; the
multi-host ones from `MultiHostConfig`): help text, choices, group and kind are declared once, in the field; a
hyperparameter's flag defaults to None (the preset), a setting's to the field's value. (ml_collections'
`config_flags` would rename every flag to `--config.<name>`.) Only --game / --env (read into `env_id`) and each
launcher's --algo choices are written here, and the launchers' own few (--preset, --eval_deterministic,
--step_time)."""

from __future__ import annotations

import dataclasses
from typing import Any

from absl import flags

from systems.anakin.config import AnakinConfig
from systems.ba3c.config import BA3CConfig
from systems.common.config import TrainConfig, hyperparameters
from systems.common.presets import PRESET_CHOICES, TASK_PRESETS
from systems.gala.config import GALAConfig
from systems.hts.config import HTSConfig
from systems.pal.config import PALConfig
from systems.spreeze.config import SpreezeConfig
from systems.sync.config import SyncConfig


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
           "gfootball/academy_empty_goal_close-v1), gymnasium/<id> or gymnax/<id> (e.g. gymnax/Breakout-MinAtar)."),
        *from_fields(config_cls, tuple(names)),
    ]


# The on-policy hyperparameters: the `hyperparameter` fields of `TrainConfig` (help text, choices and group there),
# offered as flags whose default is the preset. A new one is declared in the config only.
ON_POLICY_HYPERPARAMETERS = hyperparameters(TrainConfig, "on_policy")
PPO_HYPERPARAMETERS = hyperparameters(TrainConfig, "ppo")
NORMALIZATION_HYPERPARAMETERS = hyperparameters(TrainConfig, "normalization")
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
HTS = from_fields(HTSConfig, hyperparameters(HTSConfig, "hts"))
HTS_DEVICES = from_fields(HTSConfig, hyperparameters(HTSConfig, "hts_devices"))
MULTI_HOST = from_fields(HTSConfig, hyperparameters(HTSConfig, "multi_host"))


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


# PAL's flags in --help order: its threads and replay, the DQN exploration fields (`OffPolicyConfig`), allocation.
PAL_FLAGS = (*hyperparameters(PALConfig, "pal"), *hyperparameters(PALConfig, "dqn"),
             *hyperparameters(PALConfig, "pal_run"))
PAL = from_fields(PALConfig, PAL_FLAGS)
SPREEZE = from_fields(SpreezeConfig, hyperparameters(SpreezeConfig, "spreeze"))
BA3C = from_fields(BA3CConfig, hyperparameters(BA3CConfig, "ba3c"))
GALA = from_fields(GALAConfig, hyperparameters(GALAConfig, "gala"))
ANAKIN = from_fields(AnakinConfig, hyperparameters(AnakinConfig, "anakin"))

_ON_POLICY_ALGOS = ("ppo", "a2c")
# Each training launcher's flag groups, in --help order: (section title, flags).
LAUNCHERS: dict[str, list[tuple[str, list[Spec]]]] = {
    "hts": [("run", run_group(HTSConfig)), ("PPO / A2C", on_policy_group(algos=_ON_POLICY_ALGOS)),
            ("PPO only", PPO),
            ("observation and reward normalization", NORMALIZATION), ("HTS-RL actors and batches", HTS),
            ("devices", HTS_DEVICES),
            ("multi-host (the same command on every host with its own --process_id)", MULTI_HOST)],
    "sync": [("run", run_group(SyncConfig)), ("PPO / A2C", on_policy_group(algos=_ON_POLICY_ALGOS)),
             ("PPO only", PPO),
             ("observation and reward normalization", NORMALIZATION)],
    "ba3c": [("run", run_group(BA3CConfig)), ("A2C", on_policy_group(algos=("a2c",), num_envs=False)),
             ("scale-out", scale_out_group(BA3CConfig)),
             ("BA3C", BA3C)],
    "gala": [("run", run_group(GALAConfig)), ("A2C", on_policy_group(algos=("a2c",), num_envs=False)),
             ("scale-out", scale_out_group(GALAConfig)),
             ("GALA", GALA)],
    "pal": [("run", run_group(PALConfig)),
            ("off-policy", off_policy_group(PALConfig, algos=("dqn", "ddqn", "ddpg", "td3", "sac"))),
            ("PAL actors, learners and replay", PAL)],
    "anakin": [("run", run_group(AnakinConfig)), ("PPO / A2C", on_policy_group(algos=_ON_POLICY_ALGOS)),
               ("PPO only", PPO), ("observation and reward normalization (one device)", NORMALIZATION),
               ("Anakin: agents, chunks and devices", ANAKIN),
               ("multi-host (the same command on every host with its own --process_id)", MULTI_HOST)],
    "spreeze": [("run", run_group(SpreezeConfig, checkpoints=False)),
                ("off-policy", off_policy_group(SpreezeConfig, algos=("sac", "td3", "ddpg"))),
                ("Spreeze processes", SPREEZE)],
}


def flag_values(launcher: str) -> flags.FlagValues:
    """A new `FlagValues` holding exactly `launcher`'s flags, grouped by section for --help."""
    flag_values_ = flags.FlagValues()
    for section, specs in LAUNCHERS[launcher]:
        define(flag_values_, section, specs)
    return flag_values_


def taken_by(name: str) -> list[str]:
    """The launchers that take `--name` (with or without a `no` prefix of a boolean)."""
    found = []
    for launcher, groups in LAUNCHERS.items():
        for _, specs in groups:
            if any(spec.name == name or (spec.kind == "boolean" and name == f"no{spec.name}") for spec in specs):
                found.append(launcher)
                break
    return found


def algos_of(launcher: str) -> tuple[str, ...]:
    return next(spec.choices for _, specs in LAUNCHERS[launcher] for spec in specs if spec.name == "algo")


def launchers_training(algo: str) -> list[str]:
    return [launcher for launcher in LAUNCHERS if algo in algos_of(launcher)]


def help_text(launcher: str, flag_values_: flags.FlagValues) -> str:
    """The launcher's flags, section by section in definition order, with their defaults (absl's format)."""
    return "\n\n".join(flag_values_.module_help(section).strip("\n") for section, _ in LAUNCHERS[launcher])
