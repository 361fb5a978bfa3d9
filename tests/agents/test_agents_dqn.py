"""Tests for agents.dqn (DQN, Mnih et al. 2015; Double DQN, van Hasselt et al. 2016) and the Q network."""

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agents.dqn import DQNConfig, DQNState, dqn_act, dqn_init, dqn_td_errors, dqn_update
from agents.offpolicy_networks import QNetwork

GAMMA = 0.5


def _linear_apply(params, obs):
    """Q(s, .) = s @ W: with one-hot observations each row of W is the Q vector of one state."""
    return obs @ params["w"]  # [B, A]


# Three one-hot states; state 0 is the start state, states 1 and 2 the successors.
ONLINE = {"w": jnp.array([[1.0, 2.0, 0.0], [1.0, 5.0, 2.0], [0.0, 0.0, 3.0]])}
TARGET = {"w": jnp.array([[0.0, 0.0, 0.0], [4.0, 0.0, 3.0], [1.0, 1.0, 2.0]])}


def _batch():
    eye = jnp.eye(3)
    return {
        "obs": eye[jnp.array([0, 0, 0])],
        "action": jnp.array([0, 1, 2], jnp.int32),
        "reward": jnp.array([1.0, 0.0, -1.0]),
        "next_obs": eye[jnp.array([1, 2, 1])],
        "done": jnp.array([0.0, 0.0, 1.0]),
    }


def _expected_td(double):
    q_sa = np.array([1.0, 2.0, 0.0])
    if double:
        # argmax online(s1) = 1 -> target 0.0; argmax online(s2) = 2 -> target 2.0 (van Hasselt et al. Eq. 4).
        bootstrap = np.array([0.0, 2.0, 0.0])
    else:
        # max target(s1) = 4, max target(s2) = 2.
        bootstrap = np.array([4.0, 2.0, 4.0])
    reward = np.array([1.0, 0.0, -1.0])
    not_done = np.array([1.0, 1.0, 0.0])
    return reward + GAMMA * not_done * bootstrap - q_sa


class DQNTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_targets_are_hand_computed_and_dqn_differs_from_double(self):
        tds = {}
        for double in (False, True):
            config = DQNConfig(gamma=GAMMA, double=double)
            fn = self.variant(functools.partial(dqn_td_errors, apply_fn=_linear_apply, config=config))
            td, q_taken = fn(ONLINE, TARGET, _batch())
            np.testing.assert_allclose(td, _expected_td(double), rtol=1e-6)
            np.testing.assert_allclose(q_taken, [1.0, 2.0, 0.0])
            tds[double] = np.asarray(td)
        assert not np.allclose(tds[False], tds[True])
        # The terminated row ignores s' entirely: its target is the reward under both rules.
        assert tds[False][2] == tds[True][2] == -1.0

    @chex.variants(with_jit=True, without_jit=True)
    def test_update_priorities_loss_and_gradient(self):
        config = DQNConfig(gamma=GAMMA, double=True, loss="huber", huber_delta=1.0, target_update_period=100)
        optimizer = optax.sgd(1.0)
        update = self.variant(functools.partial(dqn_update, apply_fn=_linear_apply, optimizer=optimizer, config=config))
        state = dqn_init(ONLINE, optimizer=optimizer)._replace(target_params=TARGET)
        weights = jnp.array([1.0, 0.5, 2.0])
        new_state, metrics, priorities = update(state, _batch(), weights)

        td = _expected_td(True)  # [-1.5, 1.0, -1.0]
        np.testing.assert_allclose(priorities, np.abs(td), rtol=1e-6)
        # Huber with delta 1: 0.5 x^2 for |x| <= 1, |x| - 0.5 beyond.
        huber = np.where(np.abs(td) <= 1.0, 0.5 * td**2, np.abs(td) - 0.5)
        np.testing.assert_allclose(metrics["loss"], np.mean(np.asarray(weights) * huber), rtol=1e-6)
        # Gradient of the weighted loss w.r.t. W[0, a_i] is -w_i clip(td_i, -1, 1) / B (the target has none).
        expected_w = np.asarray(ONLINE["w"]).copy()
        for i, a in enumerate([0, 1, 2]):
            expected_w[0, a] += float(weights[i]) * np.clip(td[i], -1.0, 1.0) / 3.0
        np.testing.assert_allclose(new_state.params["w"], expected_w, rtol=1e-6)
        assert int(new_state.step) == 1
        assert float(metrics["target_updated"]) == 0.0
        chex.assert_trees_all_equal(new_state.target_params, TARGET)

    def test_importance_weights_scale_loss_and_gradient(self):
        config = DQNConfig(gamma=GAMMA, loss="mse")
        optimizer = optax.sgd(1.0)
        update = jax.jit(functools.partial(dqn_update, apply_fn=_linear_apply, optimizer=optimizer, config=config))
        state = dqn_init(ONLINE, optimizer=optimizer)._replace(target_params=TARGET)
        weights = jnp.array([0.3, 1.0, 0.7])
        one, metrics_one, prio_one = update(state, _batch(), weights)
        two, metrics_two, prio_two = update(state, _batch(), 2.0 * weights)
        np.testing.assert_allclose(metrics_two["loss"], 2.0 * metrics_one["loss"], rtol=1e-6)
        np.testing.assert_allclose(metrics_two["grad_norm"], 2.0 * metrics_one["grad_norm"], rtol=1e-6)
        step_one = one.params["w"] - ONLINE["w"]
        step_two = two.params["w"] - ONLINE["w"]
        np.testing.assert_allclose(step_two, 2.0 * step_one, rtol=1e-5, atol=1e-7)
        # Priorities are |td| and do not depend on the weights.
        np.testing.assert_allclose(prio_one, prio_two)
        np.testing.assert_allclose(prio_one, np.abs(_expected_td(True)), rtol=1e-6)
        # MSE: loss = mean(w 0.5 td^2).
        np.testing.assert_allclose(
            metrics_one["loss"], np.mean(np.asarray(weights) * 0.5 * _expected_td(True) ** 2), rtol=1e-6
        )

    def test_hard_target_copy_happens_exactly_at_the_period(self):
        period = 3
        config = DQNConfig(gamma=GAMMA, target_update_period=period)
        optimizer = optax.sgd(0.1)
        update = jax.jit(functools.partial(dqn_update, apply_fn=_linear_apply, optimizer=optimizer, config=config))
        state = dqn_init(ONLINE, optimizer=optimizer)._replace(target_params=TARGET)
        weights = jnp.ones((3,))
        for step in range(1, 2 * period + 1):
            previous_target = state.target_params
            state, metrics, _ = update(state, _batch(), weights)
            assert int(state.step) == step
            if step % period == 0:
                chex.assert_trees_all_equal(state.target_params, state.params)
                assert float(metrics["target_updated"]) == 1.0
            else:
                chex.assert_trees_all_equal(state.target_params, previous_target)
                assert float(metrics["target_updated"]) == 0.0
                with pytest.raises(AssertionError):
                    chex.assert_trees_all_close(state.target_params, state.params)

    def test_polyak_target(self):
        tau = 0.25
        config = DQNConfig(gamma=GAMMA, tau=tau)
        optimizer = optax.sgd(0.1)
        state = DQNState(ONLINE, TARGET, optimizer.init(ONLINE), jnp.zeros((), jnp.int32))
        new_state, _, _ = dqn_update(
            state, _batch(), jnp.ones((3,)), apply_fn=_linear_apply, optimizer=optimizer, config=config
        )
        expected = tau * new_state.params["w"] + (1.0 - tau) * TARGET["w"]
        np.testing.assert_allclose(new_state.target_params["w"], expected, rtol=1e-6)

    def test_config_validation(self):
        with pytest.raises(ValueError, match="Unknown loss"):
            DQNConfig(loss="l1")
        with pytest.raises(ValueError, match="target_update_period"):
            DQNConfig(target_update_period=0)
        with pytest.raises(dataclasses.FrozenInstanceError):
            DQNConfig().gamma = 0.1  # type: ignore[misc]


def _second_batch():
    eye = jnp.eye(3)
    return {
        "obs": eye[jnp.array([1, 2, 0])],
        "action": jnp.array([2, 0, 1], jnp.int32),
        "reward": jnp.array([-0.5, 2.0, 0.25]),
        "next_obs": eye[jnp.array([0, 1, 2])],
        "done": jnp.array([1.0, 0.0, 0.0]),
    }


AXIS = "learner"


