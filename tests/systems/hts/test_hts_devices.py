"""HTS-RL over several devices and processes (`systems.hts.layout`): the learner's replicas stay bit-identical, the
parameters do not depend on the actor threads, the EnvPool batch or the actor devices, one replica on another device
is the single-device run bit for bit, and 2 processes x 2 devices end where 1 process x 4 devices ends.

Each multi-device run happens in a child process (the device count is fixed when JAX starts)."""

import json

import numpy as np
import pytest

from launch import hts as launch_hts
from systems.common.config import ConfigError
from systems.hts import layout
from systems.hts import system as hts
from systems.hts.system import HTSConfig
from tests.fixtures import read_summary, run_launcher
from tests.multidevice import free_port, run_processes, run_python

# One child process, several runs: prints one JSON line per run (fingerprint, lag, the recorded layout).
_RUNS = """
import dataclasses, json, sys
import numpy as np
from flax import serialization
from systems.common.checkpoint import list_checkpoints
from systems.hts import system
from systems.hts.system import HTSConfig
base = HTSConfig(
    env_id="CartPole-v1", num_envs=8, inference_batch=4, sync_interval=16, total_steps=8 * 16 * 6, num_epochs=2,
    num_minibatches=4, eval_episodes=0, quiet=True, seed=3, debug=True, {base}
)
for i, changes in enumerate({runs}):
    config = dataclasses.replace(base, logdir=f"{{sys.argv[1]}}/run{{i}}", **changes)
    summary = system.run(config)
    with open(list_checkpoints(summary["run_dir"])[-1], "rb") as f:
        params = serialization.msgpack_restore(f.read())["state"]["params"]
    np.save(f"{{summary['run_dir']}}.npy", np.concatenate([np.ravel(x) for x in __import__("jax").tree.leaves(params)]))
    with open(f"{{summary['run_dir']}}/config.json") as f:
        recorded = json.load(f)
    print(json.dumps({{"fingerprint": summary["param_fingerprint"], "updates": summary["updates"],
                      "max_policy_lag": summary["max_policy_lag"], "actor_devices": recorded["plan"]["actor_devices"],
                      "learner_devices": recorded["plan"]["learner_devices"]}}))
"""


def _runs(tmp_path, num_devices: int, runs: list[dict], base: str = "") -> list[dict]:
    code = f"import sys; sys.argv = ['x', {str(tmp_path)!r}]\n" + _RUNS.format(base=base, runs=repr(runs))
    out = run_python(code, num_devices=num_devices)
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_two_learner_replicas_bit_identical_across_actor_threads_batches_and_actor_devices(tmp_path):
    runs = [dict(num_actors=1, env_batch_size=4), dict(num_actors=2, env_batch_size=2),
            dict(num_actors=3, env_batch_size=1),
            dict(num_actors=3, env_batch_size=3, actor_devices="0,1", learner_devices="1,2")]
    results = _runs(tmp_path, 3, runs)  # --debug: the replicas were compared after every update
    assert [r["updates"] for r in results] == [6] * 4
    assert all(r["max_policy_lag"] == 1 for r in results)
    assert [(r["actor_devices"], r["learner_devices"]) for r in results[:3]] == [("0", "1,2")] * 3  # the default
    assert len({r["fingerprint"] for r in results}) == 1, results


@pytest.mark.slow
def test_one_learner_replica_on_another_device_is_the_single_device_run(tmp_path):
    single = hts.run(HTSConfig(
        env_id="CartPole-v1", num_envs=8, inference_batch=4, sync_interval=16, total_steps=8 * 16 * 6, num_epochs=2,
        num_minibatches=4, eval_episodes=0, quiet=True, seed=3, logdir=str(tmp_path / "single"),
    ))
    # One child for the three runs: two with one replica elsewhere, and two replicas (another, data-parallel run: the
    # fingerprint does see the layout).
    *moved, two = _runs(tmp_path, 3, [dict(actor_devices="1", learner_devices="2"),
                                      dict(actor_devices="0,1", learner_devices="0"),
                                      dict(actor_devices="2", learner_devices="0,1")])
    assert [r["fingerprint"] for r in moved] == [single["param_fingerprint"]] * 2
    assert two["learner_devices"] == "0,1" and two["fingerprint"] != single["param_fingerprint"]


