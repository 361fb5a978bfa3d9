"""It really learns: HTS-PPO and sync-PPO each reach a mean evaluation return of at least 450 on CartPole-v1
within a fixed budget of 150k env steps (runs are deterministic for a seed, so this is not flaky on one machine)."""

import pytest

from systems.common.config import preset
from systems.hts import system as hts
from systems.sync import system as sync
from tests.helpers import tiny_hts

BUDGET = 150_000


def _config(tmp_path, name):
    values = preset("classic", "ppo")
    values.update(num_envs=8, sync_interval=64, total_steps=BUDGET, learning_rate=1e-3)
    return tiny_hts(tmp_path / name, **values, num_actors=2, eval_episodes=10, eval_every=BUDGET // 3,
                    eval_deterministic=True, seed=1, checkpoint_every=0)


@pytest.mark.slow
@pytest.mark.parametrize("system", [hts, sync], ids=["hts", "sync"])
def test_ppo_solves_cartpole(tmp_path, system):
    summary = system.run(_config(tmp_path, system.SYSTEM))
    assert summary["env_steps"] <= BUDGET + 8 * 64
    assert summary["last_eval_return"] >= 450, summary
