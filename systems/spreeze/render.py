"""The visualization process of a Spreeze run (seed 002, section 3.1.2): every so often it plays one episode of the
deterministic policy of the newest published weights on its own 1-env EnvPool and saves it as an animated GIF,
`<out_dir>/rollout_<version:09d>.gif` (the newest `keep` are kept). Like the test process it is a variant of the
sampler that neither explores nor sends experience, and it runs at a much lower rate, so it is a process of its own.

No physics renderer is available (EnvPool renders no frames here; pygame and mujoco are not installed), so the frames
are drawn with PIL from the observation and the action:

* Pendulum (obs = [cos theta, sin theta, theta_dot], theta = 0 upright, positive theta counter-clockwise as in
  gymnasium's own rendering): the pendulum itself -- the rod from the pivot at angle theta, the goal (upright)
  marked, the applied torque as an arc with an arrow head around the pivot (counter-clockwise for positive torque,
  length proportional to |u| / max torque) and as a bar, the step, theta, theta_dot and the return so far as text.
* Any other task (`draw_vector`): bar charts of the observation vector (each entry squashed by tanh, so 1 fills 76%
  of a bar; entries with |x| >= 3 are drawn darker) and of the action vector within its bounds (centre of the box =
  no bar, a bound = a full bar), plus step, reward and return as text.

Frame t shows the state the action of step t was taken in, that action and the return including its reward; the last
frame shows the final state. The drawing functions are pure (arrays in, `PIL.Image` out) and `save_gif` writes a
temporary file and renames it, so a reader never sees half a GIF.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import time

import numpy as np
from PIL import Image, ImageDraw

from systems.spreeze.workers import _cpu_only, _guard

__all__ = ["draw_pendulum", "draw_vector", "frame_drawer", "gif_path", "render_main", "rollout_frames", "save_gif"]

PENDULUM_SIZE = (240, 240)
VECTOR_SIZE = (320, 240)
FRAME_MS = 50  # per frame of the GIF (Pendulum's dt, so real time) before subsampling
MAX_FRAMES = 120  # longer episodes are subsampled (each kept frame shown proportionally longer)
KEEP = 5

# Colours (RGB). Part of the GIF palette, so they survive the palette conversion exactly.
BACKGROUND = (255, 255, 255)
TEXT = (30, 30, 30)
GRID = (200, 200, 200)
ROD = (204, 77, 77)  # gymnasium's pendulum colour
PIVOT = (50, 50, 100)  # not a gray: anti-aliased text never produces it
GOAL = (60, 160, 60)
TORQUE = (40, 90, 200)
OBS_BAR = (70, 110, 190)
OBS_CLIPPED = (20, 45, 110)
ACTION_BAR = (230, 140, 30)
_COLOURS = (BACKGROUND, TEXT, GRID, ROD, PIVOT, GOAL, TORQUE, OBS_BAR, OBS_CLIPPED, ACTION_BAR)

# draw_vector's chart boxes (x0, y0, x1, y1), pixel coordinates; each chart's zero line is its middle row.
VECTOR_OBS_BOX = (10, 30, 310, 130)
VECTOR_ACTION_BOX = (10, 152, 310, 212)
OBS_CLIP = 3.0  # |obs| at or beyond which a bar is drawn in OBS_CLIPPED

_GIF = re.compile(r"rollout_(\d{9,})\.gif")
_TMP_PREFIX = ".rollout-tmp-"


# ----------------------------------------------------------------------------------------------------- drawing


def _fmt(x: float) -> str:
    return f"{x:+.2f}" if abs(x) < 1000 else f"{x:+.3g}"


def pendulum_tip(obs, size: tuple[int, int] = PENDULUM_SIZE) -> tuple[float, float]:
    """Pixel (x, y) of the rod's tip in `draw_pendulum`'s frame for obs = [cos theta, sin theta, ...]."""
    (cx, cy), length = _pendulum_geometry(size)
    cos, sin = float(obs[0]), float(obs[1])
    norm = math.hypot(cos, sin) or 1.0
    return cx - length * sin / norm, cy - length * cos / norm


def _pendulum_geometry(size):
    width, height = size
    return (width / 2.0, height / 2.0 + 2.0), 0.32 * min(width, height)


def draw_pendulum(obs, action, step: int, ret: float, max_torque: float = 2.0,
                  size: tuple[int, int] = PENDULUM_SIZE) -> Image.Image:
    """One Pendulum frame (RGB): the rod at the angle of obs = [cos theta, sin theta, theta_dot] (upright = goal,
    marked in green), the torque `action` (shape [1], or None for the final state) as an arc around the pivot and
    a bar, and step / theta / theta_dot / return as text."""
    obs = np.asarray(obs, np.float64).reshape(-1)
    image = Image.new("RGB", size, BACKGROUND)
    draw = ImageDraw.Draw(image)
    width, height = size
    (cx, cy), length = _pendulum_geometry(size)
    # Reach of the tip and the goal direction.
    draw.ellipse((cx - length, cy - length, cx + length, cy + length), outline=GRID)
    draw.line((cx, cy - length - 10, cx, cy - length + 6), fill=GOAL, width=3)
    draw.polygon([(cx, cy - length - 16), (cx - 5, cy - length - 8), (cx + 5, cy - length - 8)], fill=GOAL)
    # Torque: an arc of radius 0.3 * length from the rod's direction, counter-clockwise (on screen) for u > 0.
    theta = math.atan2(obs[1], obs[0])
    u = None if action is None else float(np.asarray(action, np.float64).reshape(-1)[0])
    if u is not None and max_torque > 0 and abs(u) > 1e-3 * max_torque:
        frac = min(abs(u) / max_torque, 1.0)
        radius = 0.3 * length
        start = -90.0 - math.degrees(theta)  # PIL angles: degrees clockwise from 3 o'clock (y points down)
        sweep = 150.0 * frac
        end = start - sweep if u > 0 else start + sweep
        box = (cx - radius, cy - radius, cx + radius, cy + radius)
        draw.arc(box, min(start, end), max(start, end), fill=TORQUE, width=3)
        # Arrow head at the end, pointing along the direction of travel.
        a = math.radians(end)
        hx, hy = cx + radius * math.cos(a), cy + radius * math.sin(a)
        direction = -1.0 if u > 0 else 1.0  # d(PIL angle) of travel
        tx, ty = -math.sin(a) * direction, math.cos(a) * direction  # unit tangent along travel (screen coords)
        nx, ny = -ty, tx
        head = 8.0
        draw.polygon([(hx + tx * head, hy + ty * head), (hx + nx * head * 0.6, hy + ny * head * 0.6),
                      (hx - nx * head * 0.6, hy - ny * head * 0.6)], fill=TORQUE)
    # The rod, its bob and the pivot.
    tip = pendulum_tip(obs, size)
    draw.line((cx, cy, *tip), fill=ROD, width=9)
    draw.ellipse((tip[0] - 6, tip[1] - 6, tip[0] + 6, tip[1] + 6), fill=ROD)
    draw.ellipse((cx - 5, cy - 5, cx + 5, cy + 5), fill=PIVOT)
    # Torque bar along the bottom edge: the middle is 0, the ends are -max / +max.
    bar_y0, bar_y1 = height - 14, height - 6
    left, right = 40, width - 40
    middle = (left + right) / 2.0
    draw.rectangle((left, bar_y0, right, bar_y1), outline=GRID)
    draw.line((middle, bar_y0 - 2, middle, bar_y1 + 2), fill=TEXT)
    if u is not None and max_torque > 0:
        x = middle + max(-1.0, min(1.0, u / max_torque)) * (right - middle)
        draw.rectangle((min(middle, x), bar_y0 + 1, max(middle, x), bar_y1 - 1), fill=TORQUE)
    draw.text((4, height - 16), "u", fill=TEXT)
    if u is not None:
        draw.text((width - 4, height - 16), _fmt(u), fill=TEXT, anchor="ra")
    # Text.
    theta_dot = float(obs[2]) if obs.size > 2 else float("nan")
    draw.text((4, 2), f"step {int(step)}", fill=TEXT)
    draw.text((width - 4, 2), f"return {ret:.1f}", fill=TEXT, anchor="ra")
    draw.text((4, 15), f"theta {math.degrees(theta):+.0f} deg  w {theta_dot:+.2f}", fill=TEXT)
    return image


def _bars(draw, box, values, colours) -> None:
    """Vertical bars in `box` from its middle row; values in [-1, 1] (1 reaches the top edge)."""
    x0, y0, x1, y1 = box
    mid = (y0 + y1) // 2
    half = (y1 - y0) // 2
    n = len(values)
    draw.rectangle(box, outline=GRID)
    draw.line((x0, mid, x1, mid), fill=GRID)
    if n == 0:
        return
    slot = (x1 - x0 - 2) / n
    gap = 1 if slot >= 4 else 0
    for i, (v, colour) in enumerate(zip(values, colours, strict=True)):
        left = x0 + 1 + int(round(i * slot))
        right = max(left, x0 + int(round((i + 1) * slot)) - gap)
        top = mid - int(round(float(v) * half))
        if top != mid:
            draw.rectangle((left, min(mid, top), right, max(mid, top)), fill=colour)


def draw_vector(obs, action, low, high, step: int, reward: float, ret: float,
                size: tuple[int, int] = VECTOR_SIZE, title: str = "") -> Image.Image:
    """A generic frame (RGB) for any vector task: the observation as bars (tanh-squashed, darker where |x| >= 3;
    only the first bars fit if there are more entries than pixel columns), the action as bars within [low, high]
    (the box's middle = no bar; None bounds: a discrete action, shown as text), and step / reward / return as
    text. Chart positions are VECTOR_OBS_BOX and VECTOR_ACTION_BOX (for the default size)."""
    width, height = size
    sx, sy = width / VECTOR_SIZE[0], height / VECTOR_SIZE[1]

    def scaled(box):
        return (int(box[0] * sx), int(box[1] * sy), int(box[2] * sx), int(box[3] * sy))

    obs_box, act_box = scaled(VECTOR_OBS_BOX), scaled(VECTOR_ACTION_BOX)
    image = Image.new("RGB", size, BACKGROUND)
    draw = ImageDraw.Draw(image)
    flat = np.nan_to_num(np.asarray(obs, np.float64).reshape(-1), nan=0.0, posinf=1e9, neginf=-1e9)
    shown = flat[: max(1, obs_box[2] - obs_box[0] - 2)]
    more = "" if shown.size == flat.size else f", first {shown.size}"
    label = f"observation ({flat.size}{more}; tanh)"
    if flat.size <= 4:
        label += ": " + " ".join(_fmt(float(x)) for x in flat)
    draw.text((obs_box[0], obs_box[1] - 13), label, fill=TEXT)
    _bars(draw, obs_box, np.tanh(shown), [OBS_CLIPPED if abs(x) >= OBS_CLIP else OBS_BAR for x in shown])
    if title:
        draw.text((width - 4, 2), title, fill=TEXT, anchor="ra")
    if action is None:
        draw.text((act_box[0], act_box[1] - 13), "action -", fill=TEXT)
        draw.rectangle(act_box, outline=GRID)
    elif low is None or high is None:
        draw.text((act_box[0], act_box[1] - 13), f"action {int(np.asarray(action).reshape(-1)[0])}", fill=TEXT)
        draw.rectangle(act_box, outline=GRID)
    else:
        a = np.asarray(action, np.float64).reshape(-1)
        lo = np.broadcast_to(np.asarray(low, np.float64).reshape(-1), a.shape)
        hi = np.broadcast_to(np.asarray(high, np.float64).reshape(-1), a.shape)
        span = np.where(hi > lo, hi - lo, 1.0)
        scaled_a = np.clip(2.0 * (a - (lo + hi) / 2.0) / span, -1.0, 1.0)
        label = f"action ({a.size}) in [{_fmt(float(lo.min()))}, {_fmt(float(hi.max()))}]"
        if a.size <= 4:
            label += ": " + " ".join(_fmt(float(x)) for x in a)
        draw.text((act_box[0], act_box[1] - 13), label, fill=TEXT)
        _bars(draw, act_box, scaled_a, [ACTION_BAR] * a.size)
    draw.text((4, height - 22), f"step {int(step)}   reward {_fmt(float(reward))}   return {float(ret):.1f}", fill=TEXT)
    return image


def frame_drawer(spec):
    """`draw(obs, action, step, reward, ret) -> PIL.Image` for an EnvSpec: the pendulum picture for Pendulum,
    the generic bar charts for anything else."""
    pendulum = spec.env_id.startswith("Pendulum") and tuple(spec.obs_shape) == (3,) and spec.action_dim == 1
    if pendulum and spec.continuous:
        max_torque = float(np.asarray(spec.action_high).reshape(-1)[0])

        def draw(obs, action, step, reward, ret):
            del reward
            return draw_pendulum(obs, action, step, ret, max_torque=max_torque)
    else:
        low = spec.action_low if spec.continuous else None
        high = spec.action_high if spec.continuous else None

        def draw(obs, action, step, reward, ret):
            return draw_vector(obs, action, low, high, step, reward, ret, title=spec.env_id)
    return draw


# ----------------------------------------------------------------------------------------------------- GIF files


def _palette_image() -> Image.Image:
    """A fixed 256-entry palette: the drawing colours, a gray ramp (text anti-aliasing) and a 6x6x6 colour cube."""
    colours = list(_COLOURS)
    colours += [(v, v, v) for v in range(0, 256, 17)]
    colours += [(r, g, b) for r in range(0, 256, 51) for g in range(0, 256, 51) for b in range(0, 256, 51)]
    unique = list(dict.fromkeys(colours))[:256]
    unique += [unique[-1]] * (256 - len(unique))
    palette = Image.new("P", (1, 1))
    palette.putpalette([c for colour in unique for c in colour])
    return palette


_PALETTE = _palette_image()


def save_gif(frames, path: str, frame_ms: int = FRAME_MS, max_frames: int = MAX_FRAMES) -> int:
    """Writes `frames` (PIL images) as a looping animated GIF at `path`, atomically: a temporary file in the same
    directory, flushed and fsynced, then `os.replace`; on any failure the temporary file is removed and `path` is
    untouched. Longer sequences are subsampled to at most `max_frames` (every k-th frame and the last, each shown
    k * frame_ms). Frames are mapped to one fixed palette (palette mode, no dithering). Pillow merges identical
    consecutive frames into one. Returns the number of frames passed to the writer."""
    frames = list(frames)
    if not frames:
        raise ValueError("save_gif needs at least one frame")
    if max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")
    stride = max(1, math.ceil(len(frames) / max_frames))
    picked = frames[::stride]
    if stride > 1 and (len(frames) - 1) % stride:
        picked = picked[: max_frames - 1] + [frames[-1]]
    paletted = [f.convert("RGB").quantize(palette=_PALETTE, dither=Image.Dither.NONE) for f in picked]
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f"{_TMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}.gif")
    try:
        with open(tmp, "wb") as f:
            paletted[0].save(f, format="GIF", save_all=True, append_images=paletted[1:],
                             duration=int(frame_ms * stride), loop=0, optimize=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
        raise
    return len(paletted)


def gif_path(out_dir: str, version: int) -> str:
    return os.path.join(out_dir, f"rollout_{int(version):09d}.gif")


def _prune(out_dir: str, keep: int) -> None:
    """Removes all but the newest `keep` rollout GIFs, and temporary files of other (dead) renderers."""
    gifs = []
    for entry in os.scandir(out_dir):
        match = _GIF.fullmatch(entry.name)
        if match:
            gifs.append((int(match.group(1)), entry.path))
        elif entry.name.startswith(_TMP_PREFIX) and not entry.name.startswith(f"{_TMP_PREFIX}{os.getpid()}-"):
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
    draw = frame_drawer(spec)
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

        spec = make_spec(config.env_id)
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
