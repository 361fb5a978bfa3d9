"""The one atomic file writer, for everything a run keeps: checkpoints, `config.json`, `summary.json`, tuning
tables, Spreeze's weight files, replay-buffer files, GIFs and videos.

A temporary file next to the target is written, flushed and fsynced, then `os.replace`d onto the target and the
directory fsynced: a reader, or a run resumed after a crash, sees the old file or the new one, never a part. On any
failure (a full disk, a file-size limit, Ctrl-C) the temporary file is removed before the error goes on, so nothing
is left behind; the old file, if any, is untouched. Temporary names: `<path>.tmp-<pid>-<token>`, or
`<prefix><pid>-<token><suffix>` in the target's directory where a reader sweeps its own writers' leftovers by name.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from typing import BinaryIO


@contextlib.contextmanager
def naming_the_file(path: str):
    """Re-raises an OSError that names no file (a failed `write` or `flush`: a full disk) with `path` as its
    filename, so the launcher's one-line error says which file could not be written."""
    try:
        yield
    except OSError as error:
        if error.filename is None:
            raise OSError(error.errno, error.strerror or str(error), path) from error
        raise


def temporary_path(path: str, prefix: str | None = None, suffix: str = "") -> str:
    """A fresh temporary name in `path`'s directory (same file system, so the final rename is atomic)."""
    tag = f"{os.getpid()}-{secrets.token_hex(4)}"
    if prefix is None:
        return f"{path}.tmp-{tag}{suffix}"
    return os.path.join(os.path.dirname(os.path.abspath(path)), f"{prefix}{tag}{suffix}")


def commit(tmp: str, path: str) -> None:
    """Renames the finished `tmp` onto `path` and makes the rename durable."""
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def discard(tmp: str) -> None:
    """Removes an unfinished temporary file (absent already is fine)."""
    with contextlib.suppress(OSError):
        os.remove(tmp)


@contextlib.contextmanager
def replacing(path: str, prefix: str | None = None, suffix: str = ""):
    """Yields a temporary path to write; `path` is replaced by it when the block ends cleanly, and it is removed
    when the block raises (anything, Ctrl-C included)."""
    tmp = temporary_path(path, prefix, suffix)
    try:
        yield tmp
        commit(tmp, path)
    except BaseException:
        discard(tmp)
        raise


def write_atomic(path: str, content: bytes | str | Callable[[BinaryIO], object], prefix: str | None = None,
                 suffix: str = "") -> None:
    """Replaces `path` atomically with `content`: bytes, text (written as UTF-8), or a function that writes the
    file's bytes to the binary file object it is given."""
    with replacing(path, prefix, suffix) as tmp, naming_the_file(path), open(tmp, "wb") as f:
        if callable(content):
            content(f)
        else:
            f.write(content.encode() if isinstance(content, str) else content)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(directory: str) -> None:
    """Makes a rename in `directory` durable (best effort: some file systems cannot open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # EINVAL where directories cannot be fsynced
        pass
    finally:
        os.close(fd)
