"""What a system package tells the tools that serve every system (`launch.flagsets`, `launch.evaluate`,
`launch.sweep`): its name, its launcher, its config class, algorithms and flag groups, and how a run directory it
wrote is rebuilt. Each system package has an `entry.py` with one `ENTRY`; `systems.registry` lists them. This module
imports nothing heavy and no system: the arrows point from the systems to it, never back.

A new system plugs in with: its config (a `systems.common.config.RunConfig` subclass), its `run(config) -> summary`
built on `systems.common.monitor.Monitor` (which writes `system` into every checkpoint), a launcher
`launch/<name>.py`, and an `entry.py` whose `restore` rebuilds the run's state from config.json with the helpers of
`systems.common.restore` (`config_from_json`, `restore_into`, `on_policy_act`, ...); then one line in
`systems.registry`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

MULTI_HOST_SECTION = "multi-host (the same command on every host with its own --process_id)"


@dataclasses.dataclass(frozen=True)
class SystemEntry:
    """One system, as the shared tools see it. `restore` and `checkpoint_files` import the system lazily, so listing
    the registry stays cheap (`launch.sweep` starts without JAX)."""

    name: str  # the `system` its runs write into checkpoints' meta and summary.json
    launcher: str  # its training launcher's short name: `python -m launch.<launcher>`
    restore: Callable[[str, dict], Any]  # (run dir, config.json values) -> systems.common.restore.RestoredRun
    config_class: Callable[[], type]  # () -> its config class (imported when called)
    algos: tuple[str, ...]  # its --algo choices, the default first
    # Its launcher's flags, in --help order: (section title, group). A group is one of `launch.flagsets.GROUPS`
    # ("run", "on_policy", "ppo", ...), or "fields:<g>[,<g>...]": its config's fields of those `group`s.
    flag_groups: tuple[tuple[str, str], ...]
    # The run's checkpoint files, newest last, when they are not Monitor's `checkpoints/ckpt_*.msgpack` (Spreeze).
    checkpoint_files: Callable[[str], list[str]] | None = None
