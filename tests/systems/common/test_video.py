"""`--capture_video`: evaluation episodes filmed in real frames where the simulator gives them.

* The filmed Atari env is the policy's own env: rendering changes nothing of its steps, and the colour frame it
  shows is the state the gray 84x84 observation was made from.
* A Breakout video is colour, full size (210x160 and a caption) and moves; MP4 streams, GIF without an encoder,
  long episodes are cut at `max_frames`; MuJoCo has real frames with the `mujoco` package; GFootball falls back to
  the drawn observation and says so.
* A training run with `--capture_video --track` writes one video per evaluation, a TensorBoard preview and a W&B
  video, and prints no warning.
"""

import glob
import os
import subprocess
import sys
import warnings

import imageio
import jax
import numpy as np
import pytest
from PIL import Image

from envs import rendering
from envs.factory import make_pool, make_spec
from systems.common import drawing, video
from tests.faults import failing_ffmpeg
from tests.fixtures import REPO_ROOT

ROOT = REPO_ROOT


def _random_act(spec):
    if spec.continuous:
        return jax.jit(lambda params, obs, key: jax.random.uniform(key, (obs.shape[0], spec.action_dim), minval=-1.0,
                                                                   maxval=1.0))
    return jax.jit(lambda params, obs, key: jax.random.randint(key, (obs.shape[0],), 0, spec.action_dim))


@pytest.fixture(autouse=True)
def _ffmpeg_is_fork_and_exec():
    """imageio starts ffmpeg with a preexec_fn: JAX's at-fork hook warns about a deadlock an exec cannot have (the
    writer silences it the same way)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        yield


def _read(path):
    with imageio.get_reader(str(path)) as reader:
        return [np.asarray(frame) for frame in reader]


def _gray_84(frame):
    """EnvPool's Atari preprocessing of one screen, approximated by PIL: gray, resized to 84x84."""
    return np.asarray(Image.fromarray(frame).convert("L").resize((84, 84), Image.Resampling.BILINEAR), np.float32)


def test_the_filmed_atari_env_is_the_policys_own_env():
    spec = make_spec("Breakout-v5")
    filmed = make_pool(spec, num_envs=1, batch_size=1, seed=7, num_threads=1, evaluation=True, render=True)
    plain = make_pool(spec, num_envs=1, batch_size=1, seed=7, num_threads=1, evaluation=True)
    rng = np.random.default_rng(0)
    obs, _ = filmed.reset()
    plain_obs, _ = plain.reset()
    screens, newest = [], []
    for _ in range(150):
        np.testing.assert_array_equal(obs, plain_obs)  # rendering changes nothing of the env's steps
        frame = rendering.render_frame(filmed, spec)
        assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8
        screens.append(_gray_84(frame))
        newest.append(obs[0, -1].astype(np.float32))
        actions = rng.integers(0, spec.action_dim, size=1).astype(np.int32)
        obs, reward, terminated, _, _ = filmed.step(actions)
        plain_obs, plain_reward, plain_terminated, _, _ = plain.step(actions)
        np.testing.assert_array_equal(reward, plain_reward)
        np.testing.assert_array_equal(terminated, plain_terminated)
    filmed.close()
    plain.close()
    # The colour frame of step t, gray-scaled and resized, is closer to the observation of step t than to those of
    # steps t - 1 and t + 1 wherever the picture changed (not always: EnvPool's observation is the max over the last
    # two screens, the render the last one only).
    def distance(t, s):
        return np.abs(screens[t] - newest[s]).mean()

    closest = [distance(t, t) < min(distance(t, t - 1), distance(t, t + 1))
               for t in range(1, len(screens) - 1) if np.abs(newest[t] - newest[t - 1]).max() > 30]
    assert len(closest) > 100 and np.mean(closest) > 0.85


def test_breakout_video_is_colour_full_size_and_moves(tmp_path):
    spec = make_spec("Breakout-v5")
    film = video.record_episode(spec, _random_act(spec), None, seed=3, path=str(tmp_path / "breakout.mp4"))
    assert film.path == str(tmp_path / "breakout.mp4") and film.real_frames and film.complete
    assert film.steps_per_frame == 1 and film.fps == 15.0 and "colour" in film.note and "MP4" in film.note
    frames = _read(film.path)
    assert len(frames) == film.frames == film.episode_length + 1  # every step and the final state
    assert frames[0].shape == (210 + drawing.CAPTION, 160, 3)
    screen = np.stack(frames)[:, :210].astype(np.int16)
    assert np.abs(screen[..., 0] - screen[..., 2]).max() > 100  # colour: the bricks' rows are red, blue, ...
    moved = np.abs(np.diff(screen, axis=0)).reshape(len(frames) - 1, -1).max(axis=1) > 50
    assert moved.mean() > 0.5  # the ball moves in most frames
    assert not os.listdir(tmp_path) == [] and all(not name.startswith(".") for name in os.listdir(tmp_path))
    assert 0 < len(film.preview) <= video.PREVIEW_FRAMES and film.preview[0].shape == frames[0].shape


