"""Brax's environments as JAX envs (`--env=brax/<name>`, e.g. `brax/inverted_pendulum`, `brax/hopper`): one env's
pure reset and step, to which `envs.jax_pool.env_functions` adds EnvPool's semantics, so the pool there steps
them under every launcher and `launch.anakin` compiles them into its rounds.

`<name>` is one of `brax.envs`' registered environments. `--env_kwargs` (JSON) goes to `brax.envs.get_environment`
(e.g. `{"backend": "spring"}`; each env's own default backend otherwise), except `episode_length` (default 1000,
Brax's training wrappers' default), which is ours: Brax's own envs never truncate, so the pool truncates at it
and keeps termination (the env's `done`, e.g. Hopper falling) apart from truncation. Observations are float32
vectors; actions are Brax's, in [-1, 1]. Brax's steps are deterministic: an env's key only seeds its resets.
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings

import numpy as np

from envs.gymnasium_pool import parse_kwargs

PREFIX = "brax/"
EPISODE_LENGTH = 1000  # brax.envs.training.EpisodeWrapper's default, as Brax's PPO trains


def is_brax(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


def brax_name(env_id: str) -> str:
    """"brax/hopper" -> "hopper"."""
    return env_id[len(PREFIX):]


@contextlib.contextmanager
def _quietly():
    """Brax's import and env creation without its dependencies' noise: Brax warns that its pipelines are no longer
    maintained, mujoco.mjx prints that its optional GPU backend (warp) failed to import, and MuJoCo's model compiler
    writes deprecation warnings (halfcheetah's) to MUJOCO_LOG.TXT in the working directory, a file a run must not
    leave behind: its warnings go to Python's `warnings` instead while the models are built."""
    # mujoco picks its OpenGL backend when first imported, here (Brax imports it): the headless EGL that
    # `envs.rendering` sets for videos of MuJoCo tasks, or GLFW, without a display, would end the process at the
    # first frame.
    os.environ.setdefault("MUJOCO_GL", "egl")
    import mujoco

    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(lambda message: warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2))
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        mujoco.set_mju_user_warning(previous)


def make_env(env_id: str, env_kwargs: str = ""):
    """(env, episode_length) of a `brax/<name>` task; ValueError with one line for a missing Brax, an unknown name
    or a bad keyword."""
    try:
        with _quietly():
            from brax import envs
    except ImportError:
        raise ValueError(f"{env_id} needs Brax: pip install -e \".[brax]\"") from None
    kwargs = parse_kwargs(env_kwargs)
    episode_length = kwargs.pop("episode_length", EPISODE_LENGTH)
    if not isinstance(episode_length, int) or isinstance(episode_length, bool) or episode_length <= 0:
        raise ValueError(f"{env_id}: episode_length must be a positive integer, got {episode_length!r}")
    name = brax_name(env_id)
    known = sorted(envs._envs)  # brax.envs keeps its registry here (get_environment raises a bare KeyError)
    if name not in known:
        raise ValueError(f"unknown Brax environment '{name}'; Brax knows {', '.join(known)}")
    try:
        with _quietly():
            return envs.get_environment(name, **kwargs), episode_length
    except (TypeError, ValueError, KeyError) as error:
        raise ValueError(f"{env_id}: brax.envs.get_environment failed: {str(error).strip().splitlines()[0]}") from None


def spaces(env_id: str, env_kwargs: str = ""):
    """(observation space, action space, max_episode_steps) as gymnasium Boxes: float32 vectors, actions in [-1, 1]."""
    import jax
    from gymnasium import spaces as gym_spaces

    env, episode_length = make_env(env_id, env_kwargs)
    # The reset's shapes, abstractly: Brax's `observation_size` runs a reset op by op (~220 small compiles, ~6 s).
    obs_shape = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs.shape
    obs = gym_spaces.Box(-np.inf, np.inf, (int(obs_shape[-1]),), np.float32)
    action = gym_spaces.Box(-1.0, 1.0, (int(env.action_size),), np.float32)
    return obs, action, episode_length


def raw_functions(env_id: str, env_kwargs: str = ""):
    """`(reset(key) -> (obs, state), step(key, state, action) -> (obs, state, reward, terminated), limit)`: Brax's
    reset and step (deterministic: the step's key is unused; actions clipped to [-1, 1]) and `episode_length`, where
    `envs.jax_pool.env_functions`, which adds EnvPool's semantics, truncates."""
    import jax.numpy as jnp

    env, limit = make_env(env_id, env_kwargs)

    def reset(key):
        state = env.reset(key)
        return state.obs, state

    def step(key, state, action):
        del key
        state = env.step(state, jnp.clip(action, -1.0, 1.0))
        return state.obs, state, state.reward, state.done

    return reset, step, limit
