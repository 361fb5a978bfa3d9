"""`launch.anakin` over several devices and hosts: the envs split over every device of every process, the gradients
averaged over all of them (pmap over `DEVICE_AXIS`). A 2-process `jax.distributed` job (gloo on 127.0.0.1) over 2 + 2
devices ends where one process over the same 4 devices ends. Each run happens in its own process (the device count is
fixed when JAX starts)."""

import json
import os

import numpy as np
import pytest

from tests.multidevice import run_python, run_two_process_job

_RUN = """
import json, sys
import jax
import numpy as np
from flax import serialization
from systems.anakin import system
from systems.anakin.config import AnakinConfig
from systems.common.checkpoint import list_checkpoints
config = AnakinConfig(env_id="gymnax/CartPole-v1", seed=5, num_envs=8, sync_interval=16, total_steps=6 * 128,
                      num_epochs=2, num_minibatches=2, eval_episodes=0, quiet=True, logdir=sys.argv[1], {extra})
summary = system.run(config)
with open(list_checkpoints(summary["run_dir"])[-1], "rb") as f:
    params = serialization.msgpack_restore(f.read())["state"]["params"]
np.save(sys.argv[2], np.concatenate([np.asarray(x).ravel() for x in jax.tree_util.tree_leaves(params)]))
print(json.dumps({{"fingerprint": summary["param_fingerprint"], "updates": summary["updates"],
                  "env_steps": summary["env_steps"], "episodes": summary["train_episodes"]}}))
"""


def _single(tmp_path, name: str, num_devices: int):
    argv = [str(tmp_path / name), str(tmp_path / f"{name}.npy")]
    out = run_python(f"import sys; sys.argv = ['x', *{argv!r}]\n" + _RUN.format(extra=f"num_devices={num_devices}"),
                     num_devices=num_devices)
    return json.loads(out.strip().splitlines()[-1]), np.load(tmp_path / f"{name}.npy")


@pytest.mark.slow
def test_two_processes_equal_one_process_over_the_same_devices(tmp_path):
    four, four_params = _single(tmp_path, "four", 4)
    outputs = run_two_process_job(lambda extra: _RUN.format(extra=extra), tmp_path)
    multi = [np.load(tmp_path / f"multi{pid}.npy") for pid in range(2)]
    assert four["updates"] == outputs[0]["updates"] == outputs[1]["updates"] == 6
    assert four["env_steps"] == outputs[0]["env_steps"] == 6 * 128
    # Every process holds the same parameters (the mean over all devices gives every replica the same bits) ...
    assert outputs[0]["fingerprint"] == outputs[1]["fingerprint"]
    np.testing.assert_array_equal(multi[0], multi[1])
    # ... those of one process over the same 4 devices (the same envs, keys and per-device minibatches) up to the
    # all-reduce's summation order.
    np.testing.assert_allclose(multi[0], four_params, rtol=1e-4, atol=1e-5)
    # Each process logs its own envs' episodes: together they are the single process's.
    assert outputs[0]["episodes"] + outputs[1]["episodes"] == four["episodes"]


def test_envs_that_do_not_split_and_normalization_over_devices_are_one_line(tmp_path):
    out = run_python(
        "import sys\nfrom systems.anakin import system\nfrom systems.anakin.config import AnakinConfig\n"
        "from systems.common.config import ConfigError\n"
        f"for changes in (dict(num_envs=6), dict(num_envs=8, normalize_obs=True)):\n"
        f"    config = AnakinConfig(env_id='gymnax/CartPole-v1', logdir={str(tmp_path)!r}, quiet=True, **changes)\n"
        "    try:\n        system.run(config)\n    except ConfigError as error:\n        print(error)\n",
        num_devices=4)
    assert out.strip().splitlines()[-2:] == [
        "--num_envs=6 does not split evenly over 4 devices",
        "--normalize_obs and --normalize_reward need one device (each device would keep its own running statistics "
        "of its envs): set --num_devices=1"]


def test_a_multi_host_job_refuses_a_time_limit():
    from systems.anakin.config import AnakinConfig, validate
    from systems.common.config import ConfigError

    with pytest.raises(ConfigError, match="would stop the processes of a multi-host job at different rounds"):
        validate(AnakinConfig(env_id="gymnax/CartPole-v1", num_processes=2, coordinator_address="127.0.0.1:1",
                              time_limit=60))



@pytest.mark.slow
def test_sigterm_of_a_two_process_job_saves_the_same_round_on_both(tmp_path):
    """Both processes of a job stop with exit status 143, each having saved the round the other reached: a process
    that stops first leaves the other's next collective (a program call, or the agreed round count) to fail, which
    it treats as the job's stop."""
    from systems.common.checkpoint import list_checkpoints
    from tests.multidevice import free_port, start_launcher_job, stop_job_when

    run_dir = tmp_path / "run"

    def _logs():
        return [(tmp_path / f"run.p{p}.log").read_text()[-1500:] for p in range(2)]

    procs = start_launcher_job("launch.anakin", ["--env=gymnax/CartPole-v1", "--num_envs=8", "--sync_interval=16",
                                                 "--total_steps=100000000", "--checkpoint_every=1280",
                                                 "--eval_episodes=0", "--quiet"], run_dir, free_port())
    # glob: no checkpoint while the directory is missing
    codes = stop_job_when(procs, lambda: len(list_checkpoints(str(run_dir / "process-1"))) >= 2, 180, _logs)
    assert codes == [143, 143], (codes, _logs())
    newest = [os.path.basename(list_checkpoints(str(d))[-1]) for d in (run_dir, run_dir / "process-1")]
    assert newest[0] == newest[1], (newest, _logs())
