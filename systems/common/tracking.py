"""Experiment tracking with Weights & Biases (`--track`, as CleanRL and Cleanba users expect): the run's config, its
progress rows, its evaluations and its summary go to one W&B run beside the CSVs and TensorBoard files.

W&B is an optional extra (`python -m pip install -e ".[wandb]"`): without it `--track` stops with one line saying
what to install. `WANDB_MODE=offline` keeps everything in `<run dir>/wandb` (no account, no network; `wandb sync`
uploads it later). A resumed run continues the same W&B run: its id is kept in `<run dir>/wandb_run_id`. In a
multi-process job only process 0 tracks."""

from __future__ import annotations

import dataclasses
import netrc
import os
import secrets
import urllib.parse
from typing import Any

from systems.common.atomic import write_atomic
from systems.common.config import ConfigError, first_line

WANDB_MISSING = '--track needs Weights & Biases, an optional extra: python -m pip install -e ".[wandb]"'
_RUN_ID_FILE = "wandb_run_id"


WANDB_NO_LOGIN = ("--track needs a W&B login: run `wandb login` or set WANDB_API_KEY; or set WANDB_MODE=offline "
                  "to keep the W&B run in <run dir>/wandb (no account, no network; `wandb sync` uploads it later)")
_LOCAL_MODES = ("offline", "disabled", "dryrun")


def require_wandb() -> None:
    """ConfigError (one line) when the wandb package is not installed, or when W&B would need an account it has no
    key for (W&B's own error is a long traceback). Called before the run directory is written."""
    try:
        import wandb  # noqa: F401 - an optional extra
    except ImportError:
        raise ConfigError(WANDB_MISSING) from None
    if os.environ.get("WANDB_MODE", "").lower() not in _LOCAL_MODES and not _has_api_key():
        raise ConfigError(WANDB_NO_LOGIN)


def _has_api_key() -> bool:
    """WANDB_API_KEY, or the netrc entry `wandb login` writes for W&B's host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urllib.parse.urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or ""
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


class Tracker:
    """One W&B run for one run directory (`RunOutputs` calls it next to its CSVs and TensorBoard scalars)."""

    def __init__(self, run_dir: str, config: Any):
        require_wandb()
        import wandb  # an optional extra

        run_id = _run_id(run_dir)
        try:
            self._run = wandb.init(
                project=config.wandb_project, entity=config.wandb_entity or None, group=config.wandb_group or None,
                name=os.path.basename(os.path.normpath(run_dir)), id=run_id, resume="allow", dir=run_dir,
                config=dataclasses.asdict(config),
                # create_new: several runs at once in one process (Anakin's agents); W&B's default would hand the
                # second agent the first agent's run
                settings=wandb.Settings(console="off", silent=True, reinit="create_new"),
            )
        except Exception as error:  # W&B's errors (no network, a bad key) are many and long
            raise ConfigError(f"--track: W&B could not start its run ({first_line(error)}); WANDB_MODE=offline keeps "
                              "it in <run dir>/wandb") from None

    def log(self, values: dict, step: int) -> None:
        """Numeric `values` at env step `step` (W&B drops a step below one it has seen: rows a resume repeats)."""
        if step >= self._run.step:
            self._run.log(values, step=step)

    def video(self, key: str, path: str, fps: float, step: int) -> None:
        """A video file (MP4 or GIF) at env step `step`."""
        import wandb  # an optional extra

        if step >= self._run.step:
            fmt = os.path.splitext(path)[1].lstrip(".").lower()
            self._run.log({key: wandb.Video(path, fps=max(1, round(fps)), format=fmt)}, step=step)

    def summarize(self, summary: dict) -> None:
        self._run.summary.update({k: v for k, v in summary.items() if isinstance(v, (int, float, str, bool))})

    def finish(self) -> None:
        self._run.finish()


def _run_id(run_dir: str) -> str:
    """The W&B run id of `run_dir` (16 random hex digits): kept in a file, so a resumed run logs into the same W&B
    run."""
    path = os.path.join(run_dir, _RUN_ID_FILE)
    if os.path.exists(path):
        with open(path) as f:
            return f.read().strip()
    run_id = secrets.token_hex(8)
    write_atomic(path, run_id.encode())
    return run_id
