"""Tests for envs/: task ids, specs, pool seeding, episode bookkeeping and step times."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import envpool
import numpy as np
import pytest

from envs import (
    EpisodeTracker,
    StepTimeDistribution,
    family_of,
    make_pool,
    make_spec,
    parse_step_time,
    resolve_env_id,
    split_done,
)

# Gymnasium warns when EnvPool's float64 Box bounds are cast to float32; harmless here.
pytestmark = pytest.mark.filterwarnings("ignore:.*precision lowered by casting:UserWarning")

# ---------------------------------------------------------------------------------------------
# resolve_env_id


@pytest.mark.parametrize(
    "game, expected",
    [
        ("Breakout", "Breakout-v5"),
        ("Breakout-v5", "Breakout-v5"),
        ("breakout", "Breakout-v5"),
        ("MsPacman", "MsPacman-v5"),
        ("ms_pacman", "MsPacman-v5"),
        ("SpaceInvaders", "SpaceInvaders-v5"),
        ("space_invaders", "SpaceInvaders-v5"),
    ],
)
def test_resolve_game(game, expected):
    assert resolve_env_id(game, None) == expected


@pytest.mark.parametrize(
    "env", ["CartPole-v1", "Breakout-v5", "gfootball/academy_3_vs_1_with_keeper-v1", "Pendulum-v1"]
)
def test_resolve_env_taken_as_is(env):
    assert resolve_env_id(None, env) == env


@pytest.mark.parametrize("game, env", [(None, None), ("", ""), ("Breakout", "CartPole-v1")])
def test_resolve_needs_exactly_one(game, env):
    with pytest.raises(ValueError, match="exactly one"):
        resolve_env_id(game, env)


def test_resolve_unknown_env():
    with pytest.raises(ValueError, match=r"unknown environment 'CartPol-v1'; EnvPool knows e\.g\."):
        resolve_env_id(None, "CartPol-v1")


def test_resolve_unknown_game_lists_close_matches():
    with pytest.raises(ValueError, match="Breakout") as err:
        resolve_env_id("Breakot", None)
    assert "unknown Atari game 'Breakot'" in str(err.value)


def test_unsupported_family():
    with pytest.raises(ValueError, match="not supported"):
        resolve_env_id(None, "Go9x9-v1")


_FRESH_FACTORY = """
import sys
from envs import factory
print("envpool.jumanji.registration" in sys.modules, "matplotlib.pyplot" in sys.modules)
print(factory.family_of("HalfCheetah-v4"), factory.resolve_env_id("Breakout", None))
for env_id in ("Go9x9-v1", "CartPol-v1"):
    try:
        factory.resolve_env_id(None, env_id)
    except ValueError as error:
        print(error)
