"""Anakin's one XLA program (Podracer, arXiv 2104.06272, section 3.1): env steps, inference and the update of a
round, scanned over `chunk_rounds` rounds, vmapped over independent agents (seeds) and pmapped over local devices.

A round is the synchronous baseline's (`systems.sync`): `sync_interval` steps of every env acting with the current
parameters, then one PPO / A2C update (`agents`) on that `Rollout`; only the host round trip between them is gone.
The envs are JAX envs (gymnax's, Brax's) with EnvPool's semantics (`envs.jax_pool.env_functions`: reset steps,
termination and truncation apart), so the rollout has the layout the other systems build, `valid` marking reset steps.
Randomness is the other systems' too: env e starts from PRNGKey(seed + e) and its action at global step s draws from
fold_in(fold_in(action_key, e), s), so an agent's data do not depend on the chunk length or on how the envs are split
over devices. Episodes are counted as `envs.episodes.EpisodeTracker` counts them: real steps only.

A recurrent policy (`agents.recurrent`) keeps each env's state in the carry, zeroed where an observation opens an
episode (the first of the run, or the one after a reset step), and the state entering each round is stored with
the round (`Rollout.initial_carry`) for the learner to re-run its sequences from.

With `delayed` (`--delayed_update`), round k acts with the parameters before the last update, theta_{k-1}, and
the update starts from theta_k with theta_{k-1} as the behaviour parameters: seed 000's Eq. 6, the algorithm HTS
runs with its actors one update behind the learner. Without it the behaviour parameters are the current ones, as in
the synchronous baseline and in Podracer's Anakin.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from agents import DEVICE_AXIS, Rollout, TrainState, action_keys, policy_step
from agents.acting import recurrent_policy_step


class Carry(NamedTuple):
    """One agent's program state on one device: its learner, its envs (shard) and their running episodes."""

    train: TrainState
    action_key: jax.Array  # the agent's run key that action keys are folded from
    env_ids: jax.Array  # [n] global env ids of this device's shard
    env_keys: jax.Array  # [n] each env's own key chain
    env_states: Any  # gymnax states, [n, ...] leaves
    done: jax.Array  # [n] bool: the env's next step is a reset step
    elapsed: jax.Array  # [n] int32 real steps in the current episode
    obs: jax.Array  # [n, ...] the observation each env's next action is taken in
    episode_return: jax.Array  # [n] float32 return so far (real steps)
    episode_length: jax.Array  # [n] int32
    round: jax.Array  # int32 rounds done: the index of the next round
    behaviour_params: Any  # the parameters the next round acts with (delayed: those before the last update)
    entropy_coef: Any = None  # float32 [] of a swept coefficient (`--entropy_coefs`); None: the config's
    memory: Any = None  # [n, S] a recurrent policy's state of each env after its last step; None: feed-forward
    first: Any = None  # [n] float32 1.0 where `obs` opens an episode (the state is zeroed before it is read)


class Episodes(NamedTuple):
    """Per round and step [rounds, sync_interval, n]: whether the env's episode ended there, its return, length."""

    ended: jax.Array
    returns: jax.Array
    lengths: jax.Array


def initial_carry(train: TrainState, action_key: jax.Array, env_ids: jax.Array, seed: int, reset_one,
                  entropy_coef: float | None = None, carry_size: int = 0) -> Carry:
    """The agent's carry with every env of `env_ids` reset: env e's key chain starts at PRNGKey(seed + e); a swept
    `entropy_coef` rides in it to the update; `carry_size` S > 0: a recurrent policy's states, all opening."""
    keys = jax.vmap(jax.random.PRNGKey)(seed + env_ids.astype(jnp.uint32))
    keys, obs, states = jax.vmap(reset_one)(keys)
    n = env_ids.shape[0]
    return Carry(train=train, action_key=action_key, env_ids=env_ids, env_keys=keys, env_states=states,
                 done=jnp.zeros(n, bool), elapsed=jnp.zeros(n, jnp.int32), obs=obs,
                 episode_return=jnp.zeros(n, jnp.float32), episode_length=jnp.zeros(n, jnp.int32),
                 round=train.update_step.astype(jnp.int32), behaviour_params=train.params,
                 entropy_coef=None if entropy_coef is None else jnp.asarray(entropy_coef, jnp.float32),
                 memory=jnp.zeros((n, carry_size), jnp.float32) if carry_size else None,
                 first=jnp.ones(n, jnp.float32) if carry_size else None)


