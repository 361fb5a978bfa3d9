"""What a Gymnasium env's observation space becomes for the networks (`--env=gymnasium/<id>`).

The networks read a vector `Box` (the MLP) or a uint8 image `Box` (the CNNs). Any other space is turned into one of
those by a wrapper around the user's env, applied wherever the env is made (the pool's workers, the spec, the
evaluation envs), so evaluation, videos, `launch.evaluate`, normalization and HTS's bit-identity see one env:

* a `Box` of rank 2, or of rank 3 or more that is not a uint8 image: flattened to a float32 vector (as
  Stable-Baselines3's `FlattenExtractor`);
* `Discrete`, `MultiDiscrete` and `MultiBinary`: Gymnasium's own `spaces.flatten` (one-hot, concatenated one-hots,
  the bits), as float32;
* `Dict` and `Tuple` of those: each part flattened and concatenated (`spaces.flatten`, in the space's key order);
  `Text` parts (MiniGrid's `mission`) are left out, with one note line;
* a uint8 `Box` of shape (N, H, W, C) (Gymnasium's `FrameStackObservation` over an HxWxC image): the stack merged
  into the channels, (H, W, N * C), frame-major.

A space none of these covers (`Sequence`, `Graph`, a Dict holding an image) is left as it is, and the spec refuses
it with one line.
"""

from __future__ import annotations

import sys

import gymnasium
import numpy as np
from gymnasium import spaces


def _is_image(space: spaces.Space) -> bool:
    return isinstance(space, spaces.Box) and len(space.shape) == 3 and np.dtype(space.dtype) == np.uint8


def _flattenable(space: spaces.Space) -> bool:
    if isinstance(space, spaces.Box):
        return not (len(space.shape) >= 3 and np.dtype(space.dtype) == np.uint8)
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return True
    if isinstance(space, spaces.Dict):
        return all(_flattenable(s) for s in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return all(_flattenable(s) for s in space.spaces)
    return False


class FlatObservation(gymnasium.ObservationWrapper):
    """The observation as `spaces.flatten` lays out `source` (the env's space, or the Dict of its parts that
    `adapted` keeps), float32."""

    def __init__(self, env: gymnasium.Env, source: spaces.Space):
        super().__init__(env)
        self._source = source
        self._keys = tuple(source.spaces) if isinstance(source, spaces.Dict) else None
        flat = spaces.flatten_space(source)
        self.observation_space = spaces.Box(np.asarray(flat.low, np.float32), np.asarray(flat.high, np.float32),
                                            flat.shape, np.float32)

    def observation(self, observation):
        if self._keys is not None:
            observation = {k: observation[k] for k in self._keys}
        return np.asarray(spaces.flatten(self._source, observation), np.float32)


class StackInChannels(gymnasium.ObservationWrapper):
    """A (N, H, W, C) uint8 frame stack as one (H, W, N * C) image: frame k's channels at k * C to (k + 1) * C."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        n, h, w, c = env.observation_space.shape
        self.observation_space = spaces.Box(0, 255, (h, w, n * c), np.uint8)

    def observation(self, observation):
        stack = np.asarray(observation)
        return np.ascontiguousarray(np.moveaxis(stack, 0, 2).reshape(self.observation_space.shape))


def say_on_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def adapted(env: gymnasium.Env, say=lambda line: None) -> gymnasium.Env:
    """`env` with its observation in a form the networks read (the module docstring), or `env` itself; `say` gets
    the note line of left-out parts (the spec says it once a run, not every env of the pool)."""
    space = env.observation_space
    if isinstance(space, spaces.Box) and (len(space.shape) == 1 or _is_image(space)):
        return env
    if isinstance(space, spaces.Box) and len(space.shape) == 4 and np.dtype(space.dtype) == np.uint8:
        return StackInChannels(env)
    if isinstance(space, spaces.Dict):
        dropped = [k for k, s in space.spaces.items() if isinstance(s, spaces.Text)]
        if dropped:  # rebuilt only then: a Dict keeps its own key order
            space = spaces.Dict({k: s for k, s in space.spaces.items() if k not in dropped})
            if _flattenable(space):
                say(f"[env] the observation's text parts {', '.join(dropped)} are left out (no network reads text)")
    if _flattenable(space):
        return FlatObservation(env, space)
    return env