"""


def test_a_fresh_process_registers_only_the_supported_families_and_still_names_the_others():
    """Without `import envpool` first, the factory skips the families no system runs (Jumanji's registration
    imports matplotlib.pyplot), yet unsupported and misspelt ids get the same messages as with every family."""
    out = subprocess.run([sys.executable, "-c", _FRESH_FACTORY], capture_output=True, text=True, check=True,
                         cwd=pathlib.Path(__file__).parents[2]).stdout.splitlines()
    assert out[0] == "False False", out
    assert out[1] == "mujoco Breakout-v5", out
    assert out[2].startswith("environment 'Go9x9-v1' (envpool.") and "is not supported" in out[2], out
    assert out[3].startswith("unknown environment 'CartPol-v1'; EnvPool knows e.g. CartPole-v1"), out


@pytest.mark.parametrize(
    "env_id, family",
    [
        ("Breakout-v5", "atari"),
        ("CartPole-v1", "classic"),
        ("Pendulum-v1", "classic"),
        ("gfootball/academy_empty_goal_close-v1", "gfootball"),
        ("HalfCheetah-v4", "mujoco"),
        ("LunarLander-v2", "box2d"),
    ],
)
def test_family_of(env_id, family):
    assert family_of(env_id) == family


# ---------------------------------------------------------------------------------------------
# make_spec / make_pool


def test_make_spec_breakout():
    spec = make_spec("Breakout-v5")
    assert spec.family == "atari"
    assert spec.obs_shape == (4, 84, 84)
    assert spec.obs_dtype == np.uint8
    assert (spec.action_dim, spec.continuous) == (4, False)
    assert spec.action_low is None and spec.action_high is None
    assert spec.max_episode_steps == 27000
    assert make_spec("Breakout-v5") is spec  # Cached.


def test_make_spec_cartpole():
    spec = make_spec("CartPole-v1")
    assert (spec.family, spec.obs_shape, spec.obs_dtype) == ("classic", (4,), np.float32)
    assert (spec.action_dim, spec.continuous, spec.max_episode_steps) == (2, False, 500)


def test_make_spec_gfootball():
    spec = make_spec("gfootball/academy_empty_goal_close-v1")
    assert (spec.family, spec.obs_shape, spec.obs_dtype) == ("gfootball", (72, 96, 4), np.uint8)
    assert (spec.action_dim, spec.continuous) == (19, False)
    # EnvPool's config says 400, but GFootball truncates at elapsed_step 401.
    assert spec.max_episode_steps == 401


def test_gfootball_truncates_one_step_after_configured_limit():
    """The EnvPool behaviour behind make_spec's GFootball max_episode_steps (configured + 1)."""
    pool = envpool.make("gfootball/academy_empty_goal_close-v1", env_type="gymnasium", num_envs=1,
                        num_threads=1, seed=0, max_episode_steps=5)
    pool.reset()
    truncated_at = []
    for _ in range(7):
        _, _, term, trunc, info = pool.step(np.zeros(1, int))  # Idle: no goal in 7 steps.
        assert not term[0]
        if trunc[0]:
            truncated_at.append(int(info["elapsed_step"][0]))
    assert truncated_at == [6]


def test_make_spec_pendulum():
    spec = make_spec("Pendulum-v1")
    assert (spec.family, spec.obs_shape, spec.obs_dtype) == ("classic", (3,), np.float32)
    assert (spec.action_dim, spec.continuous, spec.max_episode_steps) == (1, True, 200)
    np.testing.assert_array_equal(spec.action_low, [-2.0])
    np.testing.assert_array_equal(spec.action_high, [2.0])


@pytest.mark.parametrize("env_id", ["Breakout-v5", "CartPole-v1", "Pendulum-v1"])
def test_spec_matches_pool(env_id):
    spec = make_spec(env_id)
    pool = make_pool(spec, num_envs=2, batch_size=2, seed=0)
    obs, _ = pool.reset()
    assert obs.shape == (2, *spec.obs_shape)
    assert obs.dtype == spec.obs_dtype


def test_atari_pool_settings():
    spec = make_spec("Breakout-v5")
    train = make_pool(spec, num_envs=2, batch_size=1, seed=0, extra_envs=1).spec.config
    evaluation = make_pool(spec, num_envs=2, batch_size=2, seed=0, evaluation=True).spec.config
    assert (train.num_envs, train.batch_size, train.num_threads) == (3, 1, 2)
    assert (train.episodic_life, train.reward_clip) == (True, True)
    assert (evaluation.episodic_life, evaluation.reward_clip) == (False, False)
    for config in (train, evaluation):
        assert config.noop_max == 30
        assert config.repeat_action_probability == 0.0
        assert (config.frame_skip, config.stack_num, config.img_height, config.gray_scale) == (
            4,
            4,
            84,
            True,
        )


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_envs=0, batch_size=1, seed=0),
        dict(num_envs=2, batch_size=3, seed=0),
        dict(num_envs=2, batch_size=0, seed=0),
        dict(num_envs=2, batch_size=2, seed=-1),
        dict(num_envs=2, batch_size=2, seed=2**31 - 2),
    ],
)
def test_make_pool_rejects_bad_sizes(kwargs):
    with pytest.raises(ValueError):
        make_pool(make_spec("CartPole-v1"), **kwargs)


