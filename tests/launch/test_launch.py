"""Launcher smoke tests (tiny sizes, through the launcher's own parser), bad flags, and checkpoint kill/resume."""

import dataclasses
import importlib
import os
import signal
import subprocess
import sys
import time

import pytest

from envs.factory import make_spec
from launch import cli, flagsets
from launch import hts as launch_hts
from launch import pal as launch_pal
from launch import sync as launch_sync
from systems.common.checkpoint import list_checkpoints, load_latest_checkpoint
from systems.common.config import TrainConfig, hyperparameter, hyperparameters
from systems.common.learner import build
from systems.registry import LAUNCHERS
from tests.faults import wait_for_checkpoints
from tests.fixtures import REPO_ROOT, assert_profile, launcher_config, read_summary, run_launcher

ROOT = REPO_ROOT


def _outputs_ok(run_dir, steps):
    summary = read_summary(run_dir)
    assert summary["env_steps"] == steps
    assert len(summary["param_fingerprint"]) == 64
    for name in ("config.json", "progress.csv", "evaluations.csv"):
        assert os.path.exists(os.path.join(run_dir, name)), name
    with open(os.path.join(run_dir, "progress.csv")) as f:
        rows = f.read().strip().splitlines()
    assert rows[0].startswith("env_steps,wall_time,sps")
    assert len(rows) == 1 + summary["updates"]
    assert os.listdir(os.path.join(run_dir, "tb"))
    assert list_checkpoints(run_dir)
    assert_profile(summary, {"actors", "learner", "main"} if summary["system"] == "hts" else {"main"})
    return summary


@pytest.mark.parametrize(
    "launcher,kwargs,steps,optimized",
    [
        # The main command at a smoke size (its preset's update at real size: tests/launch/test_presets.py).
        ("hts", dict(game="Breakout", num_envs=4, sync_interval=4, total_steps=32, num_actors=2, num_minibatches=2,
                     num_epochs=1), 32, True),
        ("sync", dict(game="Breakout", num_envs=4, sync_interval=4, total_steps=32, algo="a2c"), 32, False),
        ("hts", dict(env="gfootball/academy_empty_goal_close-v1", num_envs=4, sync_interval=4, total_steps=32,
                     num_minibatches=2, num_epochs=1), 32, True),
        ("sync", dict(env="gfootball/academy_empty_goal_close-v1", num_envs=4, sync_interval=4, total_steps=32,
                      num_minibatches=2, num_epochs=1), 32, True),
        ("hts", dict(env="HalfCheetah-v4", num_envs=2, sync_interval=8, total_steps=32, num_minibatches=2,
                     num_epochs=1), 32, False),
    ],
    ids=["hts-breakout", "sync-breakout-a2c", "hts-gfootball", "sync-gfootball", "hts-mujoco"],
)
@pytest.mark.slow
def test_launcher_smoke(tmp_path, launcher, kwargs, steps, optimized):
    """`optimized`: in a child at XLA's default optimization, where the image networks' small-batch convolutions
    (XLA's own loops) run several times faster than under the suite's quick-compile flags (conftest)."""
    run_dir = str(tmp_path / "run")
    if optimized:
        from tests.multidevice import call_in_child

        call_in_child(check_launcher_smoke, run_dir, launcher, kwargs, steps, optimized=True)
    else:
        check_launcher_smoke(run_dir, launcher, kwargs, steps)


def check_launcher_smoke(run_dir: str, launcher: str, kwargs: dict, steps: int) -> None:
    run_launcher(importlib.import_module(f"launch.{launcher}").main, logdir=run_dir, eval_episodes=1, quiet=True,
                 **kwargs)
    summary = _outputs_ok(run_dir, steps)
    assert summary["evaluations"] >= 1 and summary["final_metric"] is not None


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(game="Breakkout"), "unknown"),
        (dict(game="Breakout", env="CartPole-v1"), "exactly one"),
        (dict(env="CartPole-v1", num_envs=0), "--num_envs must be positive"),
        (dict(env="CartPole-v1", num_envs=4, sync_interval=5, num_minibatches=3),
         "does not divide the batch num_envs x sync_interval = 20: e.g. --num_minibatches=2, or more --num_envs"),
        (dict(env="CartPole-v1", sync_interval=-1), "--sync_interval must be positive"),
        (dict(env="CartPole-v1", step_time="weibull:3"), "step"),
        (dict(env="CartPole-v1", num_envs=4, env_batch_size=8), "exceeds"),
        (dict(env="CartPole-v1", recurrent="rnn"), "--recurrent"),
        (dict(env="CartPole-v1", recurrent="lstm", rnn_size=0), "--rnn_size must be positive"),
        (dict(game="Breakout", recurrent="lstm", rnn_input="obs"), "--rnn_input=obs needs vector observations"),
        (dict(env="CartPole-v1", recurrent="lstm", rnn_input="cnn"), "--rnn_input"),
        (dict(env="CartPole-v1", use_sde=True), "explores a continuous action space"),
        (dict(env="Pendulum-v1", sde_sample_freq=4), "add --use_sde"),
    ],
)
def test_bad_flags_one_line_and_exit_2(capsys, kwargs, message):
    with pytest.raises(SystemExit) as exit_info:
        run_launcher(launch_hts.main, **kwargs)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message.lower() in err.lower(), err
    assert len(err.splitlines()) == 1


