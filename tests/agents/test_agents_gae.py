"""Tests for agents.gae (GAE, Schulman et al. 2016): hand-derived values and a naive loop."""

import chex
import numpy as np
import pytest
from absl.testing import parameterized

from agents.gae import gae_advantages


def _naive_gae(rewards, values, bootstrap_value, terminations, truncations, gamma, gae_lambda):
    """Direct transcription of the documented recursion, one env at a time."""
    num_steps, num_envs = rewards.shape
    advantages = np.zeros((num_steps, num_envs), np.float64)
    for b in range(num_envs):
        next_advantage = 0.0
        for t in reversed(range(num_steps)):
            next_value = bootstrap_value[b] if t == num_steps - 1 else values[t + 1, b]
            delta = rewards[t, b] + gamma * (1.0 - terminations[t, b]) * next_value - values[t, b]
            done = max(terminations[t, b], truncations[t, b])
            next_advantage = delta + gamma * gae_lambda * (1.0 - done) * next_advantage
            advantages[t, b] = next_advantage
    return advantages, advantages + values


class GaeTest(parameterized.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_hand_derived_three_steps(self):
        # gamma = 0.9, lambda = 0.5, rewards [1, 2, 3], V(obs[0..2]) = [0.5, 1.0, 1.5],
        # V(obs[3]) = 2.
        # env 0: step 1 truncated (bootstrap from its final obs, but the trace is cut).
        #   delta_2 = 3 + 0.9 * 2.0 - 1.5 = 3.3              A_2 = 3.3
        #   delta_1 = 2 + 0.9 * 1.5 - 1.0 = 2.35             A_1 = 2.35 (trace cut)
        #   delta_0 = 1 + 0.9 * 1.0 - 0.5 = 1.4              A_0 = 1.4 + 0.45 * 2.35 = 2.4575
        # env 1: step 0 terminated (no bootstrap, trace cut).
        #   delta_2 = 3.3                                    A_2 = 3.3
        #   delta_1 = 2.35                                   A_1 = 2.35 + 0.45 * 3.3 = 3.835
        #   delta_0 = 1 + 0 - 0.5 = 0.5                      A_0 = 0.5
        rewards = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], np.float32)
        values = np.array([[0.5, 0.5], [1.0, 1.0], [1.5, 1.5]], np.float32)
        bootstrap_value = np.array([2.0, 2.0], np.float32)
        terminations = np.array([[0.0, 1.0], [0.0, 0.0], [0.0, 0.0]], np.float32)
        truncations = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]], np.float32)

        gae = self.variant(lambda *a: gae_advantages(*a, gamma=0.9, gae_lambda=0.5))
        advantages, returns = gae(rewards, values, bootstrap_value, terminations, truncations)

        expected = np.array([[2.4575, 0.5], [2.35, 3.835], [3.3, 3.3]], np.float32)
        np.testing.assert_allclose(advantages, expected, rtol=1e-6)
        np.testing.assert_allclose(returns, expected + values, rtol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters((0.99, 0.95), (0.9, 1.0), (0.5, 0.0))
    def test_matches_naive_loop(self, gamma, gae_lambda):
        rng = np.random.default_rng(0)
        num_steps, num_envs = 17, 5
        rewards = rng.normal(size=(num_steps, num_envs)).astype(np.float32)
        values = rng.normal(size=(num_steps, num_envs)).astype(np.float32)
        bootstrap_value = rng.normal(size=(num_envs,)).astype(np.float32)
        terminations = (rng.random((num_steps, num_envs)) < 0.15).astype(np.float32)
        truncations = (rng.random((num_steps, num_envs)) < 0.15).astype(np.float32)
        truncations[terminations == 1.0] = 0.0  # EnvPool never reports both on one step
        assert terminations.sum() > 0 and truncations.sum() > 0

        gae = self.variant(lambda *a: gae_advantages(*a, gamma=gamma, gae_lambda=gae_lambda))
        advantages, returns = gae(rewards, values, bootstrap_value, terminations, truncations)

        expected_adv, expected_ret = _naive_gae(
            rewards, values, bootstrap_value, terminations, truncations, gamma, gae_lambda
        )
        np.testing.assert_allclose(advantages, expected_adv, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(returns, expected_ret, rtol=1e-5, atol=1e-5)
        chex.assert_type([advantages, returns], np.float32)

    def test_termination_and_truncation_on_same_step_cut_everything(self):
        # Both flags: no bootstrap (termination wins) and no trace.
        advantages, _ = gae_advantages(
            np.array([[1.0], [5.0]], np.float32),
            np.zeros((2, 1), np.float32),
            np.array([7.0], np.float32),
            np.array([[1.0], [0.0]], np.float32),
            np.array([[1.0], [0.0]], np.float32),
            gamma=1.0,
            gae_lambda=1.0,
        )
        np.testing.assert_allclose(advantages[:, 0], [1.0, 12.0])

    def test_bad_shapes_raise(self):
        x = np.zeros((3, 2), np.float32)
        with pytest.raises(AssertionError):
            gae_advantages(x, x, np.zeros((3,), np.float32), x, x, gamma=0.9, gae_lambda=0.9)
        with pytest.raises(AssertionError):
            gae_advantages(x, x[:2], np.zeros((2,), np.float32), x, x, gamma=0.9, gae_lambda=0.9)
