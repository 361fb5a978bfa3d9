"""Reliability: what a run promises when things go wrong. Fault injection (a NaN update, SIGTERM, bad
values) against the on-policy systems; each test failed before its fix. Extend it with a new fault per promise.

Promises (docs/getting-started.md, "Stopping a run"):
a non-finite loss or parameter stops the run with one line and exit status 3,
never writes a non-finite checkpoint and leaves the last finite one newest; SIGTERM is Ctrl-C with exit status 143
(checkpoint of the newest parameters, summary, children stopped); a bad value is one line and exit status 2.
"""

from __future__ import annotations

import csv
import dataclasses
import gc
import glob
import importlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import serialization

from envs.factory import make_spec
from systems.common import config as config_lib
from systems.common import learner as learner_lib
from systems.common import rundir
from systems.common.checkpoint import list_checkpoints, load_latest_checkpoint
from systems.common.evaluation import Evaluator
from systems.common.finite import NonFiniteError, first_nonfinite, params_are_finite
from systems.common.learner import build
from systems.hts import system as hts
from systems.hts.system import HTSConfig
from systems.hts.system import validate as hts_validate
from systems.sync import system as sync
from tests.faults import start_run_dir_holder, wait_for_checkpoints
from tests.fixtures import REPO_ROOT, read_summary, run_launcher, tiny_hts, tiny_pal, tiny_spreeze
from tests.multidevice import free_port

ROOT = REPO_ROOT


# ------------------------------------------------------------------------------------------------ fault injection


def _poison_updates_from(monkeypatch, first_bad_update: int) -> None:
    """Every on-policy system built after this call gets an update that turns the parameters NaN once the update
    counter reaches `first_bad_update` (the real update otherwise, jitted the same way)."""
    real_build = learner_lib.build

    def poisoned_build(config, spec, **kwargs):
        setup, state = real_build(config, spec, **kwargs)

        def update(state, behaviour_params, rollout):
            new_state, metrics = setup.update_fn(state, behaviour_params, rollout)
            bad = new_state.update_step >= first_bad_update
            params = jax.tree_util.tree_map(lambda x: jnp.where(bad, jnp.nan, x), new_state.params)
            return new_state._replace(params=params), metrics

        return dataclasses.replace(setup, update=jax.jit(update), update_fn=update), state

    monkeypatch.setattr(learner_lib, "build", poisoned_build)


# --------------------------------------------------------------------------------------------- non-finite guard


def test_first_nonfinite_names_the_metric_before_the_parameters():
    params = {"w": jnp.ones(3), "b": jnp.array([0.0, jnp.inf]), "step": jnp.array(3, jnp.int32)}
    assert first_nonfinite({"loss": 1.0, "entropy": float("nan")}, params) == "the entropy is nan"
    assert first_nonfinite({"loss": 1.0}, params) == "a parameter is not finite"
    assert first_nonfinite({"loss": 1.0}, {"w": jnp.ones(3), "step": jnp.array(3, jnp.int32)}) is None
    assert params_are_finite({}) and not params_are_finite({"w": np.array([np.nan])})


@pytest.mark.parametrize("system", [hts, sync], ids=["hts", "sync"])
def test_a_nan_update_stops_the_run_and_the_newest_checkpoint_stays_finite(tmp_path, monkeypatch, system):
    _poison_updates_from(monkeypatch, first_bad_update=3)
    config = tiny_hts(tmp_path / "run")
    with pytest.raises(NonFiniteError, match=r"update 3 \(192 env steps\): a parameter is not finite"):
        system.run(config)
    _, template = build(config, make_spec(config.env_id))
    state, meta = load_latest_checkpoint(config.logdir, template)
    assert meta["env_steps"] == 128 and int(state.update_step) == 2  # the last finite update's checkpoint
    assert params_are_finite(state.params)
    for path in list_checkpoints(config.logdir):  # none of them non-finite
        assert int(os.path.basename(path)[5:17]) <= 128
    with open(os.path.join(config.logdir, "progress.csv")) as f:
        assert len(f.read().strip().splitlines()) == 1 + 2  # the NaN update was never logged as progress
    assert not os.path.exists(os.path.join(config.logdir, "summary.json"))


def test_evaluation_of_a_nan_policy_ends_with_nan_returns():
    """A NaN policy on a continuous task made NaN rewards until the time limit and the evaluation never ended."""
    config = config_lib.TrainConfig(env_id="Pendulum-v1", num_envs=2, sync_interval=8)
    spec = make_spec("Pendulum-v1")
    setup, state = build(config, spec)
    nan_params = jax.tree_util.tree_map(lambda x: jnp.full_like(x, jnp.nan), state.params)
    evaluator = Evaluator(spec, setup.network.apply, episodes=3, seed=0, deterministic=True)
    start = time.monotonic()
    returns = evaluator.run(nan_params)
    assert returns.shape == (3,) and np.all(np.isnan(returns))
    assert time.monotonic() - start < 60  # a guard against the old endless loop, not a speed target
    assert np.all(np.isfinite(evaluator.run(state.params)))  # the same evaluator still evaluates a finite policy


