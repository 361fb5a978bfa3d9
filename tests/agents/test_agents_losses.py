"""Tests for agents.losses and agents.distributions against hand-computed values.

The "network" is linear and written here: logits = obs @ w, value = obs @ v, so every number below
can be worked out by hand.
"""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized

from agents import distributions
from agents.batching import FlatBatch
from agents.losses import a2c_loss
from agents.ppo import PPOConfig, ppo_loss

LOG2 = math.log(2.0)


def linear_apply(params, obs):
    return obs @ params["w"], obs @ params["v"]


# Two valid rows with one-hot observations; w = 0 gives uniform logits over 2 actions, so
# log pi(a|s) = -log 2 and H = log 2 on every row; v = [1, 0] gives values [1, 0].
PARAMS = {"w": jnp.zeros((3, 2), jnp.float32), "v": jnp.array([1.0, 0.0, 5.0], jnp.float32)}
OBS = jnp.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], jnp.float32)
ACTIONS = jnp.array([0, 1], jnp.int32)
ADVANTAGES = jnp.array([2.0, -1.0], jnp.float32)
RETURNS = jnp.array([3.0, 1.0], jnp.float32)
VALID = jnp.ones((2,), jnp.float32)


def _batch(obs, actions, behaviour_log_probs, advantages, returns, valid, behaviour_values=None):
    return FlatBatch(obs, actions, behaviour_log_probs, advantages, returns, valid, behaviour_values)


def _with_invalid_row(*arrays):
    """Appends a garbage row (obs hits v[2] = 5 so its value error is large) with valid = 0."""
    obs, actions, *rest, valid = arrays
    obs = jnp.concatenate([obs, jnp.array([[0.0, 0.0, 1.0]])])
    actions = jnp.concatenate([actions, jnp.array([1], jnp.int32)])
    rest = [jnp.concatenate([x, jnp.array([-40.0])]) for x in rest]
    valid = jnp.concatenate([valid, jnp.zeros((1,))])
    return (obs, actions, *rest, valid)


class DistributionsTest(parameterized.TestCase):
    def test_categorical_hand_values(self):
        logits = jnp.array([[0.0, 0.0], [0.0, math.log(3.0)]])  # probs [.5, .5], [.25, .75]
        np.testing.assert_allclose(
            distributions.log_prob(logits, jnp.array([1, 1])), [-LOG2, math.log(0.75)], rtol=1e-6
        )
        np.testing.assert_allclose(
            distributions.entropy(logits),
            [LOG2, -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))],
            rtol=1e-6,
        )
        np.testing.assert_array_equal(distributions.mode(logits), [0, 1])

    def test_gaussian_hand_values(self):
        mean = jnp.array([[0.0, 1.0]])
        log_std = jnp.array([[0.0, math.log(2.0)]])
        actions = jnp.array([[1.0, 1.0]])
        # N(1; 0, 1) + N(1; 1, 2): -0.5 - 0.5 log 2pi  +  -log 2 - 0.5 log 2pi
        expected = -0.5 - LOG2 - math.log(2 * math.pi)
        np.testing.assert_allclose(
            distributions.log_prob((mean, log_std), actions), [expected], rtol=1e-6
        )
        np.testing.assert_allclose(
            distributions.entropy((mean, log_std)), [1.0 + math.log(2 * math.pi) + LOG2], rtol=1e-6
        )
        np.testing.assert_array_equal(distributions.mode((mean, log_std)), mean)

    @parameterized.parameters(False, True)
    def test_sample_is_per_row(self, continuous):
        keys = jax.random.split(jax.random.key(0), 4)
        if continuous:
            policy_out = (jnp.zeros((4, 3)), jnp.zeros((4, 3)))
        else:
            policy_out = jnp.zeros((4, 5))
        actions = distributions.sample_actions(policy_out, keys)
        for i in range(4):
            row_out = jax.tree.map(lambda x, i=i: x[i : i + 1], policy_out)
            np.testing.assert_array_equal(
                distributions.sample_actions(row_out, keys[i : i + 1])[0], actions[i]
            )
        chex.assert_type(actions, jnp.float32 if continuous else jnp.int32)
        chex.assert_shape(actions, (4, 3) if continuous else (4,))

    def test_categorical_sample_frequencies(self):
        logits = jnp.tile(jnp.log(jnp.array([[0.2, 0.8]])), (4000, 1))
        actions = distributions.sample_actions(logits, jax.random.split(jax.random.key(1), 4000))
        assert abs(float(actions.mean()) - 0.8) < 0.03


