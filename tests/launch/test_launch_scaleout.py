"""Smoke tests of `launch.ba3c` and `launch.gala` (tiny sizes, through the launcher's own parser, one CPU device),
resume, and bad flags: one `error:` line and exit 2."""

import pytest

from launch import ba3c as launch_ba3c
from launch import gala as launch_gala
from tests.fixtures import assert_profile, read_config, read_summary, run_launcher


@pytest.mark.slow
def test_ba3c_smoke_on_breakout_uses_the_ba3c_network(tmp_path, capsys):
    run_dir = str(tmp_path / "run")
    flags = dict(game="Breakout", local_batch=8, sync_interval=4, total_steps=32, hidden=64, eval_episodes=1)
    run_launcher(launch_ba3c.main, logdir=run_dir, **flags)
    summary = read_summary(run_dir)
    assert summary["env_steps"] == 32 and summary["updates"] == 4
    # Table 2: the BA3C network's size is 98,624 + hidden x (1602 + A) + A + 1 (Breakout: A = 4).
    assert summary["param_count"] == 98_624 + 64 * (1602 + 4) + 4 + 1
    config = read_config(run_dir)
    assert config["optimizer"] == "adam_large_batch" and config["adam_b1"] == 0.8 and config["adam_b2"] == 0.75
    # config.json: the config as asked (epsilon unset: the plan's), and the plan beside it.
    assert config["learning_rate"] == 1e-3 and config["opt_eps"] is None
    assert config["num_envs"] == 0  # not read: the plan's
    assert config["plan"] == dict(devices=1, envs_per_device=2, num_envs=2, effective_batch=8, learning_rate=1e-3,
                                  opt_eps=1e-8, total_rounds=4,  # epsilon: Table 1's, at any batch
                                  layout=dict(config["plan"]["layout"], rule="preset"))  # sizes given
    assert "effective batch 8" in capsys.readouterr().out
    assert_profile(summary, {"main"})


@pytest.mark.slow
def test_ba3c_resume_continues_from_the_checkpoint(tmp_path):
    run_dir = str(tmp_path / "run")
    base = dict(env="CartPole-v1", local_batch=20, sync_interval=5, eval_episodes=0, quiet=True, logdir=run_dir)
    run_launcher(launch_ba3c.main, total_steps=200, **base)
    run_launcher(launch_ba3c.main, total_steps=400, resume=True, **base)
    summary = read_summary(run_dir)
    assert summary["resumed_from_env_steps"] == 200 and summary["env_steps"] == 400 and summary["updates"] == 20


@pytest.mark.parametrize("gossip_flags", [dict(), dict(max_staleness=1, log_grad_cosine=True)], ids=["plain", "tau"])
def test_gala_smoke(tmp_path, gossip_flags):
    run_dir = str(tmp_path / "run")
    flags = dict(env="CartPole-v1", num_learners=2, envs_per_learner=2, sync_interval=5, total_steps=200,
                 eval_episodes=1, quiet=True, **gossip_flags)
    run_launcher(launch_gala.main, logdir=run_dir, **flags)
    summary = read_summary(run_dir)
    assert summary["env_steps"] == 200 and summary["updates"] == 20
    config = read_config(run_dir)
    assert config["learning_rate"] == 7e-4 and config["optimizer"] == "rmsprop"  # as asked
    assert config["lr_scaling"] == "linear"  # CartPole-v1's preset (presets.GALA_LR_SCALING); elsewhere sqrt
    assert config["plan"]["learning_rate"] == pytest.approx(7e-4 * 2)  # x number of learners
    assert config["plan"]["num_envs"] == 4 and config["num_envs"] == 0  # the launcher leaves num_envs to the plan
    assert len(summary["gossip"]) == 2
    assert_profile(summary, {"learners", "main"})


def test_a_gala_resume_compares_the_learning_rate_as_asked_not_the_planned_one(tmp_path, capsys):
    """config.json keeps the flags as asked and the derived values (the learning rate scaled over the learners,
    the total envs) under its plan: a resume compares the flags, so another learning rate is refused and the same
    flags resume."""
    run_dir = str(tmp_path / "run")
    base = dict(env="CartPole-v1", num_learners=2, envs_per_learner=2, sync_interval=5, eval_episodes=0, quiet=True,
                lr_scaling="sqrt", logdir=run_dir)
    run_launcher(launch_gala.main, total_steps=200, **base)
    saved = read_config(run_dir)
    assert saved["plan"]["learning_rate"] != saved["learning_rate"]
    with pytest.raises(SystemExit):
        run_launcher(launch_gala.main, total_steps=400, resume=True, learning_rate=1e-3, **base)
    assert "--learning_rate=0.001" in capsys.readouterr().err
    run_launcher(launch_gala.main, total_steps=400, resume=True, **base)
    assert read_summary(run_dir)["resumed_from_env_steps"] == 200 and "plan" in read_config(run_dir)


@pytest.mark.parametrize(
    "main,kwargs,message",
    [
        (launch_ba3c.main, dict(env="CartPole-v1", local_batch=7, sync_interval=5), "multiple of --sync_interval"),
        (launch_ba3c.main, dict(env="CartPole-v1", num_envs=8), "--num_envs does not apply to launch.ba3c"),
        (launch_ba3c.main, dict(env="CartPole-v1", num_devices=64), "devices"),
        (launch_ba3c.main, dict(env="CartPole-v1", algo="ppo"), "A2C"),
        (launch_ba3c.main, dict(env="CartPole-v1", num_processes=2), "coordinator_address"),
        (launch_ba3c.main, dict(env="CartPole-v1", hidden=0), "--hidden"),
        (launch_gala.main, dict(env="CartPole-v1", gossip="pmap"), "one learner per device"),
        (launch_gala.main, dict(env="CartPole-v1", topology="exponential"), "--gossip=pmap"),
        (launch_gala.main, dict(env="CartPole-v1", num_envs=8), "--num_envs does not apply to launch.gala"),
        (launch_gala.main, dict(env="CartPole-v1", max_staleness=-2), "max_staleness"),
        (launch_gala.main, dict(env="CartPole-v1", num_learners=3, topology="exponential", gossip="pmap"), "power"),
    ],
)
def test_bad_scaleout_flags_one_line_and_exit_2(tmp_path, capsys, main, kwargs, message):
    with pytest.raises(SystemExit) as exit_info:
        run_launcher(main, logdir=str(tmp_path / "run"), quiet=True, **kwargs)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message.lower() in err.lower(), err
    assert len(err.splitlines()) == 1
