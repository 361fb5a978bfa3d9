"""Network weights passed by file (Spreeze, seed 002 section 3.3.1): the learner publishes its parameters every
`--publish_every` updates by writing a file and atomically renaming it; samplers pick up a new version when it appears
and never read a half-written file. The same files are the checkpoints; `--resume` restarts from the newest.

File layout in `directory`:

* `weights_{version:012d}.msgpack` -- a finished version: flax msgpack of `{"state": to_state_dict(payload),
  "meta": json.dumps(meta)}` (the format of `systems.common.checkpoint`). Files under this name are only ever created
  by `os.replace` of a complete, fsynced temporary file, so a reader sees either nothing or the whole file.
* `.weights-tmp-{pid}-{token}` -- a file being written (hidden, and never matching the final pattern). Left behind
  only by a writer that died; `publish` removes those whose pid is no longer alive (or that are very old, in case the
  pid was reused), never one that a live writer may still be writing.

Readers (`WeightsWatcher`, `load_latest`) tolerate the two things that can still go wrong: the writer's cleanup deleting
a file between listing and opening it (fall back to the next newest), and a file that is unreadable because the disk
or a foreign tool broke it (skip it, with the previous version used instead).
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

import jax
from flax import serialization

from systems.common.atomic import write_atomic
from systems.common.checkpoint import NONFINITE_REASON, OnSkip, describe_error
from systems.common.finite import restored_is_finite

__all__ = ["WeightsWatcher", "latest", "list_versions", "load", "load_latest", "publish", "weights_path"]

_FINAL = re.compile(r"weights_(\d{12,})\.msgpack")
_TMP_PREFIX = ".weights-tmp-"
_TMP = re.compile(r"\.weights-tmp-(\d+)-[0-9a-f]+")
STALE_TMP_S = 3600.0  # a temporary file untouched for this long is removed even if its pid is (again) alive


def weights_path(directory: str, version: int) -> str:
    return os.path.join(directory, f"weights_{version:012d}.msgpack")


def publish(directory: str, version: int, payload: Any, meta: dict | None = None, keep: int = 3) -> str:
    """Writes `payload` (any pytree of arrays that flax can serialize) and JSON-able `meta` as `version`; returns the
    final path.

    Written atomically (`systems.common.atomic`, temporary name `.weights-tmp-{pid}-{token}`). Then the files beyond
    the newest `keep` versions and temporary files of dead writers are deleted. If anything fails before the rename,
    the temporary file is removed and the previously published versions are untouched.

    Versions must not go backwards: publishing a version lower than the newest one in `directory` raises ValueError
    (it would be pruned at once or be invisible to watchers -- a stale directory from an earlier run, without
    `--resume`). Republishing the newest version replaces it atomically.
    """
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"version must be a non-negative int, got {version!r}")
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    os.makedirs(directory, exist_ok=True)
    newest = latest(directory)
    if newest is not None and newest[0] > version:
        raise ValueError(
            f"{directory} already holds version {newest[0]} > {version}; publish into a fresh directory or resume "
            "from the newest version"
        )
    data = serialization.msgpack_serialize(
        {"state": serialization.to_state_dict(payload), "meta": json.dumps({} if meta is None else meta)}
    )
    path = weights_path(directory, version)
    write_atomic(path, data, prefix=_TMP_PREFIX)
    _cleanup(directory, keep)
    return path


def list_versions(directory: str) -> list[tuple[int, str]]:
    """Finished versions in `directory` as (version, path), oldest first; [] if the directory does not exist."""
    return [(v, os.path.join(directory, name)) for v, name, _ in _scan(directory)[0]]


def latest(directory: str) -> tuple[int, str] | None:
    """The newest finished (version, path) by name, without reading it; None if there is none."""
    versions = _scan(directory)[0]
    if not versions:
        return None
    version, name, _ = versions[-1]
    return version, os.path.join(directory, name)


def load(path: str, template: Any) -> tuple[Any, dict]:
    """Restores the payload at `path` into the structure of `template`; returns (payload, meta).

    Leaves come back as numpy arrays (flax msgpack), whatever the template's leaves are. Raises FileNotFoundError if
    the file is gone and ValueError (naming the file) if it cannot be decoded, does not match the structure of
    `template`, or a leaf's shape differs from the template's.
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        raw = serialization.msgpack_restore(data)
        if not isinstance(raw, dict) or "state" not in raw or "meta" not in raw:
            raise ValueError("not a weights file (expected keys 'state' and 'meta')")
        meta = json.loads(raw["meta"])
        payload = serialization.from_state_dict(template, raw["state"])
    except Exception as e:  # msgpack, json and flax raise assorted types for a broken file
        raise ValueError(f"corrupt or incompatible weights file {path} ({len(data)} bytes): {e}") from e
    _check_shapes(path, template, payload)
    return payload, meta