class A2CLossTest(parameterized.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_hand_values(self):
        # policy_loss = mean(log2 * [2, -1]) = 0.5 log 2
        # value_loss  = mean(0.5 * [(3 - 1)^2, (1 - 0)^2]) = mean([2, 0.5]) = 1.25
        # entropy     = log 2;  total = 0.5 log 2 + 0.5 * 1.25 - 0.01 * log 2
        loss_fn = self.variant(
            lambda *a: a2c_loss(PARAMS, linear_apply, *a, value_coef=0.5, entropy_coef=0.01)
        )
        loss, metrics = loss_fn(OBS, ACTIONS, ADVANTAGES, RETURNS, VALID)
        np.testing.assert_allclose(metrics["policy_loss"], 0.5 * LOG2, rtol=1e-6)
        np.testing.assert_allclose(metrics["value_loss"], 1.25, rtol=1e-6)
        np.testing.assert_allclose(metrics["entropy"], LOG2, rtol=1e-6)
        expected = 0.5 * LOG2 + 0.5 * 1.25 - 0.01 * LOG2
        np.testing.assert_allclose(loss, expected, rtol=1e-6)
        np.testing.assert_allclose(metrics["total_loss"], expected, rtol=1e-6)

    def test_invalid_row_changes_nothing(self):
        def loss(params, *batch):
            return a2c_loss(params, linear_apply, *batch, value_coef=0.5, entropy_coef=0.01)

        base_batch = (OBS, ACTIONS, ADVANTAGES, RETURNS, VALID)
        (loss_a, _), grad_a = jax.value_and_grad(loss, has_aux=True)(PARAMS, *base_batch)
        (loss_b, _), grad_b = jax.value_and_grad(loss, has_aux=True)(
            PARAMS, *_with_invalid_row(*base_batch)
        )
        np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)
        chex.assert_trees_all_close(grad_a, grad_b, rtol=1e-6)

    def test_advantages_are_not_differentiated(self):
        # d(loss)/d(w) from the policy term: -adv * d log pi / d logits; the critic gets no policy
        # gradient and the advantages are constants.
        grads = jax.grad(
            lambda p: a2c_loss(
                p,
                linear_apply,
                OBS,
                ACTIONS,
                ADVANTAGES,
                RETURNS,
                VALID,
                value_coef=0.0,
                entropy_coef=0.0,
            )[0]
        )(PARAMS)
        # Row 0 (obs e0, action 0, adv 2), mean over 2 rows:
        # d/dlogits of -2 * log softmax / 2 = -2 * ([1, 0] - [.5, .5]) / 2.
        np.testing.assert_allclose(grads["w"][0], [-0.5, 0.5], rtol=1e-6)
        # Row 1 (obs e1, action 1, adv -1): 1 * ([0, 1] - [.5, .5]) / 2.
        np.testing.assert_allclose(grads["w"][1], [-0.25, 0.25], rtol=1e-6)
        np.testing.assert_allclose(grads["v"], 0.0)


