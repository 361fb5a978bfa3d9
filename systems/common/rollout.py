"""Round storages and the actor logic shared by the HTS system and the synchronous baseline (seed 000, sec. 4.1).

A *round* is `sync_interval` (alpha) steps of every env. Its data live in a `RoundStorage` indexed by
(step in round, env id), so the stored batch does not depend on which actor handled which observation or when.
Two storages alternate: actors fill one while the learner reads the other.

Randomness is owned by (env, step) as in the paper's "defer randomness to the executors": the action key of env e at
its global step s is fold_in(fold_in(run_key, e), s) (`agents.action_keys`). The policy's forward pass always runs
on chunks of a fixed size c (`inference_batch`, padded) with env e in row e mod c of its chunk: a row's bits do not
depend on its batch companions at a fixed shape, but they do depend on the shape (batch 1 and batch 8 differ) and,
at some shapes, on the row's position (XLA CPU's matrix kernels handle the last rows of a batch of 10 or 12 apart
from the first 8). Ready envs that share a row go to separate chunks. Together these make the actions, hence the
whole run, independent of the number of actor threads, EnvPool's batch size, which envs are ready together and
thread timing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from agents import Rollout, action_keys, policy_step
from agents.acting import recurrent_policy_step
from envs.actor_pools import ActorPools
from envs.executor import Executor, StepResults
from systems.common.profile import stage


def rollout_shapes(sync_interval: int, num_envs: int, obs_shape, obs_dtype, action_shape, action_dtype,
                   carry_size: int = 0) -> Rollout:
    """Shapes and dtypes of a round's `Rollout` ([alpha(+1), num_envs, ...]), without allocating the round;
    `carry_size` S > 0: a recurrent policy's round, with each env's state at its start ([num_envs, S])."""
    t, n = sync_interval, num_envs

    def shape(*dims, dtype=np.float32) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(dims, jax.dtypes.canonicalize_dtype(dtype))

    return Rollout(
        obs=shape(t + 1, n, *obs_shape, dtype=obs_dtype), actions=shape(t, n, *action_shape, dtype=action_dtype),
        rewards=shape(t, n), terminations=shape(t, n), truncations=shape(t, n), valid=shape(t, n),
        behaviour_log_probs=shape(t, n), behaviour_values=shape(t, n),
        initial_carry=shape(n, carry_size) if carry_size else None,
    )


class RoundStorage:
    """One round of experience, [alpha(+1), num_envs, ...] numpy arrays, written in place by the actors; with a
    recurrent policy (`carry_size` S > 0) also each env's state entering the round's step 0 ([num_envs, S])."""

    def __init__(self, sync_interval: int, num_envs: int, obs_shape, obs_dtype, action_shape, action_dtype,
                 carry_size: int = 0):
        t, n = sync_interval, num_envs
        self.obs = np.zeros((t + 1, n, *obs_shape), obs_dtype)
        self.actions = np.zeros((t, n, *action_shape), action_dtype)
        self.rewards = np.zeros((t, n), np.float32)
        self.terminations = np.zeros((t, n), np.float32)
        self.truncations = np.zeros((t, n), np.float32)
        self.valid = np.zeros((t, n), np.float32)
        self.log_probs = np.zeros((t, n), np.float32)
        self.values = np.zeros((t, n), np.float32)
        self.initial_carry = np.zeros((n, carry_size), np.float32) if carry_size else None
        self.behaviour_version = -1  # policy version that collected this round, set when the round completes

    def rollout_shapes(self) -> Rollout:
        """Shapes and dtypes of `to_rollout()` (for compiling the update before the first round is complete)."""
        t, n = self.actions.shape[:2]
        carry_size = 0 if self.initial_carry is None else self.initial_carry.shape[1]
        return rollout_shapes(t, n, self.obs.shape[2:], self.obs.dtype, self.actions.shape[2:], self.actions.dtype,
                              carry_size)

    def to_rollout(self) -> Rollout:
        """Device copy of the round, in the agents' time-major `Rollout` layout."""
        return Rollout(
            obs=jnp.asarray(self.obs),
            actions=jnp.asarray(self.actions),
            rewards=jnp.asarray(self.rewards),
            terminations=jnp.asarray(self.terminations),
            truncations=jnp.asarray(self.truncations),
            valid=jnp.asarray(self.valid),
            behaviour_log_probs=jnp.asarray(self.log_probs),
            behaviour_values=jnp.asarray(self.values),
            initial_carry=None if self.initial_carry is None else jnp.asarray(self.initial_carry),
        )


