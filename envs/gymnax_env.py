"""gymnax's environments as JAX envs (`--env=gymnax/<id>`): one env's pure reset and step with EnvPool's semantics
(`envs.jax_pool`), for the pool there and for `launch.anakin`'s rounds.

`<id>` is a name `gymnax.make` knows ("CartPole-v1", "Breakout-MinAtar", ...). `--env_kwargs` (JSON) sets fields of
the env's `EnvParams` (e.g. `{"max_steps_in_episode": 200}`) and passes any other key to the env's constructor.
Termination is the env's own (`step_env`); truncation is ours, at the env's `max_steps_in_episode`, so the two stay
apart (gymnax's `step` would auto-reset and merge them).
"""

from __future__ import annotations

import dataclasses
import functools

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


@functools.cache
def env_functions(env_id: str, env_kwargs: str = ""):
    """`(reset_one, step_one)` of `envs.jax_pool.env_functions`' contract (truncation at `max_steps_in_episode`)."""
    import jax
    import jax.numpy as jnp

    env, params = make_env(env_id, env_kwargs)
    limit = int(params.max_steps_in_episode)
    params = params.replace(max_steps_in_episode=np.iinfo(np.int32).max)  # truncation is ours (envs.jax_pool)

    def reset_one(key):
        key, reset_key = jax.random.split(key)
        obs, state = env.reset_env(reset_key, params)
        return key, obs.astype(jnp.float32), state

    def step_one(key, state, done, elapsed, action):
        key, reset_key, step_key = jax.random.split(key, 3)
        reset_obs, reset_state = env.reset_env(reset_key, params)
        obs, next_state, reward, terminated, _ = env.step_env(step_key, state, action, params)
        pick = functools.partial(jax.tree.map, lambda a, b: jnp.where(done, a, b))
        state = pick(reset_state, next_state)
        obs = jnp.where(done, reset_obs.astype(jnp.float32), obs.astype(jnp.float32))
        elapsed = jnp.where(done, 0, elapsed + 1)
        terminated = ~done & terminated.astype(bool)
        truncated = ~done & ~terminated & (elapsed >= limit)
        reward = jnp.where(done, 0.0, reward.astype(jnp.float32))
        return key, state, terminated | truncated, elapsed, (obs, reward, terminated, truncated, elapsed)

    return reset_one, step_one
