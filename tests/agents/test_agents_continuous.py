"""Tests for agents.ddpg (DDPG, TD3: Fujimoto et al. 2018), agents.sac (Haarnoja et al. 2018) and their networks."""

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agents.ddpg import DDPGConfig, ddpg_act, ddpg_config, ddpg_init, ddpg_update, td3_target
from agents.offpolicy_networks import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    DeterministicActor,
    GaussianActor,
    QNetwork,
    TwinQ,
    bounds_as_tuples,
    squashed_gaussian_log_prob,
    squashed_gaussian_mode,
    squashed_gaussian_sample,
)
from agents.sac import SACConfig, sac_act, sac_init, sac_update, temperature_loss

OBS_DIM, ACTION_DIM, B = 3, 2, 8
LOW, HIGH = np.array([-2.0, -1.0]), np.array([2.0, 0.5])
GAMMA = 0.9


def _constant_actor(params, obs):
    """mu'(s) = params["a"] for every row."""
    return jnp.broadcast_to(params["a"], (obs.shape[0], params["a"].shape[0]))


def _linear_twin_critic(params, obs, action):
    """Q_k(s, a) = c_k + m_k sum(a), ``[2, B]``."""
    del obs
    return params["c"][:, None] + params["m"][:, None] * jnp.sum(action, axis=-1)[None]


def _target_batch(n, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "reward": jnp.asarray(rng.normal(size=n), jnp.float32),
        "next_obs": jnp.zeros((n, 1)),
        "done": jnp.asarray(np.arange(n) % 4 == 3, jnp.float32),
    }


def _random_batch(seed, n=B, action_dim=ACTION_DIM, low=LOW, high=HIGH):
    rng = np.random.default_rng(seed)
    return {
        "obs": jnp.asarray(rng.normal(size=(n, OBS_DIM)), jnp.float32),
        "action": jnp.asarray(rng.uniform(low, high, size=(n, action_dim)), jnp.float32),
        "reward": jnp.asarray(rng.normal(size=n), jnp.float32),
        "next_obs": jnp.asarray(rng.normal(size=(n, OBS_DIM)), jnp.float32),
        "done": jnp.asarray(rng.uniform(size=n) < 0.2, jnp.float32),
    }


def _td3_target(actor, critic, batch, key, config, low, high):
    return jax.jit(
        functools.partial(
            td3_target,
            actor_apply=_constant_actor,
            critic_apply=_linear_twin_critic,
            config=config,
            action_low=low,
            action_high=high,
        )
    )(actor, critic, batch, key)


def test_td3_target_takes_min_of_twin_target_critics():
    batch = _target_batch(16)
    config = DDPGConfig(gamma=GAMMA)
    actor = {"a": jnp.array([0.0])}
    expected_not_min = batch["reward"] + GAMMA * (1.0 - batch["done"]) * 3.0
    for c in ([1.0, 3.0], [3.0, 1.0]):
        critic = {"c": jnp.array(c), "m": jnp.zeros(2)}
        target = _td3_target(actor, critic, batch, jax.random.key(0), config, [-1.0], [1.0])
        np.testing.assert_allclose(target, batch["reward"] + GAMMA * (1.0 - batch["done"]) * 1.0, rtol=1e-6)
        assert not np.allclose(target, expected_not_min)


def test_td3_target_smoothing_noise_is_clipped_scaled_and_kept_in_bounds():
    n = 64
    batch = _target_batch(n, seed=1)
    not_done = 1.0 - np.asarray(batch["done"])
    critic = {"c": jnp.array([0.0, 5.0]), "m": jnp.ones(2)}  # min_k Q_k = sum(a)
    # Half-range 2, huge noise: every draw is clipped to +-0.5 * 2 = +-1 around mu' = 1.5, and 2.5 is then
    # clipped back to the bound 2.0.
    config = DDPGConfig(gamma=GAMMA, policy_noise=100.0, noise_clip=0.5)
    target = _td3_target({"a": jnp.array([1.5])}, critic, batch, jax.random.key(3), config, [-2.0], [2.0])
    next_action = (np.asarray(target) - np.asarray(batch["reward"]))[not_done > 0] / GAMMA
    low_hits = np.isclose(next_action, 0.5, atol=1e-5)
    high_hits = np.isclose(next_action, 2.0, atol=1e-5)
    assert np.all(low_hits | high_hits)
    assert low_hits.any() and high_hits.any()
    # Terminated rows never see s'.
    np.testing.assert_allclose(np.asarray(target)[not_done == 0], np.asarray(batch["reward"])[not_done == 0])

    # Small noise: a' = 0 + N(0, 0.01) * 2 (scaled by the half-range, well inside the clip).
    config = DDPGConfig(gamma=GAMMA, policy_noise=0.01, noise_clip=0.5)
    target = _td3_target({"a": jnp.array([0.0])}, critic, batch, jax.random.key(4), config, [-2.0], [2.0])
    next_action = (np.asarray(target) - np.asarray(batch["reward"]))[not_done > 0] / GAMMA
    assert np.all(np.abs(next_action) < 4 * 0.02)
    assert 0.01 < np.std(next_action) < 0.03


