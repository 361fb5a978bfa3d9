"""Spreeze's visualization process (seed 002, section 3.1.2) and its drawings (`systems.common.drawing`): the
Pendulum picture puts the rod where theta says, the generic bar-chart frame shows observation and action within their
bounds, GIFs are multi-frame, palette mode and written atomically, and `render_main` in a spawned process renders the
published weights and stops cleanly."""

import math
import multiprocessing
import os
import queue
import time

import numpy as np
import pytest
from PIL import Image

from systems.common import drawing
from systems.spreeze import render

ROD = drawing.ROD


def _rgb(image):
    return np.asarray(image.convert("RGB"))


def _pivot(pixels):
    ys, xs = np.nonzero(np.all(pixels == drawing.PIVOT, axis=-1))
    assert xs.size > 0
    return xs.mean(), ys.mean()


def _pixel(pixels, x, y):
    return tuple(int(c) for c in pixels[int(round(y)), int(round(x))])


@pytest.mark.parametrize("theta", [0.0, math.pi, math.pi / 2, math.radians(30), math.radians(-120)])
def test_pendulum_rod_points_where_theta_says(theta):
    image = drawing.draw_pendulum([math.cos(theta), math.sin(theta), 0.5], [1.0], step=3, ret=-12.5)
    assert image.size == drawing.PENDULUM_SIZE
    pixels = _rgb(image)
    px, py = _pivot(pixels)
    # theta = 0 is upright (screen up), positive theta counter-clockwise: the tip is at pivot + r (-sin, -cos).
    dx, dy = -math.sin(theta), -math.cos(theta)
    r = 0.3 * min(image.size)  # well inside the rod (length 0.32 * size), outside the pivot and the torque arc
    assert _pixel(pixels, px + r * dx, py + r * dy) == ROD
    assert _pixel(pixels, px - r * dx, py - r * dy) != ROD
    # All rod pixels lie on that side: their centroid's direction from the pivot is theta.
    ys, xs = np.nonzero(np.all(pixels == ROD, axis=-1))
    angle = math.atan2(-(xs.mean() - px), -(ys.mean() - py))
    assert abs(math.remainder(angle - theta, 2 * math.pi)) < math.radians(3)


def test_pendulum_upright_and_hanging_differ_and_torque_is_drawn():
    upright = _rgb(drawing.draw_pendulum([1.0, 0.0, 0.0], None, step=0, ret=0.0))
    hanging = _rgb(drawing.draw_pendulum([-1.0, 0.0, 0.0], None, step=0, ret=0.0))
    px, py = _pivot(upright)
    reach = 0.32 * drawing.PENDULUM_SIZE[1]
    assert _pixel(upright, px, py - 0.9 * reach) == ROD and _pixel(upright, px, py + 0.9 * reach) != ROD
    assert _pixel(hanging, px, py + 0.9 * reach) == ROD and _pixel(hanging, px, py - 0.9 * reach) != ROD
    assert not np.any(np.all(upright == drawing.TORQUE, axis=-1))  # no action: no torque arc or bar
    pushed = _rgb(drawing.draw_pendulum([1.0, 0.0, 0.0], [2.0], step=0, ret=0.0))
    assert np.sum(np.all(pushed == drawing.TORQUE, axis=-1)) > 50
    # Positive torque turns counter-clockwise: from upright the arc goes to the screen's left of the pivot.
    ys, xs = np.nonzero(np.all(pushed[: int(py) + 40] == drawing.TORQUE, axis=-1))
    assert xs.mean() < px


def _bar_probe(box, n, i, value):
    """Pixel (x, y) inside bar i of n in a draw_vector chart box, half-way to a full bar of sign `value`."""
    x0, y0, x1, y1 = box
    mid, half = (y0 + y1) // 2, (y1 - y0) // 2
    slot = (x1 - x0 - 2) / n
    return x0 + 1 + (i + 0.5) * slot, mid - math.copysign(0.5 * half, value)


@pytest.mark.parametrize("obs,action,low,high", [
    (np.array([0.9, -0.4, 2.5]), np.array([1.5]), np.array([-2.0]), np.array([2.0])),  # Pendulum's shapes
    (np.linspace(-3, 3, 17), np.array([1.0, -1.0, 0.0, 0.6, -0.6, 0.2]), -np.ones(6), np.ones(6)),  # 6-D action
])
def test_vector_frame_shows_observation_and_action_within_bounds(obs, action, low, high):
    image = drawing.draw_vector(obs, action, low, high, step=7, reward=-1.5, ret=-20.0, title="Task")
    assert image.size == drawing.VECTOR_SIZE
    pixels = _rgb(image)
    for i, a in enumerate(action):
        scaled = 2 * (a - (low[i] + high[i]) / 2) / (high[i] - low[i])
        up = _pixel(pixels, *_bar_probe(drawing.VECTOR_ACTION_BOX, action.size, i, 1.0))
        down = _pixel(pixels, *_bar_probe(drawing.VECTOR_ACTION_BOX, action.size, i, -1.0))
        assert (up == drawing.ACTION_BAR) == (scaled > 0.5)
        assert (down == drawing.ACTION_BAR) == (scaled < -0.5)
    for i, x in enumerate(obs):
        colour = drawing.OBS_CLIPPED if abs(x) >= drawing.OBS_CLIP else drawing.OBS_BAR
        probe = _pixel(pixels, *_bar_probe(drawing.VECTOR_OBS_BOX, obs.size, i, x))
        assert (probe == colour) == (abs(np.tanh(x)) > 0.5)
    # Zero observation and an action in the middle of its bounds: no bars at all.
    empty = _rgb(drawing.draw_vector(np.zeros_like(obs), (low + high) / 2, low, high, 0, 0.0, 0.0))
    for colour in (drawing.OBS_BAR, drawing.OBS_CLIPPED, drawing.ACTION_BAR):
        assert not np.any(np.all(empty == colour, axis=-1))