def _step(params, inputs, keys, apply_fn: Callable, recurrent: bool):
    """`policy_step` of `inputs` (observations), or with `recurrent` `recurrent_policy_step` of `inputs`
    (observations, states, first flags), which also returns the new states."""
    if recurrent:
        return recurrent_policy_step(params, *inputs, keys, apply_fn=apply_fn)
    return policy_step(params, inputs, keys, apply_fn=apply_fn)


def make_policy_fn(apply_fn: Callable, recurrent: bool = False, key_hold: int = 1):
    """Jitted (params, obs [C,...], env_ids [C], env_steps [C], run_key) -> (actions, log_probs, values); with
    `recurrent` (`agents.recurrent`) the inputs are (obs, carry [C, S], first [C]) and the new carry [C, S] is a
    fourth output. `key_hold`: `action_keys`' `hold` (gSDE's steps per exploration matrix)."""

    @jax.jit
    def policy(params, inputs, env_ids, env_steps, run_key):
        return _step(params, inputs, action_keys(run_key, env_ids, env_steps, key_hold), apply_fn, recurrent)

    return policy


def chunk_members(rows: np.ndarray) -> list[np.ndarray]:
    """Splits ready envs into forward-pass chunks: `rows[i]` is the chunk row of ready env i; returns, per chunk, the
    indices i it holds, no row twice. The j-th env (in order) of a row goes to chunk j, so there are as many chunks
    as the most crowded row has envs (one when the ready envs' rows differ)."""
    order = np.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    starts = np.flatnonzero(np.r_[True, sorted_rows[1:] != sorted_rows[:-1]])
    sizes = np.diff(np.r_[starts, len(rows)])
    rank = np.empty(len(rows), np.int64)
    rank[order] = np.arange(len(rows)) - np.repeat(starts, sizes)
    return [np.flatnonzero(rank == j) for j in range(int(sizes.max(initial=0)))]


