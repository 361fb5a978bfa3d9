"""Observation normalization, reward scaling and value clipping for continuous-control PPO:
the running statistics match a numpy reference, the update normalizes a round with its behaviour statistics and
merges the round in (step, env) order, HTS stays bit-identical across actor counts on a MuJoCo task, the statistics
survive --resume, and evaluation applies the frozen statistics of the policy it evaluates."""

import csv
import dataclasses
import json
import os

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import make_network
from agents.batching import FlatBatch
from agents.normalization import (
    OBS_NORM,
    REWARD_NORM,
    NormalizationConfig,
    NormalizedNetwork,
    init_reward_state,
    init_stats,
    normalize,
    normalized_update,
    scale_rewards,
    update_stats,
)
from agents.ppo import PPOConfig, ppo_loss
from agents.types import Rollout, TrainState
from systems.common.checkpoint import list_checkpoints
from systems.common.presets import preset
from systems.common.restore import restore_run
from systems.hts import system as hts
from systems.hts.system import HTSConfig
from systems.registry import ENTRIES
from systems.sync import system as sync


def test_stats_merged_in_pieces_equal_numpy_over_all_valid_rows():
    rng = np.random.default_rng(0)
    rows = rng.normal(3.0, 2.0, size=(300, 5)).astype(np.float32)
    valid = (rng.random(300) > 0.2).astype(np.float32)
    stats = init_stats((5,))
    for lo in range(0, 300, 64):
        stats = update_stats(stats, jnp.asarray(rows[lo:lo + 64]), jnp.asarray(valid[lo:lo + 64]))
    kept = rows[valid > 0]
    assert int(stats["count"]) == len(kept)
    np.testing.assert_allclose(stats["mean"], kept.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stats["var"], kept.var(0), rtol=1e-4)


def test_no_valid_row_leaves_stats_unchanged_and_empty_stats_are_the_identity():
    stats = init_stats((2,))
    same = update_stats(stats, jnp.ones((4, 2)) * 7, jnp.zeros(4))
    chex.assert_trees_all_equal(same, stats)
    x = jnp.array([[0.5, -3.0]])
    np.testing.assert_allclose(normalize(stats, x, clip=10.0), x, atol=1e-6)
    np.testing.assert_allclose(normalize(stats, x * 100, clip=10.0), [[10.0, -10.0]])
    np.testing.assert_allclose(normalize(stats, x * 100, clip=0.0), x * 100, rtol=1e-6)


def _reference_scaling(rewards, ends, valid, gamma, clip, state):
    """SB3 VecNormalize's discounted-return bookkeeping, written as plain loops over one round."""
    returns = np.array(state["returns"], np.float64)
    seen = []
    for t in range(rewards.shape[0]):
        returns = returns * gamma + rewards[t]
        seen.extend(returns[valid[t] > 0])
        returns = returns * (1 - ends[t])
    seen = np.array(seen)
    std = np.sqrt(seen.var() + 1e-8)
    return returns, seen, np.clip(rewards / std, -clip, clip)


def test_reward_scaling_matches_a_loop_reference():
    rng = np.random.default_rng(1)
    rewards = rng.normal(1.0, 3.0, size=(50, 4)).astype(np.float32)
    ends = (rng.random((50, 4)) < 0.05).astype(np.float32)
    valid = np.ones((50, 4), np.float32)
    valid[10, 2] = 0.0
    state = init_reward_state(4)
    new_state, scaled = scale_rewards(state, rewards, ends, valid, gamma=0.99, clip=10.0)
    returns, seen, expected = _reference_scaling(rewards, ends, valid, 0.99, 10.0, state)
    np.testing.assert_allclose(new_state["returns"], returns, rtol=1e-5)
    assert int(new_state["count"]) == len(seen) == 199
    np.testing.assert_allclose(new_state["var"], seen.var(), rtol=1e-4)
    np.testing.assert_allclose(scaled, expected, rtol=1e-4)
    # The next round continues each env's running return.
    again, _ = scale_rewards(new_state, rewards, ends, valid, gamma=0.99, clip=10.0)
    assert int(again["count"]) == 2 * 199