def _first_envs_trajectory(env_id, *, num_envs, extra_envs, steps, watch=2, seed=7):
    """Observations of envs 0..watch-1 under fixed actions, in a synchronous pool."""
    spec = make_spec(env_id)
    pool = make_pool(spec, num_envs=num_envs, batch_size=num_envs + extra_envs, seed=seed,
                     extra_envs=extra_envs)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, spec.action_dim, size=(steps, watch))
    obs, _ = pool.reset()
    trajectory = [obs[:watch].copy()]
    for t in range(steps):
        # Other envs get different actions so a leak between envs would show.
        action = rng.integers(0, spec.action_dim, size=num_envs + extra_envs)
        action[:watch] = actions[t]
        obs, *_ = pool.step(action)
        trajectory.append(obs[:watch].copy())
    return np.stack(trajectory)


@pytest.mark.parametrize("env_id, steps", [("CartPole-v1", 200), ("Breakout-v5", 40)])
def test_env_trajectory_independent_of_pool_size(env_id, steps):
    base = _first_envs_trajectory(env_id, num_envs=2, extra_envs=0, steps=steps)
    with_spares = _first_envs_trajectory(env_id, num_envs=2, extra_envs=3, steps=steps)
    more_envs = _first_envs_trajectory(env_id, num_envs=4, extra_envs=0, steps=steps)
    np.testing.assert_array_equal(base, with_spares)
    np.testing.assert_array_equal(base, more_envs)
    other_seed = _first_envs_trajectory(env_id, num_envs=2, extra_envs=0, steps=steps, seed=8)
    assert not np.array_equal(base, other_seed)


# ---------------------------------------------------------------------------------------------
# split_done / truncation


def _batch(rows):
    """rows: (env_id, reward, terminated, truncated, elapsed_step, raw_reward, game_over)."""
    env_id, reward, term, trunc, elapsed, raw, game_over = map(np.array, zip(*rows, strict=True))
    info = {
        "env_id": env_id.astype(np.int32),
        "elapsed_step": elapsed.astype(np.int32),
        "reward": raw.astype(np.float32),
        "terminated": game_over.astype(np.int32),
    }
    return env_id, reward.astype(np.float32), term.astype(bool), trunc.astype(bool), info


def test_truncation_recomputed_from_elapsed_step():
    tracker = EpisodeTracker(3, "classic", max_episode_steps=5)
    info = {"elapsed_step": np.array([4, 5, 6, 2])}
    got = tracker.truncation(info, np.array([False, False, False, True]))
    np.testing.assert_array_equal(got, [False, True, True, True])


def test_split_done_atari_life_loss_and_truncation():
    # Rows: life loss; elapsed_step reaches the limit without EnvPool's flag; both at once; plain.
    _, _, term, trunc, info = _batch(
        [
            (0, 0.0, True, False, 3, 0.0, False),
            (1, 1.0, False, False, 5, 4.0, False),
            (2, 0.0, True, False, 5, 0.0, True),
            (3, 0.0, False, False, 2, 0.0, False),
        ]
    )
    got_term, got_trunc = split_done("atari", term, trunc, info, 5)
    assert got_term.dtype == np.float32 and got_trunc.dtype == np.float32
    np.testing.assert_array_equal(got_term, [1, 0, 1, 0])
    np.testing.assert_array_equal(got_trunc, [0, 1, 0, 0])


# ---------------------------------------------------------------------------------------------
# EpisodeTracker


