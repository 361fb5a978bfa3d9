"""`launch.anakin`: rounds, inference and updates in one jitted program, several agents vmapped in it. Its rounds are
the synchronous baseline's (the same rollout, the same update up to rounding), its results do not depend on the
chunk length, every agent has its own outputs, a run resumes, and a stop saves every agent."""

import csv
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from systems.anakin import system as anakin
from systems.anakin.config import AnakinConfig
from systems.common.config import ConfigError

CARTPOLE = "gymnax/CartPole-v1"


def tiny(logdir, **overrides) -> AnakinConfig:
    """Six PPO rounds of 4 envs x 16 steps on gymnax's CartPole, a checkpoint every round, no evaluation."""
    values = dict(env_id=CARTPOLE, num_envs=4, sync_interval=16, total_steps=6 * 64, num_epochs=1, num_minibatches=2,
                  checkpoint_every=64, eval_every=128, eval_episodes=0, quiet=True, logdir=str(logdir))
    values.update(overrides)
    return AnakinConfig(**values)


def test_a_task_that_is_not_a_jax_env_and_unsupported_flags_are_one_line():
    for overrides, message in ((dict(env_id="CartPole-v1"), "needs a JAX env \\(--env=gymnax/<id>"),
                               (dict(num_seeds=0), "--num_seeds must be >= 1")):
        with pytest.raises(ConfigError, match=message):
            anakin.validate(tiny("unused", **overrides))


def test_more_agents_than_the_open_files_allow_are_refused_before_anything_is_written(tmp_path, monkeypatch):
    """--num_seeds=100000 built 5,000 agents' run directories, then died on "too many open files" with a misleading
    "the directory holds a damaged run" and left them all."""
    import resource

    from launch import anakin as launch_anakin
    from tests.fixtures import run_launcher

    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 4096))
    with pytest.raises(ConfigError, match=r"100,000 agents .* above this process's limit of 4,096 .* at most 960"):
        anakin.run(tiny(tmp_path / "run", num_seeds=100_000))
    assert not (tmp_path / "run").exists()
    with pytest.raises(SystemExit) as exit_info:
        run_launcher(launch_anakin.main, env=CARTPOLE, num_seeds=2_000, learning_rates="0.1,0.2",
                     logdir=str(tmp_path / "launched"))
    assert exit_info.value.code == 2 and not (tmp_path / "launched").exists()


def _csv_steps(run_dir, name: str) -> list[int]:
    return [int(row["env_steps"]) for row in csv.DictReader((run_dir / name).read_text().splitlines())]


@pytest.mark.slow
def test_results_do_not_depend_on_the_calls_and_evaluations_keep_their_grid(tmp_path, monkeypatch):
    """The same parameters whatever rounds a call runs: --chunk_rounds=4 (calls of 1, 3 and 2 rounds, ending on
    multiples of 4) and the timed calls of a run without it (one round while unmeasured, then as many as fit in
    CALL_SECONDS up to the next multiple of the chunk length: 2 rounds here; all single rounds with CALL_SECONDS 0).
    Evaluations stay on the --eval_every grid."""
    grid = dict(eval_every=128, eval_episodes=1, checkpoint_every=256)  # chunk length: 128 env steps, 2 rounds
    runs = {name: anakin.run(tiny(tmp_path / name, **changes))
            for name, changes in (("chunk4", dict(chunk_rounds=4)), ("timed", grid))}
    monkeypatch.setattr(anakin, "CALL_SECONDS", 0.0)
    runs["short"] = anakin.run(tiny(tmp_path / "short", **grid))
    assert len({summary["param_fingerprint"] for summary in runs.values()}) == 1
    assert _csv_steps(tmp_path / "chunk4", "progress.csv") == [64, 256, 384]
    assert _csv_steps(tmp_path / "timed", "progress.csv") == [64, 128, 256, 384]
    assert _csv_steps(tmp_path / "short", "progress.csv") == [64 * k for k in range(1, 7)]
    for name in ("timed", "short"):
        assert _csv_steps(tmp_path / name, "evaluations.csv") == [128, 256, 384], name