def test_parallel_learners_average_gradients_like_one_update_on_the_concatenated_batch():
    # PAL (seed 003, Sec. V-B): N learners, each on its own batch, one step with the averaged gradient.
    config = DQNConfig(gamma=GAMMA, double=True, loss="huber", target_update_period=100)
    optimizer = optax.sgd(1.0)  # not Adam: its first step is scale-invariant
    state = dqn_init(ONLINE, optimizer=optimizer)._replace(target_params=TARGET)
    batches = [_batch(), _second_batch()]
    weights = [jnp.array([1.0, 0.5, 2.0]), jnp.array([0.25, 1.5, 0.75])]
    stacked_batch = jax.tree.map(lambda *x: jnp.stack(x), *batches)
    concat_batch = jax.tree.map(lambda *x: jnp.concatenate(x), *batches)

    parallel = jax.jit(
        jax.vmap(
            functools.partial(dqn_update, apply_fn=_linear_apply, optimizer=optimizer, config=config, axis_name=AXIS),
            in_axes=(None, 0, 0),
            out_axes=(None, None, 0),
            axis_name=AXIS,
        )
    )
    single = jax.jit(functools.partial(dqn_update, apply_fn=_linear_apply, optimizer=optimizer, config=config))
    par_state, par_metrics, par_priorities = parallel(state, stacked_batch, jnp.stack(weights))
    one_state, one_metrics, one_priorities = single(state, concat_batch, jnp.concatenate(weights))

    chex.assert_trees_all_equal_shapes(par_state, state)  # replicated, no learner axis
    chex.assert_trees_all_close(par_state, one_state, rtol=1e-5)
    chex.assert_trees_all_close(par_metrics, one_metrics, rtol=1e-5)
    chex.assert_shape(par_priorities, (2, 3))
    np.testing.assert_allclose(par_priorities, np.reshape(one_priorities, (2, 3)), rtol=1e-6)
    # Each learner's priorities are its own |td|, and the step is not the one of the first batch alone.
    np.testing.assert_allclose(par_priorities[0], np.abs(_expected_td(True)), rtol=1e-6)
    first_only, _, _ = single(state, batches[0], weights[0])
    assert not np.allclose(par_state.params["w"], first_only.params["w"])


def test_epsilon_greedy():
    params = {"w": jnp.array([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0]])}
    obs = jnp.eye(2)[jnp.array([0, 1] * 500)]
    act = jax.jit(functools.partial(dqn_act, apply_fn=_linear_apply))
    greedy = np.asarray(act(params, obs, jax.random.key(0), 0.0))
    np.testing.assert_array_equal(greedy, np.tile([1, 0], 500))
    assert greedy.dtype == np.int32
    random = np.asarray(act(params, obs, jax.random.key(1), 1.0))
    counts = np.bincount(random, minlength=3) / random.size
    np.testing.assert_allclose(counts, [1 / 3] * 3, atol=0.06)
    # epsilon 0.3: greedy with probability 0.7 + 0.3 / 3.
    mixed = np.asarray(act(params, obs, jax.random.key(2), 0.3))
    np.testing.assert_allclose(np.mean(mixed == np.tile([1, 0], 500)), 0.8, atol=0.05)
    # Per-row keys and per-row epsilon: each row depends only on its own key.
    keys = jax.random.split(jax.random.key(3), 4)
    eps = jnp.array([0.0, 1.0, 0.0, 1.0])
    full = act(params, obs[:4], keys, eps)
    part = act(params, obs[:2], keys[:2], eps[:2])
    np.testing.assert_array_equal(full[:2], part)
    assert int(full[0]) == 1 and int(full[2]) == 1


def test_q_network_shapes_and_dqn_update_with_mlp():
    net = QNetwork(action_dim=4, hidden_sizes=(16, 16))
    obs = jax.random.normal(jax.random.key(0), (5, 3))
    params = net.init(jax.random.key(1), obs)
    chex.assert_shape(net.apply(params, obs), (5, 4))
    optimizer = optax.adam(1e-3)
    config = DQNConfig(target_update_period=2)
    update = jax.jit(functools.partial(dqn_update, apply_fn=net.apply, optimizer=optimizer, config=config))
    batch = {
        "obs": obs,
        "action": jnp.array([0, 1, 2, 3, 0], jnp.int32),
        "reward": jnp.ones((5,)),
        "next_obs": obs[::-1],
        "done": jnp.zeros((5,)),
    }
    state = dqn_init(params, optimizer=optimizer)
    for _ in range(3):
        state, metrics, priorities = update(state, batch, jnp.ones((5,)))
    assert all(np.isfinite(float(v)) for v in metrics.values())
    chex.assert_shape(priorities, (5,))
    assert update._cache_size() == 1


def test_q_network_nature_cnn_torso():
    net = QNetwork(action_dim=6, torso="nature_cnn")
    obs = jnp.zeros((2, 4, 84, 84), jnp.uint8)
    params = net.init(jax.random.key(0), obs)
    assert "torso" in params["params"]
    chex.assert_shape(net.apply(params, obs), (2, 6))
    with pytest.raises(ValueError, match="Unknown torso"):
        QNetwork(action_dim=2, torso="resnet").init(jax.random.key(0), jnp.zeros((1, 3)))
