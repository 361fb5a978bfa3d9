"""EnvPool construction: task ids, observation/action specs and pools for training and evaluation.

Atari preprocessing is EnvPool's own (Machado et al. 2018 / Mnih et al. 2015 conventions as used by
GALA / A2C, seed 004 Table 2): 84x84 gray, action repeat 4 with a max-pool over the last 2 frames,
frame stack 4, up to 30 no-op starts, sticky actions off. Training pools also end episodes on life
loss and clip rewards to [-1, 1]; evaluation pools do neither, so returns are real game scores.

GFootball pools use EnvPool's defaults, which give the *scoring* reward only (HTS-RL trained with
scoring+checkpoints, so returns are not directly comparable with its tables). MuJoCo, classic
control and Box2D pools use EnvPool's defaults.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import re
import sys
import types
import warnings
from typing import Any

import numpy as np
from gymnasium import spaces as gym_spaces

from envs import brax_env, gymnasium_pool, gymnax_env, jax_pool
from envs.cores import usable_cores
from envs.observations import say_on_stderr

# EnvPool's module path for each task id -> our family name. Anything else is not supported.
_FAMILY_BY_MODULE = {
    "envpool.atari": "atari",
    "envpool.gfootball": "gfootball",
    "envpool.classic_control": "classic",
    "envpool.mujoco.gym": "mujoco",
    "envpool.box2d": "box2d",
}
ENVPOOL_FAMILIES = tuple(_FAMILY_BY_MODULE.values())  # run by EnvPool's own worker threads (which may be pinned)
FAMILIES = (*ENVPOOL_FAMILIES, "gymnasium", "gymnax", "brax")


def _import_envpool():
    """EnvPool with only the families above registered, and its registry.

    `import envpool` registers every family it ships (`envpool/entry.py`), and Jumanji's registration alone imports
    matplotlib.pyplot: about a third of every launcher's, sampler's and test child's start-up went on envs no system
    here runs. While envpool's `__init__` runs, an empty module stands in for `envpool.entry`; then the
    supported families register. An id they lack registers every family first (`_registry_entry`), so unknown
    and unsupported ids are told apart as before. If envpool was imported already, this changes nothing.
    """
    if "envpool" not in sys.modules:
        sys.modules["envpool.entry"] = types.ModuleType("envpool.entry")
        try:
            importlib.import_module("envpool")
        finally:
            del sys.modules["envpool.entry"]
    for module in _FAMILY_BY_MODULE:
        importlib.import_module(f"{module}.registration")
    return sys.modules["envpool"], importlib.import_module("envpool.registration").registry


envpool, _registry = _import_envpool()


def _registry_entry(env_id: str):
    """EnvPool's registry entry for env_id, or None; registers every family before saying None."""
    if env_id not in _registry.specs:
        importlib.import_module("envpool.entry")
    return _registry.specs.get(env_id)


# Atari preprocessing shared by training and evaluation pools (EnvPool's own implementation).
_ATARI_COMMON = dict(
    noop_max=30,
    repeat_action_probability=0.0,
    img_height=84,
    img_width=84,
    gray_scale=True,
    frame_skip=4,
    stack_num=4,  # the task's own stack (`--frame_stack=0`); `--frame_stack=N` asks EnvPool for N
)
ATARI_FRAME_STACK = _ATARI_COMMON["stack_num"]
_ATARI_TRAIN = dict(_ATARI_COMMON, episodic_life=True, reward_clip=True)
_ATARI_EVAL = dict(_ATARI_COMMON, episodic_life=False, reward_clip=False)

_INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """Everything a system needs to build pools for one task."""

    env_id: str  # EnvPool task id, e.g. "Breakout-v5", "CartPole-v1".
    family: str  # One of FAMILIES: "atari" | "gfootball" | "classic" | "mujoco" | "box2d".
    obs_shape: tuple  # Shape of one observation, e.g. (4, 84, 84) for Atari.
    obs_dtype: np.dtype  # dtype of observations, e.g. uint8 for Atari and GFootball.
    action_dim: int  # Number of discrete actions, or size of the continuous action vector.
    continuous: bool  # True for Box action spaces.
    action_low: np.ndarray | None  # [action_dim] lower bounds; continuous only.
    action_high: np.ndarray | None  # [action_dim] upper bounds; continuous only.
    # The info["elapsed_step"] at which EnvPool truncates an episode. EnvPool's config value for
    # every family except GFootball, whose episodes run one step longer than the configured
    # max_episode_steps (400 -> truncated at elapsed_step 401, like gfootball's game_duration).
    max_episode_steps: int
    env_kwargs: str = ""  # gymnasium/, gymnax/ and brax/ tasks only: the env's keyword arguments as JSON
    # A factored (MultiDiscrete / MultiBinary) action's choices per component, counted from 0; () otherwise. Then
    # action_dim is the number of components and an action is int32 [action_dim].
    action_nvec: tuple = ()
    # The image packed first in a vector observation with other parts (a Gymnasium Dict of an image and vectors:
    # `envs.observations.PackedObservation`); () otherwise. The network unpacks it to its CNN.
    obs_image_shape: tuple = ()
    # `--frame_stack`: the image frames stacked on the channel axis (gymnasium/, gymnax/, jax/ image tasks, and
    # EnvPool's Atari through its `stack_num`); 1: none.
    frame_stack: int = 1

    @property
    def factored(self) -> bool:
        return bool(self.action_nvec)


