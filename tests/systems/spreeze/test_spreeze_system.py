"""Spreeze end to end (seed 002, section 3): sampler processes, shared-memory (or queue) transfer, the learner, the
test process and weight files; resume from the newest weight file; a dead sampler stops the run with its error; no
shared-memory segment outlives a run; bad flags through the launcher (one `error:` line, exit 2)."""

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from systems.spreeze import system
from systems.spreeze import weights as weights_lib
from tests.fixtures import REPO_ROOT, assert_profile, read_config, read_summary, tiny_spreeze

REPO = REPO_ROOT


def _segments(run_dir):
    prefix = f"spreeze-{system.run_id(run_dir)}"
    return [name for name in os.listdir("/dev/shm") if name.startswith(prefix)] if os.path.isdir("/dev/shm") else []


@pytest.mark.parametrize("transfer", ["shm", "queue"])
@pytest.mark.slow
def test_spreeze_run_writes_outputs_weights_and_frees_shared_memory(tmp_path, transfer):
    run_dir = str(tmp_path / transfer)
    # The samplers never wait for the learner (section 3.1.1): at 1,500 steps they could finish before its update had
    # compiled (no optimizer step under load); 30,000 leave it several seconds.
    summary = system.run(tiny_spreeze(run_dir, transfer=transfer, total_steps=30_000, eval_every=10_000))
    assert summary["system"] == "spreeze" and summary["env_steps"] >= 30_000
    assert summary["optimizer_steps"] > 0 and summary["update_fps"] > 0 and summary["sampling_fps"] > 0
    assert_profile(summary, {"main", "samplers"})  # the sampler processes' clocks come through shared memory
    assert summary["profile"]["roles"]["samplers"]["shares"]["env"] > 0
    assert summary["evaluations"] >= 2  # the test process's records plus the final evaluation
    versions = weights_lib.list_versions(os.path.join(run_dir, "checkpoints"))
    assert versions and versions[-1][0] == summary["optimizer_steps"]
    for name in ("config.json", "progress.csv", "evaluations.csv", "summary.json"):
        assert os.path.exists(os.path.join(run_dir, name))
    assert _segments(run_dir) == []


@pytest.mark.slow
def test_spreeze_resume_continues_from_the_newest_weight_file(tmp_path):
    run_dir = str(tmp_path / "run")
    first = system.run(tiny_spreeze(run_dir, total_steps=800))
    # The samplers run free: under load the first run may end well past its 800 steps, so the second asks for more.
    total = max(1_600, first["env_steps"] + 800)
    second = system.run(tiny_spreeze(run_dir, total_steps=total, resume=True))
    assert second["resumed_from_env_steps"] == first["env_steps"]
    assert second["optimizer_steps"] >= first["optimizer_steps"] and second["env_steps"] >= total


def test_spreeze_resume_sets_a_corrupt_newest_weight_file_aside(tmp_path, capsys):
    """A corrupt newest weight file made the run impossible to resume until deleted by hand (publishing an older
    version next to it was refused)."""
    run_dir = str(tmp_path / "run")
    steps = 800
    system.run(tiny_spreeze(run_dir, total_steps=steps))
    # The samplers never wait for the learner, so how many versions a short run publishes depends on the machine's
    # load (on a busy one, version 0 alone). A readable copy one version newer makes the older file certain; the copy
    # is then broken, as a disk or a foreign tool would.
    directory = os.path.join(run_dir, "checkpoints")
    version, path = weights_lib.list_versions(directory)[-1]
    newest = weights_lib.weights_path(directory, version + 1)
    shutil.copyfile(path, newest)
    with open(newest, "r+b") as f:
        f.truncate(100)
    capsys.readouterr()
    second = system.run(tiny_spreeze(run_dir, total_steps=steps + 400, resume=True))
    assert f"warning: checkpoint {newest} is unreadable (" in capsys.readouterr().err
    assert os.path.exists(newest + ".unreadable") and second["env_steps"] >= steps + 400


def test_a_dead_sampler_stops_the_run_with_its_error(tmp_path):
    run_dir = str(tmp_path / "run")
    killed = []

    def kill_a_sampler():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for child in multiprocessing.active_children():
                if child.name == "sampler-1":
                    time.sleep(1.0)
                    os.kill(child.pid, signal.SIGKILL)
                    killed.append(child.pid)
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=kill_a_sampler, daemon=True)
    thread.start()
    with pytest.raises(RuntimeError, match="sampler-1 exited with code -9"):
        system.run(tiny_spreeze(run_dir, total_steps=10_000_000, time_limit=60))
    thread.join(timeout=5)
    assert killed
    assert _segments(run_dir) == []