class RoundCollector:
    """The actors' side of HTS-RL: turns ready observations into actions and fills the round storages.

    `on_round_complete(storage, last)` is called by the actor that finishes a round (all envs did alpha steps): it
    hands the storage on and returns `(version, params)` for the next round (ignored when `last`), or None to stop.
    """

    def __init__(
        self,
        executor: Executor | ActorPools,
        *,
        policy_fn,
        run_key: jax.Array,
        sync_interval: int,
        inference_batch: int,
        first_round: int,
        total_rounds: int,
        params: Any,
        version: int,
        on_round_complete: Callable[[RoundStorage, bool], tuple[int, Any] | None],
        action_shape: tuple,
        action_dtype,
        env_id_offset: int = 0,
        carry_size: int = 0,
    ):
        spec = executor.spec
        n = executor.num_envs
        self.executor = executor
        self.num_envs = n
        self.sync_interval = sync_interval
        self.inference_batch = inference_batch
        self.total_rounds = total_rounds
        self._policy_fn = policy_fn
        self._run_key = run_key
        self._on_round_complete = on_round_complete
        self._storages = [
            RoundStorage(sync_interval, n, spec.obs_shape, spec.obs_dtype, action_shape, action_dtype, carry_size)
            for _ in range(2)
        ]
        self._lock = threading.Lock()
        self._round = first_round
        self._params, self._version = params, version
        self._step_in_round = np.zeros(n, np.int64)  # index of the stored obs whose action is in flight
        self._pending = np.zeros(n, bool)  # an action of this env is in flight
        self._prev_done = np.zeros(n, bool)  # the env's last step ended an episode: its next action is ignored
        self._held: list[tuple[int, np.ndarray]] = []
        self._pad_obs = np.zeros((inference_batch, *spec.obs_shape), spec.obs_dtype)
        self._thread_local = threading.local()  # each actor thread's chunk buffer (`_chunk_buffer`)
        self._env_id_offset = env_id_offset  # the global id of local env 0: rows follow global ids
        # A recurrent policy's state belongs to its env (`agents.recurrent`): kept per env id whichever actor steps
        # it, zeroed where an observation opens an episode (the first of the run, or the one after a reset step).
        self._carry = np.zeros((n, carry_size), np.float32) if carry_size else None
        self._first = np.ones(n, bool)
        self.finished = threading.Event()

    def rollout_shapes(self) -> Rollout:
        """Shapes and dtypes of every round's `storage.to_rollout()`."""
        return self._storages[0].rollout_shapes()

    def process(self, results: StepResults) -> None:
        """Consumes one batch of ready observations: stores rewards, picks actions, sends them."""
        alpha = self.sync_interval
        env_ids = results.env_ids  # distinct: an env has at most one step in flight
        with self._lock:
            round_index = self._round
            storage = self._storages[round_index % 2]
            params, version = self._params, self._version
            # The envs whose action was in flight: store the step's reward and flags at the step it acted on.
            stepped = self._pending[env_ids]
            step = self._step_in_round[env_ids]
            done_ids, t = env_ids[stepped], step[stepped]
            storage.rewards[t, done_ids] = results.rewards[stepped]
            storage.terminations[t, done_ids] = results.terminations[stepped]
            storage.truncations[t, done_ids] = results.truncations[stepped]
            self._prev_done[done_ids] = (results.terminations[stepped] != 0) | (results.truncations[stepped] != 0)
            index = np.where(stepped, step + 1, 0)  # 0: the env's first observation (after start())
            self._pending[env_ids] = False
            # Bootstrap observation of this round and first observation of the next: hold the env.
            held = index == alpha
            round_complete = False
            if held.any():
                held_rows = np.flatnonzero(held)
                storage.obs[alpha, env_ids[held_rows]] = results.obs[held_rows]
                self._held.extend((int(env_ids[row]), results.obs[row]) for row in held_rows)
                round_complete = len(self._held) == self.num_envs
                act_rows = np.flatnonzero(~held)
            else:
                act_rows = None  # every row acts
            ids = env_ids if act_rows is None else env_ids[act_rows]
            act_index = index if act_rows is None else index[act_rows]
            self._step_in_round[ids] = act_index
            # Mark before sending: another actor may receive the result before this one returns.
            self._pending[ids] = True
        if len(ids):
            act_steps = (round_index * alpha + act_index).astype(np.int32)
            self._act(storage, params, results, act_rows, ids, act_steps)
        if round_complete:
            storage.behaviour_version = version
            self._advance_round(storage)

    def _act(self, storage, params, results, rows, env_ids, env_steps) -> None:
        """Actions for rows `rows` of `results` (None: all of them, without a copy), stored and sent."""
        obs = results.obs if rows is None else results.obs[rows]
        index = env_steps % self.sync_interval
        with stage("inference"):
            if self._carry is None:
                actions, log_probs, values = self._forward(params, obs, env_ids, env_steps)
            else:
                actions, log_probs, values = self._recurrent_forward(storage, params, obs, env_ids, env_steps, index)
        storage.obs[index, env_ids] = obs
        storage.actions[index, env_ids] = actions
        storage.log_probs[index, env_ids] = log_probs
        storage.values[index, env_ids] = values
        storage.valid[index, env_ids] = (~self._prev_done[env_ids]).astype(np.float32)
        with stage("env"):
            self.executor.send(actions, env_ids)

    def _recurrent_forward(self, storage, params, obs, env_ids, env_steps, index):
        """`_forward` with each env's own state: zeroed where its observation opens an episode, stored with the
        round at step 0, and the new state kept for the env's next step."""
        first = self._first[env_ids]
        carry = np.where(first[:, None], np.float32(0), self._carry[env_ids])
        opening = index == 0
        storage.initial_carry[env_ids[opening]] = carry[opening]
        actions, log_probs, values, carry = self._forward(
            params, (obs, carry, first.astype(np.float32)), env_ids, env_steps)
        self._carry[env_ids] = carry
        self._first[env_ids] = self._prev_done[env_ids]  # this observation was final: the next opens an episode
        return actions, log_probs, values

    def _forward(self, params, inputs, env_ids, env_steps):
        """Policy on fixed-size, padded chunks, env e in row e mod c of its chunk (see module doc). `inputs`: the
        observations [n, ...], or a recurrent policy's (observations, states, first flags)."""
        rows = (env_ids + self._env_id_offset) % self.inference_batch
        outs = None
        for members in chunk_members(rows):
            chunk_ids = np.zeros(self.inference_batch, np.int32)
            chunk_steps = np.zeros(self.inference_batch, env_steps.dtype)
            at = rows[members]
            chunk_ids[at], chunk_steps[at] = env_ids[members], env_steps[members]
            chunk_inputs = self._padded(inputs, members, at)
            out = self._policy_fn(params, chunk_inputs, chunk_ids, chunk_steps, self._run_key)
            # One fetch for the three outputs: their device-to-host copies start together (a GPU's round trip).
            out = jax.device_get(out)
            if outs is None:
                outs = [np.empty((len(env_ids), *x.shape[1:]), x.dtype) for x in out]
            for whole, part in zip(outs, out, strict=True):
                whole[members] = part[at]
        return outs

    def _padded(self, inputs, members, at):
        """One chunk's inputs: rows `members` of `inputs` at chunk rows `at`, zeros elsewhere (first flags: 1).

        A chunk without padding is one gather of the observations (or `inputs` itself when it already is the chunk,
        row for row); a padded one is this thread's own chunk buffer, whose rows the last chunk filled and this one
        pads are zeroed again (the buffer is free: `_forward` fetched the last pass's outputs). Its values are the
        same either way, so the forward pass's bits are."""
        if not isinstance(inputs, tuple):
            if len(members) < self.inference_batch:
                chunk_obs, filled = self._chunk_buffer()
                stale = filled.copy()
                stale[at] = False
                chunk_obs[stale] = 0
                chunk_obs[at] = inputs[members]
                filled[:] = False
                filled[at] = True
                return chunk_obs
            source = np.empty(self.inference_batch, np.int64)
            source[at] = members  # chunk row r holds inputs row source[r]
            if len(inputs) == self.inference_batch and (source == np.arange(len(inputs))).all():
                return inputs
            return inputs[source]
        obs, carry, first = inputs
        chunk = (self._pad_obs.copy(), np.zeros((self.inference_batch, carry.shape[1]), np.float32),
                 np.ones(self.inference_batch, np.float32))
        for whole, part in zip(chunk, (obs, carry, first), strict=True):
            whole[at] = part[members]
        return chunk

    def _chunk_buffer(self) -> tuple[np.ndarray, np.ndarray]:
        """This actor thread's padded observation chunk and which of its rows hold an observation (made zero)."""
        if not hasattr(self._thread_local, "chunk"):
            self._thread_local.chunk = (np.zeros_like(self._pad_obs), np.zeros(self.inference_batch, bool))
        return self._thread_local.chunk

    def _advance_round(self, storage: RoundStorage) -> None:
        next_round = self._round + 1
        last = next_round >= self.total_rounds
        result = self._on_round_complete(storage, last)
        if last or result is None:
            self.finished.set()
            return
        version, params = result
        with self._lock:
            held, self._held = self._held, []
            self._round = next_round
            self._params, self._version = params, version
        # The held observations open the new round: hand them back to the actors, ready now.
        self.executor.hand_back(np.asarray([h[0] for h in held], np.int32), np.stack([h[1] for h in held]))


