"""gymnax's environments as JAX envs (`--env=gymnax/<id>`): one env's pure reset and step with EnvPool's semantics
(`envs.jax_pool`), for the pool there and for `launch.anakin`'s rounds.

`<id>` is a name `gymnax.make` knows ("CartPole-v1", "Breakout-MinAtar", ...). `--env_kwargs` (JSON) sets fields of
the env's `EnvParams` (e.g. `{"max_steps_in_episode": 200}`) and passes any other key to the env's constructor.
Termination is the env's own (`step_env`); truncation is ours, at the env's `max_steps_in_episode`, so the two stay
apart (gymnax's `step` would auto-reset and merge them).

`--env=jax/<module>:<callable>` is any JAX env with gymnax's interface (`reset_env(key, params)`, `step_env(key,
state, action, params)`, `observation_space(params)`, `action_space(params)`, and the episode limit as
`params.max_steps_in_episode` or, as Craftax names it, `params.max_timesteps`):
`<module>` is imported and `<callable>(**env_kwargs)` returns `(env, params)`. Suites built on gymnax's
`Environment` class (Craftax, XLand-MiniGrid, ...) plug in through a two-line factory of the user's; the task then
runs as a `gymnax/` one, in the same jitted pool and in Anakin's program.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from envs.gymnasium_pool import parse_kwargs

PREFIX = "gymnax/"
CUSTOM_PREFIX = "jax/"
_INTERFACE = ("reset_env", "step_env", "observation_space", "action_space")
LIMIT_FIELDS = ("max_steps_in_episode", "max_timesteps")  # gymnax's name of the episode limit, Craftax's


def limit_field(params) -> str | None:
    """The name of the episode-limit field of `params` (`LIMIT_FIELDS`), or None."""
    return next((name for name in LIMIT_FIELDS if hasattr(params, name)), None)


def is_gymnax(env_id: str) -> bool:
    """A `gymnax/<id>` task, or a `jax/<module>:<callable>` one with gymnax's interface."""
    return env_id.startswith(PREFIX) or env_id.startswith(CUSTOM_PREFIX)


def _custom_env(env_id: str, kwargs: dict):
    """(env, params) of `jax/<module>:<callable>`; ValueError with one line for a bad id, a failed import or call,
    or an env without gymnax's interface."""
    import importlib

    target = env_id[len(CUSTOM_PREFIX):]
    module_name, _, name = target.partition(":")
    if not module_name or not name:
        raise ValueError(f"{env_id}: give --env=jax/<module>:<callable>, the callable returning (env, env_params)")
    try:
        factory = getattr(importlib.import_module(module_name), name)
    except Exception as error:  # the user's module: a missing name, or any failure at its import, in one line
        text = str(error).strip().splitlines()
        raise ValueError(f"{env_id}: cannot load {target}: {text[0] if text else type(error).__name__}") from None
    try:
        made = factory(**kwargs)
    except Exception as error:  # the user's factory: its failure, in one line
        raise ValueError(f"{env_id}: {target}(**--env_kwargs) failed: {type(error).__name__}: "
                         f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}") from None
    if not (isinstance(made, tuple) and len(made) == 2):
        raise ValueError(f"{env_id}: {target} must return (env, env_params), got {type(made).__name__}")
    env, params = made
    missing = [m for m in _INTERFACE if not hasattr(env, m)]
    if limit_field(params) is None:
        missing.append("params." + " or params.".join(LIMIT_FIELDS))
    if missing:
        raise ValueError(f"{env_id}: the env lacks gymnax's interface ({', '.join(missing)})")
    return env, params


def gymnax_id(env_id: str) -> str:
    """"gymnax/Breakout-MinAtar" -> "Breakout-MinAtar"."""
    return env_id[len(PREFIX):]


def make_env(env_id: str, env_kwargs: str = ""):
    """(env, params) of a `gymnax/<id>` task: `--env_kwargs` keys naming `EnvParams` fields set them, the others go
    to the env's constructor; a `jax/<module>:<callable>` task is the callable's. ValueError with one line for an
    unknown id, a missing gymnax or a bad keyword."""
    if env_id.startswith(CUSTOM_PREFIX):
        return _custom_env(env_id, parse_kwargs(env_kwargs))
    try:
        import gymnax
    except ImportError:
        raise ValueError(f"{env_id} needs gymnax: pip install -e \".[gymnax]\"") from None
    kwargs = parse_kwargs(env_kwargs)
    name = gymnax_id(env_id)
    if name not in gymnax.registered_envs:
        raise ValueError(f"unknown gymnax environment '{name}'; gymnax knows {', '.join(gymnax.registered_envs)}")
    try:
        probe, params = gymnax.make(name)
        fields = {field.name for field in dataclasses.fields(params)}
        constructor = {key: value for key, value in kwargs.items() if key not in fields}
        env, params = gymnax.make(name, **constructor) if constructor else (probe, params)
        return env, params.replace(**{key: value for key, value in kwargs.items() if key in fields})
    except (TypeError, ValueError) as error:
        raise ValueError(f"{env_id}: gymnax.make failed: {str(error).strip().splitlines()[0]}") from None


def spaces(env_id: str, env_kwargs: str = ""):
    """(observation space, action space, max_episode_steps) as gymnax describes them."""
    env, params = make_env(env_id, env_kwargs)
    return env.observation_space(params), env.action_space(params), int(getattr(params, limit_field(params)))


def raw_functions(env_id: str, env_kwargs: str = ""):
    """`(reset(key) -> (obs, state), step(key, state, action) -> (obs, state, reward, terminated), limit)`: gymnax's
    own reset and step (no auto-reset, no truncation: `envs.jax_pool.env_functions` adds EnvPool's semantics) and the
    episode length it truncates at (`max_steps_in_episode`)."""
    env, params = make_env(env_id, env_kwargs)
    field = limit_field(params)
    limit = int(getattr(params, field))
    params = params.replace(**{field: np.iinfo(np.int32).max})  # truncation is ours (envs.jax_pool)

    def reset(key):
        return env.reset_env(key, params)

    def step(key, state, action):
        obs, state, reward, terminated, _ = env.step_env(key, state, action, params)
        return obs, state, reward, terminated

    return reset, step, limit
