"""The recurrent actor-critic (`agents.recurrent`): the learner's unroll is the actors' step-by-step recurrence,
states reset where an episode opens, PPO's minibatches hold whole env sequences, and the updates train it."""

from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agents import Rollout, TrainState, a2c, ppo
from agents.batching import FlatBatch, minibatches, prepare_batch, sequence_chunks, sequence_first
from agents.networks import make_network
from agents.recurrent import RecurrentActorCritic, init_inputs, recurrent_network, sequence_apply, unroll
from agents.types import SequenceObs

_SETTINGS = dict(deadline=None, derandomize=True)


def _network(cell: str, continuous: bool = False, rnn_size: int = 8, rnn_input: str = "auto") -> RecurrentActorCritic:
    return recurrent_network(make_network((3,), 2, continuous, hidden_sizes=(16,)), cell, rnn_size, rnn_input)


def _params(network: RecurrentActorCritic, seed: int = 0):
    return network.init(jax.random.key(seed), *init_inputs(network, jnp.zeros((1, 3))))


def _stepwise(network, params, sequences: SequenceObs):
    """The actors' view: one `__call__` per step (jitted, as the actors' policy is), the state carried by hand (and
    kept as it enters each step)."""
    step = jax.jit(network.apply)
    carry, logits, values, states = sequences.carry, [], [], []
    for t in range(sequences.obs.shape[0]):
        states.append(carry)
        out, value, carry = step(params, sequences.obs[t], carry, sequences.first[t])
        logits.append(out)
        values.append(value)
    return jnp.concatenate(logits), jnp.concatenate(values), jnp.stack(states)


def _sequences(network, rng, num_steps: int, num_envs: int, first_rate: float = 0.3) -> SequenceObs:
    return SequenceObs(
        obs=jnp.asarray(rng.normal(size=(num_steps, num_envs, 3)), jnp.float32),
        carry=jnp.asarray(rng.normal(size=(num_envs, network.carry_size)), jnp.float32),
        first=jnp.asarray(rng.random((num_steps, num_envs)) < first_rate, jnp.float32))


