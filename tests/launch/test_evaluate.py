"""`launch.evaluate` and `systems.common.restore`: a saved policy is rebuilt exactly (its fingerprint equals
summary.json's), evaluated with the Evaluator's protocol (same returns as the Evaluator's own action functions, the
same seed gives the same returns), one episode is saved as a GIF, and bad input is one line with exit code 2."""

import json
import os

import chex
import jax
import numpy as np
import pytest
from absl.testing import flagsaver
from PIL import Image

from launch import evaluate as launch_evaluate
from launch import gala as launch_gala
from launch import hts as launch_hts
from systems.common import drawing
from systems.common.checkpoint import list_checkpoints, save_checkpoint
from systems.common.evaluation import Evaluator
from systems.common.learner import build
from systems.common.outputs import params_fingerprint
from systems.common.restore import restore_run
from systems.registry import ENTRIES
from tests.faults import failing_ffmpeg
from tests.fixtures import run_launcher


def _read(path):
    with open(path) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def hts_run(tmp_path_factory):
    """A tiny HTS CartPole run (A2C: the quickest update to compile), trained once for the module."""
    run_dir = str(tmp_path_factory.mktemp("hts") / "run")
    run_launcher(launch_hts.main, env="CartPole-v1", algo="a2c", total_steps=512, num_envs=4, sync_interval=32,
                 eval_episodes=0, checkpoint_every=0, logdir=run_dir, quiet=True)
    return run_dir


def _evaluate(run_dir, out, **flags):
    with flagsaver.flagsaver(run=run_dir, eval_out=str(out), **flags):
        launch_evaluate.main([])
    return _read(out)


def test_restore_is_exact_and_evaluation_reports_every_episode(hts_run, tmp_path, capsys):
    summary = _read(os.path.join(hts_run, "summary.json"))
    restored = restore_run(hts_run, ENTRIES)
    assert restored.system == "hts" and restored.env_steps == summary["env_steps"] == 512
    assert params_fingerprint(restored.params) == summary["param_fingerprint"]

    result = _evaluate(hts_run, tmp_path / "eval.json", eval_num_episodes=3)
    assert result["episodes"] == len(result["returns"]) == 3
    assert np.all(np.isfinite(result["returns"])) and min(result["returns"]) >= 1  # CartPole: >= 1 per step
    assert result["mean_return"] == pytest.approx(np.mean(result["returns"]))
    assert result["std_return"] == pytest.approx(np.std(result["returns"]))
    assert result["param_fingerprint"] == summary["param_fingerprint"] and result["fingerprint_matches_summary"]
    assert result["policy"] == "sampled" and result["checkpoint_env_steps"] == 512
    assert result["checkpoint"] == list_checkpoints(hts_run)[-1] and result["eval_seed"] == restored.eval_seed
    line = capsys.readouterr().out
    assert "over 3 episodes" in line and "checkpoint 512 env steps" in line and "+-" in line


@pytest.mark.parametrize("policy", ["greedy", "sampled"])
def test_same_seed_same_returns_and_the_evaluators_own_protocol(hts_run, tmp_path, policy):
    first = _evaluate(hts_run, tmp_path / "a.json", eval_num_episodes=3, eval_seed=123, eval_policy=policy)
    again = _evaluate(hts_run, tmp_path / "b.json", eval_num_episodes=3, eval_seed=123, eval_policy=policy)
    assert first["policy"] == policy and first["eval_seed"] == 123
    assert first["returns"] == again["returns"]
    # The Evaluator with the training systems' own action function (setup.network.apply) plays the same episodes.
    restored = restore_run(hts_run, ENTRIES)
    setup, _ = build(restored.config, restored.spec)
    evaluator = Evaluator(restored.spec, setup.network.apply, episodes=3, seed=123, deterministic=policy == "greedy")
    np.testing.assert_array_equal(evaluator.run(restored.policy_params()), first["returns"])


def test_gif_is_one_episode_of_the_policy(hts_run, tmp_path):
    gif = tmp_path / "gifs" / "episode.gif"  # the folder is created
    result = _evaluate(hts_run, tmp_path / "eval.json", eval_num_episodes=2, eval_policy="greedy", eval_seed=5,
                       eval_gif=str(gif), eval_gif_frames=12)
    with Image.open(gif) as image:
        assert image.format == "GIF" and image.is_animated and image.size == (320, 240)  # drawing.draw_vector
        frames = image.n_frames
    info = result["gif"]
    assert info["path"] == str(gif) and 1 < info["frames"] == frames <= 12
    # A 1-env evaluation pool with the evaluation's seed replays its env 0: the greedy policy's episode 0.
    assert info["episode_return"] == result["returns"][0] == info["episode_length"]  # CartPole: 1 per step
    # Every steps_per_frame-th step is kept, plus the final state.
    assert frames == len(range(0, info["episode_length"], info["steps_per_frame"])) + 1


