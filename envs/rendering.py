"""Real frames of a task from EnvPool's own renderer (a pool made with `make_pool(render=True)`), for videos of
evaluation episodes (`systems.common.video`, `--capture_video`).

What EnvPool 1.2.5 renders:

* Atari: the emulator's screen, in colour at full resolution (210 x 160 RGB), whatever the observation's
  preprocessing (84 x 84 gray, frame stack), so the policy's own evaluation env is filmed: no second env to keep in
  step.
* Classic control and Box2D: gymnasium's pictures (CartPole 600 x 400, Pendulum 500 x 500, LunarLander 600 x 400).
* MuJoCo: the scene at 480 x 480 through MuJoCo's OpenGL renderer, which needs a current OpenGL context in the
  rendering thread. The `mujoco` package (the `video` extra: `pip install -e ".[video]"`) makes one: with
  `MUJOCO_GL=egl` (the default set here when unset) it renders headless, with Mesa's software EGL on a CPU machine
  (slow: tens of milliseconds a frame) or the GPU's EGL. `MUJOCO_GL=osmesa` or `glfw` (a display) also work where
  installed. Without the package or a working backend there are no real frames.
* GFootball: "render not implemented for this environment": no real frames.

Where there are none, the caller draws the observation instead (`FrameSource.real` is False, `note` says why).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading

import numpy as np

from envs import gymnasium_pool
from envs.factory import EnvSpec

# Env steps per second of simulated time, so a video plays at real speed (gymnasium's `render_fps`, from each task's
# dt = timestep x frame_skip). Atari: 60 Hz with an action repeat of 4.
_FPS_BY_FAMILY = {"atari": 15.0, "gfootball": 10.0}
_FPS_BY_TASK = {
    "CartPole": 50.0, "Pendulum": 20.0, "MountainCar": 30.0, "MountainCarContinuous": 30.0, "Acrobot": 15.0,
    "LunarLander": 50.0, "LunarLanderContinuous": 50.0, "BipedalWalker": 50.0, "BipedalWalkerHardcore": 50.0,
    "CarRacing": 50.0,
    "Hopper": 125.0, "Walker2d": 125.0, "HalfCheetah": 20.0, "Ant": 20.0, "Humanoid": 66.7, "HumanoidStandup": 66.7,
    "Swimmer": 25.0, "Reacher": 50.0, "Pusher": 20.0, "InvertedPendulum": 25.0, "InvertedDoublePendulum": 20.0,
}
DEFAULT_FPS = 30.0
MUJOCO_SIZE = (480, 480)  # width, height of EnvPool's MuJoCo frames (gymnasium's default)


@dataclasses.dataclass(frozen=True)
class FrameSource:
    """How a task's frames are made. `real`: EnvPool renders them; `fps`: env steps per second of real time;
    `note`: one line saying which frames these are (and, without real frames, why and how to get them)."""

    real: bool
    fps: float
    note: str


def steps_per_second(spec: EnvSpec) -> float:
    """Env steps per second of the task's simulated time (DEFAULT_FPS where unknown)."""
    if spec.family in _FPS_BY_FAMILY:
        return _FPS_BY_FAMILY[spec.family]
    return _FPS_BY_TASK.get(spec.env_id.rsplit("-v", 1)[0], DEFAULT_FPS)


