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

import dataclasses
import functools
import queue
import threading
from collections.abc import Callable

import jax

from agents import TrainState
from envs.executor import Executor
from systems.common import config as config_lib
from systems.common.concurrency import ParameterStore, StopRequested, ThreadGroup
from systems.common.monitor import LearnerReport, Monitor
from systems.common.rollout import RoundCollector, RoundStorage
from systems.common.run import start_run

SYSTEM = "hts"


@dataclasses.dataclass(frozen=True)
class HTSConfig(config_lib.TrainConfig):
    """An HTS-RL run: the on-policy fields plus its actor threads and batches (section 4.1)."""

    num_actors: int = 1  # actor threads
    env_batch_size: int = 0  # EnvPool batch size in async mode (0: num_envs // 2)
    inference_batch: int = 0  # fixed actor forward-pass batch (0: num_envs // 2); keep it fixed for bit-identity


# The parameters are bit-identical whatever the actor count or EnvPool batch: a resumed run may change them.
_MAY_CHANGE_ON_RESUME = frozenset({"num_actors", "env_batch_size"})


def env_batch_size(config: HTSConfig) -> int:
    return config.env_batch_size or max(1, config.num_envs // 2)


def inference_batch(config: HTSConfig) -> int:
    return config.inference_batch or max(1, config.num_envs // 2)


def validate(config: HTSConfig) -> None:
    """The on-policy checks (`config.validate`) and HTS's own; ConfigError with one clear line for the first."""
    config_lib.validate(config)
    if config.num_actors <= 0:
        raise config_lib.ConfigError(f"--num_actors must be positive, got {config.num_actors}")
    for name in ("env_batch_size", "inference_batch"):
        if getattr(config, name) < 0:
            raise config_lib.ConfigError(f"--{name} must be non-negative, got {getattr(config, name)}")
    if env_batch_size(config) > config.num_envs:
        raise config_lib.ConfigError(f"--env_batch_size={config.env_batch_size} exceeds --num_envs={config.num_envs}")
    if config.inference_batch > config.num_envs:
        raise config_lib.ConfigError(
            f"--inference_batch={config.inference_batch} exceeds --num_envs={config.num_envs}"
        )


def run(config: HTSConfig) -> dict:
    """Trains with HTS-RL; returns the summary (also written to `<run dir>/summary.json`)."""
    validate(config)
    ctx = start_run(SYSTEM, config, may_change_on_resume=_MAY_CHANGE_ON_RESUME)
    monitor, start_round = ctx.monitor, ctx.start_round
    if start_round >= ctx.total_rounds:
        return monitor.finish()
    state = monitor.state
    group = ThreadGroup()
    handover = _Handover(state.params, start_round, group.stopping)
    reports: queue.Queue[LearnerReport] = queue.Queue()
    executor = ctx.make_executor(env_batch_size(config))
    collector = ctx.make_collector(
        executor, inference_batch=inference_batch(config), on_round_complete=handover.on_round_complete
    )
    wait_for_compile = ctx.compile_update_ahead(collector)  # overlaps the collection of the first round
    learner = functools.partial(_learner_loop, handover, ctx.setup.update, state, wait_for_compile, reports)
    actor = functools.partial(_actor_loop, executor, collector, group.stopping, config.num_envs)
    workers = [*((f"actor-{i}", actor) for i in range(config.num_actors)), ("learner", learner)]
    interrupted = _train(workers, group, executor, reports, monitor, ctx.total_rounds - start_round)
    summary = monitor.finish(interrupted=interrupted is not None)
    if interrupted is not None:
        raise monitor.saved(interrupted)  # the same exception: the exit status tells SIGTERM from Ctrl-C
    return summary


class _Handover:
    """The two storages between the actors and the learner, and the parameters they exchange.

    Batch synchronization (seed 000, section 4.1): at the end of round r the actors wait until the learner has
    finished every batch handed to it (so the storage they fill next is free and theta_r exists), hand over round
    r's storage and go on with the newest parameters: round r >= 2 is collected with theta_{r-1} (Eq. 6). The
    learner takes the storages in round order; `None` follows the last one.
    """

    def __init__(self, params, start_round: int, stopping: threading.Event):
        self.store = ParameterStore(params, version=start_round)
        self._start_round = start_round
        self._stopping = stopping
        self._jobs: queue.Queue[RoundStorage | None] = queue.Queue(maxsize=1)
        self._submitted = 0

    def on_round_complete(self, storage: RoundStorage, last: bool):
        """The collector's call at the end of a round: the behaviour parameters of the next round, or None."""
        # The learner must be done with every batch handed to it before the roles of the storages swap.
        self.store.wait_for(self._start_round + self._submitted, self._stopping)
        self._jobs.put(storage)
        self._submitted += 1
        if last:
            self._jobs.put(None)
            return None
        return self.store.latest()

    def next_batch(self) -> RoundStorage | None:
        """The learner's next storage (None after the last round); StopRequested once the run is stopping."""
        while True:
            try:
                return self._jobs.get(timeout=0.05)
            except queue.Empty:
                if self._stopping.is_set():
                    raise StopRequested from None


def _actor_loop(executor: Executor, collector: RoundCollector, stopping: threading.Event, num_envs: int) -> None:
    """One actor thread: takes whatever observations are ready and runs one batched forward pass on them."""
    while not stopping.is_set() and not collector.finished.is_set():
        results = executor.take(max_items=num_envs, timeout=0.05)
        if results is not None:
            collector.process(results)


def _learner_loop(handover: _Handover, update: Callable, state: TrainState, wait_for_compile: Callable[[], None],
                  reports: queue.Queue) -> None:
    """The learner thread: learns from each handed-over storage with that round's behaviour parameters (Eq. 6),
    publishes the new parameters as the next version and reports both versions (the policy lag)."""
    while (storage := handover.next_batch()) is not None:
        learner_version = int(state.update_step)
        behaviour_params = handover.store.get(storage.behaviour_version)
        wait_for_compile()
        state, metrics = update(state, behaviour_params, storage.to_rollout())
        metrics = jax.device_get(metrics)
        handover.store.publish(state.params, learner_version + 1)
        reports.put(LearnerReport(state, metrics, storage.behaviour_version, learner_version))


def _train(workers: list[tuple[str, Callable[[], None]]], group: ThreadGroup, executor: Executor,
           reports: queue.Queue, monitor: Monitor, num_rounds: int) -> KeyboardInterrupt | None:
    """Starts the worker threads and the executor and hands the learner's reports to the monitor until the last
    round or an early stop; returns the Ctrl-C (or launch.common.Terminated, SIGTERM) that stopped the run, if one
    did. A worker's error is re-raised here."""
    try:
        for name, target in workers:
            group.spawn(name, target)
        executor.start()
        for _ in range(num_rounds):
            report = _next_report(reports, group, executor, monitor)
            if monitor.on_report(report, executor.pop_episodes()):
                break
    except KeyboardInterrupt as stop:
        monitor.outputs.print("[hts] interrupted: saving a checkpoint of the newest parameters")
        return stop
    finally:
        group.stop()
        executor.close()
    group.check()
    return None


def _next_report(reports: queue.Queue, group: ThreadGroup, executor: Executor, monitor: Monitor) -> LearnerReport:
    while True:
        group.check()
        executor.raise_if_failed()
        try:
            return reports.get(timeout=0.1)
        except queue.Empty:
            monitor.heartbeat(executor.env_steps_received)
