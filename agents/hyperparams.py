"""How an algorithm declares its hyperparameters: one dataclass field each, beside the code that reads it, with the
help text, allowed values and search distribution its launchers' flags and `launch.tune` use.

The on-policy run config (`systems.common.config.TrainConfig`) inherits these dataclasses (`PPOHyperparameters`,
`OptimizerHyperparameters`, `NetworkHyperparameters`, `NormalizationHyperparameters`), and the off-policy one
(`systems.offpolicy.config.OffPolicyConfig`) theirs (`ReplayLearningHyperparameters`,
`OffPolicyOptimizerHyperparameters`, `OffPolicyNetworkHyperparameters`, `DQNHyperparameters`,
`DDPGHyperparameters`), so each hyperparameter is declared once, here in `agents/`, and reaches the run, its flag
(same name) and its preset without being copied.
"""

from __future__ import annotations

import dataclasses


def hyperparameter(default, help_text: str, choices: tuple = (), group: str = "on_policy", flag_default=None,
                   flag_kind: str = "", search: tuple | None = None):
    """A config field its launchers offer as a flag whose default (None, or the `flag_default` the launcher reads
    as "unset") means the preset (`launch.flagsets`): declared once, with the flag's help text, its allowed values
    and its --help group (fields of a group are listed in the order they are declared). `flag_kind` names the absl
    kind where the flag's text is not the field's type (e.g. "string" for a size that also takes 'auto').
    `search`: its distribution in `launch.tune`'s default space (`analysis.search_space.dimension`)."""
    return dataclasses.field(default=default, metadata={"help": help_text, "choices": tuple(choices), "group": group,
                                                        "flag_default": flag_default, "preset": True,
                                                        "flag_kind": flag_kind, "search": search})


_SAME = object()


def setting(default, help_text: str, group: str, choices: tuple = (), flag_default=_SAME, flag_kind: str = ""):
    """A config field its launcher offers as a flag with the field's own default (no preset; `flag_default` where
    the flag's text differs, e.g. "2" for an int flag read as a string), declared as `hyperparameter` is."""
    return dataclasses.field(default=default, metadata={
        "help": help_text, "choices": tuple(choices), "group": group, "preset": False, "flag_kind": flag_kind,
        "flag_default": default if flag_default is _SAME else flag_default})


def field_names(config_cls: type) -> tuple[str, ...]:
    """The field names of a dataclass (e.g. the hyperparameters an algorithm's config reads from a run config)."""
    return tuple(f.name for f in dataclasses.fields(config_cls))
