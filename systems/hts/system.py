"""High-Throughput Synchronous RL (seed 000, section 4.1): executors, actors and a learner running concurrently.

* Executors: EnvPool in async mode (`envs.executor.Executor`); step-time injection optional.
* `num_actors` actor threads take whatever observations are ready, run one batched forward pass (fixed padded
  shape) and send the actions back (`systems.common.rollout.RoundCollector`).
* Batch synchronization every `sync_interval` (alpha) steps per env: a round ends when every env has done alpha
  steps. Two storages: in round r the actors fill storage r % 2 while the learner reads the round r-1 storage.
* One-step delay (Eq. 6): round 0 and round 1 are collected with theta_0; round r >= 2 with theta_{r-1}. The
  boundary after round r waits until the learner has finished every batch handed to it (the storage the actors
  fill next is then free and theta_r exists), hands over round r's storage, and gives the actors the newest
  parameters. The learner applies the gradient taken at the batch's behaviour parameters to its current
  parameters (A2C), or runs PPO epochs from its current parameters against the stored behaviour log-probs. The
  policy lag (learner version minus behaviour version) is logged for every update and is never above one
  (checked: the run fails otherwise).
* Determinism: randomness is owned by (env, step), storage is indexed by (step, env), inference uses a fixed
  padded shape, and the learner's key chain is fixed, so `--seed` fixes the parameters bit for bit whatever
  `--num_actors`, `--env_batch_size` or thread timing.
"""

from __future__ import annotations

import queue

import jax

from envs.executor import Executor
from systems.common import config as config_lib
from systems.common.concurrency import ParameterStore, StopRequested, ThreadGroup
from systems.common.monitor import LearnerReport, Monitor
from systems.common.rollout import RoundStorage
from systems.common.run import start_run

SYSTEM = "hts"


def run(config: config_lib.TrainConfig) -> dict:
    """Trains with HTS-RL; returns the summary (also written to `<run dir>/summary.json`)."""
    ctx = start_run(SYSTEM, config)
    monitor, setup = ctx.monitor, ctx.setup
    start_round, total_rounds = ctx.start_round, ctx.total_rounds
    if start_round >= total_rounds:
        return monitor.finish()
    state = monitor.state

    group = ThreadGroup()
    store = ParameterStore(state.params, version=start_round)
    jobs: queue.Queue[RoundStorage | None] = queue.Queue(maxsize=1)
    reports: queue.Queue[LearnerReport] = queue.Queue()
    submitted = [0]

    def on_round_complete(storage: RoundStorage, last: bool):
        # Batch synchronization: the learner must be done with every batch handed to it (so the storage the
        # actors will fill next is free and the newest parameters exist) before the roles of the storages swap.
        store.wait_for(start_round + submitted[0], group.stopping)
        jobs.put(storage)
        submitted[0] += 1
        if last:
            jobs.put(None)
            return None
        return store.latest()

    executor = ctx.make_executor(config_lib.env_batch_size(config))
    collector = ctx.make_collector(
        executor, inference_batch=config_lib.inference_batch(config), on_round_complete=on_round_complete
    )

    def actor_loop():
        while not group.stopping.is_set() and not collector.finished.is_set():
            results = executor.take(max_items=config.num_envs, timeout=0.05)
            if results is not None:
                collector.process(results)

    learner_state = [state]
    wait_for_compile = ctx.compile_update_ahead(collector)

    def learner_loop():
        while True:
            try:
                storage = jobs.get(timeout=0.05)
            except queue.Empty:
                if group.stopping.is_set():
                    raise StopRequested from None
                continue
            if storage is None:
                return
            current = learner_state[0]
            learner_version = int(current.update_step)
            behaviour_params = store.get(storage.behaviour_version)
            wait_for_compile()
            new_state, metrics = setup.update(current, behaviour_params, storage.to_rollout())
            metrics = jax.device_get(metrics)
            learner_state[0] = new_state
            store.publish(new_state.params, learner_version + 1)
            reports.put(LearnerReport(new_state, metrics, storage.behaviour_version, learner_version))

    interrupted: KeyboardInterrupt | None = None  # Ctrl-C, or launch.common.Terminated (SIGTERM)
    try:
        for i in range(config.num_actors):
            group.spawn(f"actor-{i}", actor_loop)
        group.spawn("learner", learner_loop)
        executor.start()
        for _ in range(total_rounds - start_round):
            report = _next_report(reports, group, executor, monitor)
            if monitor.on_report(report, executor.pop_episodes()):
                break
    except KeyboardInterrupt as stop:
        interrupted = stop
        monitor.outputs.print("[hts] interrupted: saving a checkpoint of the newest parameters")
    finally:
        group.stop()
        executor.close()
    if interrupted is None:
        group.check()
    summary = monitor.finish(interrupted=interrupted is not None)
    if interrupted is not None:
        raise monitor.saved(interrupted)  # the same exception: the exit status tells SIGTERM from Ctrl-C
    return summary


def _next_report(reports: queue.Queue, group: ThreadGroup, executor: Executor, monitor: Monitor) -> LearnerReport:
    while True:
        group.check()
        executor.raise_if_failed()
        try:
            return reports.get(timeout=0.1)
        except queue.Empty:
            monitor.heartbeat(executor.env_steps_received)
