"""`--env=gymnasium/<id>`: any Gymnasium env behind EnvPool's interface (`envs.gymnasium_pool`), under the
launchers with the same guarantees: EnvPool's reset-step semantics, per-env seeds, bit-identical HTS runs across
actor threads and batch sizes, one line for a space no launcher takes, and no process or shared memory left."""

import multiprocessing
import os
import subprocess
import sys

import numpy as np
import pytest

from envs.factory import make_pool, make_spec, resolve_env_id
from envs.pool_api import EnvFailed
from systems.common.config import ConfigError
from systems.hts import system as hts
from tests.fixtures import tiny_hts

WALK = "gymnasium/tests.gym_envs:Walk-v0"


def test_spec_reads_the_spaces_and_the_time_limit():
    spec = make_spec(WALK)
    assert spec.family == "gymnasium" and spec.obs_shape == (2,) and spec.obs_dtype == np.float32
    assert spec.action_dim == 2 and not spec.continuous and spec.max_episode_steps == 50
    continuous = make_spec("gymnasium/Pendulum-v1")
    assert continuous.continuous and continuous.action_dim == 1 and continuous.action_high[0] == 2.0


def test_a_space_no_launcher_takes_and_an_unknown_id_are_one_line():
    assert resolve_env_id(None, WALK) == WALK  # made when the config is checked, with its --env_kwargs
    with pytest.raises(ValueError, match=r"unsupported observation space Sequence\(") as error:
        make_spec("gymnasium/tests.gym_envs:SequenceObs-v0")
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="gymnasium.make failed"):
        hts.validate(tiny_hts("unused", env_id="gymnasium/NoSuchEnv-v9"))
    with pytest.raises(ConfigError, match="--env_kwargs applies to --env=gymnasium/, gymnax/ and brax/ tasks, not "
                                          "to CartPole-v1"):
        hts.validate(tiny_hts("unused", env_kwargs='{"a": 1}'))


def test_env_kwargs_reach_gymnasium_make_and_bad_ones_are_one_line():
    spec = make_spec(WALK, '{"step_size": 1.0}')
    pool = make_pool(spec, num_envs=2, batch_size=2, seed=0, num_threads=1)
    try:
        pool.reset()
        _, _, terminated, _, info = pool.step(np.ones(2, np.int32))  # one step of 1.0 from (-0.9, 0.9) ends it
        _, _, terminated2, _, _ = pool.step(np.ones(2, np.int32))
        assert (terminated | terminated2).all() and list(info["elapsed_step"]) == [1, 1]
    finally:
        pool.close()
    for kwargs, message in (("{size: 8}", "not JSON"), ("[1]", "must be a JSON object"),
                            ('{"no_such_argument": 1}', "gymnasium.make failed")):
        with pytest.raises(ValueError, match=message):
            make_spec(WALK, kwargs)
    with pytest.raises(ValueError, match="applies to --env=gymnasium/, gymnax/ and brax/ tasks, not to CartPole-v1"):
        make_spec("CartPole-v1", '{"a": 1}')


@pytest.mark.slow
def test_the_pool_keeps_envpool_semantics_and_seeds_env_i_with_seed_plus_i():
    spec = make_spec(WALK)
    pool = make_pool(spec, num_envs=3, batch_size=3, seed=5, num_threads=2)
    try:
        obs, info = pool.reset()
        assert list(info["env_id"]) == [0, 1, 2] and list(info["elapsed_step"]) == [0, 0, 0]
        solo = make_pool(spec, num_envs=1, batch_size=1, seed=6, num_threads=1)  # env 1 of the pool, alone
        solo_obs, _ = solo.reset()
        solo.close()
        np.testing.assert_array_equal(obs[1], solo_obs[0])
        ended = None
        for _ in range(30):  # always right: each env reaches +1 within 20 steps
            obs, rewards, terminated, truncated, info = pool.step(np.ones(3, np.int32))
            if terminated[0] and ended is None:
                ended = info["elapsed_step"][0]
            elif ended is not None and ended != "checked":  # the step after the end is a reset step
                assert info["elapsed_step"][0] == 0 and rewards[0] == 0.0 and not terminated[0]
                ended = "checked"
        assert ended == "checked"
    finally:
        pool.close()
    assert multiprocessing.active_children() == []


@pytest.mark.slow
def test_the_async_pool_returns_batches_of_any_envs():
    pool = make_pool(make_spec(WALK), num_envs=4, batch_size=2, seed=1, num_threads=2)
    try:
        pool.async_reset()
        first = pool.recv()[4]["env_id"]
        second = pool.recv()[4]["env_id"]  # the other two resets: recv takes whichever envs finish first
        assert len(first) == len(second) == 2 and set(first) | set(second) == {0, 1, 2, 3}
        pool.send(np.zeros(2, np.int32), first)
        assert set(pool.recv()[4]["env_id"]) == set(first)
    finally:
        pool.close()