@pytest.mark.slow
@settings(max_examples=12, **_SETTINGS)
@given(cell=st.sampled_from(["lstm", "gru"]), rnn_input=st.sampled_from(["obs", "torso"]),
       num_steps=st.integers(1, 6), num_envs=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_unroll_is_the_stepwise_recurrence(cell, rnn_input, num_steps, num_envs, seed):
    network = _network(cell, rnn_input=rnn_input)
    params = _params(network, seed % 3)
    sequences = _sequences(network, np.random.default_rng(seed), num_steps, num_envs)
    logits, values, states = unroll(network, params, sequences)
    chex.assert_shape(logits, (num_steps * num_envs, 2))
    chex.assert_shape(states, (num_steps, num_envs, network.carry_size))
    expected_logits, expected_values, expected_states = _stepwise(network, params, sequences)
    np.testing.assert_allclose(logits, expected_logits, atol=1e-5)
    np.testing.assert_allclose(values, expected_values, atol=1e-5)
    np.testing.assert_allclose(states, expected_states, atol=1e-5)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_an_opening_observation_forgets_the_state_it_is_given(cell):
    network = _network(cell)
    params = _params(network)
    obs = jnp.ones((2, 3))
    states = jnp.asarray(np.random.default_rng(1).normal(size=(2, network.carry_size)), jnp.float32)
    opened = network.apply(params, obs, states, jnp.ones(2))
    fresh = network.apply(params, obs, jnp.zeros_like(states), jnp.zeros(2))
    carried = network.apply(params, obs, states, jnp.zeros(2))
    jax.tree.map(np.testing.assert_array_equal, opened, fresh)
    assert not np.allclose(carried[0], fresh[0])  # and a carried state does change the policy


@pytest.mark.parametrize("rnn_input", ["obs", "torso"])
def test_an_mlp_task_keeps_the_critics_memory_apart_from_the_actors(rnn_input):
    """Two paths on an MLP task: the value's gradient never reaches the actor's torso or cell."""
    network = _network("lstm", rnn_input=rnn_input)
    params = _params(network)
    sequences = _sequences(network, np.random.default_rng(3), 4, 2)
    grads = jax.grad(lambda p: unroll(network, p, sequences)[1].sum())(params)["params"]
    assert set(grads) >= {"encoders_0", "encoders_1", "cores_0", "cores_1"}
    for name in ("encoders_0", "cores_0", "policy_head"):
        assert all(not np.any(g) for g in jax.tree.leaves(grads[name])), name
    assert any(np.any(g) for g in jax.tree.leaves(grads["cores_1"]))


def test_the_carry_holds_each_paths_cell_state():
    assert _network("lstm", rnn_size=8).carry_size == 2 * 2 * 8  # two paths, (c, h) each
    assert _network("gru", rnn_size=8).carry_size == 2 * 8
    cnn = recurrent_network(make_network((84, 84, 4), 4, False), "gru", 16)
    assert cnn.carry_size == 16  # one shared path on an image
    with pytest.raises(ValueError, match="cell must be"):
        recurrent_network(make_network((3,), 2, False), "transformer", 8)


@pytest.mark.parametrize("rnn_input, cell_reads", [("auto", 3), ("obs", 3), ("torso", 16)])
def test_on_vectors_the_core_reads_the_observation_unless_asked_for_the_torso(rnn_input, cell_reads):
    """sb3-contrib's layout (LSTM, then the MLP) by default on vectors: the cell's input kernels take the 3
    observation features, and the torso's first layer takes the cell's 8 outputs; `torso`: the 16 MLP features."""
    params = _params(_network("lstm", rnn_input=rnn_input))["params"]
    for path in (0, 1):
        core = params[f"cores_{path}"]  # flax's LSTM: input kernels ii, if, ig, io; hidden kernels hi, ...
        assert {core[gate]["kernel"].shape[0] for gate in ("ii", "if", "ig", "io")} == {cell_reads}
        first_layer = jax.tree.leaves(params[f"encoders_{path}"])
        assert {leaf.shape[0] for leaf in first_layer if leaf.ndim == 2} == ({8} if cell_reads == 3 else {3})


def test_a_cnn_core_reads_the_cnns_features():
    image = make_network((84, 84, 4), 4, False)
    assert not recurrent_network(image, "lstm", 16).reads_obs
    with pytest.raises(ValueError, match="--rnn_input=obs needs vector observations"):
        recurrent_network(image, "lstm", 16, "obs")


def test_sequence_first_marks_the_step_after_each_reset_step():
    valid = jnp.asarray([[1, 0], [0, 1], [1, 1]], jnp.float32)  # [T=3, B=2]: a reset step at (0, 1) and (1, 0)
    np.testing.assert_array_equal(sequence_first(valid), [[0, 0], [0, 1], [1, 0], [0, 0]])


@pytest.mark.slow
@settings(max_examples=20, **_SETTINGS)
@given(num_steps=st.integers(1, 5), per_minibatch=st.integers(1, 3), num_minibatches=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_recurrent_minibatches_are_whole_env_sequences(num_steps, per_minibatch, num_minibatches, seed):
    """Every minibatch holds B / M envs for all T steps, and its flat rows (time-major) belong to those envs."""
    num_envs = per_minibatch * num_minibatches
    rows = num_steps * num_envs
    row_ids = jnp.arange(rows, dtype=jnp.float32)  # row t * B + b
    ids = row_ids.reshape(num_steps, num_envs)
    batch = FlatBatch(
        obs=SequenceObs(obs=ids[..., None], carry=jnp.arange(num_envs, dtype=jnp.float32)[:, None], first=ids),
        actions=row_ids, behaviour_log_probs=row_ids, advantages=row_ids, returns=row_ids, valid=row_ids,
        behaviour_values=row_ids)
    permutation = jax.random.permutation(jax.random.key(seed), num_envs)
    split = minibatches(batch, permutation, num_minibatches)
    for m in range(num_minibatches):
        envs = np.asarray(permutation[m * per_minibatch:(m + 1) * per_minibatch])
        expected_rows = (np.arange(num_steps)[:, None] * num_envs + envs[None, :]).reshape(-1)  # t * B' + j
        for name in ("actions", "advantages", "returns", "valid", "behaviour_values", "behaviour_log_probs"):
            np.testing.assert_array_equal(getattr(split, name)[m], expected_rows, err_msg=name)
        np.testing.assert_array_equal(split.obs.obs[m][..., 0], expected_rows.reshape(num_steps, per_minibatch))
        np.testing.assert_array_equal(split.obs.first[m], expected_rows.reshape(num_steps, per_minibatch))
        np.testing.assert_array_equal(split.obs.carry[m][:, 0], envs)


def _recurrent_rollout(network, params, rng, num_steps: int, num_envs: int) -> Rollout:
    """A round as the actors write it: each env's state carried step by step, reset after each reset step
    (`valid == 0`), the round-start state stored; actions sampled from the carried policy."""
    obs = jnp.asarray(rng.normal(size=(num_steps + 1, num_envs, 3)), jnp.float32)
    valid = np.asarray(rng.random((num_steps, num_envs)) > 0.25, np.float32)
    first = np.zeros((num_steps, num_envs), np.float32)
    for t in range(1, num_steps):
        first[t] = valid[t - 1] == 0  # obs[t - 1] was an episode's last: the env reset on its step
    initial = jnp.asarray(rng.normal(size=(num_envs, network.carry_size)), jnp.float32)

    @jax.jit
    def act(obs_t, carry, first_t, key):
        logits, value, carry = network.apply(params, obs_t, carry, first_t)
        action = jax.random.categorical(key, logits)
        return action, jax.nn.log_softmax(logits)[jnp.arange(num_envs), action], value, carry

    carry, actions, log_probs, values = initial, [], [], []
    for t in range(num_steps):
        action, log_prob, value, carry = act(obs[t], carry, first[t], jax.random.key(t))
        actions.append(action)
        log_probs.append(log_prob)
        values.append(value)
    zeros = jnp.zeros((num_steps, num_envs), jnp.float32)
    return Rollout(obs=obs, actions=jnp.stack(actions), rewards=jnp.asarray(rng.normal(size=zeros.shape), jnp.float32),
                   terminations=1.0 - valid, truncations=zeros, valid=valid, behaviour_log_probs=jnp.stack(log_probs),
                   behaviour_values=jnp.stack(values), initial_carry=initial)


@pytest.mark.slow
@settings(max_examples=8, **_SETTINGS)
@given(length=st.integers(1, 4), num_chunks=st.integers(1, 3), num_envs=st.integers(1, 3),
       cell=st.sampled_from(["lstm", "gru"]))
@example(length=6, num_chunks=1, num_envs=3, cell="lstm")  # whole sequences
def test_the_learner_rebuilds_the_actors_policy_from_the_stored_round_start_state(length, num_chunks, num_envs, cell):
    """Under the behaviour parameters, the re-run sequences, whole or cut in chunks that start from the states the
    behaviour parameters pass through, give the actors' log-probabilities and values (so PPO's first ratio is one),
    row for row, and the bootstrap value is the state carried through the whole round."""
    network = _network(cell)
    params = _params(network)
    rollout = _recurrent_rollout(network, params, np.random.default_rng(length * 10 + num_envs), length * num_chunks,
                                 num_envs)
    apply_fn = sequence_apply(network)
    batch, _ = prepare_batch(params, rollout, apply_fn=apply_fn, gamma=0.99, gae_lambda=0.95, num_chunks=num_chunks)
    assert isinstance(batch.obs, SequenceObs) and batch.obs.first.shape == (length, num_chunks * num_envs)
    logits, values = jax.jit(apply_fn)(params, batch.obs)
    log_probs = jax.nn.log_softmax(logits)[jnp.arange(batch.actions.shape[0]), batch.actions]
    np.testing.assert_allclose(log_probs, batch.behaviour_log_probs, atol=1e-5)
    np.testing.assert_allclose(values, batch.behaviour_values, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_the_updates_train_a_recurrent_policy(algo):
    network = _network("gru")
    params = _params(network)
    rollout = _recurrent_rollout(network, params, np.random.default_rng(5), 6, 4)
    optimizer = optax.adam(1e-2)
    state = TrainState(params=params, opt_state=optimizer.init(params), key=jax.random.key(0),
                       update_step=jnp.asarray(0, jnp.int32))
    if algo == "ppo":
        config = ppo.PPOConfig(num_epochs=2, num_minibatches=2)
        update = ppo.ppo_update
    else:
        config = a2c.A2CConfig()
        update = a2c.a2c_update
    new_state, metrics = jax.jit(lambda s, r: update(s, params, r, apply_fn=sequence_apply(network),
                                                     optimizer=optimizer, config=config))(state, rollout)
    assert int(new_state.update_step) == 1 and all(np.isfinite(v) for v in jax.tree.leaves(metrics))
    moved = jax.tree.map(lambda a, b: bool(np.any(a != b)), new_state.params["params"], params["params"])
    assert moved["cores_0"] and moved["cores_1"], moved  # both paths' memory learned
    if algo == "ppo":  # 3 minibatches of 4 envs: each env's 6 steps in 3 chunks of 2
        new_state, metrics = update(state, params, rollout, apply_fn=sequence_apply(network), optimizer=optimizer,
                                    config=dataclasses.replace(config, num_minibatches=3))
        assert all(np.isfinite(v) for v in jax.tree.leaves(metrics))


@settings(max_examples=100, **_SETTINGS)
@given(num_steps=st.integers(1, 64), num_envs=st.integers(1, 64), num_minibatches=st.integers(1, 64))
def test_a_round_cuts_into_as_few_chunks_as_its_minibatches_need(num_steps, num_envs, num_minibatches):
    if (num_steps * num_envs) % num_minibatches:
        return  # PPO refuses such a round
    k = sequence_chunks(num_envs, num_minibatches)
    assert num_steps % k == 0 and (k * num_envs) % num_minibatches == 0
    assert all((j * num_envs) % num_minibatches for j in range(1, k))
