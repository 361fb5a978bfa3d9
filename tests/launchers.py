"""Running a training launcher in the test process as its command line would: the keyword values become
`--name=value` flags parsed by the launcher's own parser (`launch.cli.launcher_parser`, so a bad flag exits 2 with
one line as on the command line), then its `main` runs. The launcher's flags are reset afterwards."""

from __future__ import annotations

import sys

from launch import cli


def as_flag(name: str, value) -> str:
    if value is True:
        return f"--{name}"
    if value is False:
        return f"--no{name}"
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    return f"--{name}={value}"


def run_launcher(main, **values) -> None:
    """`main`: a launcher's `main` (e.g. `launch.hts.main`); `values`: its flags."""
    module = sys.modules[main.__module__]
    name = module.__name__.rpartition(".")[2]
    flag_values = module.FLAGS
    argv = [module.__name__] + [as_flag(key, value) for key, value in values.items()]
    flag_values.unparse_flags()
    try:
        cli.launcher_parser(name, flag_values, module.__doc__)(argv)
        main([])
    finally:
        flag_values.unparse_flags()