def test_tracker_scripted_atari():
    """Two Atari envs (max_episode_steps 5) plus a spare env 2, fed in async-style batches.

    env 0: reset; +4 (clipped to 1); life loss; life-loss reset step; +7; +1 and game over
           -> episode (return 4 + 0 + 7 + 1 = 12, length 4: the life-loss reset step is not
           counted).
    env 1: reset; +1 at elapsed 1..5; EnvPool's truncated flag is missing at elapsed 5 but
           elapsed_step >= 5 ends the episode -> (5, 5); its stray step at elapsed 6 is ignored.
    """
    tracker = EpisodeTracker(2, "atari", max_episode_steps=5)
    # (env_id, clipped reward, terminated, truncated, elapsed_step, raw reward, game over)
    batches = [
        [(0, 0, False, False, 0, 0, False), (1, 0, False, False, 0, 0, False)],
        [(0, 1, False, False, 1, 4, False), (2, 1, True, False, 9, 9, True)],
        [(1, 1, False, False, 1, 1, False), (0, 0, True, False, 2, 0, False)],  # env 0 life loss
        [(0, 0, False, False, 2, 0, False), (1, 1, False, False, 2, 1, False)],  # env 0 reset step
        [(1, 1, False, False, 3, 1, False), (0, 1, False, False, 3, 7, False)],
        [(1, 1, False, False, 4, 1, False)],
    ]
    for rows in batches:
        tracker.step(*_batch(rows))
    assert tracker.pop_finished() == []  # A life loss is not an episode end.

    tracker.step(*_batch([(1, 1, False, False, 5, 1, False), (0, 1, True, False, 4, 1, True)]))
    assert tracker.pop_finished() == [(1, 5.0, 5), (0, 12.0, 4)]
    assert tracker.pop_finished() == []

    tracker.step(*_batch([(0, 0, False, False, 0, 0, False), (1, 1, False, True, 6, 3, False)]))
    tracker.step(*_batch([(1, 0, False, False, 0, 0, False), (0, 1, False, False, 1, 2, False)]))
    tracker.step(*_batch([(1, 1, False, True, 1, 2, False), (0, 1, True, False, 2, 5, True)]))
    # env 1's step at elapsed 6 belonged to no episode; its next episode is (2, 1) by truncation.
    assert tracker.pop_finished() == [(1, 2.0, 1), (0, 7.0, 2)]


def test_tracker_classic_uses_returned_reward_and_flags():
    tracker = EpisodeTracker(1, "classic", max_episode_steps=500)

    def step(reward, term, trunc, elapsed):
        info = {"env_id": np.array([0]), "elapsed_step": np.array([elapsed])}
        tracker.step(np.array([0]), np.array([reward]), np.array([term]), np.array([trunc]), info)

    step(0.0, False, False, 0)  # async_reset observation
    step(1.5, False, False, 1)
    step(-0.5, False, False, 2)
    step(2.0, True, False, 3)
    step(0.0, False, False, 0)  # auto-reset step
    step(3.0, False, True, 1)
    assert tracker.pop_finished() == [(0, 3.0, 3), (0, 3.0, 1)]


def test_tracker_on_cartpole_pool():
    num_envs, spares = 4, 1
    spec = make_spec("CartPole-v1")
    pool = make_pool(spec, num_envs=num_envs, batch_size=2, seed=3, extra_envs=spares)
    tracker = EpisodeTracker(num_envs, spec.family, spec.max_episode_steps)
    rng = np.random.default_rng(0)
    pool.async_reset()
    real_steps = np.zeros(num_envs, int)  # Non-reset steps in the current episode.
    completed_steps = 0
    num_finished = 0
    for _ in range(1500):
        obs, reward, term, trunc, info = pool.recv()
        env_ids = info["env_id"]
        tracker.step(env_ids, reward, term, trunc, info)
        for k, i in enumerate(env_ids):
            if i >= num_envs:
                continue
            real_steps[i] += info["elapsed_step"][k] > 0
            if term[k] or trunc[k]:
                completed_steps += real_steps[i]
                real_steps[i] = 0
                num_finished += 1
        pool.send(rng.integers(0, 2, size=len(env_ids)), env_ids)
    finished = tracker.pop_finished()
    assert len(finished) == num_finished > 20
    assert sum(length for _, _, length in finished) == completed_steps
    for env_id, ret, length in finished:
        assert 0 <= env_id < num_envs
        assert ret == length  # CartPole pays 1 per real step; reset steps pay 0.