def test_a_worker_that_died_is_env_failed_on_send_as_on_recv():
    """A step sent to a dead worker raised BrokenPipeError (exit 74, 'Broken pipe') instead of the env failure that
    names the worker and its exit status (exit 70), depending on whether the pool sent or received first."""
    pool = make_pool(make_spec(WALK), num_envs=4, batch_size=4, seed=1, num_threads=2)
    try:
        pool.async_reset()
        ids = pool.recv()[4]["env_id"]
        pool._procs[1].kill()
        pool._procs[1].join()
        with pytest.raises(EnvFailed, match=r"env worker 1 \(envs [\d, ]+\) exited on signal SIGKILL"):
            for _ in range(100):  # the pipe's buffer may take a few sends before it breaks
                pool.send(np.zeros(4, np.int32), ids)
    finally:
        pool.close()


@pytest.mark.slow
def test_hts_is_bit_identical_across_actor_threads_and_batch_sizes_on_a_gymnasium_env(tmp_path):
    prints = set()
    for actors, batch in ((1, 2), (2, 4)):
        summary = hts.run(tiny_hts(tmp_path / f"{actors}-{batch}", env_id=WALK, num_envs=4, num_actors=actors,
                                   env_batch_size=batch, inference_batch=2, eval_episodes=2))
        assert summary["updates"] == 6 and summary["evaluations"] >= 1
        prints.add(summary["param_fingerprint"])
    assert len(prints) == 1