@pytest.mark.filterwarnings(r"ignore:os\.fork\(\) was called:RuntimeWarning")  # imageio's reader: fork + exec ffmpeg
def test_video_is_the_evaluations_first_episode_in_real_frames(hts_run, tmp_path):
    path = tmp_path / "videos" / "episode.mp4"  # the folder is created
    result = _evaluate(hts_run, tmp_path / "eval.json", eval_num_episodes=2, eval_policy="greedy", eval_seed=5,
                       capture_video=str(path))
    info = result["video"]
    assert info["path"] == str(path) and info["real_frames"] and info["complete"]
    assert info["episode_return"] == result["returns"][0] == info["episode_length"]  # the evaluation's env 0
    import imageio  # the video extra (in the test extra

    with imageio.get_reader(str(path)) as reader:
        frames = [np.asarray(f) for f in reader]
    assert len(frames) == info["frames"] == len(range(0, info["episode_length"], info["steps_per_frame"])) + 1
    assert frames[0].shape == (400 + drawing.CAPTION, 600, 3)  # EnvPool's CartPole picture, captioned


def test_frame_sampler_keeps_evenly_spaced_frames_and_draws_only_those():
    sampler = drawing.FrameSampler(10)
    drawn = []
    for i in range(1000):
        sampler.offer(lambda i=i: drawn.append(i) or i)
    kept = sampler.frames
    assert 5 < len(kept) <= 10 and kept[0] == 0
    assert set(np.diff(kept)) == {sampler.stride}
    assert len(drawn) < 100  # frames off the stride are never made


def test_image_frames_are_drawn_from_the_observation():
    stack = np.zeros((4, 84, 84), np.uint8)
    stack[-1, 10, 20] = 200  # only the newest frame of the stack is drawn
    stack[0, 30, 30] = 255
    image = np.asarray(drawing.draw_atari(stack, 3, 7, 1.0))
    chex.assert_shape(image, (84 * drawing.ATARI_SCALE + drawing.CAPTION,
                              84 * drawing.ATARI_SCALE, 3))
    scale = drawing.ATARI_SCALE
    assert tuple(image[10 * scale + 1, 20 * scale + 1]) == (200, 200, 200)
    assert tuple(image[30 * scale + 1, 30 * scale + 1]) == (0, 0, 0)

    smm = np.zeros((72, 96, 4), np.uint8)
    smm[40, 50, 2] = 255  # the ball
    smm[10, 10, 0] = 255  # a left-team player
    picture = drawing.smm_picture(smm)
    chex.assert_shape(picture, (72, 96, 3))
    colours = dict((plane, colour) for plane, colour in drawing.SMM_COLOURS)
    assert tuple(picture[40, 50]) == colours[2] and tuple(picture[41, 51]) == colours[2]  # grown marker
    assert tuple(picture[10, 10]) == colours[0]
    assert tuple(picture[60, 80]) == drawing.PITCH


def test_gala_learners_and_their_average(tmp_path):
    run_dir = str(tmp_path / "gala")
    run_launcher(launch_gala.main, env="CartPole-v1", num_learners=2, envs_per_learner=2, sync_interval=8,
                 total_steps=64, eval_episodes=0, checkpoint_every=0, logdir=run_dir, quiet=True)
    restored = restore_run(run_dir, ENTRIES)
    assert restored.system == "gala" and restored.num_learners == 2
    assert params_fingerprint(restored.params) == _read(os.path.join(run_dir, "summary.json"))["param_fingerprint"]
    x0, x1 = restored.policy_params("0"), restored.policy_params("1")
    mean = restored.policy_params("mean")
    expected = jax.tree.map(lambda a, b: (np.asarray(a, np.float64) + np.asarray(b, np.float64)) / 2, x0, x1)
    chex.assert_trees_all_close(mean, expected, rtol=1e-6)
    assert params_fingerprint(x0) != params_fingerprint(x1)  # the learners' own steps made them differ
    result = _evaluate(run_dir, tmp_path / "eval.json", eval_num_episodes=2, eval_learner="mean")
    assert result["learner"] == "mean" and result["episodes"] == 2 and result["fingerprint_matches_summary"]


def _no_checkpoint(tmp_path, hts_run):
    os.makedirs(tmp_path / "bare")
    with open(tmp_path / "bare" / "config.json", "w") as f:
        json.dump(_read(os.path.join(hts_run, "config.json")), f)
    return str(tmp_path / "bare")