def test_tracker_on_breakout_pool_counts_games_not_lives():
    spec = make_spec("Breakout-v5")
    pool = make_pool(spec, num_envs=2, batch_size=2, seed=0)
    tracker = EpisodeTracker(2, spec.family, spec.max_episode_steps)
    rng = np.random.default_rng(0)
    pool.reset()
    life_losses, game_overs, raw_total = 0, [], np.zeros(2)
    for _ in range(700):
        obs, reward, term, trunc, info = pool.step(rng.integers(0, spec.action_dim, size=2))
        tracker.step(info["env_id"], reward, term, trunc, info)
        raw_total += info["reward"]
        assert np.all(np.abs(reward) <= 1.0)
        for k in range(2):
            if info["terminated"][k]:
                game_overs.append((k, raw_total[k], int(info["elapsed_step"][k])))
                raw_total[k] = 0
            elif term[k]:
                life_losses += 1
    finished = tracker.pop_finished()
    assert life_losses >= 4 and len(game_overs) >= 2
    assert [(i, r, n) for i, r, n in finished] == game_overs


# ---------------------------------------------------------------------------------------------
# step_time


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", StepTimeDistribution("none", 0.0, 1.0)),
        ("none", StepTimeDistribution("none", 0.0, 1.0)),
        ("const:0.004", StepTimeDistribution("const", 0.004, 1.0)),
        ("exp:0.004", StepTimeDistribution("exp", 0.004, 1.0)),
        ("gamma:2:0.01", StepTimeDistribution("gamma", 0.01, 2.0)),
        ("gamma:0.5:1e-3", StepTimeDistribution("gamma", 0.001, 0.5)),
    ],
)
def test_parse_step_time(text, expected):
    assert parse_step_time(text) == expected


@pytest.mark.parametrize(
    "text",
    ["fast", "exp", "exp:", "exp:abc", "exp:0.1:2", "const", "gamma:2", "gamma:2:0.1:3",
     "uniform:0.1", "none:0.1", "exp:0", "exp:-0.004", "const:-1", "gamma:0:0.1", "gamma:2:-1",
     "exp:nan", "exp:inf"],
)
def test_parse_step_time_errors(text):
    with pytest.raises(ValueError, match="expected 'none', 'const:MEAN'"):
        parse_step_time(text)


def test_step_time_direct_construction_validated():
    with pytest.raises(ValueError):
        StepTimeDistribution("exp", -1.0, 1.0)
    with pytest.raises(ValueError):
        StepTimeDistribution("poisson", 1.0, 1.0)


def test_sample_none_and_const_exact():
    rng = np.random.default_rng(0)
    none = parse_step_time("none").sample(rng, 5)
    const = parse_step_time("const:0.004").sample(rng, 5)
    assert none.dtype == np.float64 and const.dtype == np.float64
    np.testing.assert_array_equal(none, np.zeros(5))
    np.testing.assert_array_equal(const, np.full(5, 0.004))


@pytest.mark.parametrize("text, mean, std", [
    ("exp:0.004", 0.004, 0.004),
    ("gamma:4:0.01", 0.01, 0.005),  # std = mean / sqrt(shape)
    ("gamma:0.5:0.002", 0.002, 0.002 * np.sqrt(2.0)),
])
def test_sample_mean_and_spread(text, mean, std):
    samples = parse_step_time(text).sample(np.random.default_rng(1), 100_000)
    assert samples.shape == (100_000,) and samples.dtype == np.float64
    assert np.all(samples >= 0)
    # 5 standard errors of the mean.
    assert abs(samples.mean() - mean) < 5 * std / np.sqrt(samples.size)
    assert abs(samples.std() - std) < 0.03 * std
