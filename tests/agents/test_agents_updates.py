"""Tests for agents.a2c (seed paper 000, Eq. 6: the one-step-delayed gradient) and agents.ppo."""

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import agents
from agents.losses import a2c_loss
from tests.fixtures import random_rollout

OBS_DIM = 3
NUM_ACTIONS = 2
T, B = 4, 3


def _net(continuous=False):
    return agents.make_network((OBS_DIM,), NUM_ACTIONS, continuous)


def _params(net, seed):
    return net.init(jax.random.key(seed), jnp.zeros((1, OBS_DIM)))


def _rollout(net, behaviour_params, seed=0):
    """`random_rollout` of ``behaviour_params`` with one termination and one truncation, each followed by its
    reset step."""
    rollout = random_rollout(net, behaviour_params, np.random.default_rng(seed), T, B, obs_dim=OBS_DIM,
                             key_seed=seed)
    terminations = np.zeros((T, B), np.float32)
    truncations = np.zeros((T, B), np.float32)
    valid = np.ones((T, B), np.float32)
    terminations[1, 0] = 1.0
    valid[2, 0] = 0.0  # reset step after the termination
    truncations[2, 1] = 1.0
    valid[3, 1] = 0.0
    return rollout._replace(terminations=jnp.asarray(terminations), truncations=jnp.asarray(truncations),
                            valid=jnp.asarray(valid))


def _state(params, optimizer, seed=0):
    return agents.TrainState(
        params=params,
        opt_state=optimizer.init(params),
        key=jax.random.key(seed),
        update_step=jnp.zeros((), jnp.int32),
    )


@functools.partial(jax.jit, static_argnums=(0, 4))
def _a2c_grad(net, grad_params, behaviour_params, rollout, config):
    """Gradient of a2c_loss at ``grad_params``, built by hand from the rollout (reference)."""
    _, bootstrap_value = net.apply(behaviour_params, rollout.obs[-1])
    advantages, returns = agents.gae_advantages(
        rollout.rewards,
        rollout.behaviour_values,
        bootstrap_value,
        rollout.terminations,
        rollout.truncations,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
    )
    flat = lambda x: x.reshape((T * B, *x.shape[2:]))  # noqa: E731
    return jax.grad(
        lambda p: a2c_loss(
            p,
            net.apply,
            flat(rollout.obs[:-1]),
            flat(rollout.actions),
            flat(advantages),
            flat(returns),
            flat(rollout.valid),
            value_coef=config.value_coef,
            entropy_coef=config.entropy_coef,
        )[0]
    )(grad_params)


@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.slow
def test_a2c_gradient_is_taken_at_behaviour_params(continuous):
    net = _net(continuous)
    current = _params(net, 1)
    behaviour = _params(net, 2)
    rollout = _rollout(net, behaviour)
    config = agents.A2CConfig(gamma=0.9, gae_lambda=0.95)
    optimizer = optax.sgd(1.0)

    update = jax.jit(
        functools.partial(agents.a2c_update, apply_fn=net.apply, optimizer=optimizer, config=config)
    )
    new_state, metrics = update(_state(current, optimizer), behaviour, rollout)

    grad_behaviour = _a2c_grad(net, behaviour, behaviour, rollout, config)
    grad_current = _a2c_grad(net, current, behaviour, rollout, config)
    # theta_{j+1} = theta_j - grad at theta_{j-1}  (Eq. 6 with SGD, lr 1).
    expected = jax.tree.map(lambda p, g: p - g, current, grad_behaviour)
    chex.assert_trees_all_close(new_state.params, expected, rtol=1e-5, atol=1e-6)
    # ...and that is a different update from the undelayed one.
    diff = optax.tree.norm(jax.tree.map(jnp.subtract, grad_behaviour, grad_current))
    assert float(diff) > 1e-3
    not_expected = jax.tree.map(lambda p, g: p - g, current, grad_current)
    with pytest.raises(AssertionError):
        chex.assert_trees_all_close(new_state.params, not_expected, rtol=1e-5, atol=1e-6)

    np.testing.assert_allclose(metrics["grad_norm"], optax.tree.norm(grad_behaviour), rtol=1e-5)
    assert int(new_state.update_step) == 1
    assert set(metrics) == {
        "policy_loss",
        "value_loss",
        "entropy",
        "total_loss",
        "grad_norm",
        "update_norm",
        "advantage_mean",
    }
    assert all(jnp.shape(v) == () for v in metrics.values())


@pytest.mark.slow
def test_a2c_with_current_as_behaviour_is_plain_a2c_and_jits():
    net = _net()
    params = _params(net, 3)
    rollout = _rollout(net, params, seed=5)
    config = agents.A2CConfig()
    optimizer = agents.make_optimizer(
        name="rmsprop",
        learning_rate=7e-4,
        total_updates=10,
        anneal_lr=True,
        max_grad_norm=0.5,
        eps=1e-5,
    )
    update = jax.jit(
        functools.partial(agents.a2c_update, apply_fn=net.apply, optimizer=optimizer, config=config)
    )
    state = _state(params, optimizer)
    new_state, metrics = update(state, state.params, rollout)

    grad = _a2c_grad(net, params, params, rollout, config)
    updates, _ = optimizer.update(grad, optimizer.init(params), params)
    expected = optax.apply_updates(params, updates)
    chex.assert_trees_all_close(new_state.params, expected, rtol=1e-5, atol=1e-7)
    assert int(new_state.update_step) == 1
    # A2C draws no randomness: the key passes through.
    np.testing.assert_array_equal(
        jax.random.key_data(new_state.key), jax.random.key_data(state.key)
    )
    assert np.isfinite(float(metrics["total_loss"]))


