"""Generalized state-dependent exploration (gSDE; Raffin, Kober and Stulp 2021, Sec. 3;
`agents.distributions.StateDependentGaussian`): given the state the action is the Gaussian its log-prob scores, one
exploration matrix makes the noise a linear function of the features, and the executor holds an env's key, hence
its matrix, for `sde_sample_freq` steps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents import action_keys, distributions, make_network
from agents.distributions import StateDependentGaussian
from agents.networks import NetworkHyperparameters
from agents.recurrent import recurrent_network

_SETTINGS = dict(max_examples=6, deadline=None, derandomize=True)


def _policy(seed: int, rows: int, features: int, actions: int) -> StateDependentGaussian:
    keys = jax.random.split(jax.random.PRNGKey(seed), 3)
    return StateDependentGaussian(mean=jax.random.normal(keys[0], (rows, actions)),
                                  latent=jax.random.normal(keys[1], (rows, features)),
                                  log_std=0.3 * jax.random.normal(keys[2], (features, actions)))


@settings(**_SETTINGS)
@given(seed=st.integers(0, 2**16), features=st.integers(1, 9), actions=st.integers(1, 3))
def test_given_the_state_the_action_is_the_gaussian_that_log_prob_scores(seed, features, actions):
    one = _policy(seed, 1, features, actions)
    draws = 4000
    many = StateDependentGaussian(jnp.repeat(one.mean, draws, 0), jnp.repeat(one.latent, draws, 0), one.log_std)
    samples = np.asarray(distributions.sample_actions(many, jax.random.split(jax.random.PRNGKey(seed + 1), draws)))
    std = np.asarray(one.std())[0]
    np.testing.assert_allclose(samples.mean(0), np.asarray(one.mean)[0], atol=4 * std.max() / np.sqrt(draws))
    np.testing.assert_allclose(samples.std(0), std, rtol=0.08)
    # The variance is latent^2 @ exp(log_std)^2 (+ SB3's 1e-6), and log_prob / entropy are that Gaussian's.
    expected_var = (np.asarray(one.latent) ** 2 @ np.exp(2 * np.asarray(one.log_std)))[0] + 1e-6
    np.testing.assert_allclose(std**2, expected_var, rtol=1e-5)
    z = (samples[:5] - np.asarray(one.mean)[0]) / std
    log_pdf = np.sum(-0.5 * z**2 - np.log(std) - 0.5 * np.log(2 * np.pi), axis=-1)
    np.testing.assert_allclose(distributions.log_prob(many, jnp.asarray(samples))[:5], log_pdf, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(distributions.entropy(one)[0], np.sum(np.log(std) + 0.5 * np.log(2 * np.pi * np.e)),
                               rtol=1e-5)
    np.testing.assert_array_equal(distributions.mode(one), one.mean)


@settings(**_SETTINGS)
@given(seed=st.integers(0, 2**16), a=st.floats(-3, 3), b=st.floats(-3, 3), features=st.integers(1, 6))
def test_one_key_gives_noise_linear_in_the_features(seed, a, b, features):
    """One exploration matrix E a key: the noise latent @ E changes smoothly with the state (the paper's point)."""
    policy = _policy(seed, 2, features, 2)
    zero_mean = jnp.zeros_like(policy.mean[:1])
    key = jax.random.split(jax.random.PRNGKey(seed + 7), 1)

    def noise(latent):
        return distributions.sample_actions(StateDependentGaussian(zero_mean, latent, policy.log_std), key)

    x, y = policy.latent[:1], policy.latent[1:]
    np.testing.assert_allclose(noise(a * x + b * y), a * noise(x) + b * noise(y), rtol=1e-4, atol=1e-4)


@settings(**_SETTINGS)
@given(hold=st.integers(1, 9), steps=st.lists(st.integers(0, 10_000), min_size=2, max_size=6), env=st.integers(0, 50))
def test_an_env_keeps_one_key_for_hold_steps(hold, steps, env):
    run_key = jax.random.PRNGKey(3)
    keys = [action_keys(run_key, jnp.asarray([env]), jnp.asarray(step), hold)[0] for step in steps]
    for i, j in [(i, j) for i in range(len(steps)) for j in range(len(steps))]:
        same = bool(jnp.all(keys[i] == keys[j]))
        assert same == (steps[i] // hold == steps[j] // hold), (steps[i], steps[j], hold)
    # hold 1 is the key every run had before gSDE: fold_in(fold_in(run_key, env), step).
    np.testing.assert_array_equal(action_keys(run_key, jnp.asarray([env]), jnp.asarray(steps[0]))[0],
                                  jax.random.fold_in(jax.random.fold_in(run_key, env), steps[0]))


def test_key_hold_is_one_without_sde_and_the_round_for_minus_one():
    assert NetworkHyperparameters().key_hold(128) == 1
    assert NetworkHyperparameters(use_sde=True).key_hold(128) == 128
    assert NetworkHyperparameters(use_sde=True, sde_sample_freq=4).key_hold(128) == 4
    assert "sde_sample_freq" not in NetworkHyperparameters(use_sde=True).network_settings()


def _log_std_and_feature_grads(network, params, inputs):
    def total_std(p):
        policy_out = network.apply(p, *inputs)[0]
        return jnp.sum(policy_out.std())

    grads = jax.grad(total_std)(params)["params"]
    log_std = grads.pop("log_std")
    others = [float(jnp.abs(leaf).sum()) for leaf in jax.tree_util.tree_leaves(grads)]
    return log_std, others


def test_the_feed_forward_policy_learns_the_std_but_not_the_features_through_it():
    network = make_network((3,), 2, True, hidden_sizes=(16, 8), use_sde=True, log_std_init=-1.0)
    obs = jax.random.normal(jax.random.PRNGKey(0), (5, 3))
    params = network.init(jax.random.PRNGKey(1), obs)
    policy_out, _ = network.apply(params, obs)
    assert isinstance(policy_out, StateDependentGaussian) and policy_out.latent.shape == (5, 8)
    np.testing.assert_array_equal(params["params"]["log_std"], -np.ones((8, 2), np.float32))
    log_std, others = _log_std_and_feature_grads(network, params, (obs,))
    assert float(jnp.abs(log_std).sum()) > 0 and max(others) == 0.0  # SB3's learn_features=False


@pytest.mark.parametrize("rnn_input, features", [("obs", 8), ("torso", 6)])
def test_the_recurrent_policy_reads_the_features_its_head_reads(rnn_input, features):
    base = make_network((3,), 1, True, hidden_sizes=(8,), use_sde=True)
    network = recurrent_network(base, "lstm", 6, rnn_input)
    obs, first = jnp.ones((4, 3)), jnp.ones(4)
    carry = jnp.zeros((4, network.carry_size))
    params = network.init(jax.random.PRNGKey(0), obs, carry, first)
    assert params["params"]["log_std"].shape == (features, 1)
    policy_out = network.apply(params, obs, carry, first)[0]
    assert isinstance(policy_out, StateDependentGaussian) and policy_out.latent.shape == (4, features)
    _, others = _log_std_and_feature_grads(network, params, (obs, carry, first))
    assert max(others) == 0.0


def test_sde_on_a_discrete_task_is_refused():
    with pytest.raises(ValueError, match="continuous action space"):
        make_network((3,), 2, False, use_sde=True)
