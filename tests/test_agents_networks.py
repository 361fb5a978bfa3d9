"""Tests for agents.networks and agents.acting.policy_step (row independence, seed paper 000 Sec. 4.1)."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents


@pytest.mark.parametrize(
    "obs_shape,dtype,torso",
    [
        ((4, 84, 84), jnp.uint8, "nature_cnn"),
        ((72, 96, 4), jnp.uint8, "gfootball_cnn"),
        ((7,), jnp.float32, "mlp"),
    ],
)
@pytest.mark.parametrize("continuous", [False, True])
def test_output_shapes(obs_shape, dtype, torso, continuous):
    net = agents.make_network(obs_shape, 5, continuous)
    assert net.torso == torso
    obs = jnp.zeros((3, *obs_shape), dtype)
    params = jax.jit(net.init)(jax.random.key(0), obs)
    policy_out, value = jax.jit(net.apply)(params, obs)
    chex.assert_shape(value, (3,))
    chex.assert_type(value, jnp.float32)
    if continuous:
        mean, log_std = policy_out
        chex.assert_shape([mean, log_std], (3, 5))
        # CleanRL: state-independent log-std, initialised to 0.
        np.testing.assert_array_equal(log_std, 0.0)
    else:
        chex.assert_shape(policy_out, (3, 5))
        chex.assert_type(policy_out, jnp.float32)


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
    batch = 8
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
    other_keys = jnp.concatenate([keys[: batch // 2], jax.random.split(jax.random.key(2), 4)])
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