@pytest.mark.slow
def test_a_round_is_the_synchronous_baselines_round(tmp_path):
    """The same envs, actions and rollout as launch.sync's first round on the same task (its metrics of the data are
    equal), and the same update but for the last bits (XLA fuses it differently inside the scan). Compared under
    XLA's default fusion emitters (`multidevice.run_with_fusion_emitters`), as runs outside the tests compile."""
    from tests.multidevice import run_with_fusion_emitters

    run_with_fusion_emitters(check_a_round_is_the_synchronous_baselines_round, str(tmp_path))


def check_a_round_is_the_synchronous_baselines_round(tmp_dir: str):
    from pathlib import Path

    from systems.sync import system as sync
    from systems.sync.config import SyncConfig

    tmp_path = Path(tmp_dir)
    config = tiny(tmp_path / "anakin", total_steps=64)
    ours = anakin.run(config)
    fields = {f.name for f in dataclasses.fields(SyncConfig)}
    theirs = sync.run(SyncConfig(**{k: v for k, v in dataclasses.asdict(config).items() if k in fields
                                    and k != "logdir"}, logdir=str(tmp_path / "sync")))
    assert ours["train_episodes"] == theirs["train_episodes"]
    for name in ("advantage_mean", "value_loss", "entropy"):
        assert ours["last_metrics"][name] == theirs["last_metrics"][name], name
    for name, value in theirs["last_metrics"].items():
        np.testing.assert_allclose(ours["last_metrics"][name], value, rtol=1e-4, atol=1e-7, err_msg=name)


@pytest.mark.slow
def test_normalized_rounds_are_the_synchronous_baselines_rounds(tmp_path):
    """--normalize_obs / --normalize_reward (`agents.normalization`, statistics in the parameters) on a continuous
    task: two rounds are launch.sync's two rounds (equal episodes, the same statistics and update up to the last
    bits), under XLA's default fusion emitters."""
    from tests.multidevice import run_with_fusion_emitters

    run_with_fusion_emitters(check_normalized_rounds_are_the_synchronous_baselines_rounds, str(tmp_path))


def check_normalized_rounds_are_the_synchronous_baselines_rounds(tmp_dir: str):
    from pathlib import Path

    from systems.sync import system as sync
    from systems.sync.config import SyncConfig

    tmp_path = Path(tmp_dir)
    config = tiny(tmp_path / "anakin", env_id="gymnax/Pendulum-v1", total_steps=2 * 64, normalize_obs=True,
                  normalize_reward=True)
    ours = anakin.run(config)
    fields = {f.name for f in dataclasses.fields(SyncConfig)}
    theirs = sync.run(SyncConfig(**{k: v for k, v in dataclasses.asdict(config).items() if k in fields
                                    and k != "logdir"}, logdir=str(tmp_path / "sync")))
    assert ours["train_episodes"] == theirs["train_episodes"]
    assert ours["last_metrics"]["obs_norm_count"] == theirs["last_metrics"]["obs_norm_count"] == 2 * 64
    for name, value in theirs["last_metrics"].items():
        np.testing.assert_allclose(ours["last_metrics"][name], value, rtol=1e-4, atol=1e-7, err_msg=name)


@pytest.mark.slow
def test_the_delayed_update_is_htss_algorithm(tmp_path):
    """With --delayed_update (Eq. 6) three rounds are HTS's three rounds on the same task: round k acts with the
    parameters before the last update (the same episodes), the updates the same up to the last bits (so the third
    round's values too); without it the third round acts with other parameters."""
    from systems.hts import system as hts
    from systems.hts.config import HTSConfig

    fields = {f.name for f in dataclasses.fields(HTSConfig)}

    def as_hts(config):
        return HTSConfig(**{k: v for k, v in dataclasses.asdict(config).items() if k in fields and k != "logdir"},
                         logdir=str(tmp_path / "hts"))

    config = tiny(tmp_path / "delayed", total_steps=3 * 64, delayed_update=True, learning_rate=0.05)  # big steps
    ours, theirs = anakin.run(config), hts.run(as_hts(config))
    plain = anakin.run(dataclasses.replace(config, delayed_update=False, logdir=str(tmp_path / "plain")))
    assert ours["max_policy_lag"] == theirs["max_policy_lag"] == 1 and plain["max_policy_lag"] == 0
    assert ours["train_episodes"] == theirs["train_episodes"]
    for name, value in theirs["last_metrics"].items():
        np.testing.assert_allclose(ours["last_metrics"][name], value, rtol=1e-4, atol=1e-7, err_msg=name)
    assert any(not np.isclose(plain["last_metrics"][name], value, rtol=1e-3)
               for name, value in theirs["last_metrics"].items())