def test_spreeze_stops_at_target(tmp_path):
    run_dir = str(tmp_path / "run")
    summary = system.run(tiny_spreeze(run_dir, total_steps=10_000_000, target_return=-1e9, stop_at_target=True,
                                      time_limit=60))
    assert summary["time_to_target"] is not None and summary["env_steps"] < 10_000_000


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env=CartPole-v1"], "continuous"),
        (["--env=Pendulum-v1", "--algo=dqn"], "launch.spreeze trains sac, td3, ddpg"),
        (["--env=Pendulum-v1", "--num_samplers=abc"], "--num_samplers"),
        (["--env=Pendulum-v1", "--num_learners=2"], "--num_learners does not apply"),
        (["--env=Pendulum-v1", "--resume", "--logdir=/nonexistent/spreeze"], "--resume"),
    ],
)
@pytest.mark.slow
def test_launcher_bad_input_is_one_line_and_exit_2(args, message):
    result = subprocess.run([sys.executable, "-m", "launch.spreeze", *args, "--quiet"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.stderr


@pytest.mark.slow
def test_auto_tuning_chooses_and_stores_the_table(tmp_path, capsys):
    run_dir = str(tmp_path / "run")
    summary = system.run(tiny_spreeze(run_dir, num_samplers=0, batch_size=0, tune_seconds=0.3, max_batch_size=512,
                                      total_steps=600, eval_episodes=0, quiet=False))
    tuning = summary["tuning"]
    assert tuning["num_samplers"]["choice"] >= 1 and tuning["batch_size"]["choice"] in (256, 512)
    assert summary["batch_size"] == tuning["batch_size"]["choice"]
    assert summary["num_samplers"] == tuning["num_samplers"]["choice"]
    assert os.path.exists(os.path.join(run_dir, "tuning.md")) and os.path.exists(os.path.join(run_dir, "tuning.json"))
    assert "| batch_size | 256 |" in capsys.readouterr().out


def test_config_file_round_trip(tmp_path):
    run_dir = str(tmp_path / "run")
    system.run(tiny_spreeze(run_dir, total_steps=400, eval_episodes=0))
    config = read_config(run_dir)
    assert config["num_samplers"] == 2 and config["transfer"] == "shm"


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
@pytest.mark.slow
def test_ctrl_c_stops_every_process_saves_weights_and_frees_shared_memory(tmp_path, signum, status):
    run_dir = str(tmp_path / "run")
    proc = subprocess.Popen(
        [sys.executable, "-m", "launch.spreeze", "--env=Pendulum-v1", "--num_samplers=2", "--hidden_sizes=16",
         "--total_steps=100000000", "--learning_starts=200", "--eval_episodes=0", f"--logdir={run_dir}",
         "--quiet"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 90
    checkpoints = os.path.join(run_dir, "checkpoints")
    while time.monotonic() < deadline:  # wait until the learner has published a few versions
        versions = weights_lib.list_versions(checkpoints)
        if versions and versions[-1][0] >= 100:
            break
        time.sleep(0.2)
    proc.send_signal(signum)
    proc.send_signal(signal.SIGINT)  # a second stop signal while it saves changes nothing
    _, stderr = proc.communicate(timeout=60)
    # Python handles pending signals in number order (SIGINT first): either may be the one that decides.
    assert proc.returncode in (status, 130), stderr
    assert ("interrupted" if proc.returncode == 130 else "terminated (SIGTERM)") in stderr
    assert "Traceback" not in stderr
    assert _segments(run_dir) == []
    summary = read_summary(run_dir)
    assert summary["interrupted"] and weights_lib.list_versions(checkpoints)[-1][0] == summary["optimizer_steps"]


_MODEL_PARALLEL = """
import json, sys
from systems.spreeze import system
config = system.SpreezeConfig(
    env_id="Pendulum-v1", algo="sac", seed=3, num_samplers=1, envs_per_sampler=1, num_envs=1, batch_size=32,
    buffer_size=5_000, learning_starts=200, total_steps=1_200, hidden_sizes=(16,), publish_every=20,
    eval_episodes=1, eval_every=600, logdir=sys.argv[1], quiet=True, learning_rate=1e-3, max_grad_norm=0.0,
    opt_eps=1e-8, tau=0.005, model_parallel=True,
)
print("SUMMARY " + json.dumps(system.run(config)))
"""


def _model_parallel_code(run_dir: str) -> str:
    return _MODEL_PARALLEL.replace("sys.argv[1]", repr(run_dir))


@pytest.mark.slow
def test_model_parallel_run_on_two_devices(tmp_path):
    from tests.multidevice import run_python

    out = run_python(_model_parallel_code(str(tmp_path / "run")), 2)
    summary = json.loads(next(line for line in out.splitlines() if line.startswith("SUMMARY "))[len("SUMMARY "):])
    assert summary["model_parallel"] == {"actor": "cpu:0", "critic": "cpu:1"}
    assert summary["optimizer_steps"] > 0 and summary["evaluations"] >= 1


def test_forkserver_preload_starts_no_jax_backend_and_no_thread():
    """Children fork from a forkserver that imported `CHILD_PRELOAD`: forking is only safe while that image has no
    JAX backend (XLA's thread pools) and no other thread, and each child must still pick its own platform."""
    code = (
        "import importlib, threading\n"
        "from systems.spreeze.system import CHILD_PRELOAD\n"
        "for name in CHILD_PRELOAD: importlib.import_module(name)\n"
        "from jax._src import xla_bridge\n"
        "print(len(xla_bridge._backends), threading.active_count())\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "1"], result.stdout


_FORKSERVER_CPU = """
import resource
from systems.spreeze.system import _stop_forkserver, child_context
child = child_context().Process(target=sum, args=(range(30_000_000),))  # about a second of CPU in the child
child.start()
child.join()
before = resource.getrusage(resource.RUSAGE_CHILDREN)
_stop_forkserver()  # what the process does at exit
after = resource.getrusage(resource.RUSAGE_CHILDREN)
print(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
"""


@pytest.mark.slow
def test_the_cpu_time_of_spreezes_children_reaches_the_launchers_parent():
    """Spreeze's children are forked by a forkserver, which reaps them: the launcher waits for the forkserver at exit,
    so a parent's `wait4` (`time`, the benchmarks' CPU column) counts the children's CPU time. Left to init, it
    counted none of it (a HalfCheetah run: 26 CPU-s reported of the 86 its processes spent)."""
    from tests.multidevice import run_python

    counted = float(run_python(_FORKSERVER_CPU, num_devices=1).strip().splitlines()[-1])
    assert counted > 0.3, counted
