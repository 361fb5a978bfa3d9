"""The one-step-delayed schedule of seed 000 (Eq. 6), read back from progress.csv: HTS update k (1-based) learns
round k-1, collected with theta_{max(0, k-2)}, while the learner holds theta_{k-1}; the sync baseline always learns
on-policy (lag 0)."""

import csv
import os

from systems.hts import system as hts
from systems.hts.system import HTSConfig
from systems.sync import system as sync


def _rows(tmp_path, system):
    run_dir = str(tmp_path / system.SYSTEM)
    config = HTSConfig(
        env_id="CartPole-v1", num_envs=4, sync_interval=8, total_steps=4 * 8 * 6, num_actors=2,
        num_epochs=1, num_minibatches=2, eval_episodes=0, quiet=True, logdir=run_dir,
    )
    system.run(config)
    with open(os.path.join(run_dir, "progress.csv")) as f:
        return list(csv.DictReader(f))


def test_hts_versions_follow_eq6(tmp_path):
    rows = _rows(tmp_path, hts)
    assert [int(r["update"]) for r in rows] == [1, 2, 3, 4, 5, 6]
    for k, row in enumerate(rows, start=1):
        assert int(row["learner_version"]) == k - 1
        assert int(row["behaviour_version"]) == max(0, k - 2)
        assert int(row["policy_lag"]) == (0 if k == 1 else 1)


def test_sync_is_on_policy(tmp_path):
    rows = _rows(tmp_path, sync)
    for k, row in enumerate(rows, start=1):
        assert int(row["learner_version"]) == int(row["behaviour_version"]) == k - 1
        assert int(row["policy_lag"]) == 0
