"""It really learns: HTS-PPO and sync-PPO each reach a mean evaluation return of at least 450 on CartPole-v1
within a fixed budget of env steps (runs are deterministic for a seed, so this is not flaky on one machine). An
evaluation every 16,384 steps and `stop_at_target` end the run at the first one that reaches 450, as a user's
`--target_return` run would. HTS's budget is 100k: seeds 1-3 evaluated 500 at its end, seed 0 249. Sync's is 150k:
at 100k seeds 0 and 3 ended at 145 and 258 (sync-PPO at this preset falls back after solving)."""

import pytest

from systems.common.presets import preset
from systems.hts import system as hts
from systems.sync import system as sync
from tests.fixtures import tiny_hts

BUDGETS = {"hts": 100_000, "sync": 150_000}


def _config(tmp_path, name):
    values = preset("classic", "ppo")
    values.update(num_envs=8, sync_interval=64, total_steps=BUDGETS[name], learning_rate=1e-3)
    return tiny_hts(tmp_path / name, **values, num_actors=2, eval_episodes=10, eval_every=16_384,
                    eval_deterministic=True, target_return=450.0, stop_at_target=True, seed=1, checkpoint_every=0)


@pytest.mark.slow
@pytest.mark.parametrize("system", [hts, sync], ids=["hts", "sync"])
def test_ppo_solves_cartpole(tmp_path, system):
    summary = system.run(_config(tmp_path, system.SYSTEM))
    assert summary["env_steps"] <= BUDGETS[system.SYSTEM] + 8 * 64
    assert summary["last_eval_return"] >= 450, summary


@pytest.mark.slow
def test_a_recurrent_policy_remembers_what_a_feed_forward_one_cannot(tmp_path):
    """bsuite's MemoryChain under Anakin: the context bit shows at an episode's first step only and the reward (+1
    or -1) comes 5 steps later for naming it. Two agents in one program (seeds 0, 1), with a GRU core, both earn
    1 at their second evaluation (20,480 steps); the feed-forward control's greedy policy stays at chance (0). A GRU
    core because it compiles in less time than an LSTM, which learns this too (1.0 for both agents)."""
    from systems.anakin.config import AnakinConfig
    from systems.anakin.system import run as run_anakin

    def final_metrics(recurrent: str) -> list[float]:
        summary = run_anakin(AnakinConfig(
            env_id="gymnax/MemoryChain-bsuite", recurrent=recurrent, rnn_size=32, num_seeds=2, seed=0,
            total_steps=20_480, eval_every=10_240, eval_episodes=10, eval_deterministic=True, checkpoint_every=0,
            quiet=True, logdir=str(tmp_path / recurrent)))
        return summary["final_metrics"]

    assert min(final_metrics("gru")) >= 0.9
    assert max(abs(m) for m in final_metrics("none")) <= 0.6
