"""Atomic file writes for everything a run keeps (checkpoints, `config.json`, `summary.json`, tuning tables).

A temporary file next to the target (`<path>.tmp-<pid>`) is written, flushed and fsynced, then `os.replace`d onto
the target and the directory fsynced: a reader, or a run resumed after a crash, sees the old file or the new one,
never a part. On any failure (a full disk, a file-size limit, Ctrl-C) the temporary file is removed before the error
goes on, so nothing is left behind; the old file, if any, is untouched.
"""

from __future__ import annotations

import contextlib
import os


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


def write_atomic(path: str, data: bytes | str) -> None:
    """Replaces `path` with `data` (bytes, or text written as UTF-8) atomically."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with naming_the_file(path), open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    fsync_dir(os.path.dirname(path) or ".")


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
