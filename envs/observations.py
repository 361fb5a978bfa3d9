"""What a Gymnasium env's observation space becomes for the networks (`--env=gymnasium/<id>`).

The networks read a vector `Box` (the MLP) or a uint8 image `Box` (the CNNs). Any other space is turned into one of
those by a wrapper around the user's env, applied wherever the env is made (the pool's workers, the spec, the
evaluation envs), so evaluation, videos, `launch.evaluate`, normalization and HTS's bit-identity see one env:

* a `Box` of rank 2, or of rank 3 or more that is not a uint8 image: flattened to a float32 vector (as
  Stable-Baselines3's `FlattenExtractor`);
* `Discrete`, `MultiDiscrete` and `MultiBinary`: Gymnasium's own `spaces.flatten` (one-hot, concatenated one-hots,
  the bits), as float32;
* `Dict` and `Tuple` of those: each part flattened and concatenated (`spaces.flatten`, in the space's key order);
  text parts (a `Text` space, or one whose samples are strings: MiniGrid's `mission`) are left out, with one note
  line;
* a `Dict` or `Tuple` of one uint8 image and parts of those (MiniGrid's image and direction): packed into one
  float32 vector, the image's pixels first (C order) and the other parts flattened after them; the spec names the
  image's shape (`PackedObservation.image_shape`), and the network unpacks it: the image through a CNN, the other
  parts concatenated after the CNN's trunk (Stable-Baselines3's `MultiInputPolicy`, `CombinedExtractor`);
* a uint8 `Box` of shape (N, H, W, C) (Gymnasium's `FrameStackObservation` over an HxWxC image): the stack merged
  into the channels, (H, W, N * C), frame-major; over a channels-first CxHxW image, (N * C, H, W).

`--frame_stack=N` (`stacked`) is Gymnasium's own `FrameStackObservation` around an image env, merged into the
channels as above: the last N frames, oldest first, and at an episode's start N copies of its first frame (its
`padding_type="reset"`), so no frame of one episode leaks into the next.

A space none of these covers (`Sequence`, `Graph`, a Dict holding two images) is left as it is, and the spec refuses
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


def channels_first(shape: tuple) -> bool:
    """An image shape whose first side is its smallest, strictly (CxHxW: `agents.networks.image_torso`'s rule)."""
    return shape[0] < min(shape[1], shape[2])


class StackInChannels(gymnasium.ObservationWrapper):
    """A (N, H, W, C) uint8 frame stack as one (H, W, N * C) image: frame k's channels at k * C to (k + 1) * C; a
    stack of channels-first (C, H, W) frames as (N * C, H, W), frame k's channels at the same places."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        n, *frame = env.observation_space.shape
        self._channels_first = channels_first(frame)
        if self._channels_first:
            c, h, w = frame
            self.observation_space = spaces.Box(0, 255, (n * c, h, w), np.uint8)
        else:
            h, w, c = frame
            self.observation_space = spaces.Box(0, 255, (h, w, n * c), np.uint8)

    def observation(self, observation):
        stack = np.asarray(observation)
        if not self._channels_first:
            stack = np.moveaxis(stack, 0, 2)
        return np.ascontiguousarray(stack.reshape(self.observation_space.shape))


def stacked(env: gymnasium.Env, frames: int) -> gymnasium.Env:
    """`env` itself for `frames` 1; else Gymnasium's `FrameStackObservation` of `frames` frames around its image
    observation, which `adapted` merges into the channels. ValueError (one line) for an observation that is not
    an image."""
    if frames == 1:
        return env
    space = env.observation_space
    if not _is_image(space):
        env.close()
        name = env.spec.id if env.spec is not None else "this env"
        raise ValueError(f"--frame_stack={frames} stacks image frames; {name} observes a {type(space).__name__} "
                         f"{getattr(space, 'shape', '')}")
    return gymnasium.wrappers.FrameStackObservation(env, frames, padding_type="reset")


class PackedObservation(gymnasium.ObservationWrapper):
    """A Dict or Tuple of one uint8 image (part `image_key`) and flattenable parts as one float32 vector: the image's
    pixels (C order), then `spaces.flatten` of the other parts (the Dict of them that `adapted` keeps)."""

    def __init__(self, env: gymnasium.Env, source: spaces.Space, image_key):
        super().__init__(env)
        parts = dict(source.spaces) if isinstance(source, spaces.Dict) else dict(enumerate(source.spaces))
        self._image_key = image_key
        self.image_shape = tuple(int(d) for d in parts.pop(image_key).shape)
        self._rest_keys = tuple(parts)
        self._rest = spaces.Dict({str(k): s for k, s in parts.items()}) if parts else None
        rest = spaces.flatten_space(self._rest) if parts else spaces.Box(0.0, 0.0, (0,))
        pixels = int(np.prod(self.image_shape))
        low = np.concatenate([np.zeros(pixels), rest.low]).astype(np.float32)
        high = np.concatenate([np.full(pixels, 255.0), rest.high]).astype(np.float32)
        self.observation_space = spaces.Box(low, high, low.shape, np.float32)

    def observation(self, observation):
        image = np.asarray(observation[self._image_key], np.float32).reshape(-1)
        if self._rest is None:
            return image
        rest = spaces.flatten(self._rest, {str(k): observation[k] for k in self._rest_keys})
        return np.concatenate([image, np.asarray(rest, np.float32)])


def _is_text(space: spaces.Space) -> bool:
    """A Text space, or another whose samples are strings (MiniGrid's `MissionSpace`)."""
    if isinstance(space, spaces.Text):
        return True
    if type(space).__module__.startswith("gymnasium.") or space.shape is not None:
        return False
    try:
        return isinstance(space.sample(), str)
    except Exception:  # a space that cannot sample is not text we know how to leave out
        return False


def _one_image_part(space: spaces.Space):
    """The key (Dict) or index (Tuple) of the only uint8 image part of `space` when its other parts flatten; None
    otherwise."""
    if not isinstance(space, (spaces.Dict, spaces.Tuple)):
        return None
    parts = dict(space.spaces) if isinstance(space, spaces.Dict) else dict(enumerate(space.spaces))
    images = [k for k, s in parts.items() if _is_image(s)]
    if len(images) != 1 or not all(_flattenable(s) for k, s in parts.items() if k != images[0]):
        return None
    return images[0]


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
        dropped = [k for k, s in space.spaces.items() if _is_text(s)]
        if dropped:  # rebuilt only then: a Dict keeps its own key order
            space = spaces.Dict({k: s for k, s in space.spaces.items() if k not in dropped})
            if _flattenable(space) or _one_image_part(space) is not None:
                say(f"[env] the observation's text parts {', '.join(dropped)} are left out (no network reads text)")
    if _flattenable(space):
        return FlatObservation(env, space)
    if _one_image_part(space) is not None:
        return PackedObservation(env, space, _one_image_part(space))
    return env