@pytest.mark.slow
def test_two_processes_equal_one_process_over_four_learner_devices(tmp_path):
    """pmean: equal up to the summation order; --ordered_reduction: bit for bit."""
    layout = dict(actor_devices="0", learner_devices="0,1,2,3")
    single, single_ordered = _runs(tmp_path / "single", 4, [layout, dict(layout, ordered_reduction=True)])
    port = free_port()
    codes = []
    for pid in range(2):
        base = f'coordinator_address="127.0.0.1:{port}", num_processes=2, process_id={pid}'
        runs = [dict(actor_devices="0", learner_devices="0,1"),
                dict(actor_devices="0", learner_devices="0,1", ordered_reduction=True)]
        codes.append(f"import sys; sys.argv = ['x', {str(tmp_path / 'multi')!r}]\n"
                     + _RUNS.format(base=base, runs=repr(runs)))
    (tmp_path / "multi").mkdir()
    results = [[json.loads(line) for line in out.splitlines() if line.startswith("{")]
               for out in run_processes(codes, num_devices=2, workdir=str(tmp_path))]
    outputs, outputs_ordered = [r[0] for r in results], [r[1] for r in results]
    assert [o["updates"] for o in outputs] == [single["updates"]] * 2
    assert all(o["max_policy_lag"] == 1 for o in outputs)
    # Every replica of both processes holds the same bits ...
    assert outputs[0]["fingerprint"] == outputs[1]["fingerprint"]
    # ... equal to one process over 4 learner devices up to the all-reduce's summation order (gloo across processes,
    # XLA's own within one) ...
    multi, single_params = (np.load(tmp_path / name / "run0.npy") for name in ("multi", "single"))
    np.testing.assert_allclose(multi, single_params, rtol=1e-5, atol=1e-6)
    # ... and bit for bit with --ordered_reduction (the order of the sum is the program's): run1 of each job.
    assert outputs_ordered[0]["fingerprint"] == outputs_ordered[1]["fingerprint"] == single_ordered["fingerprint"]
    np.testing.assert_array_equal(np.load(tmp_path / "multi" / "run1.npy"), np.load(tmp_path / "single" / "run1.npy"))


def test_debug_check_finds_replicas_that_differ():
    out = run_python("""
        import jax, numpy as np
        from systems.common import distributed
        spread = distributed.make_replica_check(jax.local_devices(), "device")
        place = jax.pmap(lambda x: x, devices=jax.local_devices())
        same = place(np.ones((2, 3), np.float32))
        differ = place(np.array([[1, 1, 1], [1, 1.5, 1]], np.float32))
        print(float(spread({"w": same})[0]), float(spread({"w": differ})[0]))
    """, num_devices=2)
    assert out.split() == ["0.0", "0.5"]


class _Device:
    def __init__(self, id_, platform="cpu"):
        self.id, self.platform = id_, platform


def _config(**changes) -> HTSConfig:
    values = dict(env_id="CartPole-v1", num_envs=8, sync_interval=16, num_minibatches=4)
    return HTSConfig(**{**values, **changes})


def test_default_roles_share_one_device_and_split_several():
    assert layout.default_roles(1, 1, _config()) == ((0,), (0,))
    assert layout.default_roles(4, 1, _config()) == ((0,), (1, 2))  # 3 spare devices, 8 envs: 2 replicas
    assert layout.default_roles(5, 1, _config()) == ((0,), (1, 2, 3, 4))
    # PPO: each replica's rows must split into the minibatches (8 envs x 2 steps / 4 replicas = 4 rows, 8 batches).
    assert layout.default_roles(5, 1, _config(sync_interval=2, num_minibatches=8)) == ((0,), (1, 2))


def test_layout_from_flags():
    devices = [_Device(i) for i in range(4)]
    resolved = layout.resolve(_config(learner_devices="2,3"), devices)
    assert [d.id for d in resolved.actor_devices] == [0] and resolved.num_replicas == 2
    resolved = layout.resolve(_config(actor_devices="4"), [*devices, _Device(4)])
    assert [d.id for d in resolved.learner_devices] == [0, 1, 2, 3]  # every device the actors leave
    assert "actors on cpu:4; 4 learner replica(s) on cpu:0,cpu:1,cpu:2,cpu:3; 2 envs per replica" in resolved.describe()


def test_a_gpu_with_few_envs_gets_a_hint_and_a_cpu_none():
    gpu = layout.resolve(_config(), [_Device(0, "gpu")])
    assert "--num_envs=128 --num_actors=4 --sync_interval=8 (about the same 1,024-step round)" in \
        hts.accelerator_hint(8, 128, gpu)
    assert "--sync_interval=16 (about the same 2,048-step round)" in hts.accelerator_hint(16, 128, gpu)
    assert hts.accelerator_hint(128, 128, gpu) == ""
    assert hts.accelerator_hint(8, 128, layout.resolve(_config(), [_Device(0)])) == ""


@pytest.mark.parametrize("changes, message", [
    (dict(learner_devices="0,7"), "device 7 does not exist"),
    (dict(learner_devices="1,1"), "names a device twice"),
    (dict(actor_devices="a"), "comma-separated device indices"),
    (dict(learner_devices="0,1,2"), "8 envs do not split evenly over 3 learner replicas"),
    (dict(learner_devices="0,1", num_minibatches=128), "not divisible by --num_minibatches=128"),
])
def test_bad_layouts_are_one_line(changes, message):
    with pytest.raises(ConfigError, match=message):
        layout.resolve(_config(**changes), [_Device(i) for i in range(4)])