def _launch(module: str, *flags: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", module, *flags], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


@pytest.mark.slow
def test_launcher_exits_3_with_one_line_on_a_nan_update(tmp_path):
    """The launcher's side of the guard, through a driver that poisons the update as the fixture above does."""
    driver = (
        "import sys, dataclasses, jax, jax.numpy as jnp\n"
        "from systems.common import learner as learner_lib\n"
        "real = learner_lib.build\n"
        "def build(config, spec, **kw):\n"
        "    setup, state = real(config, spec, **kw)\n"
        "    def update(s, b, r):\n"
        "        n, m = setup.update_fn(s, b, r)\n"
        "        return n, {**m, 'value_loss': jnp.where(n.update_step >= 2, jnp.nan, m['value_loss'])}\n"
        "    return dataclasses.replace(setup, update=jax.jit(update), update_fn=update), state\n"
        "learner_lib.build = build\n"
        "from launch import common, hts\n"
        "common.launch('hts', hts.FLAGS, hts.main, hts.__doc__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", driver, "--env=CartPole-v1", "--num_envs=4", "--sync_interval=16",
         "--total_steps=320", "--checkpoint_every=64", "--eval_episodes=0", "--quiet", f"--logdir={tmp_path}/run"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    expected = "error: [hts] update 2 (128 env steps): the value_loss is nan"
    assert len(lines) == 1 and lines[0].startswith(expected), lines
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("replay", ["per", "uniform"])
def test_pal_dqn_divergence_is_one_line_and_exit_3(tmp_path, capsys, replay):
    """The learner thread's `priorities must be finite` (the replay refusing NaN TD errors) came before
    the monitor's non-finite guard saw the loss: a 37-line traceback and exit 1."""
    from launch import pal as launch_pal

    with pytest.raises(SystemExit) as exit_info:
        run_launcher(launch_pal.main, env="CartPole-v1", replay=replay, learning_rate=1e30, total_steps=20_000,
                     learning_starts=500, eval_episodes=0, logdir=str(tmp_path / "run"), quiet=True)
    assert exit_info.value.code == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: [pal] update ") and " is nan" in err[0], err


# ---------------------------------------------------------------------------------------------------- SIGTERM


_SMALL = ("--env=CartPole-v1", "--total_steps=100000000", "--checkpoint_every=640", "--eval_episodes=0", "--quiet")


@pytest.mark.parametrize("module, flags", [
    ("launch.hts", ("--num_envs=4", "--sync_interval=16")),
    ("launch.sync", ("--num_envs=4", "--sync_interval=16")),  # LockstepLoop: also launch.ba3c's loop
    ("launch.gala", ("--num_learners=2", "--envs_per_learner=2", "--sync_interval=16")),  # asynchronous learners
    ("launch.pal", ("--learning_starts=200",)),
])
@pytest.mark.slow
def test_sigterm_saves_the_newest_parameters_writes_the_summary_and_exits_143(tmp_path, module, flags):
    """A second stop signal during the save changes nothing. Launch.spreeze's SIGTERM:
    tests/systems/spreeze/test_spreeze_system.py (with Ctrl-C, the same path)."""
    run_dir = str(tmp_path / "run")
    proc = _launch(module, *_SMALL, *flags, f"--logdir={run_dir}")
    try:
        wait_for_checkpoints(run_dir, proc)
        # GNU `timeout` signals the process and then its group: a second stop signal reaches the run while it
        # saves. A second SIGTERM may coalesce with the first; a SIGINT right behind it never does, but Python
        # handles pending signals in number order, so either may be the first: the first one decides the exit.
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode in (143, 130), err[-3000:]
    name = "terminated (SIGTERM)" if proc.returncode == 143 else "interrupted"
    newest = list_checkpoints(run_dir)[-1]
    assert f"{name}; the newest parameters are saved in {newest}" in err and "Traceback" not in err
    summary = read_summary(run_dir)
    assert summary["interrupted"] and summary["env_steps"] >= 640
    assert int(os.path.basename(newest)[5:17]) == summary["env_steps"]  # the newest, not the last periodic one


_STOP_INSIDE_A_GC_CALLBACK = """
import gc, os, signal, sys, time
from launch import common

def run(config):
    sent = []

    def callback(phase, info):  # as JAX's _xla_gc_callback: Python drops what is raised in here
        if phase == "start" and not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10_000):  # the handler runs here, inside the collection
                pass

    gc.callbacks.append(callback)
    gc.collect()
    print("collected", file=sys.stderr, flush=True)
    time.sleep(60)

common.run_main(run, lambda: None)
"""


def test_a_stop_signal_inside_a_gc_callback_still_stops_the_run():
    """SIGTERM then SIGINT while JAX's garbage-collector callback ran: the first stop was dropped with the callback's
    exception, the second only noted, and a GALA run hung until the test's timeout."""
    result = subprocess.run([sys.executable, "-c", _STOP_INSIDE_A_GC_CALLBACK], capture_output=True, text=True,
                            timeout=50, env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert result.returncode == 143, result.stderr[-2000:]
    assert "terminated (SIGTERM)" in result.stderr and "Exception ignored" not in result.stderr, result.stderr


@pytest.mark.parametrize("module, process_id, stop", [
    ("launch.hts", 1, None),  # no coordinator: --startup_timeout ends the wait
    ("launch.ba3c", 0, signal.SIGTERM),  # the coordinator waits for a peer that never comes: SIGTERM ends it
])
@pytest.mark.slow
def test_a_multi_host_job_that_does_not_form_ends_with_one_line(tmp_path, module, process_id, stop):
    """A missing coordinator or peer hung in silence past 140 s and ignored Ctrl-C and SIGTERM."""
    run_dir = str(tmp_path / "run")
    proc = _launch(module, "--env=CartPole-v1", "--num_processes=2", f"--process_id={process_id}",
                   f"--coordinator_address=127.0.0.1:{free_port()}", "--startup_timeout=3", f"--logdir={run_dir}")
    try:
        if stop is not None:
            _read_until(proc, "joining the job at")
            proc.send_signal(stop)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    lines = err.strip().splitlines()
    if stop is not None:  # _read_until read the first line
        lines.insert(0, f"process {process_id} of 2: joining the job at 127.0.0.1: (read)")
    assert lines[0].startswith(f"process {process_id} of 2: joining the job at 127.0.0.1:"), err
    if stop is None:
        assert proc.returncode == 69 and lines[-1].startswith("error: the 2-process job did not start within 3 s"), err
    else:
        assert proc.returncode == 143 and lines[-1] == "terminated (SIGTERM) before the run could save anything", err
    assert len(lines) == 2 and not os.path.exists(run_dir)


def _read_until(proc: subprocess.Popen, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            raise AssertionError(f"the run exited (code {proc.wait()}) before printing {text!r}")
        if text in line:
            return
    raise AssertionError(f"no {text!r} within {timeout} s")


@pytest.mark.parametrize("moment", ["importing", "compiling the initializer", "compiling the update"])
@pytest.mark.slow
def test_ctrl_c_at_any_moment_of_start_up_exits_130_with_one_line(tmp_path, moment):
    """Ctrl-C seconds into HTS start-up aborted (SIGABRT) or segfaulted at exit in 3 of 5 tries: XLA crashed while
    the interpreter tore it down after an interrupted compile; during the imports it was a traceback. The moments
    are found from JAX's compile log (compilation cache off, so the compiles are real)."""
    env = dict(os.environ, JAX_LOG_COMPILES="1", JAX_ENABLE_COMPILATION_CACHE="false")
    proc = _launch("launch.hts", "--env=CartPole-v1", "--total_steps=100000", "--quiet", f"--logdir={tmp_path}/run",
                   env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as from a terminal
    try:
        if moment == "importing":
            time.sleep(0.5)
        else:
            program = "state_of_run_key" if moment == "compiling the initializer" else "ppo_update"  # learner.py
            _read_until(proc, f"Compiling jit({program})")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    ours = [line for line in err.strip().splitlines() if line and not line.startswith(("W1", "I1", "waiting for"))]
    assert len(ours) == 1 and ours[0].startswith("interrupted"), err[-3000:]
    assert "Traceback" not in err and "Fatal Python error" not in err


# ------------------------------------------------------------------------------------------------- bad values


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(learning_rate=math.nan), "--learning_rate must be a finite number, got nan"),
        (dict(time_limit=math.nan), "--time_limit must be a finite number"),
        (dict(gamma=math.inf), "--gamma must be a finite number"),
        (dict(clip_eps=-1.0), "--clip_eps must be positive"),
        (dict(max_grad_norm=-1.0), "--max_grad_norm must be non-negative"),
        (dict(inference_batch=64), "--inference_batch=64 exceeds --num_envs=4"),
        (dict(env_pools="both"), "--env_pools must be one of shared, per_actor, got 'both'"),
        (dict(env_pools="per_actor", num_actors=5), "--env_pools=per_actor gives each of --num_actors=5 threads a "
                                                     "pool of its own, but there are 4 envs: pass at most 4 actors"),
        (dict(env_pools="per_actor", num_actors=2, env_batch_size=3),
         "--env_batch_size=3 exceeds the 2 envs of the smallest actor's pool"),
        (dict(env_threads=-1), "--env_threads must be non-negative, got -1"),
        (dict(env_thread_affinity=-2), "--env_thread_affinity must be -1 (no pinning) or a core number, got -2"),
        (dict(env_id="gymnasium/CartPole-v1", env_thread_affinity=0),
         "--env_thread_affinity pins EnvPool's worker threads; a gymnasium/ env has none"),
        (dict(env_id="gymnax/CartPole-v1", env_threads=2),
         "--env_threads sizes EnvPool's worker threads; a gymnax/ env steps every env in one jitted call"),
        (dict(total_steps=32), "less than one round"),
        (dict(total_steps=10**12), "int32"),
        (dict(num_envs=100_000_000), "above the limit"),
        # Tracebacks after the run directory was written, and a hang before it.
        (dict(seed=-1), "--seed must be in [0, 2,146,435,071], got -1"),
        (dict(seed=10**14), "--seed must be in [0,"),
        (dict(eval_episodes=10**9), "--eval_episodes=1,000,000,000 is above the limit of 10,000"),
        (dict(capture_video=True, eval_episodes=0), "--capture_video films an evaluation episode"),  # was a no-op
    ],
)
def test_nonsense_values_are_refused_with_one_line(overrides, message):
    config = dataclasses.replace(HTSConfig(env_id="CartPole-v1", num_envs=4, sync_interval=16), **overrides)
    with pytest.raises(config_lib.ConfigError, match=re.escape(message)):
        hts_validate(config)  # the on-policy checks and HTS's own


@pytest.mark.parametrize("launcher, flags, message", [
    ("pal", dict(env="CartPole-v1", buffer_size=10**11), "--buffer_size=100,000,000,000 (the replay buffer) needs "),
    ("pal", dict(env="CartPole-v1", num_actors=5_000), "--num_actors=5,000 is above the limit of 1,024 threads"),
    ("pal", dict(env="CartPole-v1", seed=10**14), "--seed must be in [0,"),
    ("spreeze", dict(env="Pendulum-v1", num_samplers=100_000), "--num_samplers=100,000 is more processes than"),
    ("spreeze", dict(env="Pendulum-v1", buffer_size=10**10), "(the shared replay) needs "),
    ("spreeze", dict(env="Pendulum-v1", eval_episodes=10**9), "--eval_episodes=1,000,000,000 is above the limit"),
])
def test_sizes_beyond_the_machine_are_one_line_before_the_run_directory(tmp_path, capsys, launcher, flags, message):
    """A 1.46 TiB buffer was a MemoryError traceback and 100,000 samplers forked until the machine
    crawled; the limits are the machine's (`systems.common.limits`)."""
    import importlib

    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        run_launcher(importlib.import_module(f"launch.{launcher}").main, logdir=str(run_dir), **flags)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not run_dir.exists()


@pytest.mark.parametrize("module, extra", [
    ("launch.hts", ["--env=Pendulum-v1"]),
    ("launch.pal", ["--env=Pendulum-v1", "--algo=sac"]),
    ("launch.spreeze", ["--env=Pendulum-v1"]),
])
def test_a_nan_learning_rate_is_one_line_and_exit_2(tmp_path, module, extra):
    """`--learning_rate=nan` passed validation and the run hung in its first evaluation (Pendulum)."""
    proc = subprocess.run([sys.executable, "-m", module, *extra, "--learning_rate=nan", f"--logdir={tmp_path}/r"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == ["error: --learning_rate must be a finite number, got nan"]


# ----------------------------------------------------------------------------------------------- run directories


def _finished_sync_run(tmp_path, run=None) -> config_lib.TrainConfig:
    """A finished run of 128 steps (of `run`, default `sync.run`)."""
    config = tiny_hts(tmp_path / "run", total_steps=128, eval_episodes=0)
    (run or sync.run)(config)
    return config


def _snapshot(run_dir: str) -> dict:
    files = {}
    for root, _, names in os.walk(run_dir):
        for name in names:
            if name != ".lock":
                with open(os.path.join(root, name), "rb") as f:
                    files[os.path.relpath(os.path.join(root, name), run_dir)] = f.read()
    return files


def test_a_second_run_without_resume_is_refused_and_leaves_the_first_untouched(tmp_path):
    config = _finished_sync_run(tmp_path)
    before = _snapshot(config.logdir)
    with pytest.raises(config_lib.ConfigError, match="already holds a run .* pass --resume to continue it"):
        hts.run(dataclasses.replace(config, total_steps=256))
    assert _snapshot(config.logdir) == before


def test_a_directory_whose_run_saved_nothing_names_the_way_out(tmp_path):
    """A run stopped before its first checkpoint left a directory that --resume and a plain rerun both
    refused, neither saying what to do."""
    import shutil

    config = _finished_sync_run(tmp_path)
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    shutil.copy(os.path.join(config.logdir, "config.json"), stopped)  # what a run writes before its first save
    with pytest.raises(config_lib.ConfigError, match="stopped before saving anything .* remove the directory"):
        hts.run(dataclasses.replace(config, logdir=str(stopped)))


@pytest.mark.parametrize("change, message", [
    (dict(num_envs=8), r"--num_envs=8 differs from the run's 4"),
    (dict(env_id="Acrobot-v1"), r"--env=Acrobot-v1 differs from the run's CartPole-v1"),
    (dict(algo="a2c"), r"--algo=a2c differs from the run's ppo"),
    (dict(seed=7), r"--seed=7 differs from the run's 1"),
    (dict(sync_interval=32), r"--sync_interval=32 differs"),
])
def test_resume_refuses_a_changed_defining_flag_before_touching_the_run(tmp_path, change, message):
    config = _finished_sync_run(tmp_path)
    before = _snapshot(config.logdir)
    with pytest.raises(config_lib.ConfigError, match=message):
        sync.run(dataclasses.replace(config, resume=True, total_steps=256, **change))
    assert _snapshot(config.logdir) == before


def test_resume_may_change_the_length_and_reporting(tmp_path):
    config = _finished_sync_run(tmp_path, run=hts.run)
    summary = hts.run(dataclasses.replace(config, resume=True, total_steps=256, eval_episodes=1, num_actors=2))
    assert summary["resumed_from_env_steps"] == 128 and summary["env_steps"] == 256


def test_resuming_a_finished_run_keeps_its_sps(tmp_path):
    """`--resume` of a finished run trained nothing and rewrote summary.json with `"sps": 0.0`."""
    config = _finished_sync_run(tmp_path)
    first = read_summary(config.logdir)["sps"]
    summary = sync.run(dataclasses.replace(config, resume=True))
    assert first > 0 and summary["env_steps"] == 128 and summary["sps"] == first


@pytest.mark.parametrize("first, second, launcher", [(sync.run, hts.run, "launch.sync"),
                                                      (hts.run, sync.run, "launch.hts")])
def test_resume_refuses_another_systems_run_naming_its_launcher(tmp_path, first, second, launcher):
    """`launch.sync --resume` of an HTS run rewrote its config.json without HTS's fields and trained on as sync."""
    config = _finished_sync_run(tmp_path, run=first)
    before = _snapshot(config.logdir)
    with pytest.raises(config_lib.ConfigError, match=f"holds a run of .*; resume it with python -m {launcher}$"):
        second(dataclasses.replace(config, resume=True, total_steps=256))
    assert _snapshot(config.logdir) == before


def test_a_run_directory_in_use_is_refused_and_freed_when_its_holder_is_killed(tmp_path):
    from systems.common import rundir

    run_dir = str(tmp_path / "run")
    config = tiny_hts(tmp_path / "run")
    holder = start_run_dir_holder(run_dir)
    try:
        assert rundir.holder_pid(run_dir) == holder.pid
        with pytest.raises(config_lib.ConfigError, match=f"is in use by another run \\(pid {holder.pid}\\)"):
            sync.run(config)
        holder.kill()  # SIGKILL: the kernel releases the lock, nothing stale is left
        holder.wait(timeout=30)
        assert rundir.holder_pid(run_dir) is None
        claimed = rundir.claim(run_dir, config)
        claimed.release()
    finally:
        holder.kill()


# ------------------------------------------------------------------------------------- corrupt newest checkpoint
# PAL's replay buffer file: tests/systems/pal/test_pal.py; Spreeze's weight files:
# tests/systems/spreeze/test_spreeze_system.py.


def _truncate(path: str, size: int = 100) -> None:
    """What a disk error or a copy cut short leaves: the file's first bytes."""
    with open(path, "r+b") as f:
        f.truncate(size)


@pytest.mark.slow
def test_resume_sets_a_corrupt_newest_checkpoint_aside_with_a_warning_and_continues(tmp_path, capsys):
    """A corrupt newest checkpoint was skipped with no message, and stayed the newest by name: the resumed run's
    own checkpoints were then pruned in its favour."""
    config = tiny_hts(tmp_path / "run", eval_episodes=0)
    sync.run(config)
    older, newest = list_checkpoints(config.logdir)[-2:]
    _truncate(newest)
    capsys.readouterr()
    summary = sync.run(dataclasses.replace(config, resume=True, total_steps=8 * 64))
    err = capsys.readouterr().err
    assert f"warning: checkpoint {newest} is unreadable (" in err
    assert f"set aside as {newest}.unreadable, resuming from an older one" in err
    assert summary["resumed_from_env_steps"] == int(os.path.basename(older)[5:17])
    assert os.path.exists(newest + ".unreadable")
    assert [os.path.basename(p) for p in list_checkpoints(config.logdir)] == [
        "ckpt_000000000448.msgpack", "ckpt_000000000512.msgpack"]
    summary = sync.run(dataclasses.replace(config, resume=True, total_steps=10 * 64))
    assert "warning" not in capsys.readouterr().err and summary["resumed_from_env_steps"] == 512


def test_resume_with_no_readable_checkpoint_names_each_and_renames_none(tmp_path):
    config = tiny_hts(tmp_path / "run", eval_episodes=0)
    sync.run(config)
    paths = list_checkpoints(config.logdir)
    for path in paths:
        _truncate(path)
    with pytest.raises(config_lib.ConfigError, match=r"no readable checkpoint .*\(ckpt_000000000384.msgpack: .*; "
                                                    r"ckpt_000000000320.msgpack: .*\); remove the directory"):
        sync.run(dataclasses.replace(config, resume=True, total_steps=8 * 64))
    assert list_checkpoints(config.logdir) == paths
    assert rundir.holder_pid(config.logdir) is None  # the refused run left its directory free at once


def test_a_run_that_fails_in_this_process_frees_its_directory_and_files(tmp_path, monkeypatch):
    """An error (not a stop) never reaches `Monitor.finish`: once the failed run is gone, its lock and files are
    released, so a notebook or a sweep in one process can run in the same directory again."""
    _poison_updates_from(monkeypatch, first_bad_update=2)
    config = tiny_hts(tmp_path / "run", eval_episodes=0)
    with pytest.raises(NonFiniteError):
        sync.run(config)
    gc.collect()
    assert rundir.holder_pid(config.logdir) is None
    open_files = os.listdir(f"/proc/{os.getpid()}/fd")
    assert not any(os.path.realpath(f"/proc/{os.getpid()}/fd/{fd}").startswith(str(tmp_path)) for fd in open_files)


def _poison(path: str) -> None:
    """Rewrites a checkpoint with NaN parameters, as runs from before the non-finite guard could save them."""
    with open(path, "rb") as f:
        raw = serialization.msgpack_restore(f.read())
    raw["state"]["params"] = jax.tree_util.tree_map(lambda x: np.full_like(x, np.nan), raw["state"]["params"])
    with open(path, "wb") as f:
        f.write(serialization.msgpack_serialize(raw))


@pytest.mark.parametrize("damage, reason", [(_truncate, "("), (_poison, "(it holds non-finite values)")])
def test_evaluate_warns_of_a_bad_newest_checkpoint_and_restores_the_older(tmp_path, capsys, damage, reason):
    """launch.evaluate restored a checkpoint of NaN parameters and reported its (NaN) returns as a result."""
    from systems.common.restore import restore_run
    from systems.registry import ENTRIES

    config = tiny_hts(tmp_path / "run", eval_episodes=0)
    sync.run(config)
    older, newest = list_checkpoints(config.logdir)[-2:]
    damage(newest)
    capsys.readouterr()
    restored = restore_run(config.logdir, ENTRIES)
    assert restored.checkpoint_path == older
    assert f"warning: checkpoint {newest} is unreadable {reason}" in capsys.readouterr().err
    assert os.path.exists(newest)  # evaluation only reads: nothing is renamed


def test_resume_cuts_a_row_torn_by_a_kill_so_the_report_reads_the_run(tmp_path):
    """A run killed while writing a CSV row left a line without its newline; the resumed run glued its first row to
    it, and the report refused (or, with the right width by chance, misread) the file."""
    from analysis import metrics

    config = tiny_hts(tmp_path / "run", eval_episodes=0)
    sync.run(config)
    for name in ("progress.csv", "evaluations.csv"):
        with open(os.path.join(config.logdir, name), "a") as f:
            f.write("448,1.5,")  # the start of a row, as SIGKILL mid-write leaves it
    os.remove(os.path.join(config.logdir, "summary.json"))  # as the killed run had not written it
    sync.run(dataclasses.replace(config, resume=True, total_steps=8 * 64))
    run = metrics.load_run(config.logdir)
    assert run.progress["env_steps"][-1] == 512 and metrics.steady_state_sps(run) > 0  # every row whole


def test_resume_drops_the_rows_logged_after_its_checkpoint(tmp_path):
    """After a kill, progress.csv kept the rows past the checkpoint the resumed run restarted from, so its
    env steps repeated."""
    config = tiny_hts(tmp_path / "run", eval_episodes=0, checkpoint_every=128)
    sync.run(config)  # 6 rounds of 64 env steps, checkpoints at 128, 256 and 384
    for path in list_checkpoints(config.logdir)[-1:]:
        os.remove(path)  # as if killed after logging 384 but before its checkpoint: the resume starts at 256
    os.remove(os.path.join(config.logdir, "summary.json"))
    summary = sync.run(dataclasses.replace(config, resume=True))
    with open(os.path.join(config.logdir, "progress.csv")) as f:
        steps = [int(row["env_steps"]) for row in csv.DictReader(f)]  # the file itself (load_run keeps the newest)
    assert summary["resumed_from_env_steps"] == 256 and steps == [64, 128, 192, 256, 320, 384], steps


def test_a_changed_layout_flag_is_named_not_the_env_count_it_sets(tmp_path):
    """Spreeze's resume refusal named --num_envs (derived) when the user had changed --num_samplers."""
    from systems.common import rundir

    @dataclasses.dataclass(frozen=True)
    class Layout:  # field order as SpreezeConfig's: the derived num_envs comes first
        num_envs: int = 1
        num_samplers: int = 1
        resume: bool = False

    rundir.claim(str(tmp_path), Layout()).release()
    with open(tmp_path / "config.json", "w") as f:
        json.dump({**dataclasses.asdict(Layout()), config_lib.VERSION_KEY: config_lib.VERSION}, f)
    with pytest.raises(config_lib.ConfigError, match="--num_samplers=2 differs from the run's 1"):
        rundir.claim(str(tmp_path), Layout(num_envs=2, num_samplers=2, resume=True))


def test_a_logdir_through_dot_dot_creates_no_directory_on_the_way(tmp_path):
    """`--logdir=a/../b` left an empty `a`."""
    sync.run(tiny_hts(tmp_path / "a" / ".." / "b", total_steps=64, eval_episodes=0))
    assert sorted(os.listdir(tmp_path)) == ["b"] and os.path.exists(tmp_path / "b" / "summary.json")


# ----------------------------------------------------------------------------------------- file-system errors


def _our_lines(stderr: str) -> list[str]:
    """stderr without absl / XLA log lines (W1125 ..., I1125 ...)."""
    return [line for line in stderr.strip().splitlines() if line and not line.startswith(("W1", "I1", "E1"))]


@pytest.mark.parametrize("where, message", [
    ("a file", "a file is in the way (it must be a directory)"),
    ("below a file", "a file is in the way (it must be a directory)"),
    ("sysfs", "cannot write there"),  # read-only to root as well, unlike a chmod-ed directory
])
def test_an_unusable_logdir_is_one_line_and_exit_2(tmp_path, where, message):
    (tmp_path / "file").write_text("x")
    logdir = {"a file": tmp_path / "file", "below a file": tmp_path / "file" / "run", "sysfs": "/sys/run"}[where]
    proc = subprocess.run([sys.executable, "-m", "launch.sync", "--env=CartPole-v1", f"--logdir={logdir}", "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert _our_lines(proc.stderr) == [f"error: --logdir {logdir}: {message}"] or (
        where == "sysfs" and _our_lines(proc.stderr)[0].startswith(f"error: --logdir {logdir}: {message}"))


def _limit_file_size(limit: int):
    """For preexec_fn: every file the run writes may grow to `limit` bytes; a write past it fails with EFBIG (File
    too large), as on a full disk (SIGXFSZ ignored, as a shell's `ulimit -f` cannot)."""
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.parametrize("module, flags, limit", [
    # checkpoints of about 3.5 kB fit; progress.csv or the TensorBoard file reaches the limit first
    ("launch.hts", ("--env=CartPole-v1", "--num_envs=4", "--sync_interval=16", "--checkpoint_every=640",
                    "--hidden_sizes=16"), 30_000),
    # weight files of about 6.2 kB and the 3.6 kB replay (a memfd: the limit holds for it too) fit; the TensorBoard
    # file reaches the limit first (the lower the limit, the sooner)
    ("launch.spreeze", ("--env=Pendulum-v1", "--num_samplers=1", "--hidden_sizes=16", "--buffer_size=100",
                        "--learning_starts=100", "--publish_every=20"), 8_000),
])
@pytest.mark.slow
def test_a_full_disk_stops_the_run_with_one_line_and_leaves_whole_files(tmp_path, module, flags, limit):
    """A full disk gave 50 lines of chained tracebacks and left a `.tmp-PID` checkpoint; TensorBoard's writer
    thread then died and the run hung on its queue."""
    run_dir = str(tmp_path / "run")
    proc = _launch(module, *flags, "--total_steps=1000000", "--eval_episodes=0", f"--logdir={run_dir}", "--quiet",
                   preexec_fn=_limit_file_size(limit), start_new_session=True,
                   env=dict(os.environ, JAX_ENABLE_COMPILATION_CACHE="false"))  # its writes would fail too
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 74, err[-3000:]
    lines = _our_lines(err)
    assert len(lines) == 1 and lines[0].startswith("error: cannot write ") and "File too large" in lines[0], lines
    named = lines[0][len("error: cannot write "):].split(": ")[0]
    assert named.startswith(run_dir) and not os.path.isdir(named), named  # a file, not its directory
    left = [os.path.join(root, name) for root, _, names in os.walk(run_dir) for name in names if ".tmp" in name]
    assert left == []
    deadline = time.monotonic() + 30  # Spreeze's children exit with the learner
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group_alive(proc.pid), "a child of the stopped run is still running"
    checkpoints = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "*.msgpack")))
    assert checkpoints
    with open(checkpoints[-1], "rb") as f:
        serialization.msgpack_restore(f.read())  # whole: written atomically before the limit was reached


# ------------------------------------------------------------------------------------------------ per system


@pytest.mark.slow
def test_gala_async_resumes_from_its_checkpoint(tmp_path):
    """Every checkpoint of GALA's default (async) mode used to end in IndexError on resume: the consensus-bound
    model indexed update norms the restored learners never had."""
    from systems.gala import system as gala

    config = gala.GALAConfig(
        env_id="CartPole-v1", seed=5, sync_interval=5, envs_per_learner=4, num_learners=3, total_steps=3 * 20 * 10,
        eval_episodes=0, quiet=True, logdir=str(tmp_path / "gala"), max_staleness=2,
    )
    first = gala.run(config)
    resumed = gala.run(dataclasses.replace(config, resume=True, total_steps=3 * 20 * 20))
    assert resumed["resumed_from_env_steps"] == first["env_steps"] == 600
    assert resumed["env_steps"] == 1200 and sum(resumed["learner_iterations"]) == 60


@pytest.mark.parametrize("module, config_name, extra", [
    ("systems.pal.system", "PALConfig", dict(env_id="CartPole-v1", algo="dqn")),
    ("systems.spreeze.system", "SpreezeConfig", dict(env_id="Pendulum-v1", algo="sac")),
])
def test_learning_starts_at_or_beyond_the_budget_is_refused(module, config_name, extra):
    """PAL with --learning_starts >= --total_steps 'finished' after 4 env steps and 0 updates, exit 0."""
    import importlib

    system = importlib.import_module(module)
    config = getattr(system, config_name)(**extra, learning_starts=5_000, total_steps=5_000)
    with pytest.raises(config_lib.ConfigError, match="--learning_starts=5,000 leaves no updates"):
        system.validate(config)


# ------------------------------------------------------------------------------------ processes and shared memory


def _shm_names() -> set[str]:
    """What a run could leave in /dev/shm: Spreeze's replay segment (named `spreeze-*` in an earlier version), a
    gymnasium pool's observation buffer (`htsrl-gym-*` in an earlier version) and multiprocessing's named semaphores
    (`sem.mp-*`: Events, Queues and Locks under spawn and forkserver) and heap files (`pym-*`, unlinked at once)."""
    return {name for name in os.listdir("/dev/shm") if name.startswith(("sem.mp-", "spreeze-", "htsrl-gym-", "pym-"))}


def _left_after(names: set[str], seconds: float) -> set[str]:
    """Those of `names` still in /dev/shm after up to `seconds`. Names new since a test began may be another xdist
    worker's (a gymnasium pool's queue, a Spreeze run), which go when its test ends; a killed run's leak stays."""
    deadline = time.monotonic() + seconds
    while names & _shm_names() and time.monotonic() < deadline:
        time.sleep(0.5)
    return names & _shm_names()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm (Linux)")
@pytest.mark.parametrize("moment, victim", [
    ("start-up", "group"),  # the first weights file exists, samplers and the test process are starting
    ("training", "group"),  # the learner has made 200 updates
    ("training", "learner"),  # the learner alone: its children used to run on for 30-75 s
])
@pytest.mark.slow
def test_spreeze_sigkill_leaves_dev_shm_as_it_found_it_and_no_process(tmp_path, moment, victim):
    """kill -9 of a Spreeze run left its replay segment and 19 `sem.mp-*` semaphores in /dev/shm (its resource
    tracker, which would have removed them, died with the group), and killing only the learner left its samplers
    and test process writing for up to 75 s."""
    from systems.spreeze import weights as weights_lib

    before = _shm_names()
    run_dir = str(tmp_path / "run")
    proc = subprocess.Popen(
        [sys.executable, "-m", "launch.spreeze", "--env=Pendulum-v1", "--num_samplers=2", "--hidden_sizes=16",
         "--total_steps=100000000", "--learning_starts=200", "--eval_episodes=2", "--eval_every=500",
         "--publish_every=10", f"--logdir={run_dir}", "--quiet"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        target = 0 if moment == "start-up" else 200
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            versions = weights_lib.list_versions(os.path.join(run_dir, "checkpoints"))
            if versions and versions[-1][0] >= target:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        # nothing named even while the run is alive (tracked below: a name of a test on the other worker goes)
        named_while_alive = _shm_names() - before if moment == "training" else set()
        if victim == "group":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _group_alive(proc.pid), "a child of the killed run is still running"
        assert _left_after(named_while_alive | (_shm_names() - before), seconds=150) == set()
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_benchmarks_child_run_ends_when_the_benchmark_is_killed(tmp_path):
    """`benchmarks.common.die_with_parent`: a run started by a benchmark gets SIGTERM when the benchmark dies (an
    orphaned run once trained beside the next benchmark row and skewed its timing)."""
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", f"""
import subprocess, sys, time
from benchmarks.common import die_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], preexec_fn=die_with_parent)
open({str(pid_file)!r}, "w").write(str(child.pid))
time.sleep(120)
"""], cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and parent.poll() is None, "the benchmark did not start its child"
            time.sleep(0.1)
        child = int(pid_file.read_text())
        parent.kill()
        parent.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _running(child):
            assert time.monotonic() < deadline, "the child outlived the benchmark"
            time.sleep(0.1)
    finally:
        parent.kill()


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (one that ended and waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "zombie" in line for line in f)
    except OSError:
        return False


def _finished_run_configs(tmp_path):
    from systems.ba3c.config import BA3CConfig
    from systems.gala.system import GALAConfig

    return {
        "hts": tiny_hts(tmp_path / "hts", total_steps=128, num_actors=2),
        "sync": tiny_hts(tmp_path / "sync", total_steps=128),
        "ba3c": BA3CConfig(env_id="CartPole-v1", sync_interval=5, local_batch=20, total_steps=200, eval_episodes=2,
                           quiet=True, logdir=str(tmp_path / "ba3c")),
        "gala": GALAConfig(env_id="CartPole-v1", seed=5, sync_interval=5, envs_per_learner=2, num_learners=2,
                           total_steps=200, eval_episodes=2, quiet=True, logdir=str(tmp_path / "gala")),
        "pal": tiny_pal(tmp_path / "pal", eval_episodes=2),
        "spreeze": tiny_spreeze(tmp_path / "spreeze", total_steps=600),
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hts", "sync", "ba3c", "gala", "pal", "spreeze"])
def test_resuming_a_finished_run_leaves_its_summary_as_it_was(tmp_path, name):
    """A --resume that trained nothing rewrote summary.json from its empty session: no training episodes, no
    metrics, the no-op's profile, GALA's gossip statistics null; PAL stopped with a false non-finite error (0/0),
    Spreeze evaluated once more."""
    import importlib

    system = importlib.import_module(f"systems.{name}.system")
    config = _finished_run_configs(tmp_path)[name]
    system.run(config)
    before = _snapshot(config.logdir)
    summary = system.run(dataclasses.replace(config, resume=True))
    assert summary == read_summary(config.logdir)
    after = _snapshot(config.logdir)
    for name_of_file in ("summary.json", "evaluations.csv"):
        assert after[name_of_file] == before[name_of_file], name_of_file
    assert [f for f in after if "checkpoint" in f or f.startswith("weights")] == \
        [f for f in before if "checkpoint" in f or f.startswith("weights")]


_FAULTY = "gymnasium/tests.gym_envs:Faulty-v0"


@pytest.mark.slow
@pytest.mark.parametrize("launcher, fail, message", [
    ("hts", "raise", r" \(env \d, worker \d\) failed in step: ValueError: joint 3 left its range"),
    ("hts", "crash", r": env worker \d \(envs [\d, ]+\) exited with status 9"),
    ("hts/per_actor", "raise", r" \(env \d, worker \d\) failed in step: ValueError: joint 3 left its range"),
    ("sync", "shape", r" \(env \d, worker \d\) failed in step: ValueError: step returned an observation of shape "
                      r"\(3,\); the env's observation space says \(2,\)"),
    ("sync", "reset", r" \(env \d, worker \d\) failed in reset: RuntimeError: the simulator could not load its level"),
    ("pal", "raise", r" \(env \d, worker \d\) failed in step: ValueError: joint 3 left its range"),
    ("pal", "crash", r": env worker \d \(envs [\d, ]+\) exited with status 9"),
    ("ba3c", "raise", r" \(env \d+, worker \d\) failed in step: ValueError: joint 3 left its range"),
    ("gala", "raise", r" \(env \d+, worker \d\) failed in step: ValueError: joint 3 left its range"),
], ids=["hts-raise", "hts-crash", "hts-per_actor-raise", "sync-shape", "sync-reset", "pal-raise", "pal-crash",
        "ba3c-raise", "gala-raise"])
def test_a_users_env_that_fails_is_one_line_with_its_own_traceback_and_the_run_keeps_its_checkpoint(
        tmp_path, capsys, launcher, fail, message):
    """A Gymnasium env that raised, returned the wrong shape or crashed its worker gave a 45-57-line traceback of the
    executor's frames (exit 1) and left no checkpoint, so the same command was then refused; under PAL it read as a
    false non-finite error (exit 3). `hts/per_actor`: two actor threads that each receive from their own pool
    (`--env_pools=per_actor`), where the failure surfaces in an actor thread rather than the receiver thread."""
    import importlib

    module = importlib.import_module(f"launch.{launcher.split('/')[0]}")
    sizes = {"pal": dict(num_actors=1, envs_per_actor=2, num_learners=1, learning_starts=100, checkpoint_every=200),
             "hts": dict(num_envs=4, sync_interval=16, checkpoint_every=64),
             "hts/per_actor": dict(num_envs=4, sync_interval=16, checkpoint_every=64, num_actors=2,
                                   env_pools="per_actor"),
             "sync": dict(num_envs=4, sync_interval=16, checkpoint_every=64)}.get(
        launcher, dict(sync_interval=16, checkpoint_every=64))  # BA3C's and GALA's envs follow from their layout
    after = 40 if launcher in ("ba3c", "gala") else 300  # their defaults step more envs: fewer steps each
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        run_launcher(module.main, env=_FAULTY, env_kwargs=json.dumps({"fail": fail, "after": after}), eval_episodes=0,
                     total_steps=4096, logdir=str(run_dir), quiet=True, **sizes)
    assert exit_info.value.code == 70
    first, *rest = capsys.readouterr().err.strip().splitlines()
    assert re.match(f"error: {re.escape(_FAULTY)}{message}; the newest parameters are saved in .*ckpt_", first), first
    assert (rest[0] == "Traceback of the env (most recent call last):" and rest[-1].startswith("ValueError")
            and "gym_envs.py" in "\n".join(rest)) if fail == "raise" else (rest == [] or fail == "reset")
    assert not any("envs/executor.py" in line or "systems/" in line for line in rest)
    assert list_checkpoints(str(run_dir)), "the run keeps its newest parameters"
    assert rundir.holder_pid(str(run_dir)) is None


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm (Linux)")
@pytest.mark.parametrize("launcher", ["hts", "pal"])
@pytest.mark.slow
def test_sigkill_of_a_gymnasium_run_leaves_dev_shm_as_it_found_it_and_no_process(tmp_path, launcher):
    """kill -9 of the process group of launch.hts or launch.pal on a gymnasium/ env left its pool's
    /dev/shm/htsrl-gym-<pid>-<i> segment and six sem.mp-* semaphores (the resource tracker died with the group)."""
    before = _shm_names()
    run_dir = tmp_path / "run"
    sizes = (["--num_actors=1", "--envs_per_actor=2", "--num_learners=1", "--learning_starts=100"]
             if launcher == "pal" else ["--num_envs=4", "--sync_interval=16"])
    proc = subprocess.Popen(
        [sys.executable, "-m", f"launch.{launcher}", "--env=gymnasium/tests.gym_envs:Walk-v0", *sizes,
         "--total_steps=100000000", "--eval_episodes=0", f"--logdir={run_dir}", "--quiet"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if (run_dir / "progress.csv").exists() and len((run_dir / "progress.csv").read_text().splitlines()) > 2:
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        named_while_alive = _shm_names() - before
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _group_alive(proc.pid), "a worker outlived the group's SIGKILL"
        assert not _left_after(named_while_alive, 10.0), "left in /dev/shm"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_hung_env_is_one_line_after_the_step_timeout(tmp_path, capsys, monkeypatch):
    """A gymnasium env whose step never returned stalled the run silently."""
    monkeypatch.setenv("HTSRL_ENV_STEP_TIMEOUT", "2")
    with pytest.raises(SystemExit) as exit_info:
        run_launcher(importlib.import_module("launch.hts").main, env=_FAULTY,
                     env_kwargs=json.dumps({"fail": "hang", "after": 100}), num_envs=4, sync_interval=16,
                     checkpoint_every=64, eval_episodes=0, total_steps=4096, logdir=str(tmp_path / "run"), quiet=True)
    assert exit_info.value.code == 70
    [line] = capsys.readouterr().err.strip().splitlines()
    assert re.match(f"error: {re.escape(_FAULTY)}: no env step returned in 2 s \\(env worker \\d, envs [\\d, ]+\\): "
                    "the env hangs .*; the newest parameters are saved in", line), line


@pytest.mark.slow
def test_sigterm_stops_pal_while_an_env_hangs(tmp_path):
    """PAL printed "interrupted: saving" and then blocked until the hung worker was killed by hand."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "launch.pal", f"--env={_FAULTY}", '--env_kwargs={"fail": "hang", "after": 300}',
         "--num_actors=1", "--envs_per_actor=2", "--num_learners=1", "--learning_starts=100",
         "--checkpoint_every=200", "--eval_episodes=0", "--total_steps=100000", f"--logdir={run_dir}", "--quiet"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list_checkpoints(str(run_dir)) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        time.sleep(3.0)  # the actor is inside the hung step by now (300 steps an env, 2 envs)
        proc.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        _, stderr = proc.communicate(timeout=40)
        assert proc.returncode == 143, stderr[-2000:]
        assert time.monotonic() - stopped < 30
        assert "terminated (SIGTERM); the newest parameters are saved in" in stderr
        deadline = time.monotonic() + 15  # the killed worker is reaped once its parent has exited
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _group_alive(proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
