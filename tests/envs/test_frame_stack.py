"""`--frame_stack=N`: the last N image frames on the channel axis, oldest first, N copies of an episode's first frame
at its start, for `gymnasium/` (Gymnasium's `FrameStackObservation`, `envs.observations.stacked`) and JAX envs
(`envs.jax_pool`). Checked against the same env unstacked, stacked here by hand."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tests.gym_envs  # noqa: F401 - registers Frames-v0 for the in-process checks
from envs import gymnasium_pool
from envs.factory import make_pool, make_spec


def _stack(frames: list, n: int, channels_first: bool) -> np.ndarray:
    """The last `n` of `frames` (each an image), oldest first, concatenated on the channel axis."""
    return np.concatenate(frames[-n:], axis=0 if channels_first else -1)


def _window(window: list, frame: np.ndarray, n: int, episode_start: bool) -> list:
    return [frame] * n if episode_start else (window + [frame])[-n:]


@settings(max_examples=40, deadline=None)
@given(frames=st.integers(1, 4), channels=st.integers(1, 3), channels_first=st.booleans(),
       length=st.integers(1, 5), seed=st.integers(0, 1000))
def test_a_gymnasium_image_env_sees_its_last_frames_and_restarts_them_with_each_episode(
        frames, channels, channels_first, length, seed):
    kwargs = json.dumps({"side": 40, "channels": channels, "channels_first": channels_first, "length": length})
    stacked = gymnasium_pool.make_env("gymnasium/Frames-v0", env_kwargs=kwargs, frame_stack=frames)
    plain = gymnasium_pool.make_env("gymnasium/Frames-v0", env_kwargs=kwargs)
    side, c = 40, channels * frames
    assert stacked.observation_space.shape == ((c, side, side) if channels_first else (side, side, c))
    obs, _ = stacked.reset(seed=seed)
    frame, _ = plain.reset(seed=seed)
    window = _window([], frame, frames, True)
    for _ in range(2 * length + 1):
        np.testing.assert_array_equal(obs, _stack(window, frames, channels_first))
        obs, _, terminated, _, _ = stacked.step(0)
        frame, _, done, _, _ = plain.step(0)
        window = _window(window, frame, frames, False)
        assert terminated == done
        if terminated:
            obs, _ = stacked.reset()
            frame, _ = plain.reset()
            window = _window(window, frame, frames, True)


def _pool_frames(env_id: str, kwargs: str, frames: int, steps: int, num_envs: int = 2):
    """(observations [steps + 1, envs, ...], elapsed_step [steps + 1, envs]) of a pool of `env_id` stepped with
    action 0 from its reset."""
    spec = make_spec(env_id, kwargs, frames)
    pool = make_pool(spec, num_envs=num_envs, batch_size=num_envs, seed=3, num_threads=1)
    try:
        obs, info = pool.reset()
        seen, elapsed = [np.asarray(obs)], [np.asarray(info["elapsed_step"])]
        for _ in range(steps):
            obs, _, _, _, info = pool.step(np.zeros(num_envs, np.int32))
            seen.append(np.asarray(obs))
            elapsed.append(np.asarray(info["elapsed_step"]))
    finally:
        pool.close()
    return np.stack(seen), np.stack(elapsed)


def _check_pool_stacks(env_id: str, kwargs: str, frames: int, steps: int, channels_first: bool = False):
    stacked, stacked_elapsed = _pool_frames(env_id, kwargs, frames, steps)
    plain, elapsed = _pool_frames(env_id, kwargs, 1, steps)
    np.testing.assert_array_equal(stacked_elapsed, elapsed)
    for env in range(plain.shape[1]):
        window = []
        for t in range(steps + 1):  # elapsed_step 0: the episode's first frame (a reset, or a reset step)
            window = _window(window, plain[t, env], frames, elapsed[t, env] == 0)
            np.testing.assert_array_equal(stacked[t, env], _stack(window, frames, channels_first))


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(frames=st.integers(1, 4), channels=st.integers(1, 3), length=st.integers(1, 4))
def test_a_jax_image_env_pool_stacks_each_envs_frames_through_its_auto_resets(frames, channels, length):
    kwargs = json.dumps({"side": 5, "channels": channels, "length": length})
    assert make_spec("jax/tests.jax_envs:make_frames", kwargs, frames).obs_shape == (5, 5, channels * frames)
    _check_pool_stacks("jax/tests.jax_envs:make_frames", kwargs, frames, steps=3 * length + 2)


def test_a_gymnasium_pool_stacks_in_its_worker_processes():
    kwargs = json.dumps({"side": 40, "channels": 2, "channels_first": True, "length": 3})
    _check_pool_stacks("gymnasium/tests.gym_envs:Frames-v0", kwargs, 3, steps=8, channels_first=True)


def test_minatar_stacks_its_channels():
    pytest.importorskip("gymnax")
    assert make_spec("gymnax/Breakout-MinAtar", "", 2).obs_shape == (10, 10, 8)


@pytest.mark.parametrize("frames, channels", [(0, 4), (1, 1), (2, 2)])
def test_atari_stacks_what_envpool_is_asked_for(frames, channels):
    """EnvPool's Atari: 0 keeps its own 4 frames, N asks its `stack_num` for N (1: one frame, for memory)."""
    spec = make_spec("Breakout-v5", "", frames)
    assert spec.obs_shape == (channels, 84, 84) and spec.frame_stack == channels
    pool = make_pool(spec, num_envs=2, batch_size=2, seed=0)
    obs, _ = pool.reset()
    assert obs.shape == (2, channels, 84, 84)
    pool.close()
    evaluation = make_pool(spec, num_envs=1, batch_size=1, seed=0, evaluation=True)
    assert evaluation.reset()[0].shape == (1, channels, 84, 84)
    evaluation.close()


@pytest.mark.parametrize("env_id, frames, says", [
    ("gymnasium/CartPole-v1", 2, "stacks image frames; CartPole-v1 observes a Box"),
    ("jax/tests.jax_envs:make_walk", 3, "stacks image frames; jax/tests.jax_envs:make_walk observes a vector"),
    ("CartPole-v1", 2, "--frame_stack applies to gymnasium/, gymnax/, jax/ and Atari image tasks, not to CartPole"),
    ("gymnasium/tests.gym_envs:Frames-v0", -1, "--frame_stack must be >= 0"),
])
def test_frame_stack_of_what_it_cannot_stack_is_one_line(env_id, frames, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(")) as error:
        make_spec(env_id, "", frames)
    assert "\n" not in str(error.value)