def test_ddpg_target_uses_single_critic_without_noise():
    batch = _target_batch(8, seed=2)
    config = dataclasses.replace(ddpg_config(), gamma=GAMMA)

    def single_critic(params, obs, action):
        return _linear_twin_critic(params, obs, action)[0]  # [B]

    target = td3_target(
        {"a": jnp.array([0.25, -0.5])},
        {"c": jnp.array([1.0, -10.0]), "m": jnp.array([2.0, 0.0])},
        batch,
        jax.random.key(0),
        actor_apply=_constant_actor,
        critic_apply=single_critic,
        config=config,
        action_low=[-1.0, -1.0],
        action_high=[1.0, 1.0],
    )
    # Q'(s', mu'(s')) = 1 + 2 * (0.25 - 0.5) = 0.5 exactly: no noise, no min.
    np.testing.assert_allclose(target, batch["reward"] + GAMMA * (1.0 - batch["done"]) * 0.5, rtol=1e-6)


def _td3_setup(config, seed=0):
    low, high = bounds_as_tuples(LOW, HIGH)
    actor = DeterministicActor(ACTION_DIM, low, high, hidden_sizes=(16,))
    critic = TwinQ(hidden_sizes=(16,))
    obs = jnp.zeros((1, OBS_DIM))
    key_actor, key_critic, key_state = jax.random.split(jax.random.key(seed), 3)
    actor_params = actor.init(key_actor, obs)
    critic_params = critic.init(key_critic, obs, jnp.zeros((1, ACTION_DIM)))
    actor_opt, critic_opt = optax.adam(1e-2), optax.adam(1e-2)
    state = ddpg_init(key_state, actor_params, critic_params, actor_optimizer=actor_opt, critic_optimizer=critic_opt)
    update = jax.jit(
        functools.partial(
            ddpg_update,
            actor_apply=actor.apply,
            critic_apply=critic.apply,
            actor_optimizer=actor_opt,
            critic_optimizer=critic_opt,
            config=config,
            action_low=LOW,
            action_high=HIGH,
        )
    )
    return actor, state, update


def _changed(a, b):
    return float(optax.tree.norm(jax.tree.map(jnp.subtract, a, b))) > 0.0


@pytest.mark.slow
def test_td3_delays_actor_and_targets_and_averages_with_polyak():
    tau = 0.1
    config = DDPGConfig(gamma=0.99, tau=tau, policy_delay=3)
    _, state, update = _td3_setup(config)
    weights = jnp.ones((B,))
    for step in range(1, 7):
        previous = state
        state, metrics, priorities = update(state, _random_batch(step), weights)
        assert int(state.step) == step
        assert _changed(state.critic_params, previous.critic_params)  # the critic learns every step
        assert all(np.isfinite(float(v)) for v in metrics.values())
        chex.assert_shape(priorities, (B,))
        assert np.all(np.asarray(priorities) >= 0.0)
        if step % 3 == 0:
            assert float(metrics["actor_updated"]) == 1.0
            assert _changed(state.actor_params, previous.actor_params)
            # Polyak: target <- tau * online + (1 - tau) * target, for the actor and both critics.
            expected_actor = jax.tree.map(
                lambda p, t: tau * p + (1 - tau) * t, state.actor_params, previous.actor_target_params
            )
            expected_critic = jax.tree.map(
                lambda p, t: tau * p + (1 - tau) * t, state.critic_params, previous.critic_target_params
            )
            chex.assert_trees_all_close(state.actor_target_params, expected_actor, rtol=1e-6, atol=1e-7)
            chex.assert_trees_all_close(state.critic_target_params, expected_critic, rtol=1e-6, atol=1e-7)
        else:
            assert float(metrics["actor_updated"]) == 0.0
            chex.assert_trees_all_equal(state.actor_params, previous.actor_params)
            chex.assert_trees_all_equal(state.actor_opt_state, previous.actor_opt_state)
            chex.assert_trees_all_equal(state.actor_target_params, previous.actor_target_params)
            chex.assert_trees_all_equal(state.critic_target_params, previous.critic_target_params)
    # The skipped actor steps did not advance Adam: two actor updates in six calls.
    assert int(state.actor_opt_state[0].count) == 2
    assert int(state.critic_opt_state[0].count) == 6
    assert update._cache_size() == 1  # the delayed branch is a lax.cond, not a retrace