def test_without_an_encoder_the_video_is_a_gif_and_long_episodes_are_cut(tmp_path, monkeypatch):
    monkeypatch.setattr(video, "mp4_encoder_available", lambda: False)
    spec = make_spec("Breakout-v5")
    film = video.record_episode(spec, _random_act(spec), None, seed=3, path=str(tmp_path / "b.mp4"), max_frames=12)
    assert film.path == str(tmp_path / "b.gif") and video.ENCODER_MISSING in film.note
    assert not film.complete and film.frames == 12 and film.episode_length == 11
    with Image.open(film.path) as gif:
        assert gif.format == "GIF" and gif.n_frames == 12 and gif.size == (160, 210 + drawing.CAPTION)
        gif.seek(5)
        picture = np.asarray(gif.convert("RGB"), np.int16)
    assert np.abs(picture[..., 0] - picture[..., 2]).max() > 100  # still colour (adaptive palette)
    assert sorted(os.listdir(tmp_path)) == ["b.gif"]  # no temporary file left


@pytest.mark.slow
def test_mujoco_has_real_frames_with_the_mujoco_package(tmp_path):
    spec = make_spec("Hopper-v4")
    film = video.record_episode(spec, _random_act(spec), None, seed=1, path=str(tmp_path / "hopper.mp4"))
    assert film.real_frames, film.note  # the test extra installs mujoco; MUJOCO_GL=egl renders headless
    assert film.steps_per_frame == 4 and film.fps == pytest.approx(31.25)  # Hopper: 125 steps/s
    frames = _read(film.path)
    assert frames[0].shape == (480 + drawing.CAPTION, 480, 3)
    sky, floor = frames[0][:100].astype(np.int16), frames[0][400:480].astype(np.int16)
    assert sky.std() < 20 < floor.std()  # a plain sky over the checkered floor, not a bar chart


def test_gfootball_falls_back_to_the_drawn_observation_and_says_so(tmp_path):
    spec = make_spec("gfootball/academy_empty_goal_close-v1")
    film = video.record_episode(spec, _random_act(spec), None, seed=1, path=str(tmp_path / "g.mp4"), max_frames=8)
    assert not film.real_frames and "EnvPool renders no gfootball frames" in film.note
    frames = _read(film.path)
    assert len(frames) == 8 and frames[0].shape == (72 * drawing.SMM_SCALE + drawing.CAPTION, 96 * drawing.SMM_SCALE, 3)


@pytest.mark.slow
def test_a_training_run_films_each_evaluation_to_files_tensorboard_and_wandb(tmp_path):
    run_dir = tmp_path / "run"
    code = ("import sys, runpy; sys.argv = ['launch.hts', '--env=CartPole-v1', '--num_envs=4', '--preset=family', "
            "'--total_steps=2048', "
            f"'--eval_episodes=1', '--eval_every=1024', '--capture_video', '--track', '--logdir={run_dir}']\n"
            "runpy.run_module('launch.hts', run_name='__main__')")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr  # nothing a user cannot act on
    videos = sorted(os.listdir(run_dir / "videos"))
    assert videos == ["eval-000000001024-v2.mp4", "eval-000000002048-v4.mp4"]  # env steps, policy version
    assert all(len(_read(run_dir / "videos" / name)) > 1 for name in videos)
    lines = [line for line in result.stdout.splitlines() if line.startswith("[video]")]
    assert len(lines) == 2 and "real frames" in lines[0] and "real frames" not in lines[1]
    events = b"".join(open(path, "rb").read() for path in glob.glob(str(run_dir / "tb" / "events*")))
    assert events.count(b"eval/video") == 2 and events.count(b"GIF89a") == 2  # TensorBoard's animated image
    media = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "files" / "media" / "videos" / "eval" / "*.mp4"))
    assert len(media) == 2


@pytest.mark.slow
def test_a_video_the_encoder_cannot_write_stops_the_run_with_one_line_naming_it(tmp_path):
    """An encoder failure printed ffmpeg's command and output over ten lines, and the error line did not
    name the file. The encoder here is a stand-in that fails as ffmpeg does on a full disk: it exits at once."""
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "launch.hts", "--env=CartPole-v1", "--num_envs=4", "--sync_interval=16",
         "--total_steps=2048", "--eval_episodes=1", "--eval_every=512", "--capture_video", f"--logdir={run_dir}",
         "--quiet"], cwd=ROOT, env=dict(os.environ, IMAGEIO_FFMPEG_EXE=failing_ffmpeg(tmp_path)), capture_output=True,
        text=True, timeout=300)
    assert result.returncode == 74, result.stderr
    video = run_dir / "videos" / "eval-000000000512-v8.mp4"
    lines = result.stderr.strip().splitlines()  # "... stopped: [Errno 32] Broken pipe; the run stopped ..."
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot write {video}: the video encoder (ffmpeg) "
                                                   "stopped: "), lines
    assert os.listdir(run_dir / "videos") == []  # no temporary file left
