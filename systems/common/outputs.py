"""Run outputs shared by every system: run directory, resolved config, progress CSV, TensorBoard events, a live
progress line, evaluation CSV and `summary.json` with a SHA-256 fingerprint of the final parameters."""

from __future__ import annotations

import collections
import csv
import dataclasses
import hashlib
import io
import json
import os
import sys
import time
from typing import Any

import jax
import numpy as np

from systems.common import video as video_lib
from systems.common.atomic import naming_the_file, write_atomic
from systems.common.config import PLAN_KEY, SYSTEM_KEY, VERSION, VERSION_KEY
from systems.common.tracking import Tracker

# The progress.csv columns every system writes; each system adds its own metrics' columns (`Monitor`'s `Progress`).
PROGRESS_BASE = (
    "env_steps",
    "wall_time",
    "sps",
    "update",
    "learner_version",
    "behaviour_version",
    "policy_lag",
    "episodes",
    "episode_return",
    "episode_length",
)
# The on-policy learners' metrics (agents/a2c.py, agents/ppo.py, agents/normalization.py).
ON_POLICY_LOSSES = ("total_loss", "policy_loss", "value_loss", "entropy", "grad_norm")
A2C_COLUMNS = ("update_norm",)  # the global norm of the optimizer update actually applied
PPO_COLUMNS = ("approx_kl", "clip_fraction")
REWARD_SCALE_COLUMN = "reward_scale"  # --normalize_reward: the running return std the round's rewards were divided by
OBS_NORM_COLUMN = "obs_norm_count"  # --normalize_obs: observations merged into the running statistics


def on_policy_columns(config: Any) -> tuple[str, ...]:
    """The progress.csv metric columns of a PPO / A2C learner with `config`'s algorithm and normalization."""
    columns = ON_POLICY_LOSSES + (PPO_COLUMNS if config.algo == "ppo" else A2C_COLUMNS)
    if config.normalize_reward:
        columns += (REWARD_SCALE_COLUMN,)
    if config.normalize_obs:
        columns += (OBS_NORM_COLUMN,)
    return columns


EVAL_FIELDS = ("env_steps", "wall_time", "policy_version", "episodes", "mean_return", "std_return")


def _first(row: dict, *names: str):
    """The first of `names` present in `row` (systems log different loss names)."""
    for name in names:
        if row.get(name) is not None:
            return row[name]
    return None