def test_ddpg_priorities_are_abs_td_and_weights_scale_critic_loss():
    config = DDPGConfig(gamma=0.99, policy_delay=1)
    _, state, update = _td3_setup(config, seed=1)
    batch = _random_batch(10)
    _, metrics_one, prio_one = update(state, batch, jnp.ones((B,)))
    _, metrics_two, prio_two = update(state, batch, 2.0 * jnp.ones((B,)))
    np.testing.assert_allclose(metrics_two["critic_loss"], 2.0 * metrics_one["critic_loss"], rtol=1e-5)
    np.testing.assert_allclose(prio_one, prio_two, rtol=1e-6)
    # Same key in both calls -> same target; the priority is max_k |y - Q_k| with the pre-update critics.
    assert float(jnp.max(prio_one)) > 0.0


def test_deterministic_actor_respects_bounds_and_ddpg_act_noise():
    low, high = bounds_as_tuples(LOW, HIGH)
    actor = DeterministicActor(ACTION_DIM, low, high, hidden_sizes=(8,))
    obs = 100.0 * jax.random.normal(jax.random.key(0), (256, OBS_DIM))
    params = actor.init(jax.random.key(1), obs)
    action = actor.apply(params, obs)
    assert np.all(np.asarray(action) >= LOW - 1e-6) and np.all(np.asarray(action) <= HIGH + 1e-6)
    # A zero output kernel leaves offset + scale * tanh(bias): the midpoint, or the bounds once tanh saturates.
    head = params["params"]["Dense_1"]
    for bias, expected in (([0.0, 0.0], (LOW + HIGH) / 2), ([50.0, -50.0], [HIGH[0], LOW[1]])):
        head = {"kernel": jnp.zeros_like(head["kernel"]), "bias": jnp.array(bias)}
        fixed = {"params": dict(params["params"], Dense_1=head)}
        np.testing.assert_allclose(actor.apply(fixed, obs[:3]), np.broadcast_to(expected, (3, 2)), atol=1e-6)
    act = functools.partial(ddpg_act, actor_apply=actor.apply, action_low=LOW, action_high=HIGH)
    np.testing.assert_allclose(act(params, obs, jax.random.key(2), 0.0), action)
    noisy = act(params, obs, jax.random.key(2), 10.0)
    assert np.all(np.asarray(noisy) >= LOW) and np.all(np.asarray(noisy) <= HIGH)
    with pytest.raises(ValueError, match="action_low < action_high"):
        bounds_as_tuples([1.0], [0.0])