def make_round(step_one, apply_fn, update_fn, sync_interval: int, axis_name: str | None, delayed: bool = False,
               key_hold: int = 1):
    """`one_round(carry, _) -> (carry, (metrics, Episodes))` for `lax.scan`: a round of `sync_interval` env steps of
    every env with the behaviour parameters, then the update (gradients averaged over `axis_name` when the envs are
    split over devices); `delayed`: Eq. 6 (module docstring); `key_hold`: `agents.action_keys`' `hold`."""
    update = functools.partial(update_fn, axis_name=axis_name) if axis_name else update_fn

    def act(carry: Carry, keys: jax.Array):
        """(actions, log-probs, values) of the behaviour parameters, and the carry with the new states."""
        if carry.memory is None:
            return policy_step(carry.behaviour_params, carry.obs, keys, apply_fn=apply_fn), carry
        actions, log_probs, values, memory = recurrent_policy_step(carry.behaviour_params, carry.obs, carry.memory,
                                                                   carry.first, keys, apply_fn=apply_fn)
        return (actions, log_probs, values), carry._replace(memory=memory, first=carry.done.astype(jnp.float32))

    def env_step(carry: Carry, t):
        step = carry.round * sync_interval + t
        valid = ~carry.done  # before `act`, which moves `done` into the next step's opening flags
        keys = action_keys(carry.action_key, carry.env_ids, step, key_hold)
        (actions, log_probs, values), carry = act(carry, keys)
        env_keys, env_states, done, elapsed, (obs, reward, terminated, truncated, _) = jax.vmap(step_one)(
            carry.env_keys, carry.env_states, carry.done, carry.elapsed, actions)
        ended = terminated | truncated  # only on real steps (a reset step ends nothing)
        episode_return = carry.episode_return + jnp.where(valid, reward, 0.0)
        episode_length = carry.episode_length + valid.astype(jnp.int32)
        transition = (carry.obs, actions, reward, terminated.astype(jnp.float32), truncated.astype(jnp.float32),
                      valid.astype(jnp.float32), log_probs, values)
        episodes = Episodes(ended, episode_return, episode_length)
        carry = carry._replace(
            env_keys=env_keys, env_states=env_states, done=done, elapsed=elapsed, obs=obs,
            episode_return=jnp.where(ended, 0.0, episode_return), episode_length=jnp.where(ended, 0, episode_length))
        return carry, (transition, episodes)

    def one_round(carry: Carry, _):
        memory = None if carry.memory is None else jnp.where(carry.first[:, None] > 0, 0.0, carry.memory)
        carry, (transitions, episodes) = jax.lax.scan(env_step, carry, jnp.arange(sync_interval))
        obs, actions, rewards, terminations, truncations, valid, log_probs, values = transitions
        rollout = Rollout(obs=jnp.concatenate([obs, carry.obs[None]]), actions=actions, rewards=rewards,
                          terminations=terminations, truncations=truncations, valid=valid,
                          behaviour_log_probs=log_probs, behaviour_values=values, initial_carry=memory)
        swept = {} if carry.entropy_coef is None else {"entropy_coef": carry.entropy_coef}
        train, metrics = update(carry.train, carry.behaviour_params, rollout, **swept)
        behaviour = carry.train.params if delayed else train.params  # theta_k acts in round k + 1 (Eq. 6)
        return carry._replace(train=train, round=carry.round + 1, behaviour_params=behaviour), (metrics, episodes)

    return one_round


def make_program(one_round, devices: list, max_rounds: int):
    """`program(carry, rounds) -> (carry, (metrics, Episodes))`: `rounds` rounds (at most `max_rounds`; a traced
    count, so the last, shorter chunk of a run does not compile the program again) of every agent (vmapped; carry
    leaves [devices, agents, ...]) on every device (pmapped over `DEVICE_AXIS`); outputs [devices, agents,
    max_rounds, ...], of which the first `rounds` rows are the chunk's."""

    def chunk(carry: Carry, rounds):
        shapes = jax.eval_shape(one_round, carry, None)[1]
        outputs = jax.tree.map(lambda s: jnp.zeros((max_rounds, *s.shape), s.dtype), shapes)

        def body(i, state):
            carry, outputs = state
            carry, out = one_round(carry, None)
            return carry, jax.tree.map(lambda buffer, x: buffer.at[i].set(x), outputs, out)

        return jax.lax.fori_loop(0, rounds, body, (carry, outputs))

    agents = jax.vmap(chunk, in_axes=(0, None))
    return jax.pmap(agents, axis_name=DEVICE_AXIS, in_axes=(0, None), devices=devices)
