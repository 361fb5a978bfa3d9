"""Tests for Distributed BA3C's optimizer pieces in agents.optim (seed paper 001, Sec. 2.4, Eq. (5)-(6))."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import agents

B1, B2, EPS, LR = 0.8, 0.75, 1e-3, 1e-3
PARAMS = {"w": jnp.array([0.5, -1.0, 2.0], jnp.float32), "b": {"c": jnp.array([[0.1, 0.2], [0.3, -0.4]], jnp.float32)}}
# Three gradient steps with mixed signs and magnitudes, some small enough that eps = 1e-3 matters.
GRADS = [
    {"w": np.array([0.3, -0.02, 1.5]), "b": {"c": np.array([[0.01, -0.5], [2.0, 0.003]])}},
    {"w": np.array([-0.1, 0.04, 0.7]), "b": {"c": np.array([[-0.02, 0.4], [1.0, -0.01]])}},
    {"w": np.array([0.2, 0.01, -0.3]), "b": {"c": np.array([[0.05, -0.1], [0.5, 0.002]])}},
]


def _eq5_6_reference(params, grads, *, b1, b2, eps, lr):
    """Seed paper 001, Eq. (2), (3), (5), (6) written out in numpy, one leaf at a time, float64."""
    leaves, treedef = jax.tree.flatten(params)
    theta = [np.asarray(p, np.float64) for p in leaves]
    m = [np.zeros_like(p) for p in theta]
    v = [np.zeros_like(p) for p in theta]
    trajectory = []
    for t, g_tree in enumerate(grads, start=1):
        g_leaves = jax.tree.leaves(g_tree)
        eta_t = lr * np.sqrt(1.0 - b2**t) / (1.0 - b1**t)  # Eq. (5)
        for i, g in enumerate(g_leaves):
            m[i] = b1 * m[i] + (1.0 - b1) * g  # Eq. (2)
            v[i] = b2 * v[i] + (1.0 - b2) * g**2  # Eq. (3)
            theta[i] = theta[i] - eta_t * m[i] / np.sqrt(v[i] + eps)  # Eq. (6)
        trajectory.append(jax.tree.unflatten(treedef, [x.copy() for x in theta]))
    return trajectory


def _run(optimizer, params, grads):
    update = jax.jit(optimizer.update)
    state = optimizer.init(params)
    trajectory = []
    for g in grads:
        g = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), g)
        updates, state = update(g, state, params)
        params = optax.apply_updates(params, updates)
        trajectory.append(params)
    return trajectory


def test_large_batch_adam_matches_eq_5_6():
    expected = _eq5_6_reference(PARAMS, GRADS, b1=B1, b2=B2, eps=EPS, lr=LR)
    got = _run(agents.large_batch_adam(LR, b1=B1, b2=B2, eps=EPS), PARAMS, GRADS)
    for step, (g, e) in enumerate(zip(got, expected, strict=True)):
        chex.assert_trees_all_close(g, jax.tree.map(np.float32, e), rtol=1e-6, atol=1e-7, custom_message=f"step {step}")
    # The parameters really moved (by ~lr per step), so the comparison is not vacuous.
    moved = optax.tree.norm(jax.tree.map(jnp.subtract, got[-1], PARAMS))
    assert float(moved) > 1e-3


def test_large_batch_adam_differs_from_optax_adam():
    # optax.adam puts eps outside the root, after bias correction: m_hat / (sqrt(v_hat) + eps).
    ours = _run(agents.large_batch_adam(LR, b1=B1, b2=B2, eps=EPS), PARAMS, GRADS)
    theirs = _run(optax.adam(LR, b1=B1, b2=B2, eps=EPS), PARAMS, GRADS)
    step_ours = jax.tree.map(jnp.subtract, ours[0], PARAMS)
    step_theirs = jax.tree.map(jnp.subtract, theirs[0], PARAMS)
    # The smallest gradient (0.003) is where eps inside the root shrinks the step the most.
    small = (1, 1)
    assert abs(float(step_ours["b"]["c"][small])) < 0.5 * abs(float(step_theirs["b"]["c"][small]))
    with pytest.raises(AssertionError):
        chex.assert_trees_all_close(ours[-1], theirs[-1], rtol=1e-4, atol=1e-6)
    # With a negligible eps both are the same algorithm (Eq. 4 vs Eq. 5-6).
    ours = _run(agents.large_batch_adam(LR, b1=B1, b2=B2, eps=1e-16), PARAMS, GRADS)
    theirs = _run(optax.adam(LR, b1=B1, b2=B2, eps=0.0), PARAMS, GRADS)
    chex.assert_trees_all_close(ours[-1], theirs[-1], rtol=1e-5, atol=1e-7)


def test_scale_by_large_batch_adam_state_and_direction():
    transform = agents.scale_by_large_batch_adam(B1, B2, EPS)
    state = transform.init(PARAMS)
    assert int(state.count) == 0
    chex.assert_trees_all_equal(state.mu, jax.tree.map(jnp.zeros_like, PARAMS))
    g = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), GRADS[0])
    direction, state = transform.update(g, state)
    assert int(state.count) == 1
    # t = 1: sqrt(1 - b2) / (1 - b1) * (1 - b1) g / sqrt((1 - b2) g^2 + eps), positive along g.
    g_w = GRADS[0]["w"]
    expected = np.sqrt(1 - B2) * g_w / np.sqrt((1 - B2) * g_w**2 + EPS)
    np.testing.assert_allclose(direction["w"], expected, rtol=1e-6)
    chex.assert_trees_all_close(state.mu, jax.tree.map(lambda x: (1 - B1) * x, g), rtol=1e-6)
    chex.assert_trees_all_close(state.nu, jax.tree.map(lambda x: (1 - B2) * x**2, g), rtol=1e-6)


def test_large_batch_adam_accepts_a_schedule():
    schedule = optax.linear_schedule(LR, 0.0, 4)  # lr 1e-3, 7.5e-4, 5e-4 for t = 1, 2, 3
    got = _run(agents.large_batch_adam(schedule, b1=B1, b2=B2, eps=EPS), PARAMS, GRADS)
    # Reference with the step-dependent lr: run the constant-lr reference one step at a time.
    leaves, treedef = jax.tree.flatten(PARAMS)
    theta = [np.asarray(p, np.float64) for p in leaves]
    m = [np.zeros_like(p) for p in theta]
    v = [np.zeros_like(p) for p in theta]
    for t, g_tree in enumerate(GRADS, start=1):
        lr_t = LR * (1 - (t - 1) / 4)
        for i, g in enumerate(jax.tree.leaves(g_tree)):
            m[i] = B1 * m[i] + (1 - B1) * g
            v[i] = B2 * v[i] + (1 - B2) * g**2
            theta[i] = theta[i] - lr_t * np.sqrt(1 - B2**t) / (1 - B1**t) * m[i] / np.sqrt(v[i] + EPS)
    expected = jax.tree.unflatten(treedef, [np.float32(x) for x in theta])
    chex.assert_trees_all_close(got[-1], expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("rule,expected", [("none", 1e-3), ("linear", 16e-3), ("sqrt", 4e-3)])
def test_scale_learning_rate(rule, expected):
    assert agents.scale_learning_rate(1e-3, 16, rule) == pytest.approx(expected, rel=1e-12)
    # Factor 1 is the unscaled learning rate under every rule.
    assert agents.scale_learning_rate(1e-3, 1, rule) == pytest.approx(1e-3, rel=1e-12)


def test_scale_learning_rate_rejects_bad_input():
    with pytest.raises(ValueError, match="Unknown learning-rate scaling rule"):
        agents.scale_learning_rate(1e-3, 4, "cubic")
    with pytest.raises(ValueError, match="factor"):
        agents.scale_learning_rate(1e-3, 0, "linear")


def _make(name, **kwargs):
    defaults = dict(learning_rate=LR, total_updates=10, anneal_lr=False, max_grad_norm=1.0, eps=EPS)
    defaults.update(kwargs)
    return agents.make_optimizer(name=name, **defaults)


def test_make_optimizer_adam_large_batch_is_clip_then_large_batch_adam():
    # Gradients of global norm > 1, so the clip is active on every step.
    big = [jax.tree.map(lambda x: 10.0 * x, g) for g in GRADS]
    got = _run(_make("adam_large_batch"), PARAMS, big)
    reference = optax.chain(optax.clip_by_global_norm(1.0), agents.large_batch_adam(LR, b1=0.8, b2=0.75, eps=EPS))
    expected = _run(reference, PARAMS, big)
    for g, e in zip(got, expected, strict=True):
        chex.assert_trees_all_close(g, e, rtol=1e-6, atol=1e-8)
    # The clip matters here: without it the trajectory is different (eps = 1e-3 breaks scale invariance).
    unclipped = _run(agents.large_batch_adam(LR, eps=EPS), PARAMS, big)
    with pytest.raises(AssertionError):
        chex.assert_trees_all_close(got[-1], unclipped[-1], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("max_grad_norm", [0.0, -1.0, float("inf")])
def test_make_optimizer_without_clipping(max_grad_norm):
    big = [jax.tree.map(lambda x: 10.0 * x, g) for g in GRADS]
    got = _run(_make("adam_large_batch", max_grad_norm=max_grad_norm), PARAMS, big)
    expected = _run(agents.large_batch_adam(LR, eps=EPS), PARAMS, big)
    chex.assert_trees_all_close(got[-1], expected[-1], rtol=1e-6, atol=1e-8)
    # The optimizer state keeps the clipped structure, so checkpoints do not depend on the clip setting.
    clipped_state = _make("adam_large_batch").init(PARAMS)
    chex.assert_trees_all_equal_structs(
        _make("adam_large_batch", max_grad_norm=max_grad_norm).init(PARAMS), clipped_state
    )


def test_make_optimizer_betas():
    # Explicit betas reach both Adams; None gives each optimizer's own defaults.
    got = _run(_make("adam_large_batch", b1=0.5, b2=0.6, max_grad_norm=0.0), PARAMS, GRADS)
    expected = _eq5_6_reference(PARAMS, GRADS, b1=0.5, b2=0.6, eps=EPS, lr=LR)
    chex.assert_trees_all_close(got[-1], jax.tree.map(np.float32, expected[-1]), rtol=1e-6, atol=1e-7)
    got = _run(_make("adam", b1=0.5, b2=0.6, max_grad_norm=0.0), PARAMS, GRADS)
    expected = _run(optax.adam(LR, b1=0.5, b2=0.6, eps=EPS), PARAMS, GRADS)
    chex.assert_trees_all_close(got[-1], expected[-1], rtol=1e-6, atol=1e-8)
    got = _run(_make("adam", max_grad_norm=0.0), PARAMS, GRADS)
    expected = _run(optax.adam(LR, b1=0.9, b2=0.999, eps=EPS), PARAMS, GRADS)
    chex.assert_trees_all_close(got[-1], expected[-1], rtol=1e-6, atol=1e-8)
    # rmsprop ignores the betas.
    plain = _run(_make("rmsprop"), PARAMS, GRADS)
    with_betas = _run(_make("rmsprop", b1=0.1, b2=0.2), PARAMS, GRADS)
    chex.assert_trees_all_equal(plain[-1], with_betas[-1])


def test_make_optimizer_rejects_nan_clip():
    with pytest.raises(ValueError, match="NaN"):
        _make("adam_large_batch", max_grad_norm=float("nan"))