@pytest.mark.parametrize("flags, message", [
    (dict(learner_devices="3"), "--learner_devices=3: device 3 does not exist; this process has 1 device(s)"),
    (dict(num_processes=3), "--num_envs=8 does not split evenly over --num_processes=3"),
    (dict(num_processes=2, coordinator_address="127.0.0.1:1", time_limit=60), "--time_limit with several processes"),
    # JAX took these to an IndexError traceback and a segmentation fault; the last one trained alone.
    (dict(num_processes=2, coordinator_address="nohostport"), "must be HOST:PORT with a port in 1-65535"),
    (dict(num_processes=2, coordinator_address="localhost:notaport"), "must be HOST:PORT with a port in 1-65535"),
    (dict(coordinator_address="127.0.0.1:1"), "--coordinator_address needs --num_processes > 1"),
])
def test_launcher_refuses_bad_device_flags(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        run_launcher(launch_hts.main, env="CartPole-v1", num_envs=8, logdir=str(tmp_path / "run"), **flags)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def _start_job(run_dir, port: int, *extra: str) -> list:
    from tests.multidevice import start_launcher_job

    return start_launcher_job("launch.hts", ["--env=CartPole-v1", "--num_envs=8", "--sync_interval=128",
                                             "--total_steps=4000000", "--eval_episodes=0", "--quiet"],
                              run_dir, port, *extra)


def _newest_checkpoint(directory) -> str:
    from systems.common.checkpoint import list_checkpoints

    return __import__("os").path.basename(list_checkpoints(str(directory))[-1])


@pytest.mark.slow
def test_sigterm_of_a_two_process_job_checkpoints_one_round_and_resumes(tmp_path):
    from tests.multidevice import stop_job_when

    run_dir = tmp_path / "run"
    progress = run_dir / "progress.csv"
    codes = stop_job_when(_start_job(run_dir, free_port()),
                          lambda: progress.exists() and progress.read_text().count("\n") >= 4, 120)
    assert codes == [143, 143]  # JAX's preemption notifier does not swallow SIGTERM
    newest = _newest_checkpoint(run_dir)
    assert newest == _newest_checkpoint(run_dir / "process-1")  # the same round on both processes
    resumed = _start_job(run_dir, free_port(), "--resume", f"--total_steps={int(newest[5:17]) + 8 * 128 * 2}")
    assert [proc.wait(timeout=240) for proc in resumed] == [0, 0]
    summaries = [read_summary(d) for d in (run_dir, run_dir / "process-1")]
    assert summaries[0]["param_fingerprint"] == summaries[1]["param_fingerprint"]
    assert summaries[0]["updates"] == int(newest[5:17]) // (8 * 128) + 2


_FAILING_JOB_PROCESS = """
import runpy, sys
from systems.hts import system
learn, calls = system._Learner.learn, []
def learn_then_fail(self, *args):
    calls.append(1)
    if len(calls) == 3:
        raise RuntimeError("injected failure of the third update")
    return learn(self, *args)
if {pid} == 1:
    system._Learner.learn = learn_then_fail
sys.argv = ["launch.hts", *{args!r}]
runpy.run_module("launch.hts", run_name="__main__")
"""


@pytest.mark.slow
def test_a_bug_in_one_process_ends_the_job_in_seconds_not_at_jaxs_shutdown_deadline(tmp_path):
    """A bug in one process of a job (here its third update raises) ends the job at once: that process prints its
    traceback and exits 1 without waiting at JAX's shutdown barrier for a peer that is blocked in a collective it
    will never join; the peer's collective fails, and it checkpoints and exits 130, as when a peer is stopped.
    (Both used to wait out JAX's 5-minute shutdown deadline and then abort.)"""
    import subprocess
    import sys
    import time

    from tests.multidevice import ROOT, device_env

    port, procs = free_port(), []
    for pid in range(2):
        args = ["--env=CartPole-v1", "--num_envs=8", "--sync_interval=16", "--total_steps=400000", "--eval_every=0",
                "--quiet", "--learner_devices=0,1", "--actor_devices=0", "--num_processes=2", f"--process_id={pid}",
                f"--coordinator_address=127.0.0.1:{port}", f"--logdir={tmp_path / 'run'}"]
        log = open(tmp_path / f"p{pid}.log", "w")
        procs.append(subprocess.Popen([sys.executable, "-c", _FAILING_JOB_PROCESS.format(pid=pid, args=args)],
                                      cwd=ROOT, env=device_env(2), stdout=log, stderr=subprocess.STDOUT))
    start = time.monotonic()
    try:
        codes = [proc.wait(timeout=240) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    logs = [(tmp_path / f"p{pid}.log").read_text() for pid in range(2)]
    assert codes == [130, 1], (codes, logs)
    assert time.monotonic() - start < 120, logs  # JAX's shutdown deadline is 300 s
    assert "RuntimeError: injected failure of the third update" in logs[1]
    assert logs[1].rstrip().endswith("error: process 1 of this job failed (above); the others stop when they miss it")
    assert "stopped: another process of the job stopped or failed; the newest parameters are saved" in logs[0]
