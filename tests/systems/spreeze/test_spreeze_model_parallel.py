"""Tests for systems.spreeze.model_parallel: SAC with the actor and the critics on two devices (seed 002, 3.2.2).

The device count is fixed when JAX starts, so the checks run in child processes with forced CPU devices."""

import inspect

import pytest

from systems.spreeze import model_parallel as mp
from tests.multidevice import run_python

SETUP = """
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agents.offpolicy_networks import GaussianActor, TwinQ
from agents.sac import SACConfig, sac_init, sac_update
from systems.spreeze import model_parallel as mp

OBS_DIM, ACTION_DIM, B = 3, 1, 64
LOW, HIGH = np.array([-2.0]), np.array([2.0])  # Pendulum-v1
actor = GaussianActor(ACTION_DIM, hidden_sizes=(32,))
critic = TwinQ(hidden_sizes=(32,))
opts = dict(actor_optimizer=optax.adam(3e-3), critic_optimizer=optax.adam(3e-3), alpha_optimizer=optax.adam(3e-3))
kwargs = dict(actor_apply=actor.apply, critic_apply=critic.apply, config=SACConfig(tau=0.05),
              action_low=LOW, action_high=HIGH, **opts)
obs = np.zeros((1, OBS_DIM), np.float32)
state0 = sac_init(jax.random.key(2), actor.init(jax.random.key(0), obs),
                  critic.init(jax.random.key(1), obs, np.zeros((1, ACTION_DIM), np.float32)), **opts)
reference = jax.jit(functools.partial(sac_update, **kwargs))


def random_batch(seed):
    rng = np.random.default_rng(seed)
    batch = {
        "obs": rng.normal(size=(B, OBS_DIM)).astype(np.float32),
        "action": rng.uniform(-2.0, 2.0, size=(B, ACTION_DIM)).astype(np.float32),
        "reward": rng.normal(size=(B,)).astype(np.float32),
        "next_obs": rng.normal(size=(B, OBS_DIM)).astype(np.float32),
        "done": (rng.uniform(size=(B,)) < 0.2).astype(np.float32),
    }
    return batch, rng.uniform(0.2, 1.0, size=(B,)).astype(np.float32)


def assert_matches(model, steps=3):
    ref_state, split = state0, model.place(state0)
    for step in range(steps):
        batch, weights = random_batch(step)
        ref_state, ref_metrics, ref_priorities = reference(ref_state, batch, weights)
        split, metrics, priorities = model.update(split, batch, weights)
        gathered = model.gather(split)
        np.testing.assert_array_equal(jax.random.key_data(gathered.key), jax.random.key_data(ref_state.key))
        chex.assert_trees_all_close(gathered._replace(key=0), ref_state._replace(key=0), rtol=1e-5, atol=1e-6)
        assert set(metrics) == set(ref_metrics) == set(mp.METRIC_KEYS), (set(metrics), set(ref_metrics))
        chex.assert_trees_all_close(metrics, ref_metrics, rtol=1e-5, atol=1e-6)
        chex.assert_trees_all_close(priorities, ref_priorities, rtol=1e-5, atol=1e-6)
    assert int(split.actor.step) == steps
    return split, priorities, metrics
"""


def test_actor_side_functions_never_take_reward_done_action_or_weights():
    critic_only = {"reward", "done", "action", "weights"}
    for fn in (mp.actor_sample, mp.actor_step_vjp, mp.actor_step_params):
        assert not critic_only & set(inspect.signature(fn).parameters), fn.__name__
    assert not critic_only & set(mp.ACTOR_BATCH_KEYS)
    assert {"reward", "done", "action"} <= set(mp.CRITIC_BATCH_KEYS)


@pytest.mark.slow
def test_model_parallel_sac_matches_sac_update_on_two_devices():
    out = run_python(
        SETUP
        + """
d0, d1 = jax.devices()
records = []  # (leaf id, destination, bytes, source devices or None for host)
device_put = jax.device_put


def spy(x, device=None, *args, **kw):
    for leaf in jax.tree.leaves(x):
        src = frozenset(leaf.devices()) if isinstance(leaf, jax.Array) else None
        records.append((id(leaf), device, leaf.nbytes, src))
    return device_put(x, device, *args, **kw)


jax.device_put = spy
for mode in mp.ACTOR_GRAD_MODES:
    model = mp.ModelParallelSAC(actor_device=d0, critic_device=d1, actor_grad=mode, **kwargs)
    assert model.model_parallel
    split, priorities, metrics = assert_matches(model)
    for leaf in jax.tree.leaves(split.actor):
        assert leaf.devices() == {d0}, mode
    for leaf in jax.tree.leaves(split.critic):
        assert leaf.devices() == {d1}, mode
    assert priorities.devices() == {d1}
    assert metrics["critic_loss"].devices() == {d1} and metrics["actor_loss"].devices() == {d0}

    # Reward, done, action and weights only ever go to the critic device; the device-to-device traffic of one
    # update is what transfer_bytes says.
    records.clear()
    batch, weights = random_batch(10)
    model.update(split, batch, weights)[2].block_until_ready()
    sent = {id(batch[k]) for k in ("reward", "done", "action")} | {id(weights)}
    dests = [dest for leaf, dest, _, _ in records if leaf in sent]
    assert len(dests) == 4 and set(dests) == {d1}, (mode, dests)
    assert {dest for leaf, dest, _, _ in records if leaf in {id(batch["obs"]), id(batch["next_obs"])}} == {d0, d1}
    moved = {"actor_to_critic": 0, "critic_to_actor": 0}
    for _, dest, nbytes, src in records:
        if src is not None and src != {dest}:
            moved["actor_to_critic" if dest == d1 else "critic_to_actor"] += nbytes
    assert moved == model.transfer_bytes(B, ACTION_DIM, state0.critic_params), (mode, moved)
    print(mode, moved)
jax.device_put = device_put

# Same device twice: the plain jitted sac_update.
model = mp.ModelParallelSAC(actor_device=d1, critic_device=d1, **kwargs)
assert not model.model_parallel
split, _, _ = assert_matches(model, steps=2)
assert all(leaf.devices() == {d1} for leaf in jax.tree.leaves(split))
print("ok")
""",
        2,
    )
    assert out.strip().endswith("ok"), out
    # B = 64, A = 1: vjp sends a', alpha log pi', a (4 * 64 * 3) and gets q_pi, dL/da back (4 * 64 * 2).
    assert "vjp {'actor_to_critic': 768, 'critic_to_actor': 512}" in out, out


@pytest.mark.slow
def test_one_device_falls_back_to_sac_update():
    out = run_python(
        SETUP
        + """
assert len(jax.devices()) == 1
model = mp.ModelParallelSAC(**kwargs)
assert not model.model_parallel and model.actor_device == model.critic_device
assert model.transfer_bytes(B, ACTION_DIM) == {"actor_to_critic": 0, "critic_to_actor": 0}
split, _, _ = assert_matches(model)
assert isinstance(model.gather(split), type(state0))
assert model._fused._cache_size() == 1
print("ok")
""",
        1,
    )
    assert out.strip().endswith("ok"), out