def _foreign_system(tmp_path, hts_run):
    run_dir = _no_checkpoint(tmp_path, hts_run)
    state = restore_run(hts_run, ENTRIES).state
    save_checkpoint(run_dir, 64, state, {"env_steps": 64, "system": "alphazero"})
    return run_dir


def _other_env(tmp_path, hts_run):
    """The HTS checkpoint under a config for another env: the network rebuilt from it has other shapes."""
    run_dir = _foreign_system(tmp_path, hts_run)
    config = _read(os.path.join(hts_run, "config.json"))
    config["env_id"] = "Acrobot-v1"
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(config, f)
    state = restore_run(hts_run, ENTRIES).state
    save_checkpoint(run_dir, 128, state, {"env_steps": 128, "system": "hts"})
    return run_dir


@pytest.mark.parametrize(
    "make_run,flags,message",
    [
        (lambda tmp, run: str(tmp / "missing"), {}, "no run directory"),
        (lambda tmp, run: str(tmp), {}, "no config.json"),
        (_no_checkpoint, {}, "no checkpoint"),
        (_foreign_system, {}, "does not support"),
        (_other_env, {}, "rebuilt from config.json"),
        (lambda tmp, run: run, dict(eval_learner="1"), "one parameter set"),
        (lambda tmp, run: run, dict(eval_num_episodes=0), "--eval_num_episodes"),
        # Printed nothing and grew to 18.5 GB in 30 s.
        (lambda tmp, run: run, dict(eval_num_episodes=10**9), "--eval_num_episodes must be in [1, 10,000]"),
        (lambda tmp, run: "", {}, "--run is required"),
        (lambda tmp, run: run, dict(capture_video="ep.avi"), "--capture_video must name an .mp4 or .gif"),
        # A traceback after the evaluation ran, which was lost with it.
        (lambda tmp, run: run, dict(capture_video="/etc/passwd/ep.mp4"), "cannot create its directory /etc/passwd"),
    ],
    ids=["missing-dir", "no-config", "no-checkpoint", "unsupported-system", "other-network", "learner", "episodes",
         "episodes-too-many",
         "no-run", "video-format", "video-unwritable"],
)
def test_bad_input_is_one_line_and_exit_2(hts_run, tmp_path, capsys, make_run, flags, message):
    run_dir = make_run(tmp_path, hts_run)
    with flagsaver.flagsaver(run=run_dir, eval_out=str(tmp_path / "eval.json"), **flags):
        with pytest.raises(SystemExit) as exit_info:
            launch_evaluate.main([])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err, err
    assert len(err.splitlines()) == 1
    assert not os.path.exists(tmp_path / "eval.json")


def _evaluate_but_fail_to_film(hts_run, tmp_path, capsys, name: str):
    """Evaluates `hts_run` filming to videos/`name`, which fails: (evaluation file, video path, stderr lines); the
    exit status is checked to be 74."""
    out, video = tmp_path / "eval.json", tmp_path / "videos" / name
    with flagsaver.flagsaver(run=hts_run, eval_out=str(out), capture_video=str(video)):
        with pytest.raises(SystemExit) as exit_info:
            launch_evaluate.main([])
    assert exit_info.value.code == 74
    return out, video, capsys.readouterr().err.strip().splitlines()


def test_a_gif_video_on_a_full_disk_names_the_file(hts_run, tmp_path, capsys, monkeypatch):
    """--capture_video=<x>.gif on a full disk: the error line named no file (a write's OSError carries none)."""
    import errno

    from systems.common import drawing

    def full_disk(handle, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(drawing, "write_gif", full_disk)
    out, video, err = _evaluate_but_fail_to_film(hts_run, tmp_path, capsys, "ep.gif")
    assert err == [f"error: cannot write {video}: No space left on device; the evaluation itself is saved in {out}"]
    assert _read(out)["episodes"] == 10 and os.listdir(video.parent) == []


def test_a_video_that_cannot_be_written_keeps_the_evaluation(hts_run, tmp_path, capsys, monkeypatch):
    """The encoder fails after the evaluation ran (a stand-in that exits at once, as ffmpeg on a full disk): one
    line naming the video and where the evaluation is, exit 74, and evaluation.json written."""
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", failing_ffmpeg(tmp_path))
    out, video, err = _evaluate_but_fail_to_film(hts_run, tmp_path, capsys, "ep.mp4")
    assert len(err) == 1 and err[0].startswith(f"error: cannot write {video}: the video encoder (ffmpeg) stopped")
    assert err[0].endswith(f"; the evaluation itself is saved in {out}")
    assert _read(out)["episodes"] == 10 and os.listdir(video.parent) == []
