"""The synchronous baseline HTS-RL is measured against (A2C/PPO as in Kostrikov's and CleanRL's code; seed 000,
Fig. 2(a)): every step waits for all envs, a round of `sync_interval` steps is collected with the current
parameters, then the learner updates (behaviour parameters == current parameters), then the next round starts.
Rollout and learning alternate; nothing overlaps. Uses the same executor, storage, actor logic and agent updates
as HTS, with EnvPool's batch equal to the number of envs."""

from __future__ import annotations

import jax

from envs.executor import Executor
from envs.factory import make_spec
from envs.step_time import parse_step_time
from systems.common import config as config_lib
from systems.common.learner import build
from systems.common.monitor import LearnerReport, Monitor
from systems.common.rollout import RoundCollector, RoundStorage

SYSTEM = "sync"


def run(config: config_lib.TrainConfig) -> dict:
    """Trains with the synchronous baseline; returns the summary (also written to `<run dir>/summary.json`)."""
    config_lib.validate(config)
    step_time = parse_step_time(config.step_time)
    spec = make_spec(config.env_id)
    setup, state = build(config, spec)
    monitor = Monitor(SYSTEM, config, spec, setup, state)
    start_round = int(monitor.state.update_step)
    total_rounds = config_lib.total_rounds(config)
    if start_round >= total_rounds:
        return monitor.finish()
    executor = Executor(
        spec, num_envs=config.num_envs, batch_size=config.num_envs, seed=config.seed, step_time=step_time
    )
    stop = [False]

    def on_round_complete(storage: RoundStorage, last: bool):
        current = monitor.state
        version = int(current.update_step)
        new_state, metrics = setup.update(current, current.params, storage.to_rollout())
        report = LearnerReport(new_state, jax.device_get(metrics), storage.behaviour_version, version)
        stop[0] = monitor.on_report(report, executor.pop_episodes())
        return None if stop[0] else (version + 1, new_state.params)

    collector = RoundCollector(
        executor, policy_fn=setup.policy, run_key=setup.action_key, sync_interval=config.sync_interval,
        inference_batch=config.num_envs, first_round=start_round, total_rounds=total_rounds,
        params=monitor.state.params, version=start_round, on_round_complete=on_round_complete,
        action_shape=setup.action_shape, action_dtype=setup.action_dtype,
    )
    interrupted = False
    try:
        executor.start()
        while not collector.finished.is_set():
            # Lock-step: wait for every env's result before acting (A2C/PPO's per-step synchronization).
            results = executor.take(max_items=config.num_envs, min_items=config.num_envs, timeout=1.0)
            if results is not None:
                collector.process(results)
            monitor.heartbeat(executor.env_steps_received)
    except KeyboardInterrupt:
        interrupted = True
        monitor.outputs.print("[sync] interrupted: saving a checkpoint of the newest parameters")
    finally:
        executor.close()
    summary = monitor.finish(interrupted=interrupted)
    if interrupted:
        raise KeyboardInterrupt
    return summary
