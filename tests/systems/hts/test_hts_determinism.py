"""Full determinism of HTS-RL (seed 000, section 4.1): the same seed gives bit-identical parameters whatever the
number of actor threads, EnvPool's async batch size or thread timing."""

import pytest

from systems.hts import system as hts
from systems.hts.system import HTSConfig


def _fingerprint(tmp_path, env_id, *, num_actors, env_batch_size, sync_interval, rounds, seed=3):
    config = HTSConfig(
        env_id=env_id, num_envs=8, num_actors=num_actors, env_batch_size=env_batch_size, inference_batch=4,
        sync_interval=sync_interval, total_steps=8 * sync_interval * rounds, num_epochs=2, num_minibatches=4,
        eval_episodes=0, quiet=True, seed=seed, logdir=str(tmp_path / f"{num_actors}-{env_batch_size}-{seed}"),
    )
    summary = hts.run(config)
    assert summary["updates"] == rounds
    assert summary["max_policy_lag"] == 1
    return summary["param_fingerprint"]


@pytest.mark.slow
def test_cartpole_bit_identical_across_actors_and_batch_sizes(tmp_path):
    runs = [(1, 2), (3, 4), (2, 1), (3, 8)]
    prints = {run: _fingerprint(tmp_path, "CartPole-v1", num_actors=run[0], env_batch_size=run[1],
                                sync_interval=16, rounds=6) for run in runs}
    assert len(set(prints.values())) == 1, prints
    # The fingerprint really depends on the run: another seed gives other parameters.
    other = _fingerprint(tmp_path, "CartPole-v1", num_actors=1, env_batch_size=2, sync_interval=16, rounds=6, seed=4)
    assert other != prints[(1, 2)]


@pytest.mark.slow
def test_atari_bit_identical_across_actors_and_batch_sizes(tmp_path):
    first = _fingerprint(tmp_path, "Breakout-v5", num_actors=1, env_batch_size=2, sync_interval=8, rounds=3)
    second = _fingerprint(tmp_path, "Breakout-v5", num_actors=3, env_batch_size=4, sync_interval=8, rounds=3)
    assert first == second


@pytest.mark.parametrize("env_id, step_time, num_actors, processes, expected", [
    ("CartPole-v1", "none", 1, 1, (8, 8)),  # a microsecond simulator: every env in one batch and one forward pass
    ("LunarLander-v2", "none", 2, 1, (4, 8)),  # each actor thread its share; the forward pass stays all envs
    ("CartPole-v1", "none", 1, 2, (4, 8)),  # a process steps its own envs; the forward pass is the run's, not its
    ("CartPole-v1", "exp:0.004", 1, 1, (4, 8)),  # injected step times: section 4.1's overlap of halves
    ("Breakout-v5", "none", 1, 1, (4, 4)),  # a pixel simulator: halves
    ("gymnasium/CartPole-v1", "none", 1, 1, (4, 4)),  # a user's own env: halves
])
def test_batches_default_to_every_env_only_for_microsecond_simulators(env_id, step_time, num_actors, processes,
                                                                      expected):
    config = HTSConfig(env_id=env_id, num_envs=8, step_time=step_time, num_actors=num_actors,
                       num_processes=processes)
    assert (hts.env_batch_size(config), hts.inference_batch(config)) == expected
    given = HTSConfig(env_id=env_id, num_envs=8, env_batch_size=2, inference_batch=2, num_processes=processes)
    assert (hts.env_batch_size(given), hts.inference_batch(given)) == (2, 2)  # a flag wins
