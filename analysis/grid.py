"""Sweep grids and sweep directories (the papers' sweeps, e.g. HTS-RL's actors and synchronization interval
alpha in seed 000 section 5, run by `python -m launch.sweep`).

A sweep is the cartesian product of value lists of launcher flags times a list of seeds. Every grid point runs in its
own directory `<sweep_dir>/<name>`, named after its values (`num_actors=4.sync_interval=64.seed=0`), and the
manifest `<sweep_dir>/sweep.json` records the system, the grid, the flags passed to every run and each run's command
and status. This module is pure (files are only read, there is no JAX): it parses `--sweep` values, expands grids in a
stable order, names runs, decides what a rerun does with an existing run directory and checks that a rerun's grid is
compatible with the manifest. Report tools read sweep directories with it; `launch/sweep.py` runs them.

Order: seeds are the outermost loop and the `--sweep` flags follow in command-line order, the last one varying
fastest, so the first runs of an interrupted sweep already cover the whole grid with one seed.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import itertools
import json
import os
import re

MANIFEST = "sweep.json"
MANIFEST_VERSION = 1
RESERVED = {"seed": "use --seeds", "logdir": "the sweep sets it", "resume": "the sweep sets it"}

# What a rerun finds in a run directory.
FINISHED = "finished"  # summary.json with "interrupted": false: skipped
CHECKPOINTED = "checkpointed"  # a checkpoint but no finished summary: continued with --resume
NEW = "new"  # nothing usable (no directory, or a run that died before its first checkpoint): started afresh

_FLAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.,+-]")
_MAX_NAME = 180  # well under the 255 bytes of a file name
# Checkpoints of the on-policy systems and PAL (`systems/common/checkpoint.py`) and Spreeze's weight files.
_CHECKPOINT_PATTERNS = ("ckpt_*.msgpack", "weights_*.msgpack")

Grid = tuple[tuple[str, tuple[str, ...]], ...]  # ((flag, values), ...) in command-line order


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: the swept flags' values (grid order), the seed and the directory name."""

    name: str
    flags: tuple[tuple[str, str], ...]
    seed: int


def parse_sweep(text: str) -> tuple[str, tuple[str, ...]]:
    """`name=v1,v2,...` -> (name, values). Values are split on ';' instead when there is one, so list-valued flags
    can be swept: `hidden_sizes=64,64;256,256`. Raises ValueError on a malformed, empty or repeated value."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not _FLAG_NAME.fullmatch(name):
        raise ValueError(f"--sweep={text}: expected NAME=V1,V2,... (a flag name without dashes, then its values)")
    values = tuple(v.strip() for v in rest.split(";" if ";" in rest else ","))
    if not rest.strip() or any(not v for v in values):
        raise ValueError(f"--sweep={text}: empty value")
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"--sweep={text}: repeated value {', '.join(repeated)}")
    return name, values


def build_grid(specs: list[str]) -> Grid:
    """Each `--sweep` value -> the grid; raises ValueError on a flag swept twice or a flag the sweep sets itself."""
    grid = []
    for text in specs:
        name, values = parse_sweep(text)
        if name in RESERVED:
            raise ValueError(f"--sweep={text}: --{name} cannot be swept ({RESERVED[name]})")
        if any(name == other for other, _ in grid):
            raise ValueError(f"--sweep: --{name} is swept twice; give all its values in one --sweep={name}=...")
        grid.append((name, values))
    return tuple(grid)


def parse_seeds(values: list[str]) -> tuple[int, ...]:
    """`--seeds` -> distinct non-negative ints in the given order; raises ValueError otherwise."""
    seeds = []
    for value in values:
        try:
            seed = int(value.strip())
        except ValueError:
            raise ValueError(f"--seeds: '{value}' is not an integer") from None
        if seed < 0:
            raise ValueError(f"--seeds: {seed} is negative")
        if seed in seeds:
            raise ValueError(f"--seeds: {seed} is repeated")
        seeds.append(seed)
    if not seeds:
        raise ValueError("--seeds: give at least one seed")
    return tuple(seeds)


def run_name(flags: tuple[tuple[str, str], ...], seed: int) -> str:
    """`((num_actors, 4),), 0` -> `num_actors=4.seed=0`: readable and filesystem-safe (characters other than letters,
    digits and `_.,+-` in values become `_`; names too long for a file name end in a hash of the full name)."""
    parts = [f"{flag}={_UNSAFE.sub('_', value)}" for flag, value in flags] + [f"seed={seed}"]
    name = ".".join(parts)
    if len(name) > _MAX_NAME:
        digest = hashlib.sha1(name.encode()).hexdigest()[:10]
        name = f"{name[:_MAX_NAME - 11]}.{digest}"
    return name


def expand(grid: Grid, seeds: tuple[int, ...]) -> list[RunSpec]:
    """Every (seed, grid point), seeds outermost, the last `--sweep` flag fastest. Raises ValueError when two points
    would share a directory name (values that differ only in characters the name replaces)."""
    names = [name for name, _ in grid]
    runs, seen = [], {}
    for seed in seeds:
        for values in itertools.product(*(vals for _, vals in grid)):
            flags = tuple(zip(names, values, strict=True))
            run = RunSpec(run_name(flags, seed), flags, seed)
            if run.name in seen:
                raise ValueError(f"--sweep: {dict(seen[run.name])} and {dict(flags)} would share the run "
                                 f"directory {run.name}")
            seen[run.name] = flags
            runs.append(run)
    return runs


def read_summary(run_dir: str) -> dict | None:
    """The run's summary.json, or None when it is missing or unreadable (a run killed while writing it)."""
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def has_checkpoint(run_dir: str) -> bool:
    """A checkpoint in the run's `checkpoints/`, or in an agent's of a several-agent run (Anakin's `<run>/<agent>/`,
    which `--resume` continues from the run's directory)."""
    return any(glob.glob(os.path.join(run_dir, *parts, "checkpoints", pattern))
               for parts in ((), ("*",)) for pattern in _CHECKPOINT_PATTERNS)