def family_of(env_id: str) -> str:
    """Family of an EnvPool task id ("gymnasium" for `gymnasium/<id>`, "gymnax" for `gymnax/<id>`, "brax" for
    `brax/<name>`); ValueError for unknown ids or unsupported families."""
    if gymnasium_pool.is_gymnasium(env_id):
        return "gymnasium"
    if gymnax_env.is_gymnax(env_id):
        return "gymnax"
    if brax_env.is_brax(env_id):
        return "brax"
    entry = _registry_entry(env_id)
    if entry is None:
        raise ValueError(_unknown_env_message(env_id))
    module = entry[0]
    family = _FAMILY_BY_MODULE.get(module)
    if family is None:
        raise ValueError(
            f"environment '{env_id}' ({module}) is not supported; supported families: "
            f"{', '.join(FAMILIES)}"
        )
    return family


def _unknown_env_message(env_id: str) -> str:
    """Called after `_registry_entry` found nothing, so every family's ids are registered to suggest from."""
    known = envpool.list_all_envs()
    close = difflib.get_close_matches(env_id, known, n=5, cutoff=0.5)
    examples = close or ["Breakout-v5", "CartPole-v1", "gfootball/academy_3_vs_1_with_keeper-v1"]
    return f"unknown environment '{env_id}'; EnvPool knows e.g. {', '.join(examples)}"


def _normalise_game(name: str) -> str:
    """'MsPacman', 'ms_pacman', 'mspacman-v5' -> 'mspacman'."""
    name = re.sub(r"-v5$", "", name.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]", "", name.lower())


@functools.lru_cache(maxsize=1)
def _atari_games() -> dict[str, str]:
    """Normalised game name -> Atari task id ("breakout" -> "Breakout-v5")."""
    return {
        _normalise_game(env_id): env_id
        for env_id, entry in _registry.specs.items()
        if entry[0] == "envpool.atari"
    }


def resolve_env_id(game: str | None, env: str | None) -> str:
    """Turns --game (an Atari name) or --env (an EnvPool id) into an EnvPool task id.

    Exactly one of the two must be given. Game names are matched ignoring case, "_", "-" and a
    "-v5" suffix: "Breakout", "breakout", "Breakout-v5", "MsPacman" and "ms_pacman" all work.
    """
    if (game is None or game == "") == (env is None or env == ""):
        raise ValueError(
            "give exactly one of --game (an Atari game, e.g. Breakout) and --env (an EnvPool id, "
            f"e.g. CartPole-v1); got game={game!r}, env={env!r}"
        )
    if env:
        if gymnasium_pool.is_gymnasium(env) or jax_pool.is_jax_env(env):
            return env  # made, with its --env_kwargs, when the config is checked
        if _registry_entry(env) is None:
            raise ValueError(_unknown_env_message(env))
        family_of(env)  # Rejects families we have no support for.
        return env
    games = _atari_games()
    key = _normalise_game(game)
    if key in games:
        return games[key]
    close = difflib.get_close_matches(key, list(games), n=5, cutoff=0.5)
    hint = ", ".join(games[c].removesuffix("-v5") for c in close) or "none"
    raise ValueError(f"unknown Atari game '{game}'; close matches: {hint}")


def _pool_kwargs(family: str, evaluation: bool, frame_stack: int) -> dict[str, Any]:
    if family == "atari":
        return dict(_ATARI_EVAL if evaluation else _ATARI_TRAIN, stack_num=frame_stack)
    return {}


