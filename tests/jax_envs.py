"""A JAX env of the test suite's own with gymnax's interface, for `--env=jax/tests.jax_envs:make_walk`: a walker on a
line starts at a random point of [-0.9, 0.9] and moves by +-`step_size` (a keyword argument, 0.1); reaching +1 ends
the episode with reward 1 (each step costs 0.01), reaching -1 ends it with 0; 50 steps at most.
`make_walk_timesteps` names its limit `max_timesteps` (30), as Craftax does. Also factories that break the contract
(`make_nothing`, `make_failing`)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces


@struct.dataclass
class WalkState(environment.EnvState):
    position: jax.Array
    time: int


@struct.dataclass
class WalkParams(environment.EnvParams):
    step_size: float = 0.1
    max_steps_in_episode: int = 50


class JaxWalk(environment.Environment):
    @property
    def default_params(self) -> WalkParams:
        return WalkParams()

    def reset_env(self, key: chex.PRNGKey, params: WalkParams):
        state = WalkState(position=jax.random.uniform(key, (), minval=-0.9, maxval=0.9), time=0)
        return self.get_obs(state), state

    def step_env(self, key, state: WalkState, action, params: WalkParams):
        position = state.position + jnp.where(action == 1, params.step_size, -params.step_size)
        state = WalkState(position=position, time=state.time + 1)
        won, lost = position >= 1.0, position <= -1.0
        reward = jnp.where(won, 1.0, 0.0) - 0.01
        return self.get_obs(state), state, reward, jnp.logical_or(won, lost), {}

    def get_obs(self, state: WalkState, params=None, key=None):
        return jnp.array([state.position, 1.0], jnp.float32)

    def observation_space(self, params):
        return spaces.Box(-2.0, 2.0, (2,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)


def make_walk(step_size: float = 0.1):
    env = JaxWalk()
    return env, env.default_params.replace(step_size=step_size)


@struct.dataclass
class TimestepsParams:
    """Craftax's name of the episode limit (its params, as these, do not derive gymnax's `EnvParams`)."""

    step_size: float = 0.1
    max_timesteps: int = 30


class JaxWalkTimesteps(JaxWalk):
    @property
    def default_params(self) -> TimestepsParams:
        return TimestepsParams()


def make_walk_timesteps(step_size: float = 0.1):
    env = JaxWalkTimesteps()
    return env, env.default_params.replace(step_size=step_size)


@struct.dataclass
class FramesState(environment.EnvState):
    base: jax.Array
    time: int


@struct.dataclass
class FramesParams(environment.EnvParams):
    length: int = 5
    max_steps_in_episode: int = 50


class JaxFrames(environment.Environment):
    """An HxWxC image of one value everywhere: a random base (0-99) drawn at reset plus the step count; terminates
    after `length` steps (`tests.gym_envs.Frames`, in JAX)."""

    def __init__(self, side: int = 6, channels: int = 1):
        super().__init__()
        self.shape = (side, side, channels)

    @property
    def default_params(self) -> FramesParams:
        return FramesParams()

    def reset_env(self, key, params: FramesParams):
        state = FramesState(base=jax.random.randint(key, (), 0, 100).astype(jnp.float32), time=0)
        return self.get_obs(state), state

    def step_env(self, key, state: FramesState, action, params: FramesParams):
        state = FramesState(base=state.base, time=state.time + 1)
        return self.get_obs(state), state, jnp.float32(0.0), state.time >= params.length, {}

    def get_obs(self, state: FramesState, params=None, key=None):
        return jnp.full(self.shape, state.base + state.time, jnp.float32)

    def observation_space(self, params):
        return spaces.Box(0.0, 255.0, self.shape, jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)


def make_frames(side: int = 6, channels: int = 1, length: int = 5):
    env = JaxFrames(side, channels)
    return env, env.default_params.replace(length=length)


def make_nothing():
    return None


def make_failing():
    raise RuntimeError("no such level")