def test_resume_without_checkpoint_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        run_launcher(launch_sync.main, env="CartPole-v1", logdir=str(tmp_path), resume=True)
    assert e.value.code == 2
    assert "holds no run (no readable config.json)" in capsys.readouterr().err


def test_bad_algo_from_the_command_line_has_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "launch.hts", "--env=CartPole-v1", "--algo=dqn"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "algo" in proc.stderr


def _start(run_dir, *extra):
    cmd = [  # -X faulthandler: a hung run dumps every thread's stack on SIGABRT (see `_communicate_or_dump`)
        sys.executable, "-X", "faulthandler", "-m", "launch.hts", "--env=CartPole-v1", "--num_envs=4",
        "--sync_interval=16", "--total_steps=400000", "--checkpoint_every=640", "--eval_episodes=0", "--quiet",
        f"--logdir={run_dir}",
        *extra,
    ]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _communicate_or_dump(proc, timeout=60):
    """`proc.communicate`, but a run that does not exit in time fails the test with the stacks of its threads."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"the run did not exit within {timeout} s; its threads:\n{err[-8000:]}") from None


@pytest.mark.slow
def test_kill_then_resume(tmp_path):
    run_dir = str(tmp_path / "run")
    proc = _start(run_dir)
    try:
        wait_for_checkpoints(run_dir, count=2)
        time.sleep(0.3)
    finally:
        proc.kill()  # SIGKILL at an arbitrary moment, possibly mid-write
        proc.wait(timeout=30)
    config = TrainConfig(env_id="CartPole-v1", num_envs=4, sync_interval=16)
    _, template = build(config, make_spec("CartPole-v1"))
    restored = load_latest_checkpoint(run_dir, template)
    assert restored is not None
    state, meta = restored
    killed_at = meta["env_steps"]
    assert killed_at > 0 and int(state.update_step) * 64 == killed_at

    resumed = subprocess.run(
        [sys.executable, "-m", "launch.hts", "--env=CartPole-v1", "--num_envs=4", "--sync_interval=16",
         f"--total_steps={killed_at + 1280}", "--checkpoint_every=640", "--eval_episodes=0", "--quiet",
         f"--logdir={run_dir}", "--resume"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = read_summary(run_dir)
    assert summary["resumed_from_env_steps"] == killed_at
    assert summary["env_steps"] == killed_at + 1280


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_keeps_a_checkpoint(tmp_path):
    run_dir = str(tmp_path / "run")
    proc = _start(run_dir)
    try:
        wait_for_checkpoints(run_dir)
        proc.send_signal(signal.SIGINT)
        _, err = _communicate_or_dump(proc)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    summary = read_summary(run_dir)
    assert summary["interrupted"] is True
    assert summary["env_steps"] > 0 and list_checkpoints(run_dir)


def test_checkpoints_are_atomic_and_partial_files_are_ignored(tmp_path):
    from systems.common.checkpoint import save_checkpoint

    config = TrainConfig(env_id="CartPole-v1", num_envs=4, sync_interval=16)
    _, state = build(config, make_spec("CartPole-v1"))
    run_dir = str(tmp_path)
    save_checkpoint(run_dir, 64, state, {"env_steps": 64})
    # A writer killed mid-write leaves only a temporary file, and a newer but truncated checkpoint is skipped.
    directory = os.path.join(run_dir, "checkpoints")
    with open(os.path.join(directory, "ckpt_000000000128.msgpack.tmp-123"), "wb") as f:
        f.write(b"partial")
    with open(os.path.join(directory, "ckpt_000000000192.msgpack"), "wb") as f:
        f.write(b"\x85truncated")
    restored, meta = load_latest_checkpoint(run_dir, state)
    assert meta["env_steps"] == 64
    assert int(restored.update_step) == int(state.update_step)
    save_checkpoint(run_dir, 256, state, {"env_steps": 256})
    names = sorted(os.listdir(directory))
    assert not [n for n in names if ".tmp-" in n]
    assert load_latest_checkpoint(run_dir, state)[1]["env_steps"] == 256


@pytest.mark.parametrize(
    "launcher,present,absent",
    [
        ("hts", ("--num_actors", "--clip_eps", "--normalize_obs", "--game"),
         ("--replay", "--num_learners", "--hidden")),
        ("sync", ("--sync_interval", "--num_epochs"), ("--num_actors", "--inference_batch", "--replay")),
        ("ba3c", ("--local_batch", "--coordinator_address", "--hidden"), ("--num_envs", "--clip_eps", "--num_actors")),
        ("gala", ("--envs_per_learner", "--num_learners", "--gossip"), ("--num_envs", "--normalize_obs")),
        ("pal", ("--replay", "--tree_k", "--num_learners", "--checkpoint_every"), ("--sync_interval", "--num_envs")),
        ("spreeze", ("--num_samplers", "--transfer", "--buffer_size"), ("--checkpoint_every", "--replay", "--tree_k")),
    ],
)
def test_each_launcher_help_lists_its_own_flags_with_defaults(launcher, present, absent):
    """`python -m launch.<name> --help`: the launcher's docstring and every flag it takes, none it refuses."""
    result = subprocess.run([sys.executable, "-m", f"launch.{launcher}", "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    module = importlib.import_module(f"launch.{launcher}")
    assert launcher in LAUNCHERS  # the registry and launch.flagsets name the same launchers
    for name in module.FLAGS:
        shown = f"--{name}:" in result.stdout or f"--[no]{name}:" in result.stdout
        assert shown, f"--{name} missing from launch.{launcher} --help"
    for flag in present:
        assert f"{flag}:" in result.stdout or f"--[no]{flag[2:]}:" in result.stdout, flag
    for flag in absent:
        assert f"{flag}:" not in result.stdout and f"--[no]{flag[2:]}:" not in result.stdout
    assert "(default:" in result.stdout and f"python -m launch.{launcher}" in result.stdout


@pytest.mark.parametrize(
    "main,flags,message",
    [
        (launch_sync.main, dict(num_actors=4),
         "--num_actors does not apply to launch.sync (it is a flag of launch.hts"),
        (launch_pal.main, dict(recurrent="lstm"), "--recurrent does not apply to launch.pal (it is a flag of "
         "launch.hts, launch.sync, launch.ba3c, launch.gala, launch.anakin)"),
        (launch_hts.main, dict(algo="sac"),
         "launch.hts trains ppo, a2c; --algo=sac is trained by python -m launch.pal"),
        (launch_hts.main, dict(num_actor=2), "launch.hts has no flag --num_actor; did you mean --num_actors?"),
        (launch_hts.main, dict(seed="x"), "flag --seed=x"),
    ],
)
def test_a_flag_the_launcher_does_not_take_is_one_line_naming_who_takes_it(capsys, main, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        run_launcher(main, **flags)  # exits in the launcher's parser, before any training
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


@pytest.mark.parametrize("launcher_module", [launch_hts, launch_sync], ids=["hts", "sync"])
def test_a_stray_positional_argument_is_refused_before_any_run(capsys, launcher_module):
    """`launch.hts --game=Breakout stray_arg` started a full run: every launcher shares this parser."""
    name = launcher_module.__name__.rpartition(".")[2]
    launcher_module.FLAGS.unparse_flags()
    try:
        with pytest.raises(SystemExit) as exit_info:
            cli.launcher_parser(name, launcher_module.FLAGS, launcher_module.__doc__)(
                [launcher_module.__name__, "--env=CartPole-v1", "stray_arg"])
    finally:
        launcher_module.FLAGS.unparse_flags()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: unexpected argument 'stray_arg': launch.{name} takes only flags (--name=value; see "
                   "--help)"], err


def test_a_task_with_a_tuned_preset_uses_it_and_config_says_which():
    """CartPole-v1's PPO takes rl-zoo3's tuned values; a flag still wins; `--preset=family` and tasks without one of
    their own take the family's (CleanRL's); GALA takes a task's A2C preset but keeps its own layout and no
    normalization."""
    import launch.gala
    import launch.hts
    from systems.common.presets import PRESETS, TASK_PRESETS

    tuned = launcher_config(launch.hts, "--env=CartPole-v1")
    zoo = TASK_PRESETS[("CartPole-v1", "ppo")][1]
    assert (tuned.num_envs, tuned.sync_interval, tuned.num_epochs, tuned.gamma) == (
        zoo["num_envs"], zoo["sync_interval"], zoo["num_epochs"], zoo["gamma"])
    assert tuned.preset.startswith("task CartPole-v1 ppo (rl-zoo3")
    assert launcher_config(launch.hts, "--env=CartPole-v1", "--num_envs=4").num_envs == 4
    family = launcher_config(launch.hts, "--env=CartPole-v1", "--preset=family")
    assert (family.num_envs, family.sync_interval) == (PRESETS[("classic", "ppo")]["num_envs"],
                                                       PRESETS[("classic", "ppo")]["sync_interval"])
    assert family.preset == "family classic ppo"
    assert launcher_config(launch.hts, "--env=MountainCar-v0").preset == "family classic ppo"
    assert launcher_config(launch.gala, "--env=MountainCar-v0").preset == "family classic a2c"
    gala = launcher_config(launch.gala, "--env=Acrobot-v1")  # rl-zoo3's A2C, less what several learners cannot keep
    assert gala.preset.startswith("task Acrobot-v1 a2c") and gala.entropy_coef == 0.0
    assert not gala.normalize_obs and gala.envs_per_learner == 16 and gala.lr_scaling == "sqrt"  # seed 004's
    assert launcher_config(launch.gala, "--env=CartPole-v1").lr_scaling == "linear"  # presets.GALA_LR_SCALING
    assert launcher_config(launch.gala, "--env=CartPole-v1", "--lr_scaling=sqrt").lr_scaling == "sqrt"
    football = launcher_config(launch.hts, "--env=gfootball/academy_empty_goal_close-v1")  # measured here
    assert football.preset.startswith("task gfootball/academy_empty_goal_close-v1 ppo")
    assert (football.sync_interval, football.num_minibatches, football.num_envs, football.num_epochs) == (64, 4, 16, 2)
    other = launcher_config(launch.hts, "--env=gfootball/academy_3_vs_1_with_keeper-v1")
    assert (other.preset, other.sync_interval, other.num_minibatches) == ("family gfootball ppo", 128, 8)
    cheetah = launcher_config(launch.hts, "--env=HalfCheetah-v4")
    assert cheetah.hidden_sizes == (256, 256) and cheetah.activation == "relu" and cheetah.normalize_obs


def test_a_hyperparameter_is_declared_once_in_its_config_and_every_launcher_offers_it():
    """The on-policy launchers' hyperparameter flags are generated from `TrainConfig`'s `hyperparameter` fields:
    the help text, the kind (an enum where the field has choices) and the group come from the field."""
    every = ("envs", "on_policy", "ppo", "normalization")
    groups = {"hts": every, "sync": every, "ba3c": ("on_policy",), "gala": ("on_policy",)}  # BA3C, GALA: A2C only
    for launcher, offered in groups.items():
        flag_values = flagsets.flag_values(launcher)
        for field in dataclasses.fields(TrainConfig):
            if field.metadata.get("group") in offered:
                assert flag_values[field.name].help.endswith(field.metadata["help"]), (launcher, field.name)
                # A hyperparameter's flag defaults to the preset, a setting's to the field's value.
                expected = None if field.metadata["preset"] else field.metadata["flag_default"]
                assert flag_values[field.name].default == expected, (launcher, field.name)
    assert flagsets.flag_values("hts")["optimizer"].parser.enum_values == ["adam", "rmsprop", "adam_large_batch"]
    # The systems' own groups: settings default to the field's value (or the flag default they declare: the
    # --layout=auto of HTS, BA3C and Anakin, whose field keeps a config made in code literal), hyperparameters to the
    # preset.
    from systems.ba3c.config import BA3CConfig
    from systems.gala.config import GALAConfig
    from systems.hts.config import HTSConfig
    from systems.pal.config import PALConfig

    groups = (("ba3c", BA3CConfig, "ba3c"), ("gala", GALAConfig, "gala"), ("hts", HTSConfig, "hts"),
              ("hts", HTSConfig, "hts_devices"), ("pal", PALConfig, "pal"), ("pal", PALConfig, "dqn"),
              ("pal", PALConfig, "pal_run"))
    for launcher, config_cls, group in groups:
        flag_values = flagsets.flag_values(launcher)
        for name in hyperparameters(config_cls, group):
            field = config_cls.__dataclass_fields__[name]
            assert flag_values[name].help.endswith(field.metadata["help"]), (launcher, name)
            expected = field.metadata["flag_default"]
            assert flag_values[name].default == expected, (launcher, name)
            if field.metadata["preset"] is False:
                assert expected == field.default or name == "layout", (launcher, name)

    @dataclasses.dataclass(frozen=True)
    class Extended(TrainConfig):
        new_coef: float = hyperparameter(0.3, "A new PPO coefficient (default: preset).", group="ppo")

    assert hyperparameters(Extended, "ppo")[-1] == "new_coef"
    spec = flagsets.from_fields(Extended, hyperparameters(Extended, "ppo"))[-1]
    assert (spec.kind, spec.name, spec.default, spec.help) == ("float", "new_coef", None,
                                                               "A new PPO coefficient (default: preset).")
    with pytest.raises(TypeError, match="hyperparameter"):
        flagsets.from_fields(TrainConfig, ("normalize_advantages",))  # a plain field is not a flag