@pytest.mark.parametrize("make", [
    lambda init: DeterministicActor(ACTION_DIM, *bounds_as_tuples(LOW, HIGH), hidden_sizes=(400, 300), dense_init=init),
    lambda init: GaussianActor(ACTION_DIM, hidden_sizes=(400, 300), dense_init=init),
    lambda init: TwinQ(hidden_sizes=(400, 300), dense_init=init),
    lambda init: QNetwork(ACTION_DIM, hidden_sizes=(400, 300), dense_init=init),
], ids=["deterministic_actor", "gaussian_actor", "twin_q", "q_network"])
def test_torch_init_draws_every_dense_uniformly_within_one_over_root_fan_in_with_the_same_tree(make):
    obs = jnp.zeros((1, OBS_DIM))
    inputs = (obs, jnp.zeros((1, ACTION_DIM))) if isinstance(make("flax"), TwinQ) else (obs,)
    flax_params = make("flax").init(jax.random.key(0), *inputs)
    torch_params = make("torch").init(jax.random.key(0), *inputs)
    assert jax.tree.structure(flax_params) == jax.tree.structure(torch_params)  # same names: checkpoints load
    layers = [leaf for path, leaf in jax.tree_util.tree_leaves_with_path(torch_params)
              if jax.tree_util.keystr(path).endswith("['kernel']")]
    assert len(layers) >= 3
    for kernel in layers:
        fan_in = kernel.shape[0]
        bound = 1.0 / np.sqrt(fan_in)
        assert np.all(np.abs(np.asarray(kernel)) <= bound)
        if kernel.size >= 1000:  # PyTorch's variance, bound^2 / 3: a third of LeCun normal's 1 / fan_in
            np.testing.assert_allclose(np.var(np.asarray(kernel)), bound**2 / 3, rtol=0.1)
    biases = [leaf for path, leaf in jax.tree_util.tree_leaves_with_path(torch_params)
              if jax.tree_util.keystr(path).endswith("['bias']")]
    assert all(np.any(np.asarray(b) != 0) for b in biases)  # Flax's are zeros
    with pytest.raises(ValueError, match="Unknown init"):
        make("kaiming").init(jax.random.key(0), *inputs)


