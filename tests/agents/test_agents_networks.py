"""Tests for agents.networks and policy_step's row independence (seed paper 000, Sec. 4.1)."""

import functools

import chex
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


@pytest.mark.parametrize("bad_shape", [(3, 4), (), (40, 40, 32), (3, 40, 20), (1, 40, 40, 3)])
def test_make_network_rejects_unknown_shapes(bad_shape):
    with pytest.raises(ValueError, match="No network for observation shape"):
        agents.make_network(bad_shape, 4, False)


@pytest.mark.parametrize("shape, torso", [((84, 84, 4), "pixel_cnn_hwc"), ((4, 84, 85), "pixel_cnn_chw"),
                                          ((4, 84, 84), "nature_cnn"), ((10, 10, 4), "minatar_cnn")])
def test_other_images_get_the_pixel_cnn_and_it_reads_both_layouts_alike(shape, torso):
    net = agents.make_network(shape, 3, False)
    assert net.torso == torso
    obs = jax.random.randint(jax.random.key(1), (2, *shape), 0, 256).astype(jnp.uint8)
    params = net.init(jax.random.key(0), obs)
    logits, value = net.apply(params, obs)
    assert logits.shape == (2, 3) and value.shape == (2,)
    if torso == "pixel_cnn_hwc":  # the same parameters read the same frames channels first: the same outputs
        chw = agents.make_network((4, 84, 84), 3, False, torso="pixel_cnn_chw")
        again = chw.apply(params, jnp.transpose(obs, (0, 3, 1, 2)))
        np.testing.assert_allclose(again[0], logits, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "obs_shape,continuous", [((4, 84, 84), False), ((6,), False), ((6,), True)]
)
@pytest.mark.slow
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


def _num_params(net, obs_shape):
    params = jax.eval_shape(net.init, jax.random.key(0), jnp.zeros((1, *obs_shape), jnp.uint8))
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))


def test_ba3c_parameter_count_matches_table_2_slope():
    """Seed paper 001, Table 2: weights grow by 1608 per hidden unit (538,119 - 332,295 = 128 x 1608)."""
    num_actions = 6
    # Conv (kernel, in, out) layers, each with a bias: 5x5 4->32, 5x5 32->32, 4x4 32->64, 3x3 64->64.
    conv = sum(k * k * c_in * c_out + c_out for k, c_in, c_out in [(5, 4, 32), (5, 32, 32), (4, 32, 64), (3, 64, 64)])
    assert conv == 98_624
    features = 5 * 5 * 64  # 84 -> 42 -> 21 -> 10 -> 5 after four 2x2 pools
    counts = {}
    for hidden in (256, 128, 64):
        net = agents.make_network((4, 84, 84), num_actions, False, torso="ba3c", hidden=hidden)
        assert net.torso == "ba3c" and net.hidden == hidden
        counts[hidden] = _num_params(net, (4, 84, 84))
        # dense (features + 1) hidden, policy head (hidden + 1) A, value head hidden + 1.
        assert counts[hidden] == conv + hidden * (features + 1 + num_actions + 1) + num_actions + 1
        assert counts[hidden] == 98_624 + hidden * (1602 + num_actions) + num_actions + 1
    assert counts[256] - counts[128] == 128 * 1608 == 538_119 - 332_295
    assert counts[128] - counts[64] == 64 * 1608 == 332_295 - 229_383
    # The constant part differs from the paper's (exact input and conv sizes are not given there).
    assert 538_119 - counts[256] == 27_840


def test_ba3c_forward_shapes():
    batch, num_actions, hidden = 3, 6, 64
    net = agents.make_network((4, 84, 84), num_actions, False, torso="ba3c", hidden=hidden)
    obs = jnp.asarray(np.random.default_rng(0).integers(0, 256, size=(batch, 4, 84, 84)), jnp.uint8)
    params = net.init(jax.random.key(0), obs)
    torso = params["params"]["torso"]
    # The dense layer reads the 5 x 5 x 64 = 1600 pooled features.
    chex.assert_shape(torso["Dense_0"]["kernel"], (1600, hidden))
    logits, values = jax.jit(net.apply)(params, obs)
    chex.assert_shape(logits, (batch, num_actions))
    chex.assert_shape(values, (batch,))
    assert logits.dtype == values.dtype == jnp.float32
    assert np.all(np.isfinite(logits)) and np.all(np.isfinite(values))
    # Rows are processed independently and the input is really read.
    assert not np.allclose(logits[0], logits[1])
    features = agents.networks.BA3CTorso(hidden).apply({"params": torso}, obs)
    chex.assert_shape(features, (batch, hidden))


