"""Synchronous data-parallel actor-critic: Distributed BA3C (seed 001, sections 2.2-2.5) on a named pmap axis.

* Workers are devices on the pmap axis `DEVICE_AXIS` (`--num_devices` per process; with `jax.distributed`, every
  host's devices). Device d steps its own share of the envs (global env ids d*E .. d*E+E-1, E = local_batch /
  sync_interval), runs their forward passes on its own replica of the parameters, and computes the A2C gradient
  on its local batch of `local_batch` data points.
* Gradients are averaged with `pmean` (the paper's synchronous gathering and averaging, without parameter servers:
  an all-reduce does the same job) and every replica applies the same optimizer step, so the replicas stay
  bit-identical; `--debug` checks this after every update (max over leaves of pmax - pmin must be exactly 0).
  Effective batch = number of devices x local batch.
* Optimizer: large-batch Adam (Eq. 5-6, epsilon inside the square root) with beta1 0.8, beta2 0.75, learning rate
  1e-3 not scaled by default (`--lr_scaling` none/linear/sqrt by the number of devices), and epsilon 1e-8 at every
  batch (Table 1). Sec. 2.4 saw 1e-8 help only at effective batches of 512 and more; below that, 1e-3 drove
  LunarLander-v2 under a random policy at batches 80 and 320 where 1e-8 learns (`benchmarks/learning.py`).
* Network: on Atari the BA3C network with a `--hidden` wide FC layer (Table 2); elsewhere the default network.
* Departure from the paper: within a worker the paper keeps BA3C's asynchronous prediction/training threads; here
  each worker is synchronous (lock-step envs, then one update), which makes a run a pure function of the seed and
  the device count. The paper's parameter servers are replaced by the all-reduce.
* Multi-host (`--num_processes > 1`): one process per host, `jax.distributed` (gloo on CPU). Process p steps the
  envs of its local devices only; env seeds and action keys use global env ids, so the parameters equal a
  single-process run over the same total device count. Process 0 evaluates and writes the run directory; process
  p > 0 writes `<logdir>/process-<p>` (its own checkpoints, no evaluation).
"""

from __future__ import annotations

import dataclasses
import functools

import jax

from envs.executor import Executor
from envs.factory import make_spec
from envs.step_time import parse_step_time
from systems.ba3c.config import SYSTEM, BA3CConfig, Plan, plan, validate
from systems.common import config as config_lib
from systems.common import conv_tuning, distributed, layout_rule
from systems.common import run as skeleton
from systems.common.data_parallel import DataParallelLearner
from systems.common.learner import build, network_of, optimizer_steps_per_update, with_memory
from systems.common.monitor import LearnerReport, Monitor, Progress, on_policy_evaluator
from systems.common.outputs import on_policy_columns
from systems.common.profile import stage
from systems.common.rollout import (
    RoundCollector,
    RoundStorage,
    make_sharded_policy_fn,
    replica,
    rollout_shapes,
)

__all__ = ["SYSTEM", "BA3CConfig", "Plan", "make_agent", "plan", "run", "select_devices", "validate"]


def select_devices(config: BA3CConfig) -> list:
    """The local devices on the pmap axis: all of them, or the first `num_devices` (single process only)."""
    local = jax.local_devices()
    if config.num_devices == 0:
        return local
    if config.num_devices > len(local):
        raise config_lib.ConfigError(
            f"--num_devices={config.num_devices} but this process has {len(local)} devices"
            " (on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N gives N)"
        )
    if jax.process_count() > 1 and config.num_devices != len(local):
        raise config_lib.ConfigError("with several processes every local device takes part: leave --num_devices=0")
    return local[: config.num_devices]


def make_agent(config: BA3CConfig, run_plan: Plan):
    """Spec, learner setup and initial state: the BA3C torso of width `hidden` on Atari and the optimizer with the
    plan's learning rate (scaled over the devices) and epsilon."""
    spec = make_spec(config.env_id, config.env_kwargs, config.frame_stack)
    network = network_of(config, spec, torso="ba3c" if spec.family == "atari" else None, hidden=config.hidden)
    network = with_memory(conv_tuning.with_plan(network, spec.obs_shape, config.local_batch, config.conv_plan), config)
    optimizer_settings = dict(
        config.optimizer_settings(run_plan.total_rounds * optimizer_steps_per_update(config)),
        learning_rate=run_plan.learning_rate, eps=run_plan.opt_eps,
        b1=config.adam_b1 if config.optimizer != "rmsprop" else None,
        b2=config.adam_b2 if config.optimizer != "rmsprop" else None,
    )
    setup, state = build(config, spec, network=network, optimizer_settings=optimizer_settings)
    return spec, setup, state