def _frames(n):
    return [drawing.draw_pendulum([math.cos(t), math.sin(t), 0.0], [0.5], step=i, ret=-float(i))
            for i, t in enumerate(np.linspace(0, 2 * math.pi, n))]


def test_save_gif_writes_a_multi_frame_palette_gif(tmp_path):
    path = str(tmp_path / "a.gif")
    frames = _frames(6)
    assert drawing.save_gif(frames, path) == 6
    with Image.open(path) as gif:
        assert gif.format == "GIF" and gif.mode == "P" and gif.n_frames == 6 and gif.is_animated
        assert gif.info["duration"] == drawing.FRAME_MS
        gif.seek(0)
        first = _rgb(gif)
    original = _rgb(frames[0])
    drawn = np.zeros(original.shape[:2], bool)
    for colour in (drawing.BACKGROUND, drawing.ROD, drawing.PIVOT, drawing.GOAL, drawing.TORQUE):
        drawn |= np.all(original == colour, axis=-1)
    assert drawn.mean() > 0.9 and np.array_equal(first[drawn], original[drawn])  # drawing colours are in the palette
    assert np.abs(first.astype(int) - original).mean() < 1.0  # anti-aliased text: nearest palette grays
    assert os.listdir(tmp_path) == ["a.gif"]
    # A long episode is subsampled to at most max_frames, each kept frame shown longer.
    long_path = str(tmp_path / "long.gif")
    written = drawing.save_gif(_frames(50), long_path, max_frames=20)
    with Image.open(long_path) as gif:
        assert gif.n_frames == written <= 20 and gif.info["duration"] == 3 * drawing.FRAME_MS


def test_save_gif_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "rollout_000000001.gif"

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        drawing.save_gif(_frames(3), str(path))
    assert os.listdir(tmp_path) == []  # neither the final file nor the temporary one
    path.write_bytes(b"previous")
    with pytest.raises(OSError):
        drawing.save_gif(_frames(3), str(path))
    assert path.read_bytes() == b"previous" and os.listdir(tmp_path) == [path.name]


def _next_event(events, deadline):
    while time.monotonic() < deadline:
        try:
            event = events.get(timeout=1.0)
        except queue.Empty:
            continue
        if event[0] == "error":
            pytest.fail(f"{event[1]} failed:\n{event[2]}")
        return event
    pytest.fail("no event from the render process")


@pytest.mark.slow
def test_render_main_renders_published_weights_in_a_spawned_process(tmp_path):
    from envs.factory import make_spec
    from systems.offpolicy.agent import build_agent
    from systems.spreeze import weights as weights_lib
    from systems.spreeze.system import SpreezeConfig

    config = SpreezeConfig(env_id="Pendulum-v1", hidden_sizes=(16,), num_envs=1)
    state = build_agent(config, make_spec("Pendulum-v1")).initial_state
    weights_dir, out_dir = str(tmp_path / "weights"), str(tmp_path / "renders")
    weights_lib.publish(weights_dir, 0, state, meta={"env_steps": 0, "wall_time": 0.0})
    ctx = multiprocessing.get_context("spawn")
    stop, events = ctx.Event(), ctx.Queue()
    process = ctx.Process(target=render.render_main, args=(config, weights_dir, out_dir, stop, events),
                          kwargs=dict(every_seconds=0.0, max_steps=20, poll_seconds=0.1, keep=1), daemon=True)
    process.start()
    try:
        deadline = time.monotonic() + 90
        kind, version, path = _next_event(events, deadline)
        assert (kind, version, path) == ("render", 0, os.path.join(out_dir, "rollout_000000000.gif"))
        with Image.open(path) as gif:
            assert gif.size == drawing.PENDULUM_SIZE and gif.n_frames == 21  # 20 steps and the final state
        weights_lib.publish(weights_dir, 1, state, meta={"env_steps": 100, "wall_time": 1.0})
        assert _next_event(events, deadline)[:2] == ("render", 1)
        assert os.listdir(out_dir) == ["rollout_000000001.gif"]  # keep=1 pruned version 0
        stop.set()
        process.join(timeout=30)
        assert process.exitcode == 0
    finally:
        if process.is_alive():
            process.terminate()
            process.join(timeout=5)


def test_render_main_reports_an_error_and_exits_non_zero(tmp_path):
    from systems.spreeze.system import SpreezeConfig

    config = SpreezeConfig(env_id="NoSuchTask-v0", hidden_sizes=(16,), num_envs=1)
    ctx = multiprocessing.get_context("spawn")
    stop, events = ctx.Event(), ctx.Queue()
    process = ctx.Process(target=render.render_main, args=(config, str(tmp_path), str(tmp_path / "r"), stop, events),
                          daemon=True)
    process.start()
    try:
        kind, name, trace = events.get(timeout=60)
        assert (kind, name) == ("error", "render") and "NoSuchTask-v0" in trace
        process.join(timeout=30)
        assert process.exitcode == 1
    finally:
        if process.is_alive():
            process.terminate()
            process.join(timeout=5)
