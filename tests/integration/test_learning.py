"""It really learns: HTS-PPO and sync-PPO each end with a mean evaluation return of at least 450 on CartPole-v1
after a fixed budget of env steps (runs are deterministic for a seed, so this is not flaky on one machine). HTS's
budget is 100k: seeds 0-3 all evaluated 500 at its end at the former half batches (2026-11-29); at the full
batches of 2026-11-30 (another forward-pass shape, other bits) seeds 1-3 did and seed 0 ended at 249. Sync's stays
150k: at 100k seeds 0 and 3 ended at 145 and 258 (sync-PPO at this preset falls back after solving; seed 1, the
test's, ended at 500)."""

import pytest

from systems.common.presets import preset
from systems.hts import system as hts
from systems.sync import system as sync
from tests.fixtures import tiny_hts

BUDGETS = {"hts": 100_000, "sync": 150_000}


def _config(tmp_path, name):
    values = preset("classic", "ppo")
    values.update(num_envs=8, sync_interval=64, total_steps=BUDGETS[name], learning_rate=1e-3)
    return tiny_hts(tmp_path / name, **values, num_actors=2, eval_episodes=10, eval_every=BUDGETS[name] // 3,
                    eval_deterministic=True, seed=1, checkpoint_every=0)


@pytest.mark.slow
@pytest.mark.parametrize("system", [hts, sync], ids=["hts", "sync"])
def test_ppo_solves_cartpole(tmp_path, system):
    summary = system.run(_config(tmp_path, system.SYSTEM))
    assert summary["env_steps"] <= BUDGETS[system.SYSTEM] + 8 * 64
    assert summary["last_eval_return"] >= 450, summary
