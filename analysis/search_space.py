"""Hyperparameter search spaces for `launch.tune`: read from a JSON or YAML file, or the default space of an
algorithm, declared beside its config fields (`systems.common.config.hyperparameter(..., search=...)`).

A space maps a launcher flag to its distribution, in the file as

    {"learning_rate": {"type": "float", "low": 1e-5, "high": 1e-2, "log": true},
     "num_epochs": {"type": "int", "low": 1, "high": 10},
     "hidden_sizes": {"type": "categorical", "choices": ["64,64", "256,256"]}}

(`float` / `int` with `low`, `high` and optional `log`; `categorical` with `choices`). `suggest` draws one point from
an Optuna trial and `flags` writes it as the launcher's flags.
"""

from __future__ import annotations

import dataclasses
import json
import os

KINDS = ("float", "int", "categorical")


@dataclasses.dataclass(frozen=True)
class Dimension:
    name: str
    kind: str  # one of KINDS
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple = ()

    def suggest(self, trial):
        if self.kind == "float":
            return trial.suggest_float(self.name, self.low, self.high, log=self.log)
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)
        return trial.suggest_categorical(self.name, list(self.choices))


def dimension(name: str, spec) -> Dimension:
    """One flag's distribution from its file entry (a dict) or a field's `search` metadata (a tuple: ("float", low,
    high[, log]), ("int", low, high[, log]) or ("categorical", choices)); ValueError with one line otherwise."""
    if isinstance(spec, tuple):
        kind, *rest = spec
        spec = ({"type": kind, "choices": list(rest[0])} if kind == "categorical" else
                {"type": kind, "low": rest[0], "high": rest[1], "log": bool(rest[2]) if len(rest) > 2 else False})
    if not isinstance(spec, dict) or spec.get("type") not in KINDS:
        raise ValueError(f"search space: {name}: give {{\"type\": one of {', '.join(KINDS)}, ...}}, got {spec!r}")
    if spec["type"] == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ValueError(f"search space: {name}: a categorical needs a non-empty list 'choices'")
        return Dimension(name, "categorical", choices=tuple(choices))
    try:
        low, high = float(spec["low"]), float(spec["high"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"search space: {name}: a {spec['type']} needs numbers 'low' and 'high'") from None
    log = bool(spec.get("log", False))
    if not low < high or (log and low <= 0):
        raise ValueError(f"search space: {name}: need low < high{' and low > 0 (log)' if log else ''}, got {low}, "
                         f"{high}")
    if spec["type"] == "int" and (low != int(low) or high != int(high)):
        raise ValueError(f"search space: {name}: an int's low and high must be whole numbers")
    return Dimension(name, spec["type"], low, high, log)


def load(path: str) -> tuple[Dimension, ...]:
    """The space in a JSON (`.json`) or YAML (`.yaml`, `.yml`) file; ValueError with one line for a file that is
    missing, unreadable or malformed."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as error:
        raise ValueError(f"--space={path}: {error.strerror}") from None
    try:
        if os.path.splitext(path)[1].lower() in (".yaml", ".yml"):
            import yaml  # Optuna's own dependency

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as error:  # json.JSONDecodeError, yaml.YAMLError
        raise ValueError(f"--space={path}: not valid {os.path.splitext(path)[1][1:] or 'JSON'}: "
                         f"{str(error).splitlines()[0]}") from None
    if not isinstance(data, dict) or not data:
        raise ValueError(f"--space={path}: give a non-empty mapping of flag names to distributions")
    return tuple(dimension(str(name), spec) for name, spec in data.items())


# Flag groups whose fields only one family of algorithms reads.
GROUP_ALGOS = {"ppo": ("ppo",), "dqn": ("dqn", "ddqn")}


def default_space(config_cls: type, algo: str, offered) -> tuple[Dimension, ...]:
    """The `search` distributions declared on `config_cls`'s hyperparameter fields that the launcher offers as flags
    (`offered(name)`), an algorithm's own group (PPO's, DQN's) only for that algorithm."""
    space = []
    for field in dataclasses.fields(config_cls):
        search = field.metadata.get("search")
        group = field.metadata.get("group")
        if search is None or not offered(field.name) or algo not in GROUP_ALGOS.get(group, (algo,)):
            continue
        space.append(dimension(field.name, search))
    return tuple(space)


def flags(point: dict) -> list[str]:
    """`--name=value` for each drawn value (floats written in full precision)."""
    return [f"--{name}={value!r}" if isinstance(value, float) else f"--{name}={value}" for name, value in point.items()]


def as_dicts(space) -> list[dict]:
    """The space as plain values (for a worker process)."""
    return [dataclasses.asdict(d) for d in space]


def from_dicts(values: list[dict]) -> tuple[Dimension, ...]:
    return tuple(Dimension(**{**v, "choices": tuple(v["choices"])}) for v in values)