@pytest.mark.slow
def test_several_agents_each_write_their_own_run_and_resume(tmp_path):
    config = tiny(tmp_path / "run", num_seeds=2, seed=3, total_steps=3 * 64)
    first = anakin.run(config)
    assert first["seeds"] == [3, 4] and first["run_dirs"] == [str(tmp_path / "run" / f"seed_{s}") for s in (3, 4)]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["num_seeds"] == 2
    agents = [json.loads((tmp_path / "run" / f"seed_{s}" / "summary.json").read_text()) for s in (3, 4)]
    assert [a["seed"] for a in agents] == [3, 4] and agents[0]["param_fingerprint"] != agents[1]["param_fingerprint"]
    resumed = anakin.run(dataclasses.replace(config, total_steps=6 * 64, resume=True))
    for s in (3, 4):
        summary = json.loads((tmp_path / "run" / f"seed_{s}" / "summary.json").read_text())
        assert summary["resumed_from_env_steps"] == 3 * 64 and summary["updates"] == 6
    assert resumed["env_steps_per_agent"] == 6 * 64


@pytest.mark.slow
def test_agents_whose_newest_checkpoints_differ_resume_together_from_their_newest_common_one(tmp_path, capsys):
    """A SIGKILL or a full disk amid a checkpoint round, or one agent's corrupt newest file, left the agents at
    different updates and --resume refused, asking the user to delete files by hand; a killed writer's partial
    file was never swept."""
    from systems.common.checkpoint import list_checkpoints

    config = tiny(tmp_path / "run", num_seeds=3, seed=3, total_steps=3 * 64)
    anakin.run(config)
    agents = [str(tmp_path / "run" / f"seed_{s}") for s in (3, 4, 5)]
    os.remove(list_checkpoints(agents[1])[-1])  # killed amid the round: agent 1 never saved update 3
    with open(list_checkpoints(agents[2])[-1], "r+b") as f:
        f.truncate(50)  # agent 2's newest is corrupt
    partial = os.path.join(agents[2], "checkpoints", "ckpt_000000000192.msgpack.tmp-12345")
    with open(partial, "wb") as f:
        f.write(b"partial")
    anakin.run(dataclasses.replace(config, total_steps=5 * 64, resume=True))
    for agent in agents:
        summary = json.loads((tmp_path / "run" / os.path.basename(agent) / "summary.json").read_text())
        assert summary["resumed_from_env_steps"] == 2 * 64 and summary["updates"] == 5
    err = capsys.readouterr().err
    assert "ckpt_000000000192.msgpack is ahead of the other agents' newest checkpoint (128 env steps)" in err
    assert not os.path.exists(partial)
    assert os.path.exists(os.path.join(agents[0], "checkpoints", "ckpt_000000000192.msgpack.ahead"))