class PPOLossTest(parameterized.TestCase):
    # Current log pi = -log 2 on both rows. Behaviour log-probs chosen so that the ratios are
    # [1.5, 0.5] with advantages [2, -1].
    BEHAVIOUR_LOG_PROBS = jnp.array([-LOG2 - math.log(1.5), -LOG2 - math.log(0.5)], jnp.float32)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(
        # eps 0.2: row 0 min(1.5 * 2, 1.2 * 2) = 2.4; row 1 min(0.5 * -1, 0.8 * -1) = -0.8.
        #   policy_loss = -mean(2.4, -0.8) = -0.8, both rows clipped.
        ("clipping_active", 0.2, -0.8, 1.0),
        # eps 0.6: both ratios lie inside [0.4, 1.6], so clipping is inactive:
        #   row 0 min(3, 3.2) = 3; row 1 min(-0.5, -0.5) = -0.5;
        #   policy_loss = -mean(3, -0.5) = -1.25, clip_fraction 0.
        ("clipping_inactive", 0.6, -1.25, 0.0),
    )
    def test_hand_values(self, clip_eps, expected_policy_loss, expected_clip_fraction):
        config = PPOConfig(clip_eps=clip_eps, value_coef=0.5, entropy_coef=0.01, normalize_advantages=False)
        loss_fn = self.variant(lambda *a: ppo_loss(PARAMS, _batch(*a), config, linear_apply))
        loss, metrics = loss_fn(OBS, ACTIONS, self.BEHAVIOUR_LOG_PROBS, ADVANTAGES, RETURNS, VALID)
        np.testing.assert_allclose(metrics["policy_loss"], expected_policy_loss, rtol=1e-5)
        np.testing.assert_allclose(metrics["clip_fraction"], expected_clip_fraction)
        np.testing.assert_allclose(metrics["value_loss"], 1.25, rtol=1e-6)
        np.testing.assert_allclose(metrics["entropy"], LOG2, rtol=1e-6)
        # approx_kl = mean((r - 1) - log r) over r = [1.5, 0.5].
        expected_kl = 0.5 * ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5)))
        np.testing.assert_allclose(metrics["approx_kl"], expected_kl, rtol=1e-5)
        np.testing.assert_allclose(loss, expected_policy_loss + 0.5 * 1.25 - 0.01 * LOG2, rtol=1e-5)

    def test_clipped_rows_get_no_policy_gradient(self):
        config = PPOConfig(clip_eps=0.2, value_coef=0.0, entropy_coef=0.0, normalize_advantages=False)
        batch = _batch(OBS, ACTIONS, self.BEHAVIOUR_LOG_PROBS, ADVANTAGES, RETURNS, VALID)
        grads = jax.grad(lambda p: ppo_loss(p, batch, config, linear_apply)[0])(PARAMS)
        np.testing.assert_allclose(grads["w"], 0.0)

    def test_normalized_advantages_hand_values(self):
        # Advantages [2, -1]: mean 0.5, (biased) std 1.5 -> normalised [1, -1]. Ratios 1.
        config = PPOConfig(clip_eps=0.2, value_coef=0.5, entropy_coef=0.0, normalize_advantages=True)
        loss, metrics = ppo_loss(PARAMS, _batch(OBS, ACTIONS, jnp.full((2,), -LOG2), ADVANTAGES, RETURNS, VALID),
                                 config, linear_apply)
        np.testing.assert_allclose(metrics["policy_loss"], 0.0, atol=1e-6)
        np.testing.assert_allclose(metrics["approx_kl"], 0.0, atol=1e-7)

    @parameterized.parameters(True, False)
    def test_invalid_row_changes_nothing(self, normalize_advantages):
        config = PPOConfig(clip_eps=0.2, value_coef=0.5, entropy_coef=0.01, normalize_advantages=normalize_advantages)

        def loss(params, *batch):
            return ppo_loss(params, _batch(*batch), config, linear_apply)

        base_batch = (OBS, ACTIONS, self.BEHAVIOUR_LOG_PROBS, ADVANTAGES, RETURNS, VALID)
        (loss_a, metrics_a), grad_a = jax.value_and_grad(loss, has_aux=True)(PARAMS, *base_batch)
        (loss_b, metrics_b), grad_b = jax.value_and_grad(loss, has_aux=True)(
            PARAMS, *_with_invalid_row(*base_batch)
        )
        np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)
        chex.assert_trees_all_close(metrics_a, metrics_b, rtol=1e-6)
        chex.assert_trees_all_close(grad_a, grad_b, rtol=1e-6, atol=1e-7)