def _rollout(rng, steps=6, envs=3, obs_dim=4):
    z = np.zeros((steps, envs), np.float32)
    return Rollout(
        obs=jnp.asarray(rng.normal(5.0, 3.0, size=(steps + 1, envs, obs_dim)).astype(np.float32)),
        actions=jnp.asarray(rng.normal(size=(steps, envs, 2)).astype(np.float32)),
        rewards=jnp.asarray(rng.normal(size=(steps, envs)).astype(np.float32)),
        terminations=jnp.asarray(z), truncations=jnp.asarray(z), valid=jnp.asarray(z + 1),
        behaviour_log_probs=jnp.asarray(z), behaviour_values=jnp.asarray(z),
    )


def test_update_sees_the_round_normalized_with_the_behaviour_statistics_then_merges_it():
    rng = np.random.default_rng(2)
    rollout = _rollout(rng)

    def inner(state, behaviour_params, batch):  # reports what it was given through its metrics
        assert set(state.params) == {"params"} and set(behaviour_params) == {"params"}
        return state._replace(update_step=state.update_step + 1), {"obs": batch.obs, "rewards": batch.rewards}

    config = NormalizationConfig(normalize_obs=True, normalize_reward=True, obs_clip=5.0)
    learner_stats = update_stats(init_stats((4,)), jnp.ones((2, 4)), jnp.ones(2))
    behaviour_stats = update_stats(init_stats((4,)), rollout.obs[0] * 2, jnp.ones(3))
    params = {"params": {"w": jnp.ones(2)}, OBS_NORM: learner_stats, REWARD_NORM: init_reward_state(3)}
    behaviour = dict(params, **{OBS_NORM: behaviour_stats})
    state = TrainState(params, (), jax.random.PRNGKey(0), jnp.zeros((), jnp.int32))
    new_state, metrics = jax.jit(normalized_update(inner, config))(state, behaviour, rollout)
    seen = metrics

    np.testing.assert_allclose(seen["obs"], normalize(behaviour_stats, rollout.obs, 5.0), rtol=1e-6)
    raw = rollout.obs[:-1].reshape(-1, 4)
    expected = update_stats(learner_stats, raw, jnp.ones(raw.shape[0]))
    chex.assert_trees_all_close(new_state.params[OBS_NORM], expected)
    assert int(new_state.params[OBS_NORM]["count"]) == 2 + 18 == int(metrics["obs_norm_count"])
    assert int(new_state.params[REWARD_NORM]["count"]) == 18
    np.testing.assert_allclose(seen["rewards"] * metrics["reward_scale"], rollout.rewards, rtol=1e-5)
    chex.assert_trees_all_equal(new_state.params["params"], params["params"])


def test_normalized_network_applies_its_statistics():
    network = NormalizedNetwork(make_network((3,), 2, True), NormalizationConfig(normalize_obs=True),
                                obs_shape=(3,), num_envs=2)
    variables = network.init(jax.random.PRNGKey(0), jnp.zeros((1, 3)))
    assert set(variables) == {"params", OBS_NORM}
    obs = jnp.array([[10.0, -4.0, 2.0]])
    stats = update_stats(variables[OBS_NORM], obs * jnp.array([[1.0], [3.0]]), jnp.ones(2))
    variables = dict(variables, **{OBS_NORM: stats})
    out = network.apply(variables, obs)
    raw = network.network.apply({"params": variables["params"]}, normalize(stats, obs, 10.0))
    chex.assert_trees_all_close(out, raw)


def test_value_clipping_is_cleanrl_clip_vloss():
    def apply_fn(params, obs):
        return jnp.zeros((obs.shape[0], 2)), params["v"] * jnp.ones(obs.shape[0])

    n = 4
    args = (jnp.zeros((n, 1)), jnp.zeros(n, jnp.int32), jnp.full(n, jnp.log(0.5)), jnp.ones(n))
    returns, valid, behaviour_values = jnp.full(n, 2.0), jnp.ones(n), jnp.zeros(n)
    batch = FlatBatch(*args, returns=returns, valid=valid, behaviour_values=behaviour_values)
    config = PPOConfig(clip_eps=0.2, value_coef=1.0, entropy_coef=0.0, normalize_advantages=False)
    params = {"v": jnp.asarray(1.0)}
    _, plain = ppo_loss(params, batch, config, apply_fn)
    _, clipped = ppo_loss(params, batch, dataclasses.replace(config, clip_value_loss=True), apply_fn)
    assert float(plain["value_loss"]) == pytest.approx(0.5 * 1.0**2)
    # V moved from 0 to 1; the clipped value 0.2 is further from the return 2: max(1, 1.8^2) / 2.
    assert float(clipped["value_loss"]) == pytest.approx(0.5 * 1.8**2, rel=1e-6)
    with pytest.raises(ValueError, match="behaviour_values"):
        ppo_loss(params, batch._replace(behaviour_values=None), dataclasses.replace(config, clip_value_loss=True),
                 apply_fn)