def run_state(run_dir: str) -> str:
    """FINISHED (summary.json says `"interrupted": false`), CHECKPOINTED (a checkpoint without a finished summary:
    interrupted, killed or crashed after its first checkpoint) or NEW."""
    summary = read_summary(run_dir)
    if summary is not None and summary.get("interrupted") is False:
        return FINISHED
    return CHECKPOINTED if has_checkpoint(run_dir) else NEW


def grid_to_json(grid: Grid) -> list[dict]:
    return [{"flag": name, "values": list(values)} for name, values in grid]


def grid_from_json(entries: list[dict]) -> Grid:
    return tuple((entry["flag"], tuple(entry["values"])) for entry in entries)


def read_manifest(sweep_dir: str) -> dict | None:
    """`<sweep_dir>/sweep.json`, or None when there is none; raises ValueError when it cannot be read."""
    path = os.path.join(sweep_dir, MANIFEST)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            manifest = json.load(f)
        missing = [key for key in ("system", "grid", "seeds", "passthrough", "runs") if key not in manifest]
        if missing:
            raise ValueError(f"no {', '.join(missing)}")
        grid_from_json(manifest["grid"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} is not a readable sweep manifest ({error})") from None
    return manifest


def check_compatible(manifest: dict, *, system: str, grid: Grid, seeds: tuple[int, ...], passthrough: list[str]):
    """Raises ValueError unless this sweep may continue in the manifest's directory: the same system, the same flags
    passed to every run (same order), the same swept flags (same order, as they make up the run names), and value
    and seed lists that contain the manifest's. So a rerun may only add grid points; it never orphans finished runs
    or mixes runs of different settings under one manifest."""
    where = "the sweep_dir's sweep.json"
    if manifest["system"] != system:
        raise ValueError(f"{where} is a sweep of launch.{manifest['system']}, not launch.{system}")
    if list(manifest["passthrough"]) != list(passthrough):
        raise ValueError(f"{where} passes {' '.join(manifest['passthrough']) or 'no flags'} to every run, this command "
                         f"passes {' '.join(passthrough) or 'none'}")
    old = grid_from_json(manifest["grid"])
    old_names, new_names = [n for n, _ in old], [n for n, _ in grid]
    if old_names != new_names:
        raise ValueError(f"{where} sweeps {', '.join(old_names) or 'only seeds'}, this command "
                         f"{', '.join(new_names) or 'only seeds'} (a rerun may only add values)")
    for (name, old_values), (_, new_values) in zip(old, grid, strict=True):
        missing = [v for v in old_values if v not in new_values]
        if missing:
            raise ValueError(f"{where} also has --{name}={','.join(missing)} (a rerun may only add values)")
    missing_seeds = [s for s in manifest["seeds"] if s not in seeds]
    if missing_seeds:
        raise ValueError(f"{where} also has seeds {','.join(map(str, missing_seeds))} (a rerun may only add seeds)")
