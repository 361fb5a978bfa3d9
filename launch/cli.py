"""Command-line pieces every launcher and tool shares, kept free of JAX and EnvPool imports (`launch.report` and
`launch.sweep` start fast): flag-parse errors as one line with exit status 2, and list flags of integers."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

from absl import flags

EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED = 2, 130, 143


def _exit_at_once(signum, frame):  # noqa: ARG001 - a signal handler's signature
    os.write(2, b"interrupted before the run started; nothing was saved\n")
    os._exit(EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED)


def exit_at_once_on_signals() -> None:
    """A training launcher calls this first, before its heavy imports (JAX, EnvPool: seconds): Ctrl-C or SIGTERM
    until `launch.common.run_main` takes over exits at once with 130 / 143 and one line, instead of a traceback
    from the middle of an import. Only when the launcher is the program (`python -m launch.X`), never when a test
    imports it."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name.startswith("launch."):
        signal.signal(signal.SIGINT, _exit_at_once)
        signal.signal(signal.SIGTERM, _exit_at_once)


def parse_flags(argv: Sequence[str]) -> list[str]:
    """`app.run`'s `flags_parser`: absl's own prints its usage and exits 1 on a bad flag; a bad flag here is one
    `error:` line and exit status 2, as every other bad value (README, "Stopping a run")."""
    try:
        return flags.FLAGS(list(argv))
    except flags.Error as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(f"error: {first_line} (see --helpfull)", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def int_list(flag: str, values: Sequence[str]) -> tuple[int, ...]:
    """`--flag=256,256` as a tuple of positive ints; ValueError naming the flag otherwise."""
    try:
        sizes = tuple(int(v) for v in values)
    except ValueError:
        raise ValueError(f"--{flag} must be comma-separated integers, e.g. 256,256; got {','.join(values)}") from None
    if not sizes or min(sizes) <= 0:
        raise ValueError(f"--{flag} must be positive integers, got {','.join(values)}")
    return sizes
