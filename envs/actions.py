"""What a Gymnasium env's action space becomes for the policies (`--env=gymnasium/<id>`).

The policies act in a `Discrete` space (one categorical), a 1-D `Box` (a diagonal Gaussian) or a 1-D
`MultiDiscrete` space with choices counted from 0 (one categorical per component: `agents.distributions.Factored`,
Stable-Baselines3's `MultiCategoricalDistribution`). A wrapper around the user's env, applied wherever the env is
made (the pool's workers, the spec, the evaluation envs), turns the other factored spaces into that one:

* a `MultiDiscrete` of any rank, or with a `start`: its components flattened in C order, each counted from 0 (the
  env gets ``action.reshape(nvec.shape) + start``);
* a `MultiBinary` of any shape: one two-way component per bit (the env gets the bits as int8, in its shape).

Any other action space is left as it is, and the spec refuses it with one line.
"""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces


class FlatMultiDiscrete(gymnasium.ActionWrapper):
    """A `MultiDiscrete` of any shape and start, or a `MultiBinary`, as a 1-D `MultiDiscrete` counted from 0."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        space = env.action_space
        if isinstance(space, spaces.MultiBinary):
            self._shape, self._start, self._dtype = space.shape, 0, np.int8
            nvec = np.full(int(np.prod(space.shape)), 2)
        else:
            self._shape, self._start, self._dtype = space.nvec.shape, space.start, space.dtype
            nvec = space.nvec.reshape(-1)
        self.action_space = spaces.MultiDiscrete(nvec.astype(np.int64))

    def action(self, action):
        return (np.asarray(action).reshape(self._shape) + self._start).astype(self._dtype)


def _flat_from_zero(space: spaces.Space) -> bool:
    return isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim == 1 and not np.any(space.start)


def adapted_actions(env: gymnasium.Env) -> gymnasium.Env:
    """`env` with a factored action space as a 1-D `MultiDiscrete` counted from 0 (the module docstring), or `env`
    itself."""
    space = env.action_space
    if isinstance(space, spaces.MultiBinary) or (isinstance(space, spaces.MultiDiscrete)
                                                 and not _flat_from_zero(space)):
        return FlatMultiDiscrete(env)
    return env
