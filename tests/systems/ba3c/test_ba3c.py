"""Data-parallel BA3C system (seed 001): replicas stay identical, a seed and a device count fix the run, and a
2-process `jax.distributed` job (gloo on 127.0.0.1) ends where a single process over the same 4 devices ends.

Each multi-device run happens in its own process (the device count is fixed when JAX starts)."""

import dataclasses
import json

import numpy as np
import pytest

from tests.multidevice import run_python, run_two_process_job

_RUN = """
import collections, json, sys
import jax
import numpy as np
from systems.ba3c import system
lowered = collections.Counter()  # programs lowered to XLA (once per in-memory cache miss, persistent cache or not)
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kw: lowered.update([kw.get("fun_name")])
    if event == "/jax/core/compile/jaxpr_to_mlir_module_duration" else None)
from systems.common.checkpoint import list_checkpoints
from flax import serialization
config = system.BA3CConfig(
    env_id="CartPole-v1", seed=3, sync_interval=5, local_batch=20, total_steps=4 * 20 * 12, eval_episodes=0,
    quiet=True, debug=True, logdir=sys.argv[1], num_devices={num_devices}, {extra}
)
if len(sys.argv) > 3:
    config = __import__("dataclasses").replace(config, total_steps=int(sys.argv[3]))
summary = system.run(config)
with open(list_checkpoints(summary["run_dir"])[-1], "rb") as f:
    params = serialization.msgpack_restore(f.read())["state"]["params"]
leaves = [np.asarray(x).ravel() for x in __import__("jax").tree_util.tree_leaves(params)]
np.save(sys.argv[2], np.concatenate(leaves))
print(json.dumps({{"fingerprint": summary["param_fingerprint"], "updates": summary["updates"],
                  "env_steps": summary["env_steps"], "num_envs": {num_envs_expr}, "lowered": lowered}}))
"""


def _script(num_devices, extra="", num_envs_expr='summary["env_steps"] // summary["updates"] // 5'):
    return _RUN.format(num_devices=num_devices, extra=extra, num_envs_expr=num_envs_expr)


def _run_single(tmp_path, name, num_devices, total_steps=None, extra=""):
    argv = [str(tmp_path / name), str(tmp_path / (name + ".npy"))] + ([str(total_steps)] if total_steps else [])
    out = run_python(f"import sys; sys.argv = ['x', *{argv!r}]\n" + _script(num_devices, extra=extra),
                     num_devices=num_devices)
    return json.loads(out.strip().splitlines()[-1]), np.load(tmp_path / f"{name}.npy")


@pytest.mark.slow
def test_same_seed_and_devices_give_bit_identical_parameters(tmp_path):
    first, params_a = _run_single(tmp_path, "a", 2)
    second, params_b = _run_single(tmp_path, "b", 2)
    assert first["updates"] == 4 * 20 * 12 // (2 * 20) and first["num_envs"] == 8
    assert first["fingerprint"] == second["fingerprint"]
    np.testing.assert_array_equal(params_a, params_b)
    # The second and later rounds reuse the first round's programs: 24 updates lower exactly what one update
    # lowers (the update and the sharded policy were once compiled again at the second call: the first got host
    # arrays, every later one the pmap's own outputs).
    one_update, _ = _run_single(tmp_path, "one", 2, total_steps=2 * 20)
    assert one_update["updates"] == 1
    assert first["lowered"] == one_update["lowered"], (first["lowered"], one_update["lowered"])


@pytest.mark.slow
def test_a_recurrent_policy_over_two_devices_is_reproducible(tmp_path):
    """A GRU core over 2 devices: each device's envs keep their states in the one collector (`agents.recurrent`),
    the all-reduced A2C update re-runs each env's sequence; a seed fixes the run."""
    first, params_a = _run_single(tmp_path, "a", 2, extra='recurrent="gru", rnn_size=8,')
    second, params_b = _run_single(tmp_path, "b", 2, extra='recurrent="gru", rnn_size=8,')
    feed_forward, _ = _run_single(tmp_path, "ff", 2)
    assert first["updates"] == 24 and first["fingerprint"] == second["fingerprint"] != feed_forward["fingerprint"]
    np.testing.assert_array_equal(params_a, params_b)


@pytest.mark.slow
def test_two_processes_equal_one_process_over_the_same_devices(tmp_path):
    single, single_params = _run_single(tmp_path, "single", 4)
    outputs = run_two_process_job(lambda extra: _script(0, extra=extra), tmp_path)
    multi = [np.load(tmp_path / f"multi{pid}.npy") for pid in range(2)]
    assert outputs[0]["num_envs"] == outputs[1]["num_envs"] == single["num_envs"] == 16
    assert outputs[0]["updates"] == single["updates"] == 12
    # Both processes hold the same parameters (the all-reduce gives every replica the same bits) ...
    assert outputs[0]["fingerprint"] == outputs[1]["fingerprint"]
    np.testing.assert_array_equal(multi[0], multi[1])
    # ... equal to the single-process run over the same 4 devices up to the all-reduce's summation order.
    np.testing.assert_allclose(multi[0], single_params, rtol=1e-5, atol=1e-6)


def test_the_plan_derives_the_run_over_its_devices_and_leaves_the_config_as_asked():
    from systems.ba3c.config import BA3CConfig, plan
    from systems.common.config import ConfigError

    config = BA3CConfig(env_id="CartPole-v1", sync_interval=5, local_batch=20, total_steps=1_000, lr_scaling="linear")
    four = plan(config, num_global_devices=4)
    assert (four.devices, four.envs_per_device, four.num_envs, four.effective_batch) == (4, 4, 16, 80)
    assert four.learning_rate == pytest.approx(4e-3) and config.learning_rate == 1e-3  # Sec. 2.4's linear rule
    assert four.opt_eps == 1e-8 and config.opt_eps is None  # Table 1's epsilon for large-batch Adam
    assert four.total_rounds == 13  # ceil(1000 / 80): the last round completes
    assert plan(dataclasses.replace(config, optimizer="adam"), 1).opt_eps == 1e-5
    with pytest.raises(ConfigError, match="less than one round"):
        plan(config, num_global_devices=64)  # 64 x 20 = 1,280 > 1,000 steps
