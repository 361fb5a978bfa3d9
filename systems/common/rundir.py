"""Run directories with an owner: one run at a time, never a second run mixed into the first.

* A run holds an exclusive `flock` on `<run dir>/.lock` for its whole life. The kernel releases it when the process
  ends, however it ends (SIGKILL included), so a crash never leaves a stale lock; a second run on the same directory
  (or a sweep's rerun while an orphaned child still writes there) is refused with the holder's pid.
* Without `--resume` a directory that already holds a run (its `config.json`) is refused: starting again would
  truncate the first run's logs and mix its checkpoints with the new run's.
* With `--resume`, the flags that define the run must equal those in its `config.json`; only the flags in
  `RESUMABLE_FIELDS` (how long it runs and how it is watched) and a system's own `may_change` may differ. A
  different `--num_envs` once made a 2,048-step checkpoint "resume at 4,096 steps".
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import os
from typing import Any

from systems.common.checkpoint import checkpoint_dir
from systems.common.config import SYSTEM_KEY, ConfigError, recorded_config
from systems.common.outputs import json_default

LOCK_FILE = ".lock"
CONFIG_FILE = "config.json"

# May change on --resume: the run's length and reporting, never what or how it learns.
RESUMABLE_FIELDS = frozenset({
    "track", "wandb_project", "wandb_entity", "wandb_group",
    "total_steps", "time_limit", "target_return", "stop_at_target", "eval_every", "eval_episodes", "eval_deterministic",
    "checkpoint_every", "quiet", "resume", "logdir", "step_time", "startup_timeout",
})

_FLAG_NAMES = {"env_id": "env"}  # config fields whose flag has another name
# Compared last: the envs of PAL, Spreeze, BA3C and GALA follow from their layout flags, which are what a user
# changed. Their launchers record 0 (not read); runs saved before recorded the derived count.
_DERIVED_FIELDS = frozenset({"num_envs"})


class RunDirectory:
    """The claimed run directory; keep the object for the run's life (its file descriptor holds the lock)."""

    def __init__(self, path: str, fd: int):
        self.path = path
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = -1


def claim(path: str, config: Any, *, may_change: frozenset = frozenset(), plan: dict | None = None,
          system: str | None = None) -> RunDirectory:
    """Creates and locks `path` for the run of `config` (a config dataclass with `resume`); ConfigError (one line)
    when the directory cannot be used: not creatable, in use, holding another run without --resume, or holding a
    run of another system or whose defining flags differ from `config`'s with --resume. `plan`: the values the
    system derived from `config`, which a run saved before its system recorded plans kept in the config's own
    fields; `system`: the name of the system that claims the directory."""
    try:
        os.makedirs(path, exist_ok=True)
        fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise ConfigError(f"--logdir {path}: {_reason(error)}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_pid(fd)
        os.close(fd)
        raise ConfigError(
            f"--logdir {path} is in use by another run (pid {holder}); wait for it to end or choose another directory"
        ) from None
    run_dir = RunDirectory(path, fd)
    try:
        _write_pid(fd)
        _check_existing(path, config, may_change, plan, system)
    except BaseException:
        run_dir.release()
        raise
    return run_dir


def holder_pid(path: str) -> int | None:
    """The pid of the run holding `path`'s lock, or None when no live run holds it (for tools such as sweeps)."""
    try:
        fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_pid(fd) or -1
    finally:
        os.close(fd)
    return None


def _check_existing(path: str, config: Any, may_change: frozenset, plan: dict | None, system: str | None) -> None:
    previous = read_config(path)
    if not config.resume:
        if previous is not None and _saved_nothing(path):
            raise ConfigError(
                f"--logdir {path} holds a run that stopped before saving anything (no checkpoint, so --resume "
                "cannot continue it); remove the directory to start again, or choose another directory"
            )
        if previous is not None:
            raise ConfigError(
                f"--logdir {path} already holds a run ({CONFIG_FILE}); pass --resume to continue it, or choose "
                "another directory"
            )
        return
    if previous is None:
        raise ConfigError(f"--resume: {path} holds no run (no readable {CONFIG_FILE})")
    owner = previous.get(SYSTEM_KEY)
    if system is not None and owner is not None and owner != system:
        raise ConfigError(
            f"--resume: {path} holds a run of {owner}, not {system}; resume it with python -m launch.{owner}"
        )
    current = json.loads(json.dumps(dataclasses.asdict(config), default=json_default))
    allowed = (RESUMABLE_FIELDS | may_change) & current.keys()
    if current.get("num_envs") == 0:
        current.pop("num_envs")  # not read by this run's system
    for name, value in sorted(current.items(), key=lambda item: item[0] in _DERIVED_FIELDS):
        if name in allowed or name not in previous or previous[name] == value:
            continue
        flag = _FLAG_NAMES.get(name, name)
        raise ConfigError(
            f"--resume: --{flag}={_show(value)} differs from the run's {_show(previous[name])} ({path}/{CONFIG_FILE});"
            f" a resumed run may change only --{', --'.join(sorted(allowed - {'resume', 'logdir'}))}"
        )


def _saved_nothing(path: str) -> bool:
    """No checkpoint (every system saves under `checkpoint_dir`) and no summary: a run stopped before its first
    save."""
    try:
        saved = os.listdir(checkpoint_dir(path))
    except OSError:
        saved = []
    return not saved and not os.path.exists(os.path.join(path, "summary.json"))


def read_config(path: str) -> dict | None:
    """The config.json of the run in `path` (a dict, as recorded), None when there is none; ConfigError (one line)
    when it cannot be read."""
    try:
        with open(os.path.join(path, CONFIG_FILE)) as f:
            previous = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}/{CONFIG_FILE} cannot be read ({error}); the directory holds a damaged run") from None
    return recorded_config(previous, os.path.join(path, CONFIG_FILE)) if isinstance(previous, dict) else None


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _write_pid(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or 0) or None
    except (OSError, ValueError):
        return None


def _reason(error: OSError) -> str:
    if error.errno == errno.EEXIST or error.errno == errno.ENOTDIR:
        return "a file is in the way (it must be a directory)"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write there ({error.strerror})"
    if error.errno == errno.ENOSPC:
        return "no space left on the device"
    return error.strerror or str(error)