def _envpool_spaces(spec) -> tuple:
    """EnvPool's Gymnasium spaces of `spec` (an env spec or a pool). EnvPool builds its float32 Boxes from float64
    bounds, which Gymnasium warns about ("Box low's precision lowered by casting to float32") at every read; the
    bounds are EnvPool's own float32 values, so nothing is lost and the warning is silenced here alone."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered by casting.*", category=UserWarning)
        return spec.observation_space, spec.action_space


@functools.cache
def make_spec(env_id: str, env_kwargs: str = "", frame_stack: int = 0) -> EnvSpec:
    """Spaces of env_id under make_pool's settings.

    Reads EnvPool's spec (the spaces a pool built with the same settings reports) rather than
    building a pool, which for GFootball would start a game engine. A `gymnasium/<id>` task is made once here to
    read its spaces. `frame_stack`: 0 the task's own (EnvPool's Atari stacks 4 frames, every other task none);
    N >= 1 the last N image frames on the channel axis of a `gymnasium/`, `gymnax/` or `jax/` image task, or
    EnvPool's Atari `stack_num=N` (1: a single frame, for a policy with memory).
    """
    if frame_stack < 0:
        raise ValueError(f"--frame_stack must be >= 0 (0: the task's own, 1: no stack), got {frame_stack}")
    if gymnasium_pool.is_gymnasium(env_id) or jax_pool.is_jax_env(env_id):
        if gymnasium_pool.is_gymnasium(env_id):
            return _gymnasium_spec(env_id, env_kwargs, frame_stack or 1)
        return _jax_env_spec(env_id, env_kwargs, frame_stack or 1)
    if env_kwargs:
        raise ValueError(f"--env_kwargs applies to --env=gymnasium/, gymnax/ and brax/ tasks, not to {env_id}")
    family = family_of(env_id)
    if family != "atari" and frame_stack > 1:
        raise ValueError(f"--frame_stack applies to gymnasium/, gymnax/, jax/ and Atari image tasks, not to {env_id}")
    frame_stack = (frame_stack or ATARI_FRAME_STACK) if family == "atari" else 1
    spec = envpool.make_spec(env_id, num_envs=1, **_pool_kwargs(family, evaluation=False, frame_stack=frame_stack))
    obs_space, act_space = _envpool_spaces(spec)
    continuous = isinstance(act_space, gym_spaces.Box)
    if continuous:
        if len(act_space.shape) != 1:
            raise ValueError(f"{env_id}: expected a 1-D continuous action, got {act_space.shape}")
        action_dim = int(act_space.shape[0])
        action_low = np.asarray(act_space.low, dtype=np.float32)
        action_high = np.asarray(act_space.high, dtype=np.float32)
    elif isinstance(act_space, gym_spaces.Discrete):
        action_dim = int(act_space.n)
        action_low = action_high = None
    else:
        raise ValueError(f"{env_id}: unsupported action space {act_space}")
    max_steps = int(spec.config.max_episode_steps)
    if family == "gfootball":
        max_steps += 1  # See EnvSpec.max_episode_steps.
    return EnvSpec(
        env_id=env_id,
        family=family,
        obs_shape=tuple(int(d) for d in obs_space.shape),
        obs_dtype=np.dtype(obs_space.dtype),
        action_dim=action_dim,
        continuous=continuous,
        action_low=action_low,
        action_high=action_high,
        max_episode_steps=max_steps,
        frame_stack=frame_stack,
    )


def make_pool(
    spec: EnvSpec,
    *,
    num_envs: int,
    batch_size: int,
    seed: int,
    num_threads: int | None = None,
    evaluation: bool = False,
    extra_envs: int = 0,
    render: bool = False,
    thread_affinity_offset: int = -1,
):
    """A raw EnvPool gymnasium pool with num_envs + extra_envs environments.

    Env i is seeded with seed + i (EnvPool's rule), so envs 0..num_envs-1 follow the same
    trajectories whatever extra_envs (spare envs at ids >= num_envs) and num_envs are.

    Args:
      spec: from make_spec.
      num_envs: training (or evaluation) environments, ids 0..num_envs-1.
      batch_size: envs returned per recv(); < num_envs + extra_envs gives EnvPool's async mode.
      seed: base seed; env i gets seed + i.
      num_threads: EnvPool worker threads (a Gymnasium pool's worker processes); default
        min(num_envs + extra_envs, the cores this process may use: `envs.cores.usable_cores`).
        (EnvPool's own default is batch_size, which is slow for batch_size 1.)
      evaluation: Atari only: no life-loss episode ends and no reward clipping.
      extra_envs: spare environments appended at ids num_envs..num_envs + extra_envs - 1.
      render: EnvPool's `render_mode="rgb_array"`: `pool.render()` gives env 0's real frame
        (`envs.rendering`); stepping is unchanged.
      thread_affinity_offset: EnvPool's own option: -1 leaves its threads to the scheduler; k >= 0 pins
        worker thread t to core (k + t) mod the machine's cores. EnvPool families only.
    """
    total = num_envs + extra_envs
    if num_envs < 1 or extra_envs < 0:
        raise ValueError(f"need num_envs >= 1 and extra_envs >= 0, got {num_envs}, {extra_envs}")
    if not 1 <= batch_size <= total:
        raise ValueError(
            f"batch_size must be in [1, {total}] (num_envs + extra_envs), got {batch_size}"
        )
    if not 0 <= seed <= _INT32_MAX - total:
        raise ValueError(f"seed must be in [0, {_INT32_MAX - total}] so seed + env id fits int32")
    if num_threads is None:
        num_threads = min(total, usable_cores())
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    if thread_affinity_offset < -1:
        raise ValueError(f"thread_affinity_offset must be -1 (no pinning) or a core, got {thread_affinity_offset}")
    if thread_affinity_offset >= 0 and spec.family not in ENVPOOL_FAMILIES:
        raise ValueError(f"{spec.env_id}: thread_affinity_offset pins EnvPool's threads; a {spec.family} pool has none")
    if spec.family == "gymnasium":
        return gymnasium_pool.GymnasiumPool(
            spec.env_id, spec.env_kwargs, num_envs=total, batch_size=batch_size, seed=seed, obs_shape=spec.obs_shape,
            obs_dtype=spec.obs_dtype, num_workers=num_threads, render=render, frame_stack=spec.frame_stack)
    if spec.family in ("gymnax", "brax"):
        if render:
            raise ValueError(f"{spec.env_id}: {spec.family} envs render no frames here; videos draw the observation")
        return jax_pool.JaxEnvPool(spec.env_id, spec.env_kwargs, num_envs=total, batch_size=batch_size, seed=seed,
                                   continuous=spec.continuous, frame_stack=spec.frame_stack)
    pool = envpool.make(
        spec.env_id,
        env_type="gymnasium",
        num_envs=total,
        batch_size=batch_size,
        num_threads=num_threads,
        seed=seed,
        thread_affinity_offset=thread_affinity_offset,
        **_pool_kwargs(spec.family, evaluation, spec.frame_stack),
        **({"render_mode": "rgb_array"} if render else {}),
    )
    _envpool_spaces(pool)  # the pool builds (and keeps) its spaces at the first read: here, not in its first recv
    return pool


def _gymnasium_spec(env_id: str, env_kwargs: str, frame_stack: int) -> EnvSpec:
    """The spaces of a `gymnasium/<id>` task: a vector `Box` observation or a uint8 image `Box` (``HxWxC``, or
    ``CxHxW`` of sides 36 or more: `agents.networks.image_torso`), after `envs.observations.adapted` (any rank of
    Box, Discrete / MultiDiscrete / MultiBinary, Dict and Tuple of those and one image, frame stacks), and a
    `Discrete`, 1-D `Box`, `MultiDiscrete` or `MultiBinary` action (after `envs.actions.adapted_actions`); any other
    space is refused with one line naming it."""
    import gymnasium

    try:
        env = gymnasium_pool.make_env(env_id, env_kwargs=env_kwargs, say=say_on_stderr, frame_stack=frame_stack)
    except (gymnasium.error.Error, ModuleNotFoundError, ImportError, AttributeError, TypeError) as error:
        raise ValueError(f"{env_id}: gymnasium.make failed: {str(error).strip().splitlines()[0]}") from None
    try:
        obs_space, act_space = env.observation_space, env.action_space
        max_steps = env.spec.max_episode_steps if env.spec is not None else None
        image_shape = getattr(env, "image_shape", ())  # a Dict of an image and vectors, packed (PackedObservation)
    finally:
        env.close()
    if not isinstance(obs_space, gym_spaces.Box) or len(obs_space.shape) not in (1, 3):
        raise ValueError(f"{env_id}: unsupported observation space {obs_space} (gymnasium/ takes a Box, Discrete, "
                         "MultiDiscrete, MultiBinary, a Dict or Tuple of those and at most one uint8 image, or a "
                         "uint8 image Box HxWxC / CxHxW)")
    if len(obs_space.shape) == 3 or image_shape:
        _check_image(env_id, gym_spaces.Box(0, 255, image_shape, np.uint8) if image_shape else obs_space)
    nvec = ()
    if isinstance(act_space, gym_spaces.Discrete):
        action_dim, low, high, continuous = int(act_space.n), None, None, False
    elif isinstance(act_space, gym_spaces.Box) and len(act_space.shape) == 1:
        action_dim, continuous = int(act_space.shape[0]), True
        low, high = np.asarray(act_space.low, np.float32), np.asarray(act_space.high, np.float32)
    elif isinstance(act_space, gym_spaces.MultiDiscrete) and act_space.nvec.ndim == 1 and len(act_space.nvec):
        nvec, low, high, continuous = tuple(int(n) for n in act_space.nvec), None, None, False
        action_dim = len(nvec)
    else:
        raise ValueError(f"{env_id}: unsupported action space {act_space} (gymnasium/ takes Discrete, a 1-D Box, "
                         "MultiDiscrete or MultiBinary)")
    dtype = np.dtype(np.float32) if np.dtype(obs_space.dtype).kind == "f" else np.dtype(obs_space.dtype)
    return EnvSpec(env_id=env_id, family="gymnasium", obs_shape=tuple(int(d) for d in obs_space.shape),
                   obs_dtype=dtype, action_dim=action_dim, continuous=continuous, action_low=low, action_high=high,
                   max_episode_steps=int(max_steps) if max_steps else _INT32_MAX, env_kwargs=env_kwargs,
                   action_nvec=nvec, obs_image_shape=image_shape, frame_stack=frame_stack)


# The smallest side the Nature CNN's layers read (`agents.networks.PIXEL_MIN_SIDE`, the same value, tested): a
# smaller image goes to MinAtar's CNN, channels last.
PIXEL_MIN_SIDE = 36


def _check_image(env_id: str, obs_space) -> None:
    """A uint8 image; a small one (a side under PIXEL_MIN_SIDE) channels last, as MinAtar's CNN reads it."""
    shape = tuple(int(d) for d in obs_space.shape)
    if np.dtype(obs_space.dtype) != np.uint8:
        raise ValueError(f"{env_id}: image observations must be uint8 pixels, got {obs_space} (scale or cast them in "
                         "a gymnasium.ObservationWrapper)")
    if max(shape) < PIXEL_MIN_SIDE and shape[0] < min(shape[1], shape[2]):
        raise ValueError(f"{env_id}: the small image {shape} looks channels first; small images must be channels "
                         "last (HxWxC), as MinAtar's CNN reads them")


def _jax_env_spec(env_id: str, env_kwargs: str, frame_stack: int) -> EnvSpec:
    """The spaces of a `gymnax/<id>` or `brax/<name>` task: a vector or `HxWxC` image `Box` observation (float32 to
    the networks) and a `Discrete` or 1-D `Box` action; any other space is refused with one line naming it."""
    obs_space, act_space, max_steps = jax_pool.spaces(env_id, env_kwargs)
    kind = type(act_space).__name__
    if type(obs_space).__name__ != "Box" or len(obs_space.shape) not in (1, 3):
        raise ValueError(f"{env_id}: unsupported observation space {type(obs_space).__name__} "
                         f"{getattr(obs_space, 'shape', '')} (JAX envs take a vector or an HxWxC image Box)")
    if kind == "Discrete":
        action_dim, low, high, continuous = int(act_space.n), None, None, False
    elif kind == "Box" and len(act_space.shape) <= 1:
        action_dim, continuous = int(np.prod(act_space.shape)), True
        low = np.broadcast_to(np.asarray(act_space.low, np.float32), (action_dim,)).copy()
        high = np.broadcast_to(np.asarray(act_space.high, np.float32), (action_dim,)).copy()
    else:
        raise ValueError(f"{env_id}: unsupported action space {kind} (JAX envs take Discrete or a 1-D Box)")
    obs_shape = tuple(int(d) for d in obs_space.shape)
    if frame_stack > 1:
        if len(obs_shape) != 3:
            raise ValueError(f"--frame_stack={frame_stack} stacks image frames; {env_id} observes a vector {obs_shape}")
        obs_shape = (*obs_shape[:2], obs_shape[2] * frame_stack)
    return EnvSpec(env_id=env_id, family=family_of(env_id), obs_shape=obs_shape,
                   obs_dtype=np.dtype(np.float32), action_dim=action_dim, continuous=continuous, action_low=low,
                   action_high=high, max_episode_steps=max_steps, env_kwargs=env_kwargs, frame_stack=frame_stack)