def make_sharded_policy_fn(
    apply_fn: Callable, devices: list | None, envs_per_shard: int, env_id_offset: int = 0, num_shards: int = 0,
    recurrent: bool = False, key_hold: int = 1,
):
    """Policy for lock-step systems whose envs are split over devices (data-parallel workers, gossip learners).

    Returns `policy(params, obs [D*E, ...], env_ids [D*E], env_steps [D*E], run_key)`, the same contract as
    `make_policy_fn`, where `params` has a leading device axis (pmap-replicated for data-parallel, one set per
    learner for gossip) and the batch holds every env exactly once (lock-step: each call sees all envs). Env
    `e` runs on device `e // E` with that device's parameters, on a fixed [E] batch, so its actions do not depend
    on how many processes or devices share the work. Action keys use the global env id `env_id_offset + e`.
    `devices=None` (multi-process jobs) maps over this process's `num_shards` local devices. `recurrent`: the
    contract of `make_policy_fn(recurrent=True)` (inputs `(obs, carry, first)`, the new states a fourth output);
    `key_hold` that of `make_policy_fn`.
    """
    num_shards = len(devices) if devices is not None else num_shards
    total = num_shards * envs_per_shard

    def shard_policy(params, inputs, env_ids, env_steps, run_key):
        return _step(params, inputs, action_keys(run_key, env_ids, env_steps, key_hold), apply_fn, recurrent)

    sharded = jax.pmap(shard_policy, in_axes=(0, 0, 0, 0, None), devices=devices)

    def policy(params, inputs, env_ids, env_steps, run_key):
        env_ids = np.asarray(env_ids)
        order = np.argsort(env_ids, kind="stable")
        if len(env_ids) != total or not np.array_equal(env_ids[order], np.arange(total)):
            raise RuntimeError(f"lock-step policy needs every env 0..{total - 1} exactly once, got {len(env_ids)}")
        inverse = np.empty_like(order)
        inverse[order] = np.arange(total)

        def by_shard(x):
            x = np.asarray(x)[order]
            return x.reshape(num_shards, envs_per_shard, *x.shape[1:])

        ids = (env_ids[order] + env_id_offset).astype(np.int32).reshape(num_shards, envs_per_shard)
        outs = sharded(params, jax.tree.map(by_shard, inputs), ids, by_shard(env_steps), run_key)
        return tuple(np.asarray(x).reshape(total, *x.shape[2:])[inverse] for x in outs)

    return policy


