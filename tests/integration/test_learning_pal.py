"""PAL really learns (seed 003 section V): DQN with prioritized replay reaches an evaluation return of at least 450 on
CartPole-v1, and SAC and TD3 reach -300 on Pendulum-v1, each within a fixed env-step budget, with 2 actor threads and
2 learner threads. PAL's threads are asynchronous by design (a seed does not fix which transitions a batch sees),
so the budgets carry margin: on the 2-core machine DQN (exploring over its first 8k steps) first reached 450 at 28k,
36k and 44k steps in three runs (exploring over 20k: between 28k and 52k in eight runs, one of which missed it within
60k under the full suite's load), so the budget is 100k and the run stops at 450; SAC reached
-300 by 4k and TD3 by 6k of their 12k (the runs stop at their threshold). DQN on CartPole is unstable after it
solves the task, so the tests ask for the threshold within the budget (the best evaluation), not at its end."""

import csv
import json
import os

import pytest

from systems.pal import system
from tests.fixtures import tiny_pal

pytestmark = pytest.mark.slow


def _evaluations(run_dir):
    with open(os.path.join(run_dir, "evaluations.csv")) as f:
        return [float(row["mean_return"]) for row in csv.DictReader(f)]


def _run(tmp_path, **values):
    run_dir = str(tmp_path / "run")
    base = dict(seed=1, hidden_sizes=(64, 64), eval_episodes=10, learning_starts=1_000, buffer_size=100_000,
                checkpoint_every=0, target_update_period=system.PALConfig.target_update_period)  # not tiny_pal's
    summary = system.run(tiny_pal(run_dir, **{**base, **values}))
    return summary, _evaluations(run_dir)


def test_pal_dqn_per_solves_cartpole(tmp_path):
    summary, returns = _run(
        tmp_path, env_id="CartPole-v1", algo="dqn", replay="per", envs_per_actor=2, total_steps=100_000,
        batch_size=64, update_interval=2.0, learning_rate=1e-3, tau=0.01, target_update_period=1,
        exploration_fraction=0.08, epsilon_end=0.05, max_grad_norm=10.0, eval_every=2_000, target_return=450.0,
        stop_at_target=True,
    )
    assert summary["priorities_updated"] > 0
    assert max(returns) >= 450, returns


@pytest.mark.parametrize("algo", ["sac"])  # TD3 runs end to end in test_pal.py; its learning run cost 37 s
def test_pal_continuous_reaches_minus_300_on_pendulum(tmp_path, algo):
    """In a child process at XLA's default optimization: its time is the updates' (batch 256, one per env step),
    which the suite's quick-compile flags slow (conftest; 34-35 s under them, 30 s in the child)."""
    from tests.multidevice import run_python

    out = run_python(f"""
        import json, pathlib
        from tests.integration.test_learning_pal import _run
        summary, returns = _run(
            pathlib.Path({str(tmp_path)!r}), env_id="Pendulum-v1", algo={algo!r}, replay="per", envs_per_actor=1,
            total_steps=12_000, batch_size=256, update_interval=1.0, learning_rate=1e-3, tau=0.005,
            max_grad_norm=0.0, opt_eps=1e-8, eval_every=1_000, target_return=-300.0, stop_at_target=True,
        )
        print(json.dumps(dict(optimizer_steps=summary["optimizer_steps"], returns=returns)))
        """, num_devices=1, optimized=True)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["optimizer_steps"] > 0
    assert max(result["returns"]) >= -300, result["returns"]