def _normal_log_pdf(x, mean, std):
    return -0.5 * ((x - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)


def test_squashed_gaussian_log_prob_matches_change_of_variables():
    low, high = np.array([-2.0, 1.0]), np.array([3.0, 1.5])
    mean = jnp.array([[0.3, -1.2]] * 4096)
    log_std = jnp.array([[-0.5, 0.4]] * 4096)
    action, log_prob = squashed_gaussian_sample(mean, log_std, jax.random.key(0), action_low=low, action_high=high)
    action, log_prob = np.asarray(action, np.float64), np.asarray(log_prob, np.float64)
    assert np.all(action > low) and np.all(action < high)

    # Numerical reference in float64: u = atanh((a - offset) / scale), p(a) = N(u) |du/da|, du/da by central
    # differences of the inverse map.
    scale, offset = (high - low) / 2, (high + low) / 2
    inverse = lambda a: np.arctanh((a - offset) / scale)  # noqa: E731
    keep = np.all(np.abs((action - offset) / scale) < 0.999, axis=1)  # finite differences need room
    a = action[keep]
    h = 1e-6 * scale
    du_da = (inverse(a + h) - inverse(a - h)) / (2 * h)
    reference = np.sum(_normal_log_pdf(inverse(a), np.asarray(mean)[0], np.exp(np.asarray(log_std)[0])), axis=1)
    reference += np.sum(np.log(du_da), axis=1)
    np.testing.assert_allclose(log_prob[keep], reference, rtol=1e-3, atol=1e-3)
    # The same density from the action alone (inverting the squashing).
    from_action = squashed_gaussian_log_prob(
        jnp.asarray(action[keep], jnp.float32),
        mean[: keep.sum()],
        log_std[: keep.sum()],
        action_low=low,
        action_high=high,
    )
    np.testing.assert_allclose(from_action, log_prob[keep], rtol=1e-3, atol=1e-3)


def test_squashed_gaussian_density_integrates_to_one_on_the_box():
    low, high = -2.0, 3.0
    grid = np.linspace(low, high, 200_001)[1:-1]
    for mu, log_sigma in ((0.0, 0.0), (1.5, -1.0), (-0.5, 0.3)):
        log_p = squashed_gaussian_log_prob(
            jnp.asarray(grid[:, None], jnp.float32),
            jnp.full((grid.size, 1), mu),
            jnp.full((grid.size, 1), log_sigma),
            action_low=[low],
            action_high=[high],
        )
        total = np.sum(np.exp(np.asarray(log_p, np.float64))) * (grid[1] - grid[0])
        np.testing.assert_allclose(total, 1.0, atol=1e-2)


def test_gaussian_actor_clips_log_std_and_sac_act():
    actor = GaussianActor(ACTION_DIM, hidden_sizes=(8,))
    obs = 1000.0 * jax.random.normal(jax.random.key(0), (64, OBS_DIM))
    params = actor.init(jax.random.key(1), obs)
    mean, log_std = actor.apply(params, obs)
    chex.assert_shape([mean, log_std], (64, ACTION_DIM))
    assert float(jnp.min(log_std)) == LOG_STD_MIN and float(jnp.max(log_std)) == LOG_STD_MAX
    act = functools.partial(sac_act, actor_apply=actor.apply, action_low=LOW, action_high=HIGH)
    deterministic = act(params, obs, jax.random.key(2), True)
    np.testing.assert_allclose(deterministic, squashed_gaussian_mode(mean, action_low=LOW, action_high=HIGH))
    sampled = act(params, obs, jax.random.key(2), False)
    assert np.all(np.asarray(sampled) >= LOW) and np.all(np.asarray(sampled) <= HIGH)
    assert not np.allclose(sampled, deterministic)


def _fixed_gaussian_actor(params, obs):
    shape = (obs.shape[0], params["mean"].shape[0])
    return jnp.broadcast_to(params["mean"], shape), jnp.broadcast_to(params["log_std"], shape)


def _sac_update_fn(actor_apply, critic_apply, config, low, high, lr=0.1):
    actor_opt, critic_opt, alpha_opt = optax.adam(1e-3), optax.adam(1e-3), optax.sgd(lr)
    update = jax.jit(
        functools.partial(
            sac_update,
            actor_apply=actor_apply,
            critic_apply=critic_apply,
            actor_optimizer=actor_opt,
            critic_optimizer=critic_opt,
            alpha_optimizer=alpha_opt,
            config=config,
            action_low=low,
            action_high=high,
        )
    )
    init = functools.partial(
        sac_init, actor_optimizer=actor_opt, critic_optimizer=critic_opt, alpha_optimizer=alpha_opt
    )
    return update, init


@pytest.mark.parametrize("log_std, direction", [(0.0, -1.0), (-4.0, 1.0)])
@pytest.mark.slow
def test_sac_temperature_falls_above_target_entropy_and_rises_below(log_std, direction):
    # One action dim on [-1, 1], target entropy -1: a unit-std squashed Gaussian has entropy ~ +0.4 (above),
    # std e^-4 has entropy ~ -4 + 1.42 (below).
    critic = TwinQ(hidden_sizes=(8,))
    batch = _random_batch(0, n=64, action_dim=1, low=-1.0, high=1.0)
    critic_params = critic.init(jax.random.key(0), batch["obs"], batch["action"])
    actor_params = {"mean": jnp.zeros(1), "log_std": jnp.full(1, log_std)}
    update, init = _sac_update_fn(_fixed_gaussian_actor, critic.apply, SACConfig(), [-1.0], [1.0])
    state = init(jax.random.key(1), actor_params, critic_params, initial_alpha=0.5)
    new_state, metrics, _ = update(state, batch, jnp.ones((64,)))
    assert (float(metrics["entropy"]) - (-1.0)) * direction < 0.0  # entropy on the stated side of the target
    change = float(new_state.log_alpha - state.log_alpha)
    assert change * direction > 0.0
    # SGD on log alpha: the step is -lr * alpha * (entropy - target).
    np.testing.assert_allclose(change, -0.1 * 0.5 * (float(metrics["entropy"]) + 1.0), rtol=1e-4)
    np.testing.assert_allclose(metrics["alpha"], 0.5, rtol=1e-6)
    # Without learning, alpha stays put.
    update_fixed, _ = _sac_update_fn(_fixed_gaussian_actor, critic.apply, SACConfig(learn_alpha=False), [-1.0], [1.0])
    fixed_state, _, _ = update_fixed(state, batch, jnp.ones((64,)))
    assert float(fixed_state.log_alpha) == float(state.log_alpha)


def test_temperature_loss_gradient_sign():
    log_prob = jnp.array([-0.5, 0.5])  # entropy estimate 0.0
    grad = jax.grad(temperature_loss)(jnp.log(2.0), log_prob, target_entropy=-1.0)
    np.testing.assert_allclose(grad, 2.0 * (0.0 + 1.0), rtol=1e-6)  # alpha (H - H_target) > 0: alpha falls
    grad = jax.grad(temperature_loss)(jnp.log(2.0), log_prob, target_entropy=1.0)
    np.testing.assert_allclose(grad, 2.0 * (0.0 - 1.0), rtol=1e-6)


def test_sac_update_jits_gives_finite_metrics_and_polyak_targets():
    tau = 0.05
    actor = GaussianActor(ACTION_DIM, hidden_sizes=(16,))
    critic = TwinQ(hidden_sizes=(16,))
    obs = jnp.zeros((1, OBS_DIM))
    actor_params = actor.init(jax.random.key(0), obs)
    critic_params = critic.init(jax.random.key(1), obs, jnp.zeros((1, ACTION_DIM)))
    update, init = _sac_update_fn(actor.apply, critic.apply, SACConfig(tau=tau), LOW, HIGH, lr=3e-4)
    state = init(jax.random.key(2), actor_params, critic_params)
    weights = jnp.asarray(np.random.default_rng(0).uniform(0.1, 1.0, size=B), jnp.float32)
    for step in range(1, 4):
        previous = state
        state, metrics, priorities = update(state, _random_batch(step), weights)
        assert all(np.isfinite(float(v)) for v in metrics.values()), metrics
        chex.assert_shape(priorities, (B,))
        assert np.all(np.isfinite(np.asarray(priorities)))
        assert _changed(state.actor_params, previous.actor_params)
        assert _changed(state.critic_params, previous.critic_params)
        expected = jax.tree.map(
            lambda p, t: tau * p + (1 - tau) * t, state.critic_params, previous.critic_target_params
        )
        chex.assert_trees_all_close(state.critic_target_params, expected, rtol=1e-6, atol=1e-7)
        assert not np.array_equal(jax.random.key_data(state.key), jax.random.key_data(previous.key))
    assert int(state.step) == 3
    assert update._cache_size() == 1
    assert set(metrics) == {
        "critic_loss",
        "actor_loss",
        "alpha_loss",
        "alpha",
        "entropy",
        "q_mean",
        "td_abs_mean",
        "critic_grad_norm",
        "actor_grad_norm",
    }


AXIS = "learner"


def _parallel(update):
    """PAL learners (seed 003, Sec. V-B): replicated state, one batch per learner, replicated new state."""
    return jax.jit(jax.vmap(update, in_axes=(None, 0, 0), out_axes=(None, None, 0), axis_name=AXIS))


def _stack(*trees):
    return jax.tree.map(lambda *x: jnp.stack(x), *trees)


def _concat(*trees):
    return jax.tree.map(lambda *x: jnp.concatenate(x), *trees)


@pytest.mark.parametrize("name", ["td3", "ddpg"])
@pytest.mark.slow
def test_parallel_td3_and_ddpg_learners_equal_one_update_on_the_concatenated_batch(name):
    # No smoothing noise, so the target is deterministic and the noise keys do not matter.
    config = DDPGConfig(gamma=0.99, tau=0.1, policy_noise=0.0) if name == "td3" else ddpg_config()
    low, high = bounds_as_tuples(LOW, HIGH)
    actor = DeterministicActor(ACTION_DIM, low, high, hidden_sizes=(16,))
    twin = TwinQ(hidden_sizes=(16,))
    critic_apply = twin.apply if config.twin else (lambda p, o, a: twin.apply(p, o, a)[0])
    obs = jnp.zeros((1, OBS_DIM))
    actor_params = actor.init(jax.random.key(0), obs)
    critic_params = twin.init(jax.random.key(1), obs, jnp.zeros((1, ACTION_DIM)))
    # SGD, not Adam: Adam's first step is invariant to the gradient's scale and would hide a sum for a mean.
    actor_opt, critic_opt = optax.sgd(0.05), optax.sgd(0.05)
    state = ddpg_init(
        jax.random.key(2), actor_params, critic_params, actor_optimizer=actor_opt, critic_optimizer=critic_opt
    )
    update = functools.partial(
        ddpg_update,
        actor_apply=actor.apply,
        critic_apply=critic_apply,
        actor_optimizer=actor_opt,
        critic_optimizer=critic_opt,
        config=config,
        action_low=LOW,
        action_high=HIGH,
    )
    parallel, single = _parallel(functools.partial(update, axis_name=AXIS)), jax.jit(update)
    rng = np.random.default_rng(0)
    par_state = one_state = state
    for step in range(2):  # TD3's actor and targets move on the second call only
        batches = [_random_batch(10 * step + 1), _random_batch(10 * step + 2)]
        weights = [jnp.asarray(rng.uniform(0.2, 1.0, size=B), jnp.float32) for _ in batches]
        previous = par_state
        par_state, par_metrics, par_priorities = parallel(par_state, _stack(*batches), _stack(*weights))
        one_state, one_metrics, one_priorities = single(one_state, _concat(*batches), _concat(*weights))
        chex.assert_trees_all_equal_shapes(par_state, state)
        chex.assert_trees_all_close(par_metrics, one_metrics, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(par_priorities, np.reshape(one_priorities, (2, B)), rtol=1e-5, atol=1e-6)
    assert float(par_metrics["actor_updated"]) == 1.0
    for field in ("actor_params", "critic_params", "actor_target_params", "critic_target_params"):
        chex.assert_trees_all_close(getattr(par_state, field), getattr(one_state, field), rtol=1e-5, atol=1e-6)
    assert _changed(par_state.actor_params, state.actor_params)
    np.testing.assert_array_equal(jax.random.key_data(par_state.key), jax.random.key_data(one_state.key))
    # The learners' batches differ: the averaged step is not the step on the first learner's batch alone.
    first_only, _, _ = single(previous, batches[0], weights[0])
    assert _changed(par_state.critic_params, first_only.critic_params)
    assert _changed(par_state.actor_params, first_only.actor_params)


@pytest.mark.slow
def test_parallel_sac_learners_fold_in_their_index_and_keep_the_state_replicated():
    actor = GaussianActor(ACTION_DIM, hidden_sizes=(16,))
    critic = TwinQ(hidden_sizes=(16,))
    obs = jnp.zeros((1, OBS_DIM))
    actor_params = actor.init(jax.random.key(0), obs)
    critic_params = critic.init(jax.random.key(1), obs, jnp.zeros((1, ACTION_DIM)))
    actor_opt, critic_opt, alpha_opt = optax.sgd(0.05), optax.sgd(0.05), optax.sgd(0.1)
    state = sac_init(
        jax.random.key(2),
        actor_params,
        critic_params,
        actor_optimizer=actor_opt,
        critic_optimizer=critic_opt,
        alpha_optimizer=alpha_opt,
    )
    update = functools.partial(
        sac_update,
        actor_apply=actor.apply,
        critic_apply=critic.apply,
        actor_optimizer=actor_opt,
        critic_optimizer=critic_opt,
        alpha_optimizer=alpha_opt,
        config=SACConfig(),
        action_low=LOW,
        action_high=HIGH,
    )
    batch, weights = _random_batch(3), jnp.ones((B,))
    # Both learners get the SAME batch: only their (folded-in) sample keys differ.
    par_state, par_metrics, par_priorities = _parallel(functools.partial(update, axis_name=AXIS))(
        state, _stack(batch, batch), _stack(weights, weights)
    )
    one_state, one_metrics, _ = jax.jit(update)(state, batch, weights)

    chex.assert_trees_all_equal_shapes(par_state, state)  # no learner axis anywhere
    np.testing.assert_array_equal(jax.random.key_data(par_state.key), jax.random.key_data(one_state.key))
    assert int(par_state.step) == 1
    assert set(par_metrics) == set(one_metrics)
    for name, value in par_metrics.items():
        chex.assert_shape(value, ())
        assert np.isfinite(float(value)), name
    chex.assert_shape(par_priorities, (2, B))
    # Without fold_in both learners would reproduce the single update exactly ((x + x) / 2 == x).
    assert not np.allclose(par_priorities[0], par_priorities[1])  # distinct target samples
    assert _changed(par_state.critic_params, one_state.critic_params)
    assert _changed(par_state.actor_params, one_state.actor_params)
    assert float(par_state.log_alpha) != float(one_state.log_alpha)  # distinct actor samples -> entropy
    assert float(par_metrics["critic_loss"]) != float(one_metrics["critic_loss"])
