"""A factored action (MultiDiscrete / MultiBinary): `agents.distributions.Factored`, one categorical per component,
as Stable-Baselines3's `MultiCategoricalDistribution`; the actor-critic's head of `sum(nvec)` logits."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents import distributions
from agents.distributions import Factored
from agents.networks import make_network

_NVECS = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)


def _policy(nvec, rows, seed):
    logits = jax.random.normal(jax.random.PRNGKey(seed), (rows, sum(nvec))) * 3.0
    return Factored(logits, nvec)


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(nvec=_NVECS, rows=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_log_prob_and_entropy_are_the_sums_over_independent_components(nvec, rows, seed):
    policy = _policy(nvec, rows, seed)
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), rows)
    actions = distributions.sample_actions(policy, keys)
    chex.assert_shape(actions, (rows, len(nvec)))
    assert actions.dtype == jnp.int32 and np.all((np.asarray(actions) >= 0) & (np.asarray(actions) < np.array(nvec)))
    expected_log_prob = np.zeros(rows)
    expected_entropy = np.zeros(rows)
    start = 0
    for k, n in enumerate(nvec):
        part = np.asarray(jax.nn.log_softmax(policy.logits[:, start:start + n]), np.float64)
        expected_log_prob += part[np.arange(rows), np.asarray(actions)[:, k]]
        expected_entropy -= np.sum(np.exp(part) * part, axis=1)
        start += n
    np.testing.assert_allclose(distributions.log_prob(policy, actions), expected_log_prob, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(distributions.entropy(policy), expected_entropy, rtol=1e-5, atol=1e-5)
    mode = np.asarray(distributions.mode(policy))
    assert all(np.array_equal(mode[:, k], np.argmax(p, axis=1)) for k, p in enumerate(policy.parts()))


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(nvec=_NVECS, rows=st.integers(2, 6), row=st.integers(0, 5), seed=st.integers(0, 2**16))
def test_a_rows_action_depends_on_its_own_logits_and_key_only(nvec, rows, row, seed):
    """Seed paper 000, Sec. 4.1: an action does not depend on which observations share the actor's batch."""
    row = row % rows
    policy = _policy(nvec, rows, seed)
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), rows)
    alone = distributions.sample_actions(Factored(policy.logits[row:row + 1], nvec), keys[row:row + 1])
    np.testing.assert_array_equal(distributions.sample_actions(policy, keys)[row], alone[0])


def test_samples_follow_each_components_softmax():
    nvec = (3, 2)
    logits = jnp.log(jnp.array([[0.2, 0.5, 0.3, 0.9, 0.1]]))
    keys = jax.random.split(jax.random.PRNGKey(0), 20_000)
    actions = np.asarray(distributions.sample_actions(Factored(jnp.repeat(logits, 20_000, 0), nvec), keys))
    np.testing.assert_allclose(np.bincount(actions[:, 0], minlength=3) / 20_000, [0.2, 0.5, 0.3], atol=0.015)
    np.testing.assert_allclose(np.bincount(actions[:, 1], minlength=2) / 20_000, [0.9, 0.1], atol=0.015)


def test_the_network_has_one_logit_per_choice_and_refuses_a_mismatched_nvec():
    network = make_network((5,), 3, False, action_nvec=(2, 4, 3))
    obs = jnp.zeros((7, 5))
    params = network.init(jax.random.PRNGKey(0), obs)
    policy, value = network.apply(params, obs)
    assert isinstance(policy, Factored) and policy.nvec == (2, 4, 3)
    chex.assert_shape([policy.logits, value], [(7, 9), (7,)])
    with pytest.raises(ValueError, match="action_nvec"):
        make_network((5,), 2, False, action_nvec=(2, 4, 3))
    with pytest.raises(ValueError, match="action_nvec"):
        make_network((5,), 1, True, action_nvec=(2,))
