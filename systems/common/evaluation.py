"""Evaluation protocol of seed 000, section 5.

* Evaluation runs on separate envs (Atari: real episodes, no life-loss ends, unclipped rewards, up to 30 no-op
  starts, all from EnvPool's own preprocessing; see `envs.factory.make_pool(evaluation=True)`).
* *final metric*: the mean return over the last 100 evaluation episodes, i.e. `eval_episodes` (10) episodes for
  each of the last ten evaluated policies.
* *final time metric*: the final metric when training is stopped by a time limit (`--time_limit`).
* *required time metric*: the wall time at which the running average over the most recent ten evaluations first
  reaches `--target_return`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from agents import distributions
from agents.recurrent import memory_of
from envs import jax_pool
from envs.episodes import EpisodeTracker
from envs.factory import EnvSpec, make_pool
from systems.common import video
from systems.common.jit_cache import made_once

LAST_POLICIES = 10


def policy_act_fn(apply_fn: Callable, *, deterministic: bool) -> Callable:
    """Jitted `act(params, obs, key) -> actions` of an actor-critic: the mode of pi(.|s) (greedy) or one draw per
    row (sampled)."""

    def act(params, obs, key):
        policy_out, _ = apply_fn(params, obs)
        if deterministic:
            return distributions.mode(policy_out)
        keys = jax.random.split(key, obs.shape[0])
        return distributions.sample_actions(policy_out, keys)

    return jax.jit(act)


def network_act_fn(network, *, deterministic: bool) -> Callable:
    """`policy_act_fn` of a flax actor-critic, made once for equal networks (`jit_cache.made_once`); a new
    `RecurrentAct` of a recurrent one (it holds its episodes' states)."""
    if memory_of(network) is not None:
        return RecurrentAct(network, deterministic=deterministic)
    return made_once(("act", network, deterministic),
                     lambda: policy_act_fn(network.apply, deterministic=deterministic))


class RecurrentAct:
    """`act(params, obs, key) -> actions` of a recurrent actor-critic (`agents.recurrent`) for the evaluation loops,
    whose row i is the same env from its reset on: it keeps row i's state between calls, from zeros at the first
    call after `start()` (each evaluation and each filmed episode starts one). The step is jitted once per network
    and mode; the object itself is not a pure function, so the loops call it from Python."""

    def __init__(self, network, *, deterministic: bool):  # a RecurrentActorCritic, or a NormalizedNetwork of one
        def step(params, obs, carry, first, key):
            policy_out, _, carry = network.apply(params, obs, carry, first)
            if deterministic:
                return distributions.mode(policy_out), carry
            return distributions.sample_actions(policy_out, jax.random.split(key, obs.shape[0])), carry

        self._step = made_once(("recurrent_act", network, deterministic), lambda: jax.jit(step))
        self._carry_size = memory_of(network).carry_size
        self._carry = None

    def start(self) -> None:
        """The next call opens new episodes: every row's state starts from zeros."""
        self._carry = None

    def __call__(self, params, obs, key):
        first = np.zeros(len(obs), np.float32)
        if self._carry is None or self._carry.shape[0] != len(obs):
            self._carry, first = np.zeros((len(obs), self._carry_size), np.float32), np.ones(len(obs), np.float32)
        actions, self._carry = self._step(params, obs, self._carry, first, key)
        return actions


def start_episodes(act: Callable) -> None:
    """Before a loop of new episodes: a `RecurrentAct` forgets its states (a feed-forward act has none)."""
    if isinstance(act, RecurrentAct):
        act.start()


def _python_split_and_act(act: Callable) -> Callable:
    """`split_and_act` for an act that is not a pure function (`RecurrentAct`): the key split in the program, the
    act called from Python."""
    split = jax.jit(jax.random.split)

    def step(params, obs, key):
        key, subkey = split(key)
        return key, act(params, obs, subkey)

    return step


@functools.lru_cache(maxsize=32)
def split_and_act(act: Callable) -> Callable:
    """Jitted `(params, obs, key) -> (next key, act(params, obs, subkey))` with `next key, subkey = split(key)`: the
    pooled loop's key chain inside the program; the split and the unpacking of its result, run op by op, cost more
    than a small policy's whole call. Made once per `act`."""

    def step(params, obs, key):
        key, subkey = jax.random.split(key)
        return key, act(params, obs, subkey)

    return jax.jit(step)


@functools.cache
def _jitted_episodes(env_id: str, env_kwargs: str, act: Callable, low: tuple | None, high: tuple | None,
                     frame_stack: int = 1):
    """`run(params, env_keys, act_key) -> (env_keys, act_key, returns)`: the pooled protocol of `Evaluator.run` on JAX
    envs (gymnax, Brax) as one jitted loop (no host round trip a step: on a GPU those made Anakin's evaluation 87% of
    its time). Same env functions, env and action keys and episode rule as the pool: each env's first episode, which
    ends at termination, truncation or a non-finite reward (return NaN). Returns sum in float32, which is exact for
    integer rewards (float64 in the pooled loop). One program per task and action function, shared by evaluators."""
    import jax.numpy as jnp

    reset_one, step_one = jax_pool.env_functions(env_id, env_kwargs, frame_stack)

    def run(params, env_keys, act_key):
        env_keys, obs, states = jax.vmap(reset_one)(env_keys)
        count = obs.shape[0]
        zeros = jnp.zeros(count, bool)
        carry = (env_keys, act_key, states, zeros, jnp.zeros(count, jnp.int32), obs, jnp.zeros(count), zeros)

        def body(carry):
            env_keys, act_key, states, done, elapsed, obs, returns, finished = carry
            act_key, key = jax.random.split(act_key)
            actions = act(params, obs, key)
            if low is not None:
                actions = jnp.clip(actions, jnp.asarray(low, jnp.float32), jnp.asarray(high, jnp.float32))
            env_keys, states, done, elapsed, (obs, reward, terminated, truncated, _) = jax.vmap(step_one)(
                env_keys, states, done, elapsed, actions)
            broken = ~jnp.isfinite(reward) & ~finished
            returns = jnp.where(finished, returns, jnp.where(broken, jnp.nan, returns + reward))
            finished = finished | terminated | truncated | broken
            return env_keys, act_key, states, done, elapsed, obs, returns, finished

        carry = jax.lax.while_loop(lambda carry: ~jnp.all(carry[-1]), body, carry)
        return carry[0], carry[1], carry[6]

    return jax.jit(run)


def _jax_env_evaluation(spec: EnvSpec, act: Callable):
    """`_jitted_episodes` of a JAX env task's spec (its action bounds when continuous)."""
    low, high = ((tuple(map(float, spec.action_low)), tuple(map(float, spec.action_high))) if spec.continuous
                 else (None, None))
    return _jitted_episodes(spec.env_id, spec.env_kwargs, act, low, high, spec.frame_stack)


class Evaluator:
    """Runs `episodes` real episodes, one per env of its own EnvPool, with the given parameters. On gymnax tasks the
    whole evaluation is one jitted loop over the same env functions and keys as the pool's (`_jitted_episodes`);
    `jitted=False` keeps the pooled loop there (the tests compare the two)."""

    def __init__(
        self,
        spec: EnvSpec,
        apply_fn: Callable | None,
        *,
        episodes: int,
        seed: int,
        deterministic: bool,
        act_fn: Callable | None = None,
        jitted: bool = True,
    ):
        """`apply_fn(params, obs) -> (policy_out, value)` of an actor-critic, or `act_fn(params, obs, key) ->
        actions` (jitted: an off-policy agent's, or `network_act_fn`'s) and `apply_fn=None`."""
        self.spec = spec
        self.episodes = episodes
        self.seed = seed
        self._key = jax.random.PRNGKey(seed)
        self._deterministic = deterministic
        self._act = act_fn if act_fn is not None else policy_act_fn(apply_fn, deterministic=deterministic)
        recurrent = isinstance(self._act, RecurrentAct)  # holds its envs' states: its loop runs from Python
        self._split_and_act = _python_split_and_act(self._act) if recurrent else split_and_act(self._act)
        self._jitted = None
        if jitted and jax_pool.is_jax_env(spec.env_id) and not recurrent:
            self._jitted = _jax_env_evaluation(spec, self._act)
            self._env_keys = jax_pool.env_keys(seed, episodes)  # the pool's
        else:
            self._pool = make_pool(spec, num_envs=episodes, batch_size=episodes, seed=seed, evaluation=True)

    def record_video(self, params: Any, path: str) -> video.Video:
        """One episode of the same policy on the evaluation's env 0, filmed to `path` (`systems.common.video`)."""
        start_episodes(self._act)
        return video.record_episode(self.spec, self._act, params, seed=self.seed, path=path)

    def run(self, params: Any) -> np.ndarray:
        """Returns the `episodes` episode returns (each env's first complete episode). An env whose reward is not
        finite ends its episode there with a NaN return (a NaN policy on a continuous task makes NaN rewards
        until the time limit: the evaluation must not wait for them, and the return must not look normal)."""
        if self._jitted is not None:
            self._env_keys, self._key, returns = self._jitted(params, self._env_keys, self._key)
            return np.asarray(returns, np.float64)
        tracker = EpisodeTracker(self.episodes, self.spec.family, self.spec.max_episode_steps)
        returns = np.full(self.episodes, np.nan)
        finished = np.zeros(self.episodes, bool)
        obs, _ = self._pool.reset()
        start_episodes(self._act)
        while not finished.all():
            self._key, actions = self._split_and_act(params, obs, self._key)
            actions = np.asarray(actions)
            if self.spec.continuous:
                actions = np.clip(actions, self.spec.action_low, self.spec.action_high)
            obs, rewards, terminated, truncated, info = self._pool.step(actions)
            env_ids = np.asarray(info["env_id"])
            tracker.step(env_ids, rewards, terminated, truncated, info)
            for env_id, episode_return, _ in tracker.pop_finished():
                if not finished[env_id]:
                    returns[env_id], finished[env_id] = episode_return, True
            broken = env_ids[~np.isfinite(np.asarray(rewards, np.float64))]
            returns[broken[~finished[broken]]] = np.nan
            finished[broken] = True
        return returns


class AgentsEvaluator:
    """The evaluations of agents that are evaluated together (Anakin's vmapped agents) in one jitted call on gymnax
    tasks: agent k plays the episodes its own `Evaluator(seed=seeds[k])` would (a vmapped loop leaves a finished
    agent's carry as it is), in one host round trip for all agents instead of one each. `offer(stacked_params)` hands
    over the agents' newest parameters ([agents, ...] leaves); `agent(k)` is agent k's evaluator for its Monitor."""

    def __init__(self, spec: EnvSpec, act_fn: Callable, *, episodes: int, seeds: list[int]):
        if not jax_pool.is_jax_env(spec.env_id):
            raise ValueError(f"AgentsEvaluator needs a JAX env task (gymnax/, brax/), not {spec.env_id}")
        self._run = jax.jit(jax.vmap(_jax_env_evaluation(spec, act_fn)))
        self._env_keys = jax.vmap(lambda seed: jax_pool.env_keys(seed, episodes))(np.asarray(seeds, np.uint32))
        self._act_keys = jax.vmap(jax.random.PRNGKey)(np.asarray(seeds, np.uint32))
        self._agents = [_OneOfAgents(self, k, spec, act_fn, episodes, seed) for k, seed in enumerate(seeds)]
        self._stacked = self._returns = None
        self._taken: set[int] = set()

    def offer(self, stacked_params: Any) -> None:
        self._stacked, self._returns, self._taken = stacked_params, None, set()

    def agent(self, k: int) -> _OneOfAgents:
        return self._agents[k]

    def returns_of(self, k: int) -> np.ndarray:
        """Agent k's row of one evaluation of every agent's offered parameters (run at the first agent's request)."""
        if self._stacked is None or k in self._taken:
            raise RuntimeError("AgentsEvaluator: offer the agents' new parameters before evaluating them again")
        if self._returns is None:
            self._env_keys, self._act_keys, returns = self._run(self._stacked, self._env_keys, self._act_keys)
            self._returns = np.asarray(returns, np.float64)
        self._taken.add(k)
        return self._returns[k]


@dataclasses.dataclass
class _OneOfAgents:
    """Agent k's view of an `AgentsEvaluator`, with an `Evaluator`'s interface; `run` evaluates the offered
    parameters (the Monitor passes the same ones)."""

    group: AgentsEvaluator
    k: int
    spec: EnvSpec
    act_fn: Callable
    episodes: int
    seed: int

    def run(self, params: Any) -> np.ndarray:
        del params
        return self.group.returns_of(self.k)

    def record_video(self, params: Any, path: str) -> video.Video:
        return video.record_episode(self.spec, self.act_fn, params, seed=self.seed, path=path)


@dataclasses.dataclass
class EvaluationRecord:
    env_steps: int
    wall_time: float
    policy_version: int
    returns: list


def final_metric(records: list[EvaluationRecord]) -> float | None:
    """Mean over all episodes of the last ten evaluated policies (seed 000, section 5)."""
    if not records:
        return None
    episodes = [r for record in records[-LAST_POLICIES:] for r in record.returns]
    return float(np.mean(episodes))


def required_time(records: list[EvaluationRecord], target: float | None) -> float | None:
    """Wall time when the running average over the most recent ten evaluations first reaches `target`."""
    if target is None:
        return None
    for i, record in enumerate(records):
        window = [r for rec in records[max(0, i + 1 - LAST_POLICIES) : i + 1] for r in rec.returns]
        if np.mean(window) >= target:
            return record.wall_time
    return None


def reached_target(records: list[EvaluationRecord], config) -> bool:
    """With `config.stop_at_target`: the newest evaluation's mean return is at least `config.target_return`."""
    if not config.stop_at_target or config.target_return is None or not records:
        return False
    return float(np.mean(records[-1].returns)) >= config.target_return
