"""Command-line pieces every launcher and tool shares, kept free of JAX and EnvPool imports (`launch.report` and
`launch.sweep` start fast): flag-parse errors as one line with exit status 2, and list flags of integers."""

from __future__ import annotations

import difflib
import os
import signal
import sys
from collections.abc import Sequence

from absl import flags

EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED = 2, 130, 143


def _exit_at_once(signum, frame):  # a signal handler's signature
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
    `error:` line and exit status 2, as every other bad value (docs/getting-started.md, "Stopping a run")."""
    try:
        return flags.FLAGS(list(argv))
    except flags.Error as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(f"error: {first_line} (see --helpfull)", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


HELP_TOKENS = ("-h", "-?", "--help", "-help", "--helpshort", "-helpshort", "--helpfull", "-helpfull")


def launcher_parser(launcher: str, launcher_flags: flags.FlagValues, doc: str | None):
    """`app.run`'s `flags_parser` for a training launcher whose flags live in their own `FlagValues`
    (`launch.flagsets`): `--help` prints the launcher's docstring and its flags by group (`--helpfull` adds absl's
    own); a bad value or a flag the launcher does not take is one `error:` line and exit 2, naming the launchers
    that take it. absl's own flags (`--verbosity`, ...) still go to `flags.FLAGS`."""

    def parse(argv: Sequence[str]) -> list[str]:
        argv = list(argv)
        options = argv[1:argv.index("--")] if "--" in argv else argv[1:]
        asked = [token for token in options if token in HELP_TOKENS]
        if asked:
            print_launcher_help(launcher, launcher_flags, doc, full=any("full" in token for token in asked))
            sys.exit(0)
        refusal = algo_refusal(launcher, options)
        if refusal:
            print(f"error: {refusal}", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
        try:
            rest = launcher_flags(argv, known_only=True)
            positional = flags.FLAGS(rest)[1:]
        except flags.UnrecognizedFlagError as error:
            print(f"error: {unknown_flag_message(launcher, launcher_flags, error.flagname)}", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
        except flags.Error as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            print(f"error: {first_line} (see --help)", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
        if positional:  # a typo such as `--game=Breakout stray_arg` or `--env CartPole-v1` must not start a run
            print(f"error: unexpected argument {positional[0]!r}: launch.{launcher} takes only flags "
                  "(--name=value; see --help)", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
        return argv[:1]

    return parse


def algo_refusal(launcher: str, options: Sequence[str]) -> str | None:
    """One line for `--algo=X` that another launcher trains (`launch.hts --algo=dqn`: train it with launch.pal)."""
    from launch import flagsets  # imports absl and the optimizer names only

    for token in options:
        if token.startswith("--algo="):
            algo = token.partition("=")[2]
            mine, others = flagsets.algos_of(launcher), flagsets.launchers_training(algo)
            if algo not in mine and others:
                return (f"launch.{launcher} trains {', '.join(mine)}; --algo={algo} is trained by "
                        f"python -m launch.{' or launch.'.join(others)}")
    return None


def unknown_flag_message(launcher: str, launcher_flags: flags.FlagValues, name: str) -> str:
    """One line for `--name` that `launch.<launcher>` does not take: who takes it, or the closest flag it has."""
    from launch import flagsets  # imports absl and the optimizer names only

    others = [other for other in flagsets.taken_by(name) if other != launcher]
    if others:
        return f"--{name} does not apply to launch.{launcher} (it is a flag of launch.{', launch.'.join(others)})"
    close = difflib.get_close_matches(name, list(launcher_flags), n=1)
    hint = f"; did you mean --{close[0]}?" if close else " (see --help)"
    return f"launch.{launcher} has no flag --{name}{hint}"


def print_launcher_help(launcher: str, launcher_flags: flags.FlagValues, doc: str | None, *, full: bool) -> None:
    from launch import flagsets  # imports absl and the optimizer names only

    print((doc or f"python -m launch.{launcher}").strip())
    print(f"\nFlags of launch.{launcher}:\n")
    print(flagsets.help_text(launcher, launcher_flags))
    if full:
        print("\nabsl flags:\n")
        print(flags.FLAGS.get_help())
    else:
        print("\n(--helpfull also lists absl's own flags: --verbosity, --flagfile, ...)")


def int_list(flag: str, values: Sequence[str]) -> tuple[int, ...]:
    """`--flag=256,256` as a tuple of positive ints; ValueError naming the flag otherwise."""
    try:
        sizes = tuple(int(v) for v in values)
    except ValueError:
        raise ValueError(f"--{flag} must be comma-separated integers, e.g. 256,256; got {','.join(values)}") from None
    if not sizes or min(sizes) <= 0:
        raise ValueError(f"--{flag} must be positive integers, got {','.join(values)}")
    return sizes


def parse_count(text: str, name: str, *, auto: bool) -> int:
    """A positive integer flag given as text; 'auto' (0) where the launcher tunes it."""
    if auto and text == "auto":
        return 0
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"--{name} must be a positive integer{' or auto' if auto else ''}, got '{text}'")
    return value
