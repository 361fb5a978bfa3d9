"""Spreeze really learns (seed 002): SAC with one sampler process reaches a test return of -200 on Pendulum-v1
(Spreeze's Table 1 target) within a fixed wall-time budget of 150 s on the 2-core machine (first runs there reached
it after 12-20 s of training). The run stops at the target (`stop_at_target`). Samplers and learner run free, so
the run is not bit-reproducible; the budget carries the margin. In a child process at XLA's default optimization:
the time to the target is the learner's speed, which the suite's quick-compile flags cut (conftest; the test took
22-27 s under them, 21 s in the child)."""

import json

import pytest

from tests.multidevice import run_python

pytestmark = pytest.mark.slow


def test_spreeze_sac_reaches_minus_200_on_pendulum(tmp_path):
    out = run_python(f"""
        import json
        from systems.spreeze import system
        config = system.SpreezeConfig(
            env_id="Pendulum-v1", algo="sac", seed=1, num_samplers=1, envs_per_sampler=1, num_envs=1,
            batch_size=256, buffer_size=100_000, learning_starts=1_000, total_steps=10_000_000,
            hidden_sizes=(64, 64), learning_rate=1e-3, tau=0.005, max_grad_norm=0.0, opt_eps=1e-8,
            publish_every=50, eval_episodes=5, eval_every=1_000, target_return=-200.0, stop_at_target=True,
            time_limit=150.0, quiet=True, logdir={str(tmp_path / "run")!r},
        )
        summary = system.run(config)
        print(json.dumps({{k: summary[k] for k in ("time_to_target", "last_eval_return")}}))
        """, num_devices=1, optimized=True)
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["time_to_target"] is not None, summary["last_eval_return"]
    assert summary["time_to_target"] <= 150.0
