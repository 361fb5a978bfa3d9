"""Runs with a recurrent policy (`--recurrent`, `agents.recurrent`): the actors' per-env states and the learner's
re-run sequences agree to rounding, and evaluation, `launch.evaluate` and its GIF carry each episode's state."""

import csv
import json
import os

import numpy as np
import pytest
from absl.testing import flagsaver

from launch import evaluate as launch_evaluate
from launch import hts as launch_hts
from systems.anakin.config import AnakinConfig
from systems.anakin.system import run as run_anakin
from systems.common.evaluation import Evaluator, RecurrentAct
from systems.common.learner import build
from systems.common.restore import restore_run
from systems.registry import ENTRIES
from systems.sync.system import SyncConfig
from systems.sync.system import run as run_sync
from tests.fixtures import read_summary, run_launcher


def _progress(run_dir) -> list[dict]:
    with open(os.path.join(run_dir, "progress.csv")) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
@pytest.mark.parametrize("system, cell, normalize", [("sync", "lstm", False), ("sync", "gru", True),
                                                      ("anakin", "lstm", False)])
def test_the_learner_replays_the_actors_states_exactly(tmp_path, system, cell, normalize):
    """Synchronous PPO (the sync system's actors, or Anakin's one program on a JAX env), one epoch of one minibatch:
    the update's only step runs at the behaviour parameters, so the re-run sequences (from each env's stored
    round-start state, reset after each episode) give the actors' own log-probabilities and the ratio is one: a state
    reset one step late, or carried across envs, shows as a KL. With running normalization the learner reads the
    observations with the behaviour statistics, as the actors. The bound: a reset one step late gave KLs of 5e-8 to
    2.5e-7 (the initial policy is near uniform, so a wrong state moves its log-probabilities little); XLA CPU may
    round the actors' single step and the learner's scan of it apart in the last bits (about 5e-10 on an AVX2 host,
    0 on an AVX-512 one)."""
    run_dir = str(tmp_path / "run")
    config_class, run = (SyncConfig, run_sync) if system == "sync" else (AnakinConfig, run_anakin)
    run(config_class(env_id="CartPole-v1" if system == "sync" else "gymnax/CartPole-v1", num_envs=4,
                     sync_interval=32, total_steps=4 * 32 * 4, num_epochs=1, num_minibatches=1, eval_episodes=0,
                     quiet=True, logdir=run_dir, recurrent=cell, rnn_size=16, normalize_obs=normalize,
                     normalize_reward=normalize))
    rows = _progress(run_dir)
    assert len(rows) == 4 and sum(int(row["episodes"]) for row in rows) > 4  # episodes ended inside the rounds
    assert all(abs(float(row["approx_kl"])) < 5e-9 and float(row["clip_fraction"]) == 0 for row in rows), rows
    if normalize:
        assert float(rows[-1]["obs_norm_count"]) > 4 * 32 * 3 and float(rows[-1]["reward_scale"]) > 0


@pytest.fixture(scope="module")
def recurrent_run(tmp_path_factory):
    """A tiny HTS CartPole run with a GRU core, evaluated during training."""
    run_dir = str(tmp_path_factory.mktemp("hts") / "run")
    run_launcher(launch_hts.main, env="CartPole-v1", recurrent="gru", rnn_size=16, total_steps=512, num_envs=4,
                 sync_interval=32, num_minibatches=2, eval_every=256, eval_episodes=3, checkpoint_every=0,
                 logdir=run_dir, quiet=True)
    return run_dir


def test_a_recurrent_run_evaluates_and_is_restored_exactly(recurrent_run, tmp_path):
    summary = read_summary(recurrent_run)
    assert summary["env_steps"] == 512 and summary["evaluations"] == 2 and summary["final_metric"] >= 1
    restored = restore_run(recurrent_run, ENTRIES)
    assert restored.config.recurrent == "gru" and restored.config.rnn_size == 16
    out = tmp_path / "eval.json"
    with flagsaver.flagsaver(run=recurrent_run, eval_out=str(out), eval_num_episodes=3, eval_seed=9,
                             eval_policy="greedy", eval_gif=str(tmp_path / "episode.gif"), eval_gif_frames=8):
        launch_evaluate.main([])
    result = json.loads(out.read_text())
    assert result["fingerprint_matches_summary"] and len(result["returns"]) == 3
    # The GIF's 1-env pool replays the evaluation's env 0 with its own fresh state: the same episode.
    assert result["gif"]["episode_return"] == result["returns"][0] == result["gif"]["episode_length"]
    # The Evaluator with the training system's network, state carried per env, plays the same episodes.
    setup, _ = build(restored.config, restored.spec)
    evaluator = Evaluator(restored.spec, None, episodes=3, seed=9, deterministic=True,
                          act_fn=RecurrentAct(setup.network, deterministic=True))
    np.testing.assert_array_equal(evaluator.run(restored.policy_params()), result["returns"])


@pytest.mark.slow
def test_a_run_recorded_without_rnn_input_keeps_its_cores_layout(tmp_path):
    """A recurrent run's config.json without `rnn_input` (written before the flag) had its core read the torso's
    features: launch.evaluate restores that layout, and --resume without --rnn_input=torso is one line naming it."""
    from systems.common.config import ConfigError
    from systems.hts import system as hts
    from tests.fixtures import tiny_hts

    run_dir = tmp_path / "run"
    hts.run(tiny_hts(run_dir, recurrent="lstm", rnn_size=8, rnn_input="torso", total_steps=128, eval_episodes=0))
    path = run_dir / "config.json"
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "rnn_input"}))
    restored = restore_run(str(run_dir), ENTRIES)  # the parameters fit the network rebuilt from the config
    assert restored.config.rnn_input == "torso"
    with pytest.raises(ConfigError, match=r"--rnn_input=auto differs from the run's torso"):
        hts.run(tiny_hts(run_dir, recurrent="lstm", rnn_size=8, total_steps=256, eval_episodes=0, resume=True))
    resumed = hts.run(tiny_hts(run_dir, recurrent="lstm", rnn_size=8, rnn_input="torso", total_steps=256,
                               eval_episodes=0, resume=True))
    assert resumed["env_steps"] == 256