def load_latest(directory: str, template: Any, on_skip: OnSkip | None = None) -> tuple[int, Any, dict] | None:
    """For `--resume`: the newest readable version as (version, payload, meta), skipping unreadable or non-finite
    files (each passed to `on_skip(path, reason)`) and files deleted while we look; None if there is none."""
    for version, path in reversed(list_versions(directory)):
        try:
            payload, meta = load(path, template)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as error:
            if on_skip is not None:
                on_skip(path, describe_error(error.__cause__ or error))
            continue
        if not restored_is_finite(payload):
            if on_skip is not None:
                on_skip(path, NONFINITE_REASON)
            continue
        return version, payload, meta
    return None


class WeightsWatcher:
    """A sampler's view of the learner's weights directory.

    `poll()` returns (version, payload) for the newest readable version newer than the last one it returned, else
    None. When nothing changed it costs one `os.scandir` of the directory and no file is opened. A file deleted
    between listing and opening (the writer pruned it) falls back to the next newest newer version; an unreadable
    file is skipped and remembered (by version and inode) so that it is not read again on every poll. The meta of the
    last returned version is in `self.meta`.
    """

    def __init__(self, directory: str, template: Any):
        self.directory = directory
        self.template = template
        self.version: int | None = None  # last version returned
        self.meta: dict | None = None
        self._bad: set[tuple[int, int]] = set()

    def poll(self) -> tuple[int, Any] | None:
        versions = _scan(self.directory)[0]
        for version, name, inode in reversed(versions):
            if self.version is not None and version <= self.version:
                return None
            if (version, inode) in self._bad:
                continue
            try:
                payload, meta = load(os.path.join(self.directory, name), self.template)
            except FileNotFoundError:
                continue  # pruned by the writer after we listed it: an older (or a newer, next poll) one will do
            except (OSError, ValueError):
                self._bad.add((version, inode))
                continue
            self.version, self.meta = version, meta
            return version, payload
        return None


def _scan(directory: str) -> tuple[list[tuple[int, str, int]], list[tuple[int, str]]]:
    """One `os.scandir`: finished files as (version, name, inode) sorted by version, temporary files as (pid, name)."""
    finals, tmps = [], []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                m = _FINAL.fullmatch(entry.name)
                if m:
                    try:
                        inode = entry.inode()
                    except OSError:
                        continue
                    finals.append((int(m.group(1)), entry.name, inode))
                    continue
                m = _TMP.fullmatch(entry.name)
                if m:
                    tmps.append((int(m.group(1)), entry.name))
    except FileNotFoundError:
        pass
    finals.sort()
    return finals, tmps


def _cleanup(directory: str, keep: int) -> None:
    finals, tmps = _scan(directory)
    for _, name, _ in finals[:-keep]:
        _remove(os.path.join(directory, name))
    now = time.time()
    for pid, name in tmps:
        path = os.path.join(directory, name)
        if _pid_alive(pid):
            try:
                if now - os.stat(path).st_mtime < STALE_TMP_S:
                    continue  # possibly being written right now by a live writer
            except OSError:
                continue  # already gone (renamed or removed)
        _remove(path)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:  # gone already, or (on Windows) open in a reader: a later publish retries
        pass


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # another thread of this process may be publishing
    if os.name != "posix":
        return True  # os.kill(pid, 0) would terminate the process on Windows; rely on the age limit there
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    except OSError:
        return True
    return True


def _check_shapes(path: str, template: Any, payload: Any) -> None:
    want = jax.tree_util.tree_leaves(template)
    got = jax.tree_util.tree_leaves(payload)
    if len(want) != len(got):
        raise ValueError(f"weights file {path} has {len(got)} leaves, the template {len(want)}")
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        w_shape, g_shape = getattr(w, "shape", None), getattr(g, "shape", None)
        if w_shape is not None and tuple(w_shape) != tuple(g_shape if g_shape is not None else ()):
            raise ValueError(f"weights file {path}: leaf {i} has shape {g_shape}, the template {tuple(w_shape)}")