def test_mujoco_presets_normalize_by_default_and_others_do_not():
    for algo in ("ppo", "a2c"):
        values = preset("mujoco", algo)
        assert values["normalize_obs"] and values["normalize_reward"]
    assert preset("mujoco", "ppo")["clip_value_loss"]
    for family in ("atari", "classic", "gfootball", "box2d"):
        assert not preset(family, "ppo").get("normalize_obs", False)


def _hopper_config(tmp_path, name, **overrides):
    values = dict(
        env_id="Hopper-v4", num_envs=8, num_actors=1, env_batch_size=2, inference_batch=4, sync_interval=32,
        total_steps=8 * 32 * 4, num_epochs=2, num_minibatches=4, eval_episodes=0, quiet=True, seed=5,
        normalize_obs=True, normalize_reward=True, clip_value_loss=True, logdir=str(tmp_path / name),
    )
    values.update(overrides)
    return HTSConfig(**values)


@pytest.mark.slow
def test_hts_mujoco_normalized_runs_are_bit_identical_across_actors_and_batch_sizes(tmp_path):
    prints = {}
    for actors, batch in ((1, 2), (3, 4), (2, 8)):
        summary = hts.run(_hopper_config(tmp_path, f"hts-{actors}-{batch}", num_actors=actors, env_batch_size=batch))
        assert summary["updates"] == 4 and summary["max_policy_lag"] == 1
        prints[(actors, batch)] = summary["param_fingerprint"]
    assert len(set(prints.values())) == 1, prints
    plain = hts.run(_hopper_config(tmp_path, "plain", normalize_obs=False, normalize_reward=False))
    assert plain["param_fingerprint"] != prints[(1, 2)]


def _rows(run_dir):
    with open(os.path.join(run_dir, "progress.csv")) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_resume_restores_the_statistics_and_evaluation_uses_them(tmp_path):
    config = _hopper_config(tmp_path, "run", total_steps=8 * 32 * 2, checkpoint_every=8 * 32)
    sync.run(config)
    first_count = int(float(_rows(config.logdir)[-1]["obs_norm_count"]))
    restored = restore_run(config.logdir, ENTRIES)
    stats = restored.params[OBS_NORM]
    assert int(stats["count"]) == first_count > 0
    assert float(jnp.max(jnp.abs(stats["mean"]))) > 0  # real statistics, not the initial ones

    # Evaluation applies the restored (frozen) statistics: the greedy action equals the raw network's action
    # on observations normalized with them.
    act = restored.make_act("greedy")
    obs = np.random.default_rng(0).normal(size=(5, 11)).astype(np.float32)
    actions = np.asarray(act(restored.params, obs, jax.random.PRNGKey(0)))
    raw_net = make_network((11,), 3, True)
    policy_out, _ = raw_net.apply({"params": restored.params["params"]}, normalize(stats, obs, config.obs_clip))
    np.testing.assert_allclose(actions, np.asarray(policy_out[0]), rtol=1e-5, atol=1e-6)

    resumed = HTSConfig(**dict(config.__dict__, total_steps=8 * 32 * 4, resume=True))
    sync.run(resumed)
    rows = _rows(config.logdir)
    step_of_first_resumed = [r for r in rows if int(r["env_steps"]) == 3 * 8 * 32][0]
    added = int(float(step_of_first_resumed["obs_norm_count"])) - first_count
    assert 0 < added <= 8 * 32  # continued from the checkpoint's count, not from zero
    with open(os.path.join(config.logdir, "summary.json")) as f:
        assert json.load(f)["env_steps"] == 8 * 32 * 4
    assert len(list_checkpoints(config.logdir)) >= 1
