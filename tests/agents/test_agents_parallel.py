"""Tests for agents.parallel and data-parallel ``a2c_update`` (seed paper 001, Distributed BA3C, Sec. 2.2-2.3).

Synchronous data parallelism averages the replicas' gradients and applies one step everywhere, so with an
all-valid rollout split by environments it must reproduce the single-device update on the whole rollout. The
pmap check needs two XLA CPU devices and runs in its own process (tests/multidevice.py).
"""

import functools
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import agents
from tests.fixtures import random_rollout
from tests.multidevice import run_python


def test_mean_over_axis():
    tree = {"a": jnp.arange(6.0).reshape(3, 2), "b": jnp.array([1.0, 2.0, 6.0])}
    # None: the tree itself, untouched.
    assert agents.mean_over_axis(tree, None) is tree
    # Named axis: the mean over the mapped axis, broadcast back to every member.
    averaged = jax.vmap(lambda t: agents.mean_over_axis(t, agents.DEVICE_AXIS), axis_name=agents.DEVICE_AXIS)(tree)
    np.testing.assert_allclose(averaged["a"], np.broadcast_to(np.array([2.0, 3.0]), (3, 2)))
    np.testing.assert_allclose(averaged["b"], np.full(3, 3.0))
    assert agents.DEVICE_AXIS == "device" and agents.LEARNER_AXIS == "learner"


def test_ordered_mean_adds_replicas_left_to_right():
    rng = np.random.default_rng(0)
    values = jnp.asarray(rng.normal(size=(4, 5)) * 10.0 ** rng.integers(-6, 6, size=(4, 5)), jnp.float32)
    ordered = jax.vmap(lambda x: agents.mean_over_axis(x, "r", ordered=True), axis_name="r")(values)
    expected = (((values[0] + values[1]) + values[2]) + values[3]) / 4  # the order the docstring promises
    np.testing.assert_array_equal(ordered, jnp.broadcast_to(expected, (4, 5)))
    pmean = jax.vmap(lambda x: agents.mean_over_axis(x, "r"), axis_name="r")(values)
    np.testing.assert_allclose(ordered, pmean, rtol=1e-6, atol=1e-6 * float(jnp.max(jnp.abs(values))))


@pytest.mark.parametrize("ordered", [False, True], ids=["pmean", "ordered"])
def test_a_tree_is_averaged_in_one_collective_per_dtype_with_each_leafs_own_values(ordered):
    """Across processes each collective costs a round of messages, so the leaves of a dtype travel together; every
    leaf keeps its shape and dtype and gets exactly the values a collective of its own would give it."""
    rng = np.random.default_rng(1)
    tree = {"kernel": jnp.asarray(rng.normal(size=(4, 3, 5)), jnp.float32),
            "bias": jnp.asarray(rng.normal(size=(4, 5)), jnp.float32),
            "loss": jnp.asarray(rng.normal(size=(4,)), jnp.float32),
            "count": jnp.asarray(rng.integers(0, 9, size=(4, 2)), jnp.int32)}

    def fused(t):
        return agents.mean_over_axis(t, "r", ordered=ordered)

    def per_leaf(t):
        return jax.tree.map(lambda x: agents.mean_over_axis(x, "r", ordered=ordered), t)

    one_replica = jax.tree.map(lambda x: x[0], tree)
    jaxpr = str(jax.make_jaxpr(fused, axis_env=[("r", 4)])(one_replica))
    collective = "all_gather" if ordered else "psum"
    assert jaxpr.count(f"{collective}[") == 2, jaxpr  # float32 and int32
    out, expected = jax.vmap(fused, axis_name="r")(tree), jax.vmap(per_leaf, axis_name="r")(tree)
    for name in tree:
        assert out[name].shape == tree[name].shape and out[name].dtype == expected[name].dtype, name
        np.testing.assert_array_equal(out[name], expected[name], err_msg=name)


@pytest.mark.slow
def test_a2c_update_norm_is_the_applied_step():
    net = agents.make_network((4,), 2, False)
    params = net.init(jax.random.key(0), jnp.zeros((1, 4)))
    rollout = random_rollout(net, params, np.random.default_rng(0), 5, 3)
    optimizer = agents.make_optimizer(
        name="adam_large_batch", learning_rate=1e-2, total_updates=1, anneal_lr=False, max_grad_norm=0.5, eps=1e-3
    )
    state = agents.TrainState(params, optimizer.init(params), jax.random.key(0), jnp.zeros((), jnp.int32))
    config = agents.A2CConfig()
    update = jax.jit(functools.partial(agents.a2c_update, apply_fn=net.apply, optimizer=optimizer, config=config))
    new_state, metrics = update(state, params, rollout)
    step = optax.tree.norm(jax.tree.map(jnp.subtract, new_state.params, params))
    np.testing.assert_allclose(metrics["update_norm"], step, rtol=1e-4)
    # It is the step after the optimizer, not the gradient: Adam's step is about lr per weight.
    assert abs(float(metrics["update_norm"]) - float(metrics["grad_norm"])) > 1e-3


