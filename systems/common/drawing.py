"""Frames drawn from observations, and atomic animated GIFs: what a policy sees when no simulator renders the task.

Used where no real frame exists (`systems.common.video` falls back to them: GFootball, whose EnvPool build renders
nothing, and MuJoCo without a renderer), by `launch.evaluate --eval_gif` (the observation itself: Atari's 84x84 gray
frame, GFootball's super mini map) and by Spreeze's visualization process (seed 002, section 3.1.2):

* Atari: the newest frame of the (4, 84, 84) stack, upscaled, with a caption.
* GFootball: the (72, 96, 4) super mini map as a coloured pitch (left team yellow, right team blue, active player red,
  ball white).
* gymnax's MinAtar games (a small channels-last 0/1 image): each cell in the colour of its object's plane.
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

import chex
import numpy as np
from PIL import Image, ImageDraw

from systems.common.atomic import write_atomic

PENDULUM_SIZE = (240, 240)
VECTOR_SIZE = (320, 240)
FRAME_MS = 50  # per frame of the GIF (Pendulum's dt, so real time) before subsampling; FAMILY_FRAME_MS: others
MAX_FRAMES = 120  # longer episodes are subsampled (each kept frame shown proportionally longer)
GIF_TMP_PREFIX = ".rollout-tmp-"  # save_gif's temporary files (Spreeze's renderer removes stale ones)

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


def vector_drawer(spec):
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


def _paletted(frames, adaptive: bool) -> list[Image.Image]:
    """PIL images -> palette mode without dithering: the fixed palette of the drawings (their colours exactly), or
    each frame's own 256 colours (`adaptive`, for real frames)."""
    if adaptive:
        return [f.convert("RGB").quantize(colors=256, dither=Image.Dither.NONE) for f in frames]
    return [f.convert("RGB").quantize(palette=_PALETTE, dither=Image.Dither.NONE) for f in frames]


def _pick(frames: list, max_frames: int) -> tuple[list, int]:
    """At most `max_frames` of `frames`: every k-th and the last; returns them and k."""
    if not frames:
        raise ValueError("a GIF needs at least one frame")
    if max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")
    stride = max(1, math.ceil(len(frames) / max_frames))
    picked = frames[::stride]
    if stride > 1 and (len(frames) - 1) % stride:
        picked = picked[: max_frames - 1] + [frames[-1]]
    return picked, stride


def write_gif(handle, frames, frame_ms: int, adaptive: bool = False) -> None:
    """Writes `frames` (PIL images) to the open binary `handle` as a looping animated GIF, `frame_ms` each.
    Pillow merges identical consecutive frames into one."""
    paletted = _paletted(frames, adaptive)
    paletted[0].save(handle, format="GIF", save_all=True, append_images=paletted[1:], duration=int(frame_ms),
                     loop=0, optimize=False)


def save_gif(frames, path: str, frame_ms: int = FRAME_MS, max_frames: int = MAX_FRAMES,
             adaptive: bool = False) -> int:
    """Writes `frames` (PIL images) as a looping animated GIF at `path`, atomically (`systems.common.atomic`).
    Longer sequences are subsampled to at most `max_frames` (every k-th frame and the last, each shown k * frame_ms).
    Frames are mapped to one fixed palette (palette mode, no dithering; `adaptive`: each frame's own palette).
    Returns the number of frames passed to the writer."""
    picked, stride = _pick(list(frames), max_frames)
    write_atomic(path, lambda f: write_gif(f, picked, frame_ms * stride, adaptive), GIF_TMP_PREFIX, ".gif")
    return len(picked)


# --------------------------------------------------------------------------------------------- observation frames


ATARI_SCALE = 3  # 84 x 84 -> 252 x 252
SMM_SCALE = 4  # 72 x 96 -> 288 x 384
CAPTION = 16  # pixel rows of the text line under an image frame
# GIF frame time per env step (real time where there is one): Atari 4 frames at 60 Hz, GFootball 10 steps/s.
FAMILY_FRAME_MS = {"atari": 67, "gfootball": 100, "gymnax": 100, "brax": 50}
# Super-mini-map planes (gfootball observation_preprocessing: 0 left team, 1 right team, 2 ball, 3 active player),
# drawn in this order so the active player and the ball stay visible over the teams.
PITCH = (40, 110, 50)
SMM_COLOURS = ((0, (250, 210, 0)), (1, (70, 150, 255)), (3, (230, 40, 40)), (2, (255, 255, 255)))
SMM_MARKER = 1  # each marker pixel is grown by this many pixels on every side (SMM markers are one or two pixels)


# ----------------------------------------------------------------------------------------------------- frames


def captioned(image: Image.Image, text: str) -> Image.Image:
    framed = Image.new("RGB", (image.width, image.height + CAPTION), BACKGROUND)
    framed.paste(image.convert("RGB"), (0, 0))
    ImageDraw.Draw(framed).text((4, image.height + 2), text, fill=TEXT)
    return framed