def shard_rollout(storage: RoundStorage, num_shards: int) -> Rollout:
    """A round's storage [T(+1), D*E, ...] as a Rollout with a leading device axis [D, T(+1), E, ...] (numpy)."""

    def split(x):
        t, b = x.shape[:2]
        x = x.reshape(t, num_shards, b // num_shards, *x.shape[2:])
        return np.ascontiguousarray(np.moveaxis(x, 1, 0))

    s = storage
    carry = None if s.initial_carry is None else np.ascontiguousarray(
        s.initial_carry.reshape(num_shards, -1, s.initial_carry.shape[1]))  # [D, E, S]
    return Rollout(
        obs=split(s.obs), actions=split(s.actions), rewards=split(s.rewards), terminations=split(s.terminations),
        truncations=split(s.truncations), valid=split(s.valid), behaviour_log_probs=split(s.log_probs),
        behaviour_values=split(s.values), initial_carry=carry,
    )


def sharded_shapes(rollout_shapes: Rollout, num_shards: int) -> Rollout:
    """`rollout_shapes()` [T(+1), D*E, ...] as the shapes `shard_rollout` returns, [D, T(+1), E, ...]."""

    def split(s: jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
        t, b = s.shape[:2]
        return jax.ShapeDtypeStruct((num_shards, t, b // num_shards, *s.shape[2:]), s.dtype)

    carry = rollout_shapes.initial_carry  # [D * E, S], env-major
    return jax.tree.map(split, rollout_shapes._replace(initial_carry=None))._replace(
        initial_carry=None if carry is None else jax.ShapeDtypeStruct(
            (num_shards, carry.shape[0] // num_shards, carry.shape[1]), carry.dtype))


def stack_host(tree: Any, n: int) -> Any:
    """`n` host copies of every leaf along a new leading axis: the input of a pmapped function whose replicas (or
    learners) start from the same values (pmap places row i on its device i)."""
    return jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (n, *np.shape(x))).copy(), tree)


def place_on_axis(stacked: Any, devices: list | None, axis_name: str) -> Any:
    """A host tree with a leading device axis (`stack_host`), placed on `devices` exactly as a pmap over
    `axis_name` places its outputs.

    Feed this, not the host arrays, to the first call of a pmapped function that is later fed its own outputs: pmap
    keys its compiled programs on the arguments' shardings, and an uncommitted host array (or a sharding over
    another axis name) would compile the whole program a second time at the second call (BA3C's update and policy
    were each compiled twice)."""
    return jax.pmap(lambda tree: tree, axis_name=axis_name, devices=devices)(stacked)


def replica(tree: Any, index: int = 0) -> Any:
    """Host copy of one local replica (row `index`) of a pmap output, read from the device that holds it.

    Reads the shard directly: indexing (`x[0]`) would launch a JAX computation, which in a multi-process job is a
    program every process must join."""

    def row(x):
        if isinstance(x, jax.Array):
            shard = sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)[index]
            return np.asarray(shard.data).reshape(x.shape[1:])
        return np.asarray(x)[index]

    return jax.tree.map(row, tree)
