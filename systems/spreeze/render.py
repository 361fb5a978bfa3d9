"""The visualization process of a Spreeze run (seed 002, section 3.1.2): every so often it plays one episode of the
deterministic policy of the newest published weights on its own 1-env EnvPool and saves it as an animated GIF,
`<out_dir>/rollout_<version:09d>.gif` (the newest `keep` are kept). Like the test process it is a variant of the
sampler that neither explores nor sends experience, and it runs at a much lower rate, so it is a process of its own.

The frames are drawn from the observation and the action by `systems.common.drawing.vector_drawer` (the pendulum
itself for Pendulum, bar charts otherwise) and saved by its atomic `save_gif`; a training run's videos of real frames
are `--capture_video` (`systems.common.video`).
"""

from __future__ import annotations

import os
import re
import time

import numpy as np
from PIL import Image

from systems.common.drawing import GIF_TMP_PREFIX, save_gif, vector_drawer
from systems.spreeze.workers import _cpu_only, _guard

__all__ = ["gif_path", "render_main", "rollout_frames"]

KEEP = 5

_GIF = re.compile(r"rollout_(\d{9,})\.gif")


def gif_path(out_dir: str, version: int) -> str:
    return os.path.join(out_dir, f"rollout_{int(version):09d}.gif")


def _prune(out_dir: str, keep: int) -> None:
    """Removes all but the newest `keep` rollout GIFs, and temporary files of other (dead) renderers."""
    gifs = []
    for entry in os.scandir(out_dir):
        match = _GIF.fullmatch(entry.name)
        if match:
            gifs.append((int(match.group(1)), entry.path))
        elif entry.name.startswith(GIF_TMP_PREFIX) and not entry.name.startswith(f"{GIF_TMP_PREFIX}{os.getpid()}-"):
            _remove(entry.path)  # one renderer per out_dir: another pid's temporary file is a leftover
    for _, path in sorted(gifs)[:-keep] if keep > 0 else sorted(gifs):
        _remove(path)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


# ----------------------------------------------------------------------------------------------------- process


def rollout_frames(spec, pool, act, max_steps: int, stop=None) -> list[Image.Image] | None:
    """One episode (at most `max_steps` steps) on a 1-env pool with `act(obs [1, ...]) -> actions [1, ...]`; its
    frames (one per step plus the final state). None if `stop` was set meanwhile."""
    draw = vector_drawer(spec)
    obs, _ = pool.reset()
    frames = []
    ret = 0.0
    for step in range(max_steps):
        if stop is not None and stop.is_set():
            return None
        action = np.asarray(act(obs))
        next_obs, reward, terminated, truncated, info = pool.step(action)
        ret += float(reward[0])
        frames.append(draw(obs[0], action[0], step, float(reward[0]), ret))
        obs = next_obs
        if terminated[0] or truncated[0] or int(info["elapsed_step"][0]) >= spec.max_episode_steps:
            break
    frames.append(draw(obs[0], None, len(frames), 0.0, ret))
    return frames


def render_main(config, weights_dir: str, out_dir: str, stop, events, every_seconds: float = 30.0,
                max_steps: int = 200, poll_seconds: float = 0.5, keep: int = KEEP) -> None:
    """The visualization process (seed 002, section 3.1.2), a top-level function for a forkserver child. Whenever a new
    weights version is published in `weights_dir` and at least `every_seconds` passed since the last GIF, plays one
    episode (up to `max_steps` steps) of the deterministic policy (`agent.eval_act`) on its own 1-env EnvPool,
    saves it as `<out_dir>/rollout_<version:09d>.gif` (atomically), keeps the newest `keep` GIFs and puts
    ("render", version, path) on `events`. Versions published during the wait are skipped (the newest is drawn).
    Errors: ("error", "render", traceback) on `events` and exit code 1; `stop` ends it (exit code 0)."""
    _cpu_only()

    def body():
        import jax

        from envs.factory import make_pool, make_spec
        from systems.offpolicy.agent import build_agent
        from systems.spreeze import weights as weights_lib

        spec = make_spec(config.env_id, config.env_kwargs, config.frame_stack)
        agent = build_agent(config, spec, abstract_state=True)  # reads published weights only
        pool = make_pool(spec, num_envs=1, batch_size=1, seed=agent.eval_seed, num_threads=1, evaluation=True)
        watcher = weights_lib.WeightsWatcher(weights_dir, agent.initial_state)
        key = jax.random.PRNGKey(agent.eval_seed)
        os.makedirs(out_dir, exist_ok=True)
        last = None
        try:
            while not stop.is_set():
                if last is not None and time.monotonic() - last < every_seconds:
                    stop.wait(min(poll_seconds, every_seconds - (time.monotonic() - last)))
                    continue
                newest = watcher.poll()
                if newest is None:
                    stop.wait(poll_seconds)
                    continue
                version, state = newest
                params = agent.policy_params(state.agent)
                frames = rollout_frames(spec, pool, lambda obs, p=params: agent.eval_act(p, obs, key), max_steps, stop)
                if frames is None:
                    break
                path = gif_path(out_dir, version)
                save_gif(frames, path)
                _prune(out_dir, keep)
                last = time.monotonic()
                events.put(("render", int(version), path))
        finally:
            pool.close()

    _guard("render", events, body)