def _ppo_update(net, optimizer, config):
    return jax.jit(
        functools.partial(agents.ppo_update, apply_fn=net.apply, optimizer=optimizer, config=config)
    )


def test_ppo_first_step_is_on_policy_and_changes_params():
    net = _net()
    params = _params(net, 4)
    rollout = _rollout(net, params, seed=1)
    optimizer = optax.adam(1e-2)
    config = agents.PPOConfig(num_epochs=1, num_minibatches=1)
    state = _state(params, optimizer)

    new_state, metrics = _ppo_update(net, optimizer, config)(state, params, rollout)

    # One epoch, one minibatch, behaviour == current: the only step has ratio 1 everywhere.
    np.testing.assert_allclose(metrics["clip_fraction"], 0.0)
    np.testing.assert_allclose(metrics["approx_kl"], 0.0, atol=1e-6)
    diff = optax.tree.norm(jax.tree.map(jnp.subtract, new_state.params, params))
    assert float(diff) > 1e-4
    assert int(new_state.update_step) == 1
    assert not np.array_equal(jax.random.key_data(new_state.key), jax.random.key_data(state.key))
    assert set(metrics) == {
        "policy_loss",
        "value_loss",
        "entropy",
        "total_loss",
        "grad_norm",
        "advantage_mean",
        "approx_kl",
        "clip_fraction",
    }


@pytest.mark.parametrize("continuous", [False, True])
def test_ppo_is_deterministic_given_the_key(continuous):
    net = _net(continuous)
    params = _params(net, 6)
    behaviour = _params(net, 7)
    rollout = _rollout(net, behaviour, seed=2)
    optimizer = optax.adam(1e-2)
    config = agents.PPOConfig(num_epochs=2, num_minibatches=2)
    update = _ppo_update(net, optimizer, config)

    state_a, metrics_a = update(_state(params, optimizer, seed=0), behaviour, rollout)
    state_b, metrics_b = update(_state(params, optimizer, seed=0), behaviour, rollout)
    state_c, _ = update(_state(params, optimizer, seed=1), behaviour, rollout)

    chex.assert_trees_all_equal(state_a.params, state_b.params)
    chex.assert_trees_all_equal(metrics_a, metrics_b)
    # A different key gives different minibatch permutations, hence different parameters.
    with pytest.raises(AssertionError):
        chex.assert_trees_all_equal(state_a.params, state_c.params)
    # Stale behaviour policy: ratios start away from 1, so something is clipped or moved.
    assert float(metrics_a["approx_kl"]) > 0.0


def test_ppo_epochs_start_from_current_params():
    # With lr 0 nothing moves: the result is state.params, not behaviour_params.
    net = _net()
    params = _params(net, 8)
    behaviour = _params(net, 9)
    rollout = _rollout(net, behaviour)
    optimizer = optax.sgd(0.0)
    new_state, _ = agents.ppo_update(
        _state(params, optimizer),
        behaviour,
        rollout,
        apply_fn=net.apply,
        optimizer=optimizer,
        config=agents.PPOConfig(num_minibatches=2),
    )
    chex.assert_trees_all_close(new_state.params, params)


def test_ppo_rejects_indivisible_minibatches():
    net = _net()
    params = _params(net, 0)
    optimizer = optax.sgd(0.1)
    config = dataclasses.replace(agents.PPOConfig(), num_minibatches=5)  # T * B = 12
    with pytest.raises(ValueError, match="not divisible"):
        agents.ppo_update(
            _state(params, optimizer),
            params,
            _rollout(net, params),
            apply_fn=net.apply,
            optimizer=optimizer,
            config=config,
        )


def test_make_optimizer():
    params = {"w": jnp.ones((2,))}
    grads = {"w": jnp.array([3.0, 4.0])}  # global norm 5
    # RMSprop, PyTorch semantics: v = 0.01 * g^2 after one step, step = g / (sqrt(v) + eps).
    opt = agents.make_optimizer(
        name="rmsprop",
        learning_rate=0.1,
        total_updates=1,
        anneal_lr=False,
        max_grad_norm=100.0,
        eps=0.5,
        rmsprop_decay=0.99,
    )
    updates, _ = opt.update(grads, opt.init(params), params)
    expected = -0.1 * np.array([3.0, 4.0]) / (0.1 * np.array([3.0, 4.0]) + 0.5)
    np.testing.assert_allclose(updates["w"], expected, rtol=1e-6)
    # Clipping to norm 1 then Adam's first step is lr * sign(g) (up to eps).
    opt = agents.make_optimizer(
        name="adam",
        learning_rate=0.1,
        total_updates=4,
        anneal_lr=True,
        max_grad_norm=1.0,
        eps=1e-8,
    )
    state = opt.init(params)
    updates, state = opt.update(grads, state, params)
    np.testing.assert_allclose(updates["w"], [-0.1, -0.1], rtol=1e-5)
    # Linear annealing: the second step uses lr 0.1 * (1 - 1/4).
    updates, _ = opt.update(grads, state, params)
    np.testing.assert_allclose(updates["w"], [-0.075, -0.075], rtol=1e-5)
    with pytest.raises(ValueError, match="Unknown optimizer"):
        agents.make_optimizer(
            name="sgd",
            learning_rate=0.1,
            total_updates=1,
            anneal_lr=False,
            max_grad_norm=1.0,
            eps=1e-5,
        )