_CHILD = r"""
import functools, json
import jax, jax.numpy as jnp, numpy as np
import agents
from tests.fixtures import random_rollout

assert jax.local_device_count() == 2, jax.devices()
T, B, D = 5, 8, 2
net = agents.make_network((4,), 2, False)
# The helpers are jitted whole: run op by op, each of their ops would compile on its own (~100 small programs).
init = jax.jit(net.init)
params = init(jax.random.key(0), jnp.zeros((1, 4)))
behaviour = init(jax.random.key(1), jnp.zeros((1, 4)))
rollout = random_rollout(net, behaviour, np.random.default_rng(3), T, B)
optimizer = agents.make_optimizer(
    name="adam_large_batch", learning_rate=1e-2, total_updates=1, anneal_lr=False, max_grad_norm=0.5,
    eps=1e-3)
config = agents.A2CConfig(gamma=0.9, gae_lambda=0.95)
state = agents.TrainState(params, optimizer.init(params), jax.random.key(0), jnp.zeros((), jnp.int32))
flat = lambda tree: np.concatenate([np.ravel(x) for x in jax.tree.leaves(tree)]).tolist()
# Devices take the environments (axis 1) in halves: [T, B] -> [D, T, B / D].
shard = jax.jit(lambda tree: jax.tree.map(
    lambda x: jnp.moveaxis(x.reshape(x.shape[0], D, B // D, *x.shape[2:]), 1, 0), tree))
replicate = jax.jit(lambda tree: jax.tree.map(lambda x: jnp.stack([x] * D), tree))
replica = lambda tree, i: jax.tree.map(lambda x: np.asarray(x)[i], tree)

def run(reduce):
    update = functools.partial(agents.a2c_update, apply_fn=net.apply, optimizer=optimizer, config=config)
    # Two consecutive updates, so the optimizer state must stay in sync too.
    single = jax.jit(update)
    s1, m1 = single(state, behaviour, rollout)
    s1, m1 = single(s1, behaviour, rollout)
    sharded = shard(rollout)
    axis_name = agents.DEVICE_AXIS if reduce else None
    parallel = jax.pmap(functools.partial(update, axis_name=axis_name), axis_name=agents.DEVICE_AXIS)
    sp, mp = parallel(replicate(state), replicate(behaviour), sharded)
    sp, mp = parallel(sp, replicate(behaviour), sharded)
    return {
        "single": flat(s1.params),
        "replica0": flat(replica(sp.params, 0)),
        "replica1": flat(replica(sp.params, 1)),
        "start": flat(params),
        "metrics_single": {k: float(v) for k, v in m1.items()},
        "metrics_replica0": {k: float(v[0]) for k, v in mp.items()},
        "metrics_replica1": {k: float(v[1]) for k, v in mp.items()},
    }

def run_ppo():
    # One minibatch per epoch and no per-minibatch advantage normalisation: the replicas' averaged gradients are
    # then exactly the full-batch gradient, whatever the row permutation.
    ppo_config = agents.PPOConfig(num_epochs=2, num_minibatches=1, normalize_advantages=False)
    update = functools.partial(agents.ppo_update, apply_fn=net.apply, optimizer=optimizer, config=ppo_config)
    s1, _ = jax.jit(update)(state, behaviour, rollout)
    parallel = jax.pmap(functools.partial(update, axis_name=agents.DEVICE_AXIS), axis_name=agents.DEVICE_AXIS)
    sp, _ = parallel(replicate(state), replicate(behaviour), shard(rollout))
    return {
        "single": flat(s1.params),
        "replica0": flat(replica(sp.params, 0)),
        "replica1": flat(replica(sp.params, 1)),
        "start": flat(params),
    }

print(json.dumps({"synced": run(True), "unsynced": run(False), "ppo": run_ppo()}))
"""


@pytest.mark.slow
def test_pmap_a2c_and_ppo_updates_equal_single_device_updates():
    result = json.loads(run_python(_CHILD, num_devices=2).strip().splitlines()[-1])
    synced = result["synced"]
    single, replica0, replica1 = (np.asarray(synced[k], np.float32) for k in ("single", "replica0", "replica1"))
    # Every replica applied the same averaged update: bit-identical parameters.
    np.testing.assert_array_equal(replica0, replica1)
    # ...and it is the single-device update on the whole rollout.
    np.testing.assert_allclose(replica0, single, rtol=1e-5, atol=1e-6)
    assert np.abs(single - np.asarray(synced["start"])).max() > 1e-3  # the updates moved the parameters
    assert synced["metrics_replica0"] == synced["metrics_replica1"]
    assert set(synced["metrics_single"]) == set(synced["metrics_replica0"])
    for name, value in synced["metrics_single"].items():
        np.testing.assert_allclose(synced["metrics_replica0"][name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    # Without the reduction each replica follows its own half of the data and the replicas drift apart.
    unsynced = result["unsynced"]
    assert not np.array_equal(np.asarray(unsynced["replica0"]), np.asarray(unsynced["replica1"]))
    chex.assert_trees_all_equal(np.asarray(unsynced["single"]), single)
    # PPO with axis_name averages each minibatch gradient the same way.
    ppo = result["ppo"]
    single, replica0, replica1 = (np.asarray(ppo[k], np.float32) for k in ("single", "replica0", "replica1"))
    np.testing.assert_array_equal(replica0, replica1)
    np.testing.assert_allclose(replica0, single, rtol=1e-5, atol=1e-6)
    assert np.abs(single - np.asarray(ppo["start"])).max() > 1e-3
