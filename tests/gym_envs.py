"""A small Gymnasium env of the test suite's own, for `--env=gymnasium/tests.gym_envs:Walk-v0` (the `module:Name`
form imports this module, which registers it): a walker on a line starts at a random point of [-1, 1] and moves by
+-step_size (a keyword argument, 0.1) per step; reaching +1 ends the episode with reward 1 (each step costs 0.01),
reaching -1 ends it with 0, and the time limit is 50 steps; the same walk seen through a Dict (`DictObs-v0`) and a
Dict of a table, a Discrete and a Text (`MixedObs-v0`), a space no launcher takes (`SequenceObs-v0`), and
`Lamp-v0`, a uint8 image env of any `shape` (a keyword argument, HxWxC or CxHxW): each step shows a lit or a dark
image, and the action that names it (1 lit, 0 dark) earns 1; 20 steps an episode, so a random policy scores 10;
and `Dials-v0`, factored actions: each step shows a target setting of each dial and an action sets them all
(`space="multidiscrete"`: a MultiDiscrete of shape (2, 2) counted from `start`, `space="multibinary"`: a
MultiBinary (2, 3)); the reward is the fraction of dials set right, 20 steps an episode."""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces


class Walk(gymnasium.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)
    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode=None, step_size=0.1):
        self.render_mode, self.step_size = render_mode, step_size
        self.position = 0.0

    def _obs(self):
        return np.array([self.position, 1.0], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = float(self.np_random.uniform(-0.9, 0.9))
        return self._obs(), {}

    def step(self, action):
        self.position += self.step_size if int(action) == 1 else -self.step_size
        won, lost = self.position >= 1.0, self.position <= -1.0
        return self._obs(), (1.0 if won else 0.0) - 0.01, bool(won or lost), False, {}

    def render(self):
        frame = np.zeros((8, 40, 3), np.uint8)
        frame[:, int(np.clip((self.position + 1) * 19.5, 0, 39))] = 255
        return frame


class DictObs(Walk):
    observation_space = spaces.Dict({"position": spaces.Box(-1.0, 1.0, (1,), np.float32)})


class MixedObs(Walk):
    """Walk seen as a Dict of a 2-D Box (the position in a 1x2 table), a Discrete (which half of the line) and a
    Text part that no network reads (MiniGrid's `mission`)."""

    observation_space = spaces.Dict({"table": spaces.Box(-2.0, 2.0, (1, 2), np.float32),
                                     "half": spaces.Discrete(2), "mission": spaces.Text(20)})

    def _obs(self):
        return {"table": np.array([[self.position, 1.0]], np.float32), "half": int(self.position > 0),
                "mission": "reach the right end"}


class SequenceObs(Walk):
    """A space no launcher takes: a variable-length sequence."""

    observation_space = spaces.Sequence(spaces.Box(-1.0, 1.0, (1,), np.float32))

    def _obs(self):
        return (np.array([self.position], np.float32),)


class Lamp(gymnasium.Env):
    action_space = spaces.Discrete(2)

    def __init__(self, render_mode=None, shape=(10, 10, 1)):
        self.observation_space = spaces.Box(0, 255, tuple(shape), np.uint8)
        self.render_mode, self.lit = render_mode, False

    def _obs(self):
        return np.full(self.observation_space.shape, 255 if self.lit else 0, np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.lit = bool(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == int(self.lit))
        self.lit = bool(self.np_random.integers(2))
        return self._obs(), reward, False, False, {}


class Frames(gymnasium.Env):
    """An image of one value everywhere: a random base (0-99) drawn at reset plus the step count; terminates after
    `length` steps. `channels_first` lays it out CxHxW."""

    action_space = spaces.Discrete(2)

    def __init__(self, render_mode=None, side=40, channels=1, channels_first=False, length=5):
        shape = (channels, side, side) if channels_first else (side, side, channels)
        self.observation_space = spaces.Box(0, 255, shape, np.uint8)
        self.render_mode, self.length = render_mode, length

    def _obs(self):
        return np.full(self.observation_space.shape, self.base + self.t, np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.base, self.t = int(self.np_random.integers(100)), 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 0.0, self.t >= self.length, False, {}


class Faulty(Walk):
    """`Walk` that fails after `after` steps of each env: `fail` is "raise" (a ValueError in step), "reset" (in its
    first reset), "shape" (a 3-vector observation), "crash" (its worker process dies) or "hang" (its step never
    returns)."""

    def __init__(self, render_mode=None, fail="raise", after=0):
        super().__init__(render_mode)
        self.fail, self.after, self.steps = fail, after, 0

    def reset(self, *, seed=None, options=None):
        if self.fail == "reset":
            raise RuntimeError("the simulator could not load its level")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.steps += 1
        obs, reward, terminated, truncated, info = super().step(action)
        if self.steps > self.after:
            if self.fail == "raise":
                raise ValueError("joint 3 left its range")
            if self.fail == "shape":
                return np.zeros(3, np.float32), reward, terminated, truncated, info
            if self.fail == "crash":
                import os

                os._exit(9)
            if self.fail == "hang":
                import time

                time.sleep(10**6)
        return obs, reward, terminated, truncated, info


class Dials(gymnasium.Env):
    def __init__(self, render_mode=None, space="multidiscrete", start=0):
        if space == "multidiscrete":
            self.action_space = spaces.MultiDiscrete(np.array([[3, 2], [4, 3]]), start=np.full((2, 2), start))
            self._nvec, self._start = self.action_space.nvec, self.action_space.start
        else:
            self.action_space = spaces.MultiBinary((2, 3))
            self._nvec, self._start = np.full((2, 3), 2), np.zeros((2, 3), np.int64)
        self.observation_space = spaces.Box(0.0, 1.0, (self._nvec.size,), np.float32)
        self.render_mode, self.target = render_mode, None

    def _obs(self):
        return ((self.target - self._start) / (self._nvec - 1)).astype(np.float32).reshape(-1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target = self._start + self.np_random.integers(self._nvec)
        return self._obs(), {}

    def step(self, action):
        action = np.asarray(action)
        assert action.shape == self._nvec.shape and self.action_space.contains(action.astype(self.action_space.dtype))
        reward = float(np.mean(action == self.target))
        self.target = self._start + self.np_random.integers(self._nvec)
        return self._obs(), reward, False, False, {}


gymnasium.register("Walk-v0", entry_point=Walk, max_episode_steps=50)
gymnasium.register("Faulty-v0", entry_point=Faulty, max_episode_steps=50)
gymnasium.register("Lamp-v0", entry_point=Lamp, max_episode_steps=20)
gymnasium.register("Frames-v0", entry_point=Frames, max_episode_steps=50)
gymnasium.register("DictObs-v0", entry_point=DictObs, max_episode_steps=50)
gymnasium.register("MixedObs-v0", entry_point=MixedObs, max_episode_steps=50)
gymnasium.register("SequenceObs-v0", entry_point=SequenceObs, max_episode_steps=50)
gymnasium.register("Dials-v0", entry_point=Dials, max_episode_steps=20)