def params_fingerprint(params: Any) -> str:
    """SHA-256 over every parameter leaf's path, dtype, shape and bytes, in tree order: equal iff bit-identical."""
    digest = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        array = np.asarray(leaf)
        digest.update(jax.tree_util.keystr(path).encode())
        digest.update(str(array.dtype).encode() + str(array.shape).encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def write_json_atomic(path: str, payload: Any) -> None:
    write_atomic(path, json.dumps(payload, indent=2, sort_keys=True, default=json_default))


def json_default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return str(value)


class RunOutputs:
    """Writes one run directory. `append=True` (resume) keeps the CSVs and adds to them."""

    def __init__(self, run_dir: str, config: Any, *, append: bool, plan: dict | None = None, quiet: bool = False,
                 progress_fields: tuple[str, ...] = PROGRESS_BASE, resumed_from: int | None = None,
                 system: str | None = None):
        """`progress_fields`: progress.csv's columns (the system's schema). A resumed run keeps the columns its
        progress.csv already has, so a run from before a schema change stays one consistent table, and drops the
        rows logged after `resumed_from` env steps (its checkpoint's): the resumed run logs those steps again.
        config.json holds the config's fields, under `PLAN_KEY` the `plan` the system derived from them, under
        `SYSTEM_KEY` the `system` that made the run and under `VERSION_KEY` the version that wrote it."""
        self.run_dir = run_dir
        self._resumed_from = resumed_from
        self._closed = False
        os.makedirs(run_dir, exist_ok=True)
        # First: without the wandb extra this stops with one line before any file is written.
        self._tracker = Tracker(run_dir, config) if getattr(config, "track", False) else None
        self.quiet = quiet
        recorded = dataclasses.asdict(config)
        if plan is not None:
            recorded[PLAN_KEY] = plan
        if system is not None:
            recorded[SYSTEM_KEY] = system
        recorded[VERSION_KEY] = VERSION
        write_json_atomic(os.path.join(run_dir, "config.json"), recorded)
        self._progress = self._open_csv("progress.csv", progress_fields, append)
        self._evals = self._open_csv("evaluations.csv", EVAL_FIELDS, append)
        self._tb = TensorBoardScalars(os.path.join(run_dir, "tb"))
        self._last_line = 0.0
        self._video_noted = False
        self._recent = collections.deque(maxlen=_ETA_WINDOW)  # (wall_time, env_steps) of the latest rows

    def _open_csv(self, name, fields, append):
        path = os.path.join(self.run_dir, name)
        exists = append and os.path.exists(path)
        if exists:
            _drop_torn_last_line(path)
            if self._resumed_from is not None:
                _drop_rows_after(path, self._resumed_from)
            exists = os.path.getsize(path) > 0  # a torn header is rewritten
        if exists:
            with open(path, newline="") as existing:
                fields = tuple(next(csv.reader(existing)))
        handle = open(path, "a" if exists else "w", newline="")
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        if not exists:
            writer.writeheader()
        return handle, writer

    def log_progress(self, row: dict) -> None:
        handle, writer = self._progress
        with naming_the_file(handle.name):
            writer.writerow({k: _fmt(row.get(k)) for k in writer.fieldnames})
            handle.flush()
        step = int(row["env_steps"])
        scalars = {}
        for key, value in row.items():
            numeric = isinstance(value, (int, float, np.floating, np.integer))
            if key != "env_steps" and numeric and np.isfinite(value):
                self._tb.add_scalar(f"train/{key}", float(value), step)
                scalars[f"train/{key}"] = float(value)
        if self._tracker is not None:
            self._tracker.log(scalars, step)

    def log_evaluation(self, row: dict) -> None:
        handle, writer = self._evals
        with naming_the_file(handle.name):
            writer.writerow({k: _fmt(row.get(k)) for k in writer.fieldnames})
            handle.flush()
        self._tb.add_scalar("eval/mean_return", float(row["mean_return"]), int(row["env_steps"]))
        if self._tracker is not None:
            self._tracker.log({"eval/mean_return": float(row["mean_return"]),
                               "eval/std_return": float(row["std_return"])}, int(row["env_steps"]))
        self.print(
            f"[eval] steps {int(row['env_steps']):,}  policy v{row['policy_version']}  "
            f"return {row['mean_return']:.2f} +- {row['std_return']:.2f} over {row['episodes']} episodes"
        )

    def log_video(self, video: video_lib.Video, step: int) -> None:
        """A filmed episode (`systems.common.video.Video`): its preview to TensorBoard (`eval/video`), the file to
        W&B, and a line naming it (the first line also says which frames and format)."""
        if video.preview:
            gif = video_lib.preview_gif(video.preview, video.fps)
            self._tb.add_gif("eval/video", gif, step, video.preview[0].shape)
        if self._tracker is not None:
            self._tracker.video("eval/video", video.path, video.fps, step)
        cut = "" if video.complete else f", cut at {video.frames} frames"
        self.print(f"[video] {video.path}  ({video.frames} frames, return {video.episode_return:.2f} over "
                   f"{video.episode_length} steps{cut})" + ("" if self._video_noted else f"  {video.note}"))
        self._video_noted = True

    def progress_line(self, row: dict, total_steps: int, force: bool = False, time_limit: float = 0.0) -> None:
        """One line per call at most every 2 s (or when forced): steps, SPS, return, losses, policy lag, and the time
        left (`eta_seconds`; `time_limit`: the run's --time_limit, 0 for none)."""
        self._recent.append((float(row["wall_time"]), int(row["env_steps"])))
        now = time.monotonic()
        if not force and now - self._last_line < 2.0:
            return
        self._last_line = now
        ret = row.get("episode_return")
        ret_text = f"{ret:8.2f}" if ret is not None and np.isfinite(ret) else "     n/a"
        pct = 100.0 * row["env_steps"] / max(total_steps, 1)
        self.print(
            f"steps {int(row['env_steps']):>10,} ({pct:5.1f}%)  sps {row['sps']:8.0f}  return {ret_text}  "
            f"loss {_num(_first(row, 'total_loss', 'loss', 'critic_loss'))}  entropy {_num(row.get('entropy'))}  "
            f"lag {row.get('policy_lag', 0)}  t {row['wall_time']:7.1f}s  "
            f"eta {format_duration(eta_seconds(self._recent, total_steps, time_limit))}"
        )

    def print(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stdout, flush=True)

    def write_summary(self, summary: dict) -> str:
        path = os.path.join(self.run_dir, "summary.json")
        write_json_atomic(path, summary)
        if self._tracker is not None:
            self._tracker.summarize(summary)
        return path

    def close(self) -> None:
        """Closes the files, TensorBoard and the tracker (again: nothing)."""
        if self._closed:
            return
        self._closed = True
        for handle, _ in (self._progress, self._evals):
            handle.close()
        self._tb.close()
        if self._tracker is not None:
            self._tracker.finish()
            self._tracker = None


# Rows the time-left estimate looks back over: the recent rate, not the average since the start (which counts the
# first update's compile and any evaluation pauses long ago).
_ETA_WINDOW = 20


def eta_seconds(recent, total_steps: int, time_limit: float = 0.0) -> float | None:
    """Seconds until `total_steps` at the rate of the `recent` (wall time, env steps) rows, or until `time_limit`
    if that comes first; None while there is no rate yet (a single row)."""
    wall, steps = recent[-1]
    left = None
    if len(recent) >= 2:
        first_wall, first_steps = recent[0]
        rate = (steps - first_steps) / (wall - first_wall) if wall > first_wall else 0.0
        if rate > 0:
            left = max(total_steps - steps, 0) / rate
    if time_limit:
        by_limit = max(time_limit - wall, 0.0)
        left = by_limit if left is None else min(left, by_limit)
    return left


def format_duration(seconds: float | None) -> str:
    """'45s', '12m05s', '3h07m'; 'n/a' for None."""
    if seconds is None:
        return "n/a"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _drop_torn_last_line(path: str) -> None:
    """A run killed while writing a CSV row leaves a line without its newline; the resumed run's first row would be
    glued to it (one row of the wrong width, or worse, of the right width with wrong values). That row was logged
    after the checkpoint the run resumes from, so it is superseded anyway: it is cut off before appending."""
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(max(0, size - 65536))
        tail = f.read()
        if tail.endswith(b"\n"):
            return
        cut = tail.rfind(b"\n")
        f.truncate(size - len(tail) + cut + 1 if cut >= 0 else 0)


def _drop_rows_after(path: str, env_steps: int) -> None:
    """Rows past the checkpoint a run resumes from were logged after it, by the run that was then killed; the
    resumed run logs those env steps again, so they would repeat. Rewritten atomically, only if any."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or "env_steps" not in rows[0]:
        return
    column = rows[0].index("env_steps")

    def keep(row: list) -> bool:
        try:
            return float(row[column]) <= env_steps
        except (IndexError, ValueError):
            return True

    kept = [rows[0]] + [row for row in rows[1:] if keep(row)]
    if len(kept) == len(rows):
        return
    text = io.StringIO()
    csv.writer(text).writerows(kept)  # the csv module's own line ends, as the run's writers use
    write_atomic(path, text.getvalue().encode())


class TensorBoardScalars:
    """TensorBoard scalars in `directory`, written in the caller's thread: tensorboardX's `EventsWriter` (its event
    file format and fsynced flush) with `summary.scalar`, as its `SummaryWriter.add_scalar` writes them.

    Why not `SummaryWriter`: it writes from a background thread that dies on a write error (a full disk), after
    which `add_scalar` blocks forever on the thread's full queue, and so does the run (seen with a file-size
    limit). Here a failed write raises in the run, which stops with one line. Flushed every `flush_every_s`
    seconds and on `close`, as `SummaryWriter` flushes every 120 s."""

    def __init__(self, directory: str, flush_every_s: float = 30.0):
        from tensorboardX.event_file_writer import EventsWriter  # only runs write TensorBoard files

        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        with naming_the_file(directory):
            self._writer = EventsWriter(os.path.join(directory, "events"))
        # A failed write names the event file, not its directory, as every other file is named.
        self.path = getattr(self._writer, "_file_name", directory)
        self._flush_every_s = flush_every_s
        self._next_flush = time.monotonic() + flush_every_s

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.summary import scalar

        with naming_the_file(self.path):
            self._writer.write_event(Event(wall_time=time.time(), step=int(step), summary=scalar(tag, value)))
            if time.monotonic() >= self._next_flush:
                self._writer.flush()
                self._next_flush = time.monotonic() + self._flush_every_s

    def add_gif(self, tag: str, gif: bytes, step: int, shape: tuple) -> None:
        """An animated GIF as an image summary: how TensorBoard shows a video (tensorboardX's `add_video` makes the
        same summary, through moviepy)."""
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary

        height, width, channels = shape
        image = Summary.Image(height=height, width=width, colorspace=channels, encoded_image_string=gif)
        summary = Summary(value=[Summary.Value(tag=tag, image=image)])
        with naming_the_file(self.path):
            self._writer.write_event(Event(wall_time=time.time(), step=int(step), summary=summary))
            self._writer.flush()

    def close(self) -> None:
        with naming_the_file(self.path):
            self._writer.close()


def _fmt(value):
    if value is None:
        return ""
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.6g}"
    return value


def _num(value) -> str:
    return "   n/a" if value is None else f"{float(value):6.3f}"