def run(config: BA3CConfig) -> dict:
    """Trains data-parallel A2C (BA3C); returns the summary (also written to `<run dir>/summary.json`)."""
    return skeleton.run(SYSTEM, config, _open, validate=validate)


def _open(config: BA3CConfig) -> skeleton.Opening:
    """The devices, the plan (learning rate and epsilon for the effective batch), the agent and the monitor's
    parts."""
    devices = select_devices(config)
    given_batch = config.local_batch
    config, fitted = layout_rule.applied_batch(config, layout_rule.this_machine(), len(devices) * jax.process_count(),
                                               jax.process_count())
    try:
        if fitted.rule != "preset":
            validate(config)
        run_plan = plan(config, len(devices) * jax.process_count())
    except config_lib.ConfigError as error:
        if config.local_batch == given_batch:
            raise
        raise config_lib.ConfigError(
            f"{error}; --local_batch={config.local_batch} is the layout rule's choice ({fitted.rule}, "
            f"{fitted.machine.describe()}), not a flag: --layout=preset keeps the preset's {given_batch}") from None
    config = distributed.per_process_config(config)  # process 0 owns the run directory and the evaluations
    spec, setup, state = make_agent(config, run_plan)
    header = (f"  {fitted.describe()}\n"
              f"  devices {run_plan.devices} ({jax.process_count()} process(es))  local batch {config.local_batch}  "
              f"effective batch {run_plan.effective_batch}  lr {run_plan.learning_rate:g}  eps {run_plan.opt_eps:g}")
    progress = Progress(metric_columns=on_policy_columns(config), steps_per_update=run_plan.effective_batch,
                        sizes=f"envs {run_plan.num_envs}  alpha {config.sync_interval}", header=header)
    return skeleton.Opening(agents=[skeleton.Agent(config, state, on_policy_evaluator(config, spec, setup))],
                            start=functools.partial(_start, config, run_plan, devices, spec, setup),
                            progress=progress, plan=dict(dataclasses.asdict(run_plan), layout=fitted.record()))


def _start(config: BA3CConfig, run_plan: Plan, devices: list, spec, setup, monitor: Monitor) -> skeleton.Loop | None:
    """The data-parallel learner, this process's envs and their sharded forward pass, and the lock-step loop:
    every env of this process, then one synchronous all-reduced update."""
    start_round = int(monitor.state.update_step)
    total_rounds = run_plan.total_rounds
    if start_round >= total_rounds:
        return None
    process, num_local, e = jax.process_index(), len(devices), run_plan.envs_per_device
    learner = DataParallelLearner(setup.update_fn, distributed.pmap_devices(devices), num_local, monitor.state,
                                  debug=config.debug)
    holder = {"state": learner.state, "version": start_round}  # version: updates applied so far (a host int)

    first_env = process * num_local * e
    executor = Executor(
        spec, num_envs=num_local * e, batch_size=num_local * e, seed=config.seed + first_env,
        step_time=parse_step_time(config.step_time),
    )
    stop = [False]
    round_shapes = rollout_shapes(config.sync_interval, num_local * e, spec.obs_shape, spec.obs_dtype,
                                  setup.action_shape, setup.action_dtype, setup.carry_size)
    wait_for_compile = learner.compile_ahead(round_shapes)

    def on_round_complete(storage: RoundStorage, last: bool):
        current, version = holder["state"], holder["version"]
        with stage("compile"):
            wait_for_compile()
        with stage("update"):  # ends when the metrics are on the host: the update has run
            new_state, metrics = learner.learn(current, current.params, storage)
            metrics = replica(metrics)
        holder["state"], holder["version"] = new_state, version + 1
        report = LearnerReport(replica(new_state), metrics, version, version)
        stop[0] = monitor.on_report(report, executor.pop_episodes())
        return None if stop[0] else (version + 1, new_state.params)

    collector = RoundCollector(
        executor,
        policy_fn=make_sharded_policy_fn(
            setup.network.apply, distributed.pmap_devices(devices), e, env_id_offset=first_env, num_shards=num_local,
            recurrent=bool(setup.carry_size), key_hold=setup.key_hold,
        ),
        run_key=setup.action_key, sync_interval=config.sync_interval, inference_batch=num_local * e,
        first_round=start_round, total_rounds=total_rounds, params=learner.state.params, version=start_round,
        on_round_complete=on_round_complete, action_shape=setup.action_shape, action_dtype=setup.action_dtype,
        carry_size=setup.carry_size,
    )
    return skeleton.LockstepLoop(executor, collector, monitor)