def test_make_network_torso_choice():
    # torso=None keeps the automatic choice; an explicit torso must fit the shape.
    assert agents.make_network((4, 84, 84), 6, False).torso == "nature_cnn"
    assert agents.make_network((4, 84, 84), 6, False, torso="nature_cnn").torso == "nature_cnn"
    assert agents.make_network((7,), 2, True, torso="mlp").torso == "mlp"
    with pytest.raises(ValueError, match="does not fit observation shape"):
        agents.make_network((7,), 6, False, torso="ba3c")
    with pytest.raises(ValueError, match="does not fit observation shape"):
        agents.make_network((72, 96, 4), 6, False, torso="ba3c")
    with pytest.raises(ValueError, match="Unknown torso"):
        agents.make_network((4, 84, 84), 6, False, torso="resnet")
    with pytest.raises(ValueError, match="hidden"):
        agents.make_network((4, 84, 84), 6, False, torso="ba3c", hidden=0)


def test_mlp_options_match_sb3_ortho_init_false_relu_and_log_std_init():
    """rl-zoo3's tuned MuJoCo PPO: ReLU 256x256, PyTorch's default init (U(+-1/sqrt(fan_in))), log-std -2."""
    import jax
    import jax.numpy as jnp

    from agents.networks import make_network

    network = make_network((17,), 6, True, hidden_sizes=(256, 128), activation="relu", orthogonal_init=False,
                           log_std_init=-2.0)
    params = network.init(jax.random.PRNGKey(0), jnp.zeros((1, 17)))["params"]
    first = params["actor_torso"]["Dense_0"]["kernel"]
    assert first.shape == (17, 256) and params["critic_torso"]["Dense_1"]["kernel"].shape == (256, 128)
    assert float(jnp.abs(first).max()) <= 1 / np.sqrt(17) and float(jnp.abs(first).max()) > 0.9 / np.sqrt(17)
    np.testing.assert_array_equal(params["log_std"], np.full(6, -2.0, np.float32))
    (mean, log_std), value = network.apply({"params": params}, -jnp.ones((3, 17)) * 100)
    assert mean.shape == (3, 6) and value.shape == (3,) and np.all(np.asarray(log_std) == -2.0)
    # ReLU, not tanh: features are >= 0 and grow with the input instead of saturating at 1
    from agents.networks import MLPTorso

    for activation, low, high in (("relu", 0.0, np.inf), ("tanh", -1.0, 1.0)):
        torso = MLPTorso((32,), activation=activation, orthogonal_init=False)
        x = jax.random.normal(jax.random.PRNGKey(1), (64, 17)) * 100
        out = np.asarray(torso.apply(torso.init(jax.random.PRNGKey(0), x), x))
        assert out.min() >= low and out.max() <= high
        assert (out.max() > 1.5) == (activation == "relu")
    with pytest.raises(ValueError, match="activation"):
        make_network((17,), 6, True, activation="gelu")


def test_an_action_key_is_owned_by_its_env_and_step():
    """`action_keys` gives row i the key of (env_ids[i], env_steps[i]) alone: the same pair has the same key in any
    batch, order or step broadcast, and different pairs differ."""
    run_key = jax.random.PRNGKey(7)
    env_ids, steps = jnp.array([3, 0, 5, 1]), jnp.array([10, 10, 2, 11])
    keys = agents.action_keys(run_key, env_ids, steps)
    pairs = zip([3, 0, 5, 1], [10, 10, 2, 11], strict=True)
    expected = [jax.random.fold_in(jax.random.fold_in(run_key, e), s) for e, s in pairs]
    chex.assert_trees_all_equal(keys, jnp.stack(expected))
    reordered = agents.action_keys(run_key, env_ids[::-1], steps[::-1])
    chex.assert_trees_all_equal(reordered, keys[::-1])
    same_step = agents.action_keys(run_key, env_ids[:2], 10)
    chex.assert_trees_all_equal(same_step, keys[:2])
    assert len({tuple(np.asarray(k).tolist()) for k in keys}) == len(keys)
