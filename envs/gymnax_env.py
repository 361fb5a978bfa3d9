"""gymnax's environments as JAX envs (`--env=gymnax/<id>`): one env's pure reset and step with EnvPool's semantics
(`envs.jax_pool`), for the pool there and for `launch.anakin`'s rounds.

`<id>` is a name `gymnax.make` knows ("CartPole-v1", "Breakout-MinAtar", ...). `--env_kwargs` (JSON) sets fields of
the env's `EnvParams` (e.g. `{"max_steps_in_episode": 200}`) and passes any other key to the env's constructor.
Termination is the env's own (`step_env`); truncation is ours, at the env's `max_steps_in_episode`, so the two stay
apart (gymnax's `step` would auto-reset and merge them).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from envs.gymnasium_pool import parse_kwargs

PREFIX = "gymnax/"


def is_gymnax(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


def gymnax_id(env_id: str) -> str:
    """"gymnax/Breakout-MinAtar" -> "Breakout-MinAtar"."""
    return env_id[len(PREFIX):]


def make_env(env_id: str, env_kwargs: str = ""):
    """(env, params) of a `gymnax/<id>` task: `--env_kwargs` keys naming `EnvParams` fields set them, the others go
    to the env's constructor. ValueError with one line for an unknown id, a missing gymnax or a bad keyword."""
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
    return env.observation_space(params), env.action_space(params), int(params.max_steps_in_episode)


def raw_functions(env_id: str, env_kwargs: str = ""):
    """`(reset(key) -> (obs, state), step(key, state, action) -> (obs, state, reward, terminated), limit)`: gymnax's
    own reset and step (no auto-reset, no truncation: `envs.jax_pool.env_functions` adds EnvPool's semantics) and the
    episode length it truncates at (`max_steps_in_episode`)."""
    env, params = make_env(env_id, env_kwargs)
    limit = int(params.max_steps_in_episode)
    params = params.replace(max_steps_in_episode=np.iinfo(np.int32).max)  # truncation is ours (envs.jax_pool)

    def reset(key):
        return env.reset_env(key, params)

    def step(key, state, action):
        obs, state, reward, terminated, _ = env.step_env(key, state, action, params)
        return obs, state, reward, terminated

    return reset, step, limit
