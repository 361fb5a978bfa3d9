"""Atomic checkpoints (flax msgpack serialization): write to a temporary file, fsync, then `os.replace`, so a crash
or Ctrl-C at any moment leaves the previous checkpoint intact and readable. The newest `keep` are kept.

An unreadable checkpoint (a disk error, a file truncated or edited by hand) is skipped in favour of an older one,
never silently: the loader reports each skipped file to `on_skip(path, reason)`, and `--resume` sets such files
aside (`set_aside`: renamed `<name>.unreadable`, kept for inspection, out of every listing) so the resumed run's
newer checkpoints are not pruned in favour of a broken one and later resumes do not trip on it again."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
from collections.abc import Callable
from typing import Any

from flax import serialization

from systems.common.atomic import write_atomic
from systems.common.finite import restored_is_finite

_NAME = re.compile(r"ckpt_(\d+)\.msgpack$")


def checkpoint_dir(run_dir: str) -> str:
    return os.path.join(run_dir, "checkpoints")


def save_checkpoint(run_dir: str, step: int, state: Any, meta: dict, keep: int = 2) -> str:
    """Saves `state` (any pytree of arrays) and JSON-able `meta` as checkpoint number `step`."""
    directory = checkpoint_dir(run_dir)
    os.makedirs(directory, exist_ok=True)
    payload = serialization.msgpack_serialize(
        {"state": serialization.to_state_dict(state), "meta": json.dumps(meta)}
    )
    path = os.path.join(directory, f"ckpt_{step:012d}.msgpack")
    write_atomic(path, payload)
    for old in list_checkpoints(run_dir)[:-keep]:
        os.remove(old)
    _remove_partial_files(run_dir)
    return path


def _remove_partial_files(run_dir: str) -> None:
    """Removes the temporary files of checkpoints whose writer was killed."""
    for partial in glob.glob(os.path.join(checkpoint_dir(run_dir), "ckpt_*.msgpack.tmp-*")):
        os.remove(partial)


def _decode(path: str) -> tuple[Any, dict]:
    """(state dict, meta) of a checkpoint file; msgpack, json and the OS raise assorted errors for a bad one."""
    with open(path, "rb") as f:
        raw = serialization.msgpack_restore(f.read())
    return raw["state"], json.loads(raw["meta"])


def checkpoint_step(path: str) -> int:
    """The number a checkpoint file was saved as (`save_checkpoint`'s `step`)."""
    return int(_NAME.search(path).group(1))


def decodable_checkpoints(run_dir: str) -> list[str]:
    """The run's checkpoints whose file decodes (whole msgpack with a state and a meta), oldest first; a killed
    writer's partial files are removed on the way."""
    _remove_partial_files(run_dir)
    whole = []
    for path in list_checkpoints(run_dir):
        try:
            _decode(path)
        except Exception:  # msgpack, json and the OS raise assorted types
            continue
        whole.append(path)
    return whole


def list_checkpoints(run_dir: str) -> list[str]:
    paths = [p for p in glob.glob(os.path.join(checkpoint_dir(run_dir), "ckpt_*.msgpack")) if _NAME.search(p)]
    return sorted(paths, key=lambda p: int(_NAME.search(p).group(1)))


def load_latest_checkpoint(run_dir: str, target: Any, on_skip: OnSkip | None = None) -> tuple[Any, dict] | None:
    """Restores the newest readable checkpoint into the structure of `target`; None if there is none. Each newer
    file that cannot be read, does not fit `target` or holds a non-finite value (possible only in a run from before
    the non-finite guard) is passed to `on_skip(path, reason)` before an older one is tried."""
    for path in reversed(list_checkpoints(run_dir)):
        try:
            state_dict, meta = _decode(path)
            state = serialization.from_state_dict(target, state_dict)
        except Exception as error:  # msgpack, flax, json and the OS raise assorted types
            if on_skip is not None:
                on_skip(path, describe_error(error))
            continue
        if not restored_is_finite(state):  # written before the non-finite guard: nothing to resume or evaluate
            if on_skip is not None:
                on_skip(path, NONFINITE_REASON)
            continue
        return state, meta
    return None


OnSkip = Callable[[str, str], None]
NONFINITE_REASON = "it holds non-finite values"
UNREADABLE_SUFFIX = ".unreadable"


def describe_error(error: BaseException, limit: int = 160) -> str:
    """One short line for a warning: the exception's type and the start of its message."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def set_aside(path: str, suffix: str = UNREADABLE_SUFFIX) -> str:
    """Renames a checkpoint to `<path><suffix>` (out of every listing, kept for inspection; default: unreadable);
    returns the new name, or the old one if the rename failed (the file is then only skipped)."""
    aside = path + suffix
    try:
        os.replace(path, aside)
    except OSError:
        return path
    return aside



@dataclasses.dataclass(frozen=True)
class Checkpointing:
    """How a system's state is written and read back: the state codec the run harness (`monitor.Monitor`) uses for
    its checkpoints and `--resume`. The default is this module's msgpack files; Spreeze passes its weight files.

    `save(run_dir, env_steps, state, meta) -> path`; `load(run_dir, target, on_skip) -> (state, meta) | None`
    (each unreadable newer file reported to `on_skip(path, reason)`); `extra_meta(run_dir, env_steps) -> dict`,
    called before each checkpoint is written, adds the system's own entries (PAL saves its replay buffer there)."""

    save: Callable[[str, int, Any, dict], str] = save_checkpoint
    load: Callable[[str, Any, OnSkip], tuple[Any, dict] | None] = load_latest_checkpoint
    extra_meta: Callable[[str, int], dict] | None = None