def caption_text(step: int, action, ret: float) -> str:
    shown = "-" if action is None else np.array2string(np.asarray(action), precision=2, separator=",")
    return f"step {step}  action {shown}  return {ret:.1f}"


def draw_atari(obs, action, step: int, ret: float) -> Image.Image:
    """The newest frame of a (4, 84, 84) uint8 stack (EnvPool stacks oldest first), upscaled, with a caption."""
    chex.assert_rank(obs, 3)  # [4, 84, 84]
    frame = np.asarray(obs)[-1]  # [84, 84]
    image = Image.fromarray(frame, mode="L").resize(
        (frame.shape[1] * ATARI_SCALE, frame.shape[0] * ATARI_SCALE), Image.Resampling.NEAREST
    )
    return captioned(image, caption_text(step, action, ret))


def _grow(plane: np.ndarray, radius: int) -> np.ndarray:
    """[H, W] -> [H, W]: the maximum over each pixel's (2 radius + 1)^2 neighbourhood (a square dilation)."""
    height, width = plane.shape
    padded = np.pad(plane, radius)
    return np.max([padded[dy : dy + height, dx : dx + width] for dy in range(2 * radius + 1)
                   for dx in range(2 * radius + 1)], axis=0)


def smm_picture(obs) -> np.ndarray:
    """[72, 96, 4] uint8 super mini map -> [72, 96, 3] uint8 RGB: each plane (markers grown by SMM_MARKER) blended
    over the pitch in its colour, with its value / 255 as opacity."""
    chex.assert_shape(obs, (None, None, 4))
    planes = np.asarray(obs, np.float32) / 255.0  # [H, W, 4]
    picture = np.broadcast_to(np.asarray(PITCH, np.float32), (*planes.shape[:2], 3)).copy()
    for plane, colour in SMM_COLOURS:
        alpha = _grow(planes[..., plane], SMM_MARKER)[..., None]  # [H, W, 1]
        picture = picture * (1.0 - alpha) + np.asarray(colour, np.float32) * alpha
    return np.clip(np.rint(picture), 0, 255).astype(np.uint8)


def draw_smm(obs, action, step: int, ret: float) -> Image.Image:
    picture = smm_picture(obs)
    image = Image.fromarray(picture, mode="RGB").resize(
        (picture.shape[1] * SMM_SCALE, picture.shape[0] * SMM_SCALE), Image.Resampling.NEAREST
    )
    return captioned(image, caption_text(step, action, ret))


PLANES_SCALE = 24  # MinAtar's 10 x 10 -> 240 x 240
PLANE_COLOURS = ((230, 40, 40), (70, 150, 255), (250, 210, 0), (60, 160, 60), (200, 90, 220), (255, 140, 30),
                 (0, 200, 200), (255, 255, 255), (150, 150, 150), (120, 70, 30))


def planes_picture(obs) -> np.ndarray:
    """[H, W, 3] uint8 of a channels-last 0/1 image (gymnax MinAtar): each cell the colour of its last set plane,
    black where none is set."""
    planes = np.asarray(obs, np.float32) > 0.5  # [H, W, C]
    picture = np.zeros((*planes.shape[:2], 3), np.uint8)
    for channel in range(planes.shape[-1]):
        picture[planes[..., channel]] = PLANE_COLOURS[channel % len(PLANE_COLOURS)]
    return picture


def draw_planes(obs, action, step: int, ret: float) -> Image.Image:
    picture = planes_picture(obs)
    scale = max(1, PLANES_SCALE * 10 // max(picture.shape[:2]))
    image = Image.fromarray(picture, mode="RGB").resize(
        (picture.shape[1] * scale, picture.shape[0] * scale), Image.Resampling.NEAREST)
    return captioned(image, caption_text(step, action, ret))


def observation_drawer(spec):
    """`draw(obs, action, step, reward, ret) -> PIL.Image` for one observation of `spec` (module docstring)."""
    if spec.family == "atari" and len(spec.obs_shape) == 3:
        return lambda obs, action, step, reward, ret: draw_atari(obs, action, step, ret)
    if spec.family == "gfootball" and len(spec.obs_shape) == 3:
        return lambda obs, action, step, reward, ret: draw_smm(obs, action, step, ret)
    if len(spec.obs_shape) == 3:  # another channels-last image: gymnax's MinAtar planes
        return lambda obs, action, step, reward, ret: draw_planes(obs, action, step, ret)
    return vector_drawer(spec)


class FrameSampler:
    """Keeps at most `cap` evenly spaced frames of a sequence of unknown length: every `stride`-th one, the stride
    doubling (and every other kept frame dropped) whenever the cap would be passed. Frames are made only when kept."""

    def __init__(self, cap: int):
        self.cap = max(2, cap)
        self.stride = 1
        self.frames: list = []
        self._seen = 0

    def offer(self, make_frame) -> None:
        """Frame number `seen`: `make_frame()` is called (and its frame kept) iff it falls on the stride."""
        if self._seen % self.stride == 0:
            self.frames.append(make_frame())
            if len(self.frames) > self.cap:
                self.frames = self.frames[::2]
                self.stride *= 2
        self._seen += 1
