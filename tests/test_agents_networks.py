"""Tests for agents.networks and policy_step's row independence (seed paper 000, Sec. 4.1)."""

import functools

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents


@pytest.mark.parametrize(
    "obs_shape,dtype,torso,continuous",
    [
        ((4, 84, 84), jnp.uint8, "nature_cnn", False),
        ((4, 84, 84), jnp.uint8, "nature_cnn", True),
        ((72, 96, 4), jnp.uint8, "gfootball_cnn", False),
        ((7,), jnp.float32, "mlp", False),
        ((7,), jnp.float32, "mlp", True),
    ],
)
def test_output_shapes(obs_shape, dtype, torso, continuous):
    net = agents.make_network(obs_shape, 5, continuous)
    assert net.torso == torso
    obs = jnp.zeros((3, *obs_shape), dtype)
    # eval_shape: shapes and dtypes without compiling the CNNs (XLA CPU conv compiles are slow).
    params = jax.eval_shape(net.init, jax.random.key(0), obs)
    policy_out, value = jax.eval_shape(net.apply, params, obs)
    chex.assert_shape(value, (3,))
    assert value.dtype == jnp.float32
    if continuous:
        chex.assert_shape(list(policy_out), (3, 5))
    else:
        chex.assert_shape(policy_out, (3, 5))
        assert policy_out.dtype == jnp.float32


def test_continuous_log_std_is_state_independent():
    net = agents.make_network((7,), 2, True)
    obs = jax.random.normal(jax.random.key(1), (3, 7))
    params = net.init(jax.random.key(0), obs)
    # CleanRL: one learned log-std vector, initialised to 0, shared by every state.
    assert params["params"]["log_std"].shape == (2,)
    (mean, log_std), _ = net.apply(params, obs)
    np.testing.assert_array_equal(log_std, 0.0)
    chex.assert_shape(mean, (3, 2))


def test_mlp_has_separate_actor_and_critic():
    net = agents.make_network((4,), 2, False)
    params = net.init(jax.random.key(0), jnp.zeros((1, 4)))["params"]
    assert {"actor_torso", "critic_torso"} <= set(params)


@pytest.mark.parametrize("bad_shape", [(84, 84, 4), (3, 4), (), (4, 84, 85)])
def test_make_network_rejects_unknown_shapes(bad_shape):
    with pytest.raises(ValueError, match="No network for observation shape"):
        agents.make_network(bad_shape, 4, False)


@pytest.mark.parametrize(
    "obs_shape,continuous", [((4, 84, 84), False), ((6,), False), ((6,), True)]
)
def test_policy_step_rows_are_independent(obs_shape, continuous):
    batch = 4
    net = agents.make_network(obs_shape, 4, continuous)
    rng = np.random.default_rng(0)
    dtype = np.uint8 if len(obs_shape) == 3 else np.float32

    def draw(n):
        if dtype == np.uint8:
            return rng.integers(0, 256, size=(n, *obs_shape)).astype(np.uint8)
        return rng.normal(size=(n, *obs_shape)).astype(np.float32)

    params = net.init(jax.random.key(0), jnp.asarray(draw(1)))
    step = jax.jit(functools.partial(agents.policy_step, apply_fn=net.apply))
    keys = jax.random.split(jax.random.key(1), batch)
    obs = draw(batch)
    out_a = step(params, obs, keys)

    # Same first half, different companions in the second half (same batch shape).
    other_obs = obs.copy()
    other_obs[batch // 2 :] = draw(batch // 2)
    other_keys = jnp.concatenate(
        [keys[: batch // 2], jax.random.split(jax.random.key(2), batch // 2)]
    )
    out_b = step(params, other_obs, other_keys)
    for a, b in zip(out_a, out_b, strict=True):
        np.testing.assert_array_equal(a[: batch // 2], b[: batch // 2])

    # Same rows in reversed positions.
    out_c = step(params, obs[::-1], keys[::-1])
    for a, c in zip(out_a, out_c, strict=True):
        np.testing.assert_array_equal(a, c[::-1])

    actions, log_probs, values = out_a
    chex.assert_shape([log_probs, values], (batch,))
    chex.assert_shape(actions, (batch, 4) if continuous else (batch,))


@pytest.mark.parametrize("height,width,channels", [(84, 84, 4), (72, 96, 4)])
def test_conv8x8_stride4_equals_flax_conv(height, width, channels):
    """The space-to-depth convolution computes exactly what nn.Conv does with the same parameters."""
    from agents.networks import Conv8x8Stride4

    x = jax.random.uniform(jax.random.PRNGKey(0), (3, height, width, channels))
    fast = Conv8x8Stride4(32)
    params = fast.init(jax.random.PRNGKey(1), x)
    params = jax.tree.map(lambda p: p + 0.1 * jax.random.normal(jax.random.PRNGKey(2), p.shape), params)
    reference = nn.Conv(32, (8, 8), strides=(4, 4), padding="VALID")
    expected = reference.apply(params, x)
    got = fast.apply(params, x)
    assert got.shape == expected.shape == (3, height // 4 - 1, width // 4 - 1, 32)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