def frame_source(spec: EnvSpec) -> FrameSource:
    """Whether EnvPool gives real frames of `spec` here (MuJoCo: the OpenGL context is made now, once a process)."""
    if spec.family == "gymnasium":
        return _gymnasium_frame_source(spec.env_id, spec.env_kwargs)
    fps = steps_per_second(spec)
    if spec.family == "atari":
        return FrameSource(True, fps, "real frames: the Atari screen in colour (210x160), from EnvPool")
    if spec.family in ("classic", "box2d"):
        return FrameSource(True, fps, "real frames: gymnasium's picture of the task, from EnvPool")
    if spec.family == "mujoco":
        problem = _mujoco_context_problem()
        if problem is None:
            backend = os.environ.get("MUJOCO_GL", "egl")
            return FrameSource(True, fps, f"real frames: the MuJoCo scene (480x480), EnvPool with MUJOCO_GL={backend}")
        return FrameSource(False, fps, f"no MuJoCo renderer ({problem}): frames drawn from the observation "
                                       '(pip install -e ".[video]" for real frames; MUJOCO_GL=egl, osmesa or glfw)')
    if spec.family in ("gymnax", "brax"):
        renderer = "matplotlib" if spec.family == "gymnax" else "its own renderer"
        return FrameSource(False, fps, f"{spec.family} draws its frames with {renderer}, not here: frames drawn from "
                                       "the observation")
    return FrameSource(False, fps, f"EnvPool renders no {spec.family} frames: frames drawn from the observation")


@functools.lru_cache(maxsize=8)
def _gymnasium_frame_source(env_id: str, env_kwargs: str) -> FrameSource:
    """A `gymnasium/<id>` task films its own `render_mode="rgb_array"` frames where it offers that mode and one
    frame renders here (CartPole's needs pygame, for one). Tried once a process, not at every evaluation's video."""
    env = gymnasium_pool.make_env(env_id, env_kwargs=env_kwargs)
    metadata = dict(env.metadata or {})
    env.close()
    fps = float(metadata.get("render_fps") or DEFAULT_FPS)
    if "rgb_array" not in metadata.get("render_modes", ()):
        return FrameSource(False, fps, "the env offers no rgb_array render mode: frames drawn from the observation")
    env = gymnasium_pool.make_env(env_id, render=True, env_kwargs=env_kwargs)
    try:
        env.reset(seed=0)
        frame = np.asarray(env.render())
    except Exception as error:  # a missing renderer package, no display, ...
        problem = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:100]}"
        return FrameSource(False, fps, f"the env's rgb_array render failed ({problem}): frames drawn from the "
                                       "observation")
    finally:
        env.close()
    if frame.ndim != 3 or frame.shape[-1] != 3:
        return FrameSource(False, fps, f"the env's rgb_array frame is {frame.shape}, not HxWx3: frames drawn from "
                                       "the observation")
    return FrameSource(True, fps, "real frames: the env's own rgb_array render, from gymnasium")


def render_frame(pool, spec: EnvSpec) -> np.ndarray:
    """[H, W, 3] uint8: the current frame of env 0 of a `make_pool(render=True)` pool (MuJoCo: with this process's
    OpenGL context made current in the calling thread)."""
    if spec.family == "mujoco":
        context = _mujoco_context()
        with _MUJOCO_LOCK:
            context.make_current()
            frame = pool.render()
    else:
        frame = pool.render()
    return np.asarray(frame)[0]


_MUJOCO_LOCK = threading.Lock()  # one OpenGL context per process: one thread renders with it at a time


@functools.lru_cache(maxsize=1)
def _mujoco_context():
    """The process's OpenGL context for MuJoCo rendering (the `mujoco` package's, MUJOCO_GL=egl unless set)."""
    os.environ.setdefault("MUJOCO_GL", "egl")  # before `mujoco` is imported: it picks its backend at import
    import mujoco  # an optional extra, and only videos of MuJoCo tasks need it

    width, height = MUJOCO_SIZE
    return mujoco.GLContext(width, height)


@functools.lru_cache(maxsize=1)
def _mujoco_context_problem() -> str | None:
    """None when an OpenGL context for MuJoCo can be made here, else what stops it (one short phrase)."""
    try:
        _mujoco_context()
    except ImportError:
        return "the mujoco package is not installed"
    except Exception as error:  # any backend failure (no EGL, no display) means: no renderer
        return f"MUJOCO_GL={os.environ.get('MUJOCO_GL')}: {type(error).__name__}: {str(error).splitlines()[0][:80]}"
    return None
