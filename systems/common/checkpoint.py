"""Atomic checkpoints (flax msgpack serialization): write to a temporary file, fsync, then `os.replace`, so a crash
or Ctrl-C at any moment leaves the previous checkpoint intact and readable. The newest `keep` are kept."""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Any

from flax import serialization

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
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(directory)
    for old in list_checkpoints(run_dir)[:-keep]:
        os.remove(old)
    for partial in glob.glob(os.path.join(directory, "ckpt_*.msgpack.tmp-*")):  # left by a killed writer
        os.remove(partial)
    return path


def list_checkpoints(run_dir: str) -> list[str]:
    paths = [p for p in glob.glob(os.path.join(checkpoint_dir(run_dir), "ckpt_*.msgpack")) if _NAME.search(p)]
    return sorted(paths, key=lambda p: int(_NAME.search(p).group(1)))


def load_latest_checkpoint(run_dir: str, target: Any) -> tuple[Any, dict] | None:
    """Restores the newest readable checkpoint into the structure of `target`; None if there is none."""
    for path in reversed(list_checkpoints(run_dir)):
        try:
            with open(path, "rb") as f:
                raw = serialization.msgpack_restore(f.read())
            state = serialization.from_state_dict(target, raw["state"])
            return state, json.loads(raw["meta"])
        except Exception:  # noqa: BLE001 - an unreadable file is skipped in favour of an older one
            continue
    return None


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
