"""Videos of evaluation episodes (`--capture_video` on every training launcher and on `launch.evaluate`), as
CleanRL's `--capture-video` records them: a person judges a policy by watching it play.

One episode of the evaluated policy is played on a 1-env evaluation pool (seed 000 section 5's protocol, the
evaluation's seed, so it is the evaluation's env 0; actions drawn as the `Evaluator` draws them) and filmed:

* Real frames where the simulator gives them (`envs.rendering`): Atari's colour screen at 210x160, classic control
  and Box2D pictures, MuJoCo scenes through the `mujoco` package's OpenGL context. The env that is filmed is the
  policy's own env, so picture and policy cannot drift apart. Elsewhere (GFootball, MuJoCo without a renderer) the
  observation is drawn (`systems.common.drawing`) and the note says so.
* Each frame carries a caption: step, action, return so far. Frames are taken every `steps_per_frame` steps so a video
  plays at real speed at no more than about 30 frames a second (MuJoCo's Hopper: every 4th of its 125 steps/s).
* MP4 (H.264) through imageio and imageio-ffmpeg (the `video` extra), streamed to disk frame by frame; where no
  encoder is installed, an animated GIF instead (PIL; at most `GIF_FRAMES` frames, subsampled evenly). Files are
  written to a temporary name and renamed, so a reader never sees half a video.
* A small preview (at most `PREVIEW_FRAMES` frames, at most `PREVIEW_WIDTH` pixels wide) goes to TensorBoard, as an
  animated GIF in its image tab (TensorBoard's own video format), and the file itself to W&B with `--track`.

Episodes longer than `MAX_FRAMES` video frames (an Atari policy that never serves plays 27,000 steps) stop there; the
result says whether the episode was complete.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import os
import warnings
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from PIL import Image

from envs import rendering
from envs.episodes import EpisodeTracker
from envs.factory import EnvSpec, make_pool
from systems.common import atomic, drawing
from systems.common.config import first_line

MAX_FRAMES = 4_500  # 5 minutes at 15 frames a second (Atari)
GIF_FRAMES = 600  # the GIF fallback keeps at most this many frames, evenly spaced
PREVIEW_FRAMES = 100
PREVIEW_WIDTH = 240
TARGET_FPS = 30.0
VIDEO_SUFFIXES = (".mp4", ".gif")
_TMP_PREFIX = ".video-tmp-"
ENCODER_MISSING = 'no MP4 encoder (pip install -e ".[video]" adds imageio-ffmpeg): writing an animated GIF instead'


@dataclasses.dataclass(frozen=True)
class Video:
    """One recorded episode: where it is, how it was made, what happened in it."""

    path: str
    frames: int  # frames in the file
    steps_per_frame: int  # env steps between two frames of the file
    fps: float  # frames per second of the file (real speed)
    episode_return: float  # the return of the recorded steps (the whole episode when `complete`)
    episode_length: int  # env steps recorded
    complete: bool  # False: the episode was cut at MAX_FRAMES frames
    real_frames: bool  # True: the simulator's frames; False: drawn from the observation
    note: str  # one line: which frames and which format
    preview: tuple = ()  # [h, w, 3] uint8 frames for TensorBoard (subsampled, scaled down)


def mp4_encoder_available() -> bool:
    try:
        import imageio  # noqa: F401 - optional extra
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        return False
    return True


def check_path(path: str) -> None:
    """ValueError (one line) unless `path` names an .mp4 or .gif file."""
    if os.path.splitext(path)[1].lower() not in VIDEO_SUFFIXES:
        raise ValueError(f"--capture_video must name an .mp4 or .gif file, got '{path}'")


def output_path(path: str) -> str:
    """`path`, or the same name ending in .gif when it asks for MP4 and no encoder is installed."""
    root, suffix = os.path.splitext(path)
    if suffix.lower() == ".mp4" and not mp4_encoder_available():
        return root + ".gif"
    return path


# ----------------------------------------------------------------------------------------------------- writers


class _Mp4Writer:
    """Streams frames to an H.264 MP4 (imageio's ffmpeg writer; yuv420p, so odd sizes are padded by one pixel)."""

    def __init__(self, tmp_path: str, fps: float, path: str):
        import imageio  # optional extra

        # ffmpeg shares our stderr: "quiet", so that a failure is our one line naming the file, not its own ten.
        self._writer = imageio.get_writer(tmp_path, format="FFMPEG", mode="I", fps=fps, codec="libx264",
                                          pixelformat="yuv420p", macro_block_size=1, ffmpeg_log_level="quiet")
        self._path = path
        self.frames = 0

    def append(self, frame: np.ndarray) -> None:
        height, width = frame.shape[:2]
        frame = np.pad(frame, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")
        with warnings.catch_warnings(), self._as_one_line():
            # The first frame starts ffmpeg (fork + exec, with a preexec_fn): JAX's at-fork hook warns about a
            # deadlock that cannot happen in a child that only calls exec.
            warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
            self._writer.append_data(frame)
        self.frames += 1

    def close(self) -> None:
        with self._as_one_line():
            self._writer.close()

    @contextlib.contextmanager
    def _as_one_line(self):
        """imageio's encoder error holds ffmpeg's command and output over ten lines: an OSError naming
        the video instead, with the error's first line, which the launchers print as one line and exit 74."""
        try:
            yield
        except (OSError, RuntimeError) as error:
            raise OSError(errno.EIO, f"the video encoder (ffmpeg) stopped: {first_line(error)}", self._path) from None


class _GifWriter:
    """Keeps at most GIF_FRAMES evenly spaced frames and writes them as one animated GIF on close."""

    def __init__(self, tmp_path: str, fps: float, path: str):
        self._path, self._frame_ms = tmp_path, 1000.0 / fps
        self._named = path  # what an error names: the user's file, not the temporary one
        self._sampler = drawing.FrameSampler(GIF_FRAMES)
        self.frames = 0

    def append(self, frame: np.ndarray) -> None:
        self._sampler.offer(lambda: Image.fromarray(frame))
        self.frames = len(self._sampler.frames)

    def close(self) -> None:
        try:
            with open(self._path, "wb") as handle:
                drawing.write_gif(handle, self._sampler.frames, round(self._frame_ms * self._sampler.stride),
                                  adaptive=True)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as error:  # a write's error names no file: the launchers' one line names the GIF
            raise OSError(error.errno, error.strerror or str(error), self._named) from None


def preview_gif(frames, fps: float) -> bytes:
    """An animated GIF of `frames` ([h, w, 3] uint8) in memory: TensorBoard's video (an image summary)."""
    buffer = io.BytesIO()
    drawing.write_gif(buffer, [Image.fromarray(f) for f in frames], round(1000.0 / fps), adaptive=True)
    return buffer.getvalue()


def _thumbnail(frame: np.ndarray) -> np.ndarray:
    height, width = frame.shape[:2]
    if width <= PREVIEW_WIDTH:
        return frame
    size = (PREVIEW_WIDTH, max(2, round(height * PREVIEW_WIDTH / width)))
    return np.asarray(Image.fromarray(frame).resize(size, Image.Resampling.BILINEAR))


# ----------------------------------------------------------------------------------------------------- recording


class _Film:
    """Where the frames go: the file (temporary name until `keep`), and the preview."""

    def __init__(self, path: str, fps: float):
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        suffix = os.path.splitext(path)[1].lower()
        self.path = path
        self.tmp = atomic.temporary_path(path, _TMP_PREFIX, suffix)
        self.writer = _Mp4Writer(self.tmp, fps, path) if suffix == ".mp4" else _GifWriter(self.tmp, fps, path)
        self.preview = drawing.FrameSampler(PREVIEW_FRAMES)

    def add(self, frame: np.ndarray) -> None:
        self.writer.append(frame)
        self.preview.offer(lambda: _thumbnail(frame))

    def keep(self) -> None:
        self.writer.close()
        atomic.commit(self.tmp, self.path)

    def discard(self) -> None:
        """Drops the unfinished file; an error of the writer's own close must not hide the one that stopped it."""
        try:
            self.writer.close()
        except (OSError, IndexError):  # IndexError: a GIF of no frame yet
            pass
        finally:
            atomic.discard(self.tmp)


def _framer(spec: EnvSpec, source: rendering.FrameSource) -> Callable:
    """`frame(pool, obs, action, step, reward, ret) -> [H, W, 3] uint8` with its caption."""
    if source.real:
        def frame(pool, obs, action, step, reward, ret):
            del obs, reward
            image = Image.fromarray(rendering.render_frame(pool, spec))
            return np.asarray(drawing.captioned(image, drawing.caption_text(step, action, ret)))
        return frame
    draw = drawing.observation_drawer(spec)
    return lambda pool, obs, action, step, reward, ret: np.asarray(draw(obs, action, step, reward, ret).convert("RGB"))


def record_episode(spec: EnvSpec, act: Callable, params: Any, *, seed: int, path: str,
                   max_frames: int = MAX_FRAMES) -> Video:
    """Plays one evaluation episode of `act(params, obs [1, ...], key) -> actions [1, ...]` (keys as the Evaluator
    draws them from `seed`) on a 1-env evaluation pool seeded `seed`, and writes it to `output_path(path)`. Frame
    k shows the state the action of step k * steps_per_frame was taken in, that action and the return so far; the
    last frame shows the final state."""
    check_path(path)
    source = rendering.frame_source(spec)
    steps_per_frame = max(1, round(source.fps / TARGET_FPS)) if source.real else 1
    fps = source.fps / steps_per_frame
    film = _Film(output_path(path), fps)
    pool = make_pool(spec, num_envs=1, batch_size=1, seed=seed, num_threads=1, evaluation=True, render=source.real)
    try:
        ret, length, complete = _play(spec, act, params, seed, pool, film, _framer(spec, source), steps_per_frame,
                                      max_frames)
        film.keep()
    except BaseException:
        film.discard()
        raise
    finally:
        pool.close()
    fmt = "MP4" if film.path.lower().endswith(".mp4") else "GIF"
    note = f"{source.note}; {fmt}" + ("" if fmt == "MP4" or path.lower().endswith(".gif") else f" ({ENCODER_MISSING})")
    return Video(path=film.path, frames=film.writer.frames, steps_per_frame=steps_per_frame, fps=fps,
                 episode_return=ret, episode_length=length, complete=complete, real_frames=source.real, note=note,
                 preview=tuple(film.preview.frames))


def _play(spec, act, params, seed, pool, film, frame, steps_per_frame, max_frames) -> tuple[float, int, bool]:
    """The episode loop of `record_episode`; returns (return, steps, complete)."""
    tracker = EpisodeTracker(1, spec.family, spec.max_episode_steps)
    key = jax.random.PRNGKey(seed)
    ret, step = 0.0, 0
    obs, _ = pool.reset()
    while True:
        if step > spec.max_episode_steps + 1:  # the tracker ends every episode by then (truncation)
            raise RuntimeError(f"an episode of {spec.env_id} did not end after {step} steps")
        key, step_key = jax.random.split(key)
        actions = np.asarray(act(params, obs, step_key))
        if spec.continuous:
            actions = np.clip(actions, spec.action_low, spec.action_high)
        if step % steps_per_frame == 0:
            if film.writer.frames >= max_frames - 1:
                film.add(frame(pool, obs[0], None, step, 0.0, ret))
                return ret, step, False
            film.add(frame(pool, obs[0], actions[0], step, 0.0, ret))
        obs, rewards, terminated, truncated, info = pool.step(actions)
        tracker.step(np.asarray(info["env_id"]), rewards, terminated, truncated, info)
        ret += float(np.asarray(rewards)[0])
        step += 1
        finished = tracker.pop_finished()
        if finished:
            _, episode_return, length = finished[0]
            film.add(frame(pool, obs[0], None, step, 0.0, float(episode_return)))
            return float(episode_return), int(length), True