@pytest.mark.slow
def test_the_launcher_trains_a_user_env_and_refuses_a_space_it_cannot_take(tmp_path):
    launcher = subprocess.Popen(
        [sys.executable, "-m", "launch.sync", f"--env={WALK}", "--total_steps=2048", "--num_envs=4",
         "--sync_interval=64", "--eval_every=1024", "--eval_episodes=4", f"--logdir={tmp_path / 'run'}", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=os.getcwd()))
    _, stderr = launcher.communicate(timeout=300)
    assert launcher.returncode == 0, stderr[-2000:]
    assert (tmp_path / "run" / "summary.json").exists()
    bad = subprocess.run([sys.executable, "-m", "launch.sync", "--env=gymnasium/tests.gym_envs:SequenceObs-v0"],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "Sequence(" in bad.stderr, bad.stderr


@pytest.mark.slow
def test_sync_ppo_learns_the_suite_env(tmp_path):
    """PPO through `gymnasium/` walks right from every start: near the best return (always right: about 0.9;
    a greedy policy that walks left ends at -1 with about -0.1)."""
    from systems.sync import system as sync
    from systems.sync.config import SyncConfig

    summary = sync.run(SyncConfig(
        env_id=WALK, num_envs=8, sync_interval=32, total_steps=12_288, num_epochs=4, num_minibatches=4,
        learning_rate=2.5e-3, eval_every=4096, eval_episodes=8, eval_deterministic=True, quiet=True, seed=1,
        logdir=str(tmp_path / "run")))
    assert summary["last_eval_return"] >= 0.85, summary["last_eval_return"]


@pytest.mark.slow
def test_sync_ppo_learns_frozen_lake_through_its_one_hot_observation(tmp_path):
    """FrozenLake-v1's Discrete(16) observation reaches the MLP one-hot (`envs.observations`); not slippery, the
    greedy policy reaches the goal from the start (return 1, the optimum). The run stops at its first evaluation
    that does (`stop_at_target`)."""
    from systems.sync import system as sync
    from systems.sync.config import SyncConfig

    summary = sync.run(SyncConfig(
        env_id="gymnasium/FrozenLake-v1", env_kwargs='{"is_slippery": false}', num_envs=8, total_steps=60_000,
        eval_every=5_000, eval_episodes=4, eval_deterministic=True, target_return=1.0, stop_at_target=True, quiet=True,
        seed=1, logdir=str(tmp_path / "run")))
    assert summary["last_eval_return"] == 1.0, summary["last_eval_return"]


LAMP = "gymnasium/tests.gym_envs:Lamp-v0"


@pytest.mark.parametrize("shape, torso", [((10, 10, 1), "minatar_cnn"), ((1, 40, 40), "pixel_cnn_chw"),
                                          ((40, 40, 3), "pixel_cnn_hwc")])
def test_uint8_images_reach_a_cnn_channels_first_or_last(shape, torso):
    from agents import networks

    spec = make_spec(LAMP, f'{{"shape": {list(shape)}}}')
    assert spec.obs_shape == shape and spec.obs_dtype == np.uint8
    assert networks.make_network(spec.obs_shape, spec.action_dim, spec.continuous).torso == torso
    hts.validate(tiny_hts("unused", env_id=LAMP, env_kwargs=f'{{"shape": {list(shape)}}}'))


def test_the_env_check_and_the_networks_agree_on_the_smallest_pixel_cnn_side():
    from agents import networks
    from envs import factory

    assert factory.PIXEL_MIN_SIDE == networks.PIXEL_MIN_SIDE


@pytest.mark.parametrize("shape, message", [
    ((1, 10, 10), "looks channels first; small images must be channels last"),
    ((3, 40, 20), "No network for observation shape \\(3, 40, 20\\)"),
    ((40, 40, 32), "No network for observation shape"),
])
def test_an_image_no_network_reads_is_one_line(shape, message):
    with pytest.raises(ConfigError, match=message) as error:
        hts.validate(tiny_hts("unused", env_id=LAMP, env_kwargs=f'{{"shape": {list(shape)}}}'))
    assert "\n" not in str(error.value)


@pytest.mark.slow
def test_hts_learns_a_pixel_env_through_the_pixel_cnn(tmp_path):
    """A channels-first 40x40 image (the Nature CNN's layers at another size): HTS learns to name the lamp's state
    (the best return is 20, a random policy's 10). In a child process at LLVM's default optimization: XLA's own
    convolution runs 15x slower at the suite's -O0 (conftest). Two minibatches: the CNN update unrolls its minibatch
    loop on a CPU (`learner.ppo_loop_plan`), each minibatch seconds of compiling. Seeds 1, 2, 3 and 0 ended at 18.8,
    16.4, 18.4 and 18.3."""
    from tests.multidevice import run_python

    out = run_python(f"""
        from systems.hts import system as hts
        from tests.fixtures import tiny_hts
        summary = hts.run(tiny_hts({str(tmp_path / "run")!r}, env_id={LAMP!r}, env_kwargs='{{"shape": [1, 40, 40]}}',
                                   sync_interval=32, total_steps=4096, num_epochs=4, num_minibatches=2,
                                   learning_rate=1e-3, eval_every=4096, eval_episodes=10, checkpoint_every=4096))
        print(summary["last_eval_return"])
        """, num_devices=1, optimized=True)
    last_eval_return = float(out.strip().splitlines()[-1])
    assert last_eval_return >= 16, last_eval_return


def test_a_gymnasium_env_films_its_own_rgb_array_frames(tmp_path):
    from systems.common import video

    spec = make_spec(WALK)
    film = video.record_episode(spec, lambda params, obs, key: np.ones(len(obs), np.int32), None, seed=2,
                                path=str(tmp_path / "walk.gif"))
    assert film.real_frames and film.complete and "rgb_array" in film.note, film.note
    assert film.frames == film.episode_length + 1  # every step and the final state


@pytest.mark.slow
def test_hts_learns_minigrid_through_its_dict_observation(tmp_path):
    """MiniGrid's Dict (a 7x7x3 image, a direction, a text mission) with no wrapper of the user's: the image through
    MinAtar's CNN, the direction after it, the mission left out. A random policy rarely reaches the goal of
    Empty-5x5 in its 100 steps (return about 0.1); the optimum is about 0.95. The run stops at its first evaluation
    of 0.5 or more (`stop_at_target`)."""
    summary = hts.run(hts.HTSConfig(env_id="gymnasium/minigrid:MiniGrid-Empty-5x5-v0", num_envs=8, total_steps=30_000,
                                    eval_every=6_000, eval_episodes=10, target_return=0.5, stop_at_target=True,
                                    quiet=True, seed=1, logdir=str(tmp_path / "run")))
    assert summary["last_eval_return"] >= 0.5, summary["last_eval_return"]


@pytest.mark.slow
def test_hts_trains_highway_env_through_its_flattened_vehicle_table(tmp_path):
    """highway-env's observation is a 5x5 float table of vehicles (a Box of rank 2): flattened for the MLP, as
    Stable-Baselines3's `FlattenExtractor`, with no wrapper of the user's. Two rounds of PPO and an evaluation run."""
    pytest.importorskip("highway_env")
    env_id = "gymnasium/highway_env:highway-fast-v0"
    assert make_spec(env_id).obs_shape == (25,)
    summary = hts.run(hts.HTSConfig(env_id=env_id, num_envs=4, sync_interval=64, total_steps=512, eval_episodes=2,
                                    num_minibatches=2, quiet=True, seed=1, logdir=str(tmp_path / "run")))
    assert summary["updates"] == 2 and np.isfinite(summary["final_metric"]), summary
