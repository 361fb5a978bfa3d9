"""Every on-policy preset's update builds at its real size: `python -m launch.hts --env=Hopper-v4` once
unrolled CleanRL's 10 epochs x 32 minibatches into one XLA program that did not build in 7.5 minutes and 14 GB.

Each preset's update is compiled in its own process at the preset's real sizes (rollout `sync_interval x
num_envs`, its epochs and minibatches, its network) and checked with measures that do not depend on the machine's
load: the number of instructions in the optimized XLA program, its temporary buffers and the building process's
own peak resident memory (`VmHWM`). Time to the first update of every launcher's preset is measured by
`benchmarks/presets.py` (results/presets_cpu.md)."""

import json
import sys

import pytest

from systems.common.learner import MAX_UNROLLED_CONV_STEPS, ppo_loop_plan
from tests.multidevice import run_python

_TASKS = {"atari": "Breakout-v5", "gfootball": "gfootball/academy_empty_goal_close-v1", "classic": "CartPole-v1",
          "box2d": "LunarLander-v2", "mujoco": "Hopper-v4"}
# Measured with jax 0.10.2 on 2 CPU cores (optimized-HLO instructions, compile time, peak memory): Atari and
# GFootball PPO (Nature CNN, 4 x 4 steps unrolled) about 60,000 (14 s, 1.3 GB); MLP PPO rolled 3,400-4,400; A2C
# 1,600-2,000. The MuJoCo preset with its 32 minibatches unrolled (epochs rolled) already reaches 180,000 (34 s,
# 2.2 GB), and fully unrolled did not build in 7.5 minutes. The bound sits between the two.
MAX_INSTRUCTIONS = 100_000
# Temporary buffers of the compiled update (XLA's own figure, independent of load): Atari and GFootball PPO
# 0.43 GB with the launchers' memory-saving CPU schedule (`systems.common.xla_flags`), 2.0 and 1.8 GB without it.
MAX_TEMP_GB = 1.0
MAX_PEAK_GB = 4.0  # the process building the update

_CHILD = """
import json, sys
from systems.common.xla_flags import prefer_memory_saving_cpu_schedule
prefer_memory_saving_cpu_schedule()  # as the launchers do
import jax
jax.config.update("jax_enable_compilation_cache", False)  # compile for real: the test inspects the program
from envs.factory import make_spec
from systems.common import config as config_lib
from systems.common import presets
from systems.common.learner import build
from systems.common.rollout import rollout_shapes

family, algo, env_id = {args!r}
config = config_lib.TrainConfig(env_id=env_id, algo=algo, **presets.preset(family, algo))
spec = make_spec(env_id)
setup, state = build(config, spec)
rollout = rollout_shapes(config.sync_interval, config.num_envs, spec.obs_shape, spec.obs_dtype, setup.action_shape,
                         setup.action_dtype)
compiled = jax.jit(setup.update_fn).lower(state, state.params, rollout).compile()
instructions = sum(1 for line in compiled.as_text().splitlines() if " = " in line)
temp_gb = compiled.memory_analysis().temp_size_in_bytes / 1e9
# VmHWM belongs to this program's own memory map: ru_maxrss would also count the pytest process it was forked from.
peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
peak_gb = peak_kb * 1024 / 1e9
print("RESULT " + json.dumps(dict(instructions=instructions, temp_gb=temp_gb, peak_gb=peak_gb)))
"""


def _build(family: str, algo: str) -> dict:
    out = run_python(_CHILD.format(args=(family, algo, _TASKS[family])), num_devices=1, timeout=600)
    return json.loads(out.split("RESULT ", 1)[1])


# A2C has no epoch or minibatch loop: its largest network (Atari's) stands for the rest. Box2D's PPO preset is
# classic control's (the same sizes and MLP; LunarLander's 8 observations against CartPole's 4): built once.
_PRESETS = [(family, "ppo") for family in sorted(_TASKS) if family != "box2d"] + [("atari", "a2c")]


@pytest.mark.slow
@pytest.mark.parametrize("family, algo", _PRESETS, ids=[f"{f}-{a}" for f, a in _PRESETS])
def test_preset_update_builds_at_real_size(family, algo):
    result = _build(family, algo)
    print(family, algo, result, file=sys.stderr)
    assert result["instructions"] < MAX_INSTRUCTIONS, result
    assert result["temp_gb"] < MAX_TEMP_GB, result
    assert result["peak_gb"] < MAX_PEAK_GB, result


def test_loop_plan_never_unrolls_an_mlp_or_too_many_conv_steps():
    assert ppo_loop_plan((11,), 10, 32) == dict(unroll_epochs=False, unroll_minibatches=False)
    assert ppo_loop_plan((4, 84, 84), 4, 4, backend="cpu") == dict(unroll_epochs=True, unroll_minibatches=True)
    big = ppo_loop_plan((4, 84, 84), 10, 32, backend="cpu")
    assert big["unroll_epochs"] is False
    unrolled_per_epoch = 32 if big["unroll_minibatches"] is True else 1
    assert unrolled_per_epoch <= MAX_UNROLLED_CONV_STEPS


def test_loop_plan_keeps_minatars_loops_rolled_on_a_cpu_too():
    """MinAtar's CNN runs im2col slices on a CPU, not XLA's convolution: rolled loops build faster and run as fast."""
    assert ppo_loop_plan((10, 10, 4), 4, 8, backend="cpu") == dict(unroll_epochs=False, unroll_minibatches=False)
    assert ppo_loop_plan((1, 40, 40), 4, 4, backend="cpu") == dict(unroll_epochs=True, unroll_minibatches=True)


def test_loop_plan_keeps_loops_rolled_off_the_cpu():
    """Unrolling is XLA CPU's remedy; a GPU gets the rolled loops (results/gpu_first_run.md)."""
    for backend in ("gpu", "cuda", "tpu"):
        assert ppo_loop_plan((4, 84, 84), 4, 4, backend=backend) == dict(unroll_epochs=False, unroll_minibatches=False)