@pytest.mark.slow
def test_a_learning_rate_sweep_trains_each_rate_as_its_own_run_would(tmp_path):
    """--learning_rates: one agent per rate in the one program, each with its own directory and config, training as
    a run with that --learning_rate (metrics within 1e-4 after two rounds; the rate is applied after a unit-rate
    optimizer, so the last bits differ); a malformed list is one line."""
    sweep = anakin.run(tiny(tmp_path / "sweep", total_steps=2 * 64, learning_rates="0.01,0.05"))
    assert sweep["learning_rates"] == [0.01, 0.05] and sweep["num_agents"] == 2
    for rate in (0.01, 0.05):
        run = tmp_path / "sweep" / f"lr_{rate:g}_seed_1"
        assert json.loads((run / "config.json").read_text())["learning_rate"] == rate
        ours = json.loads((run / "summary.json").read_text())
        alone = anakin.run(tiny(tmp_path / f"alone{rate}", total_steps=2 * 64, learning_rate=rate))
        for name, value in alone["last_metrics"].items():
            np.testing.assert_allclose(ours["last_metrics"][name], value, rtol=1e-4, atol=1e-6, err_msg=name)
    with pytest.raises(ConfigError, match="--learning_rates must be distinct positive numbers"):
        anakin.validate(tiny("unused", learning_rates="0.1,x"))


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_an_entropy_sweep_trains_each_coefficient_as_its_own_run_would(tmp_path, algo):
    """--entropy_coefs: one agent per coefficient in the one program (the coefficient traced in each agent's carry),
    training as a run with that --entropy_coef (equal metrics up to rounding; each coefficient reaches its loss:
    the total loss subtracts coefficient x entropy); with --learning_rates, every pair."""
    coefs = (0.0, 0.5)
    sweep = anakin.run(tiny(tmp_path / "sweep", algo=algo, total_steps=3 * 64, entropy_coefs="0,0.5"))
    assert sweep["entropy_coefs"] == list(coefs) and sweep["num_agents"] == 2
    losses = []
    for coef in coefs:
        run = tmp_path / "sweep" / f"ent_{coef:g}_seed_1"
        assert json.loads((run / "config.json").read_text())["entropy_coef"] == coef
        ours = json.loads((run / "summary.json").read_text())
        alone = anakin.run(tiny(tmp_path / f"alone{coef}", algo=algo, total_steps=3 * 64, entropy_coef=coef))
        for name, value in alone["last_metrics"].items():
            np.testing.assert_allclose(ours["last_metrics"][name], value, rtol=1e-4, atol=1e-6, err_msg=name)
        losses.append(ours["last_metrics"]["total_loss"])
    assert losses[0] - losses[1] > 0.1  # 0.5 x entropy (about ln 2 = 0.69 on CartPole's two actions)
    both = anakin.run(tiny(tmp_path / "both", algo=algo, total_steps=64, entropy_coefs="0,0.5",
                           learning_rates="0.01,0.05"))
    assert both["num_agents"] == 4 and (tmp_path / "both" / "lr_0.05_ent_0.5_seed_1" / "summary.json").exists()
    with pytest.raises(ConfigError, match="--entropy_coefs must be distinct non-negative numbers"):
        anakin.validate(tiny("unused", entropy_coefs="0.1,-1"))


@pytest.mark.slow
def test_sigterm_saves_every_agent_and_names_the_root_to_resume(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "launch.anakin", f"--env={CARTPOLE}", "--num_envs=4", "--sync_interval=16",
         "--num_seeds=2", "--total_steps=100000000", "--checkpoint_every=64", "--chunk_rounds=1", "--eval_episodes=0",
         "--quiet", f"--logdir={run_dir}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=os.getcwd()))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if len(list((run_dir / "seed_2" / "checkpoints").glob("ckpt_*"))) >= 2:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-2000:]
    assert f"continue with --resume --logdir={run_dir})" in err and "Traceback" not in err, err
    for seed in (1, 2):
        summary = json.loads((run_dir / f"seed_{seed}" / "summary.json").read_text())
        assert summary["interrupted"] and summary["env_steps"] >= 64


@pytest.mark.slow
def test_every_agent_evaluates_and_films_its_own_episodes(tmp_path):
    """Evaluated together, filmed each: every agent's run has its evaluations and one video per evaluation."""
    config = tiny(tmp_path / "run", num_seeds=2, total_steps=2 * 64, eval_every=64, eval_episodes=2,
                  capture_video=True)
    summary = anakin.run(config)
    assert all(np.isfinite(summary["final_metrics"]))
    for seed in (1, 2):
        run = tmp_path / "run" / f"seed_{seed}"
        assert len((run / "evaluations.csv").read_text().splitlines()) == 1 + 2  # header, at 64 and 128 steps
        assert len(list((run / "videos").glob("eval-*"))) == 2
