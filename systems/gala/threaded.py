"""GALA's async mode (seed 004, Algorithm 1 as written): one thread per learner, non-blocking gossip through
`systems.gala.buffers.GossipNetwork`, optional staleness bound tau."""

from __future__ import annotations

import dataclasses
import functools
import queue
import threading
import time
from typing import Any, NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np

from agents import TrainState
from agents.gossip import ConsensusBound, consensus_distance, make_topology, mix, pairwise_cosine
from envs.executor import Executor
from envs.step_time import parse_step_time
from systems.common import run as skeleton
from systems.common.concurrency import StopRequested, ThreadGroup
from systems.common.learner import compile_in_background
from systems.common.monitor import LearnerReport, Monitor, on_policy_evaluator
from systems.common.profile import Bound, Profile, stage
from systems.common.rollout import (
    RoundCollector,
    RoundStorage,
    rollout_shapes,
)
from systems.gala.buffers import GossipNetwork
from systems.gala.config import SYSTEM, GALAConfig, Plan
from systems.gala.learners import CosineLog, GossipState, make_agent, plan_record, progress


class _LearnersSnapshot(NamedTuple):
    """Every async learner's state and local iteration count at the moment one of them reported."""

    states: tuple
    iterations: tuple
    created: float | None = None  # time.perf_counter() of the report


@dataclasses.dataclass
class _LearnerSlot:
    """What the main thread may read of one learner: its newest state and per-iteration update norms."""

    state: TrainState
    iterations: int = 0
    first_iteration: int = 0  # local iteration of update_norms[0]: the restored iterations after --resume
    update_norms: list = dataclasses.field(default_factory=list)
    grads: Any = None


def open_async(config: GALAConfig, run_plan: Plan) -> skeleton.Opening:
    """GALA as Algorithm 1 is written: `num_learners` learners that start equal (evaluation plays learner 0's
    policy), each run by its own thread."""
    spec, setup, state = make_agent(config, run_plan)
    return skeleton.Opening(
        agents=[skeleton.Agent(config, _async_initial_state(state, config.num_learners),
                               on_policy_evaluator(config, spec, setup))],
        start=functools.partial(_start, config, spec, setup),
        progress=progress(config, run_plan, steps_per_update=config.envs_per_learner * config.sync_interval),
        policy_params=lambda s: s.params[0], plan=plan_record(config, run_plan), profile=async_profile(),
    )


def _start(config: GALAConfig, spec, setup, monitor: Monitor) -> skeleton.Loop | None:
    """One thread per learner runs its own local iterations (`_AsyncLearners.on_round_complete`), and the main
    thread logs their reports with the gossip metrics."""
    topology = make_topology(config.topology, config.num_learners, config.num_peers)
    total_iterations = monitor.total_updates
    start = int(monitor.state.update_step)
    if start >= total_iterations:
        return None
    learners = _AsyncLearners(config, spec, setup, topology, monitor.state, start, total_iterations, monitor.profile)
    gossip_log = _AsyncGossipLog(config, topology, learners.slots, monitor)
    return _AsyncTraining(learners, gossip_log, monitor, start, total_iterations)


def async_profile() -> Profile:
    """The async mode's threads: each learner steps its envs, acts, and runs its iteration (the A2C update, the
    gossip mix with any wait that tau imposes, and the host copy of its metrics, which waits for the update); the
    main thread logs, evaluates and checkpoints."""
    bounds = {
        "env": Bound("simulator-bound", "the learners wait for EnvPool: more CPU cores for the simulators would "
                                        "move it"),
        "inference": Bound("actor-bound", "the learners' forward passes: more --envs_per_learner per pass would "
                                          "move it"),
        "update": Bound("learner-bound", "the learners' iterations: more envs will not help; a larger "
                                         "--sync_interval (fewer iterations per env step) will"),
    }
    return Profile({"learners": ("env", "inference", "compile", "update"),
                    "main": ("wait_for_learner", "evaluation", "checkpoint")}, "learners", bounds)


def _async_initial_state(state: TrainState, n: int) -> GossipState:
    """`n` learners that start equal (as Proposition 1 assumes); no messages in flight."""
    return GossipState(
        params=tuple(state.params for _ in range(n)), opt_state=tuple(state.opt_state for _ in range(n)),
        key=tuple(state.key for _ in range(n)), update_step=np.zeros((), np.int32),
        learner_steps=np.zeros((n,), np.int32), inbox=(),
    )


def _restored_slot(restored: GossipState, i: int, device) -> _LearnerSlot:
    """Learner i's slot from the (restored) run state, its state on `device`."""
    learner = TrainState(
        params=restored.params[i], opt_state=restored.opt_state[i], key=restored.key[i],
        update_step=np.asarray(restored.learner_steps[i], np.int32),
    )
    return _LearnerSlot(state=jax.device_put(learner, device), iterations=int(restored.learner_steps[i]),
                        first_iteration=int(restored.learner_steps[i]))


def _offset_policy(policy, env_id_offset: int, params, inputs, env_ids, env_steps, run_key):
    """`policy` for one learner's envs, numbered after the envs of the learners before it."""
    return policy(params, inputs, env_ids + env_id_offset, env_steps, run_key)


class _AsyncLearners:
    """The async mode's learner threads and what they share: each learner's slot, device and executor, the gossip
    network, the compiled update and mix, the reports to the main thread, and the run's iteration budget."""

    def __init__(self, config: GALAConfig, spec, setup, topology, restored: GossipState, start: int,
                 total_iterations: int, profile: Profile):
        n, e = config.num_learners, config.envs_per_learner
        self._config, self._setup, self._profile = config, setup, profile
        self._devices = jax.local_devices()
        self.slots = [_restored_slot(restored, i, self._device(i)) for i in range(n)]
        self.group = ThreadGroup()
        tau = None if config.max_staleness < 0 else config.max_staleness
        self.network = GossipNetwork(n, [topology.in_peers(i, 0) for i in range(n)], tau, self.group.stopping)
        self._update = jax.jit(functools.partial(setup.update_fn, return_grads=True) if config.log_grad_cosine
                               else setup.update_fn)
        self._mix = jax.jit(mix)
        example_rollout = rollout_shapes(config.sync_interval, e, spec.obs_shape, spec.obs_dtype, setup.action_shape,
                                         setup.action_dtype, setup.carry_size)
        first_state = self.slots[0].state
        self._wait_for_compile = compile_in_background(self._update, first_state, first_state.params, example_rollout)
        self._policy = setup.policy  # `make_policy_fn`'s, recurrent or not
        self.reports: queue.Queue = queue.Queue()
        self._publish_lock = threading.Lock()
        self._taken, self._total_iterations = start, total_iterations
        self._budget_lock = threading.Lock()
        self.executors = [
            Executor(spec, num_envs=e, batch_size=e, seed=config.seed + i * e,
                     step_time=parse_step_time(config.step_time))
            for i in range(n)
        ]

    def _device(self, i: int):
        return self._devices[i % len(self._devices)]

    def start(self) -> None:
        for i in range(self._config.num_learners):
            self.group.spawn(f"learner-{i}", self._profile.timed("learners", functools.partial(self._learner_loop, i)))

    def close(self) -> None:
        self.group.stop()
        self.network.close()
        for executor in self.executors:
            executor.close()

    def claim_iteration(self) -> bool:
        """One more local iteration for some learner while the run's budget lasts (shared by all learners)."""
        with self._budget_lock:
            if self._taken >= self._total_iterations:
                return False
            self._taken += 1
            return True

    def _learner_loop(self, i: int) -> None:
        """Learner i's thread: steps its own envs; every round they complete is one local iteration."""
        slot, executor, e, setup = self.slots[i], self.executors[i], self._config.envs_per_learner, self._setup
        collector = RoundCollector(
            executor, policy_fn=functools.partial(_offset_policy, self._policy, i * e), run_key=setup.action_key,
            sync_interval=self._config.sync_interval, inference_batch=e, first_round=slot.iterations,
            total_rounds=2**62, params=slot.state.params, version=slot.iterations,
            on_round_complete=functools.partial(self.on_round_complete, i), action_shape=setup.action_shape,
            action_dtype=setup.action_dtype, carry_size=setup.carry_size,
        )
        try:
            if not self.claim_iteration():
                return
            executor.start()
            while not collector.finished.is_set():
                if self.group.stopping.is_set():
                    raise StopRequested
                with stage("env"):
                    results = executor.take(max_items=e, min_items=e, timeout=0.2)
                if results is not None:
                    collector.process(results)
        finally:
            self.network.retire(i)  # learners waiting on this one's messages (tau) must not wait for ever

    def on_round_complete(self, i: int, storage: RoundStorage, last: bool):
        """One local iteration of learner i (Algorithm 1): local A2C step on the round just collected (lines 2-4),
        non-blocking broadcast (line 5) and mixing with the in-peers' messages it holds (lines 6-7); then its report.
        Returns the next round's version and policy parameters, or None when the run's budget is spent."""
        slot = self.slots[i]
        current = slot.state
        with stage("compile"):
            self._wait_for_compile()
        with stage("update"):  # with the gossip and the host copy of the metrics, which waits for the update
            new_state, metrics = self._update(current, current.params, storage.to_rollout())
            iteration = slot.iterations + 1
            params = self._gossip(i, iteration, new_state.params)
            self._publish(i, iteration, new_state._replace(params=params), metrics)
        if self.group.stopping.is_set() or not self.claim_iteration():
            return None
        return iteration, params

    def _gossip(self, i: int, iteration: int, params):
        """Sends learner i's new parameters to its out-peers and mixes them with its in-peers' messages, if it
        holds one from every in-peer (`GossipNetwork.receive`, which waits only when tau requires it)."""
        self.network.send(i, iteration, params)
        messages = self.network.receive(i, iteration)
        if messages:
            params = self._mix(params, [jax.device_put(m.params, self._device(i)) for m in messages])
        return params

    def _publish(self, i: int, iteration: int, state: TrainState, metrics: dict) -> None:
        """Stores learner i's new state in its slot and queues its report for the main thread, with every learner's
        state at this moment (references to immutable arrays). The main thread falls behind the learners while it
        evaluates; the snapshot keeps each evaluation, checkpoint and consensus distance at the env step its row
        names, not at wherever the learners are when the main thread gets to the report."""
        slot = self.slots[i]
        grads = metrics.pop("grads", None)
        host_metrics = jax.device_get(metrics)
        episodes = self.executors[i].pop_episodes()
        with self._publish_lock:  # snapshots and queue order agree: the k-th report has k iterations in all
            slot.state = state
            slot.update_norms.append(float(host_metrics["update_norm"]))
            slot.grads = grads
            slot.iterations = iteration
            snapshot = _LearnersSnapshot(states=tuple(s.state for s in self.slots),
                                         iterations=tuple(s.iterations for s in self.slots),
                                         created=time.perf_counter())
            self.reports.put((i, host_metrics, episodes, snapshot))


class _AsyncGossipLog:
    """The async mode's gossip metrics, logged by the main thread and repeated on every row until renewed: the
    Proposition 1 bound, the consensus distance and the learners' gradient similarity (`--log_grad_cosine`)."""

    def __init__(self, config: GALAConfig, topology, slots: list[_LearnerSlot], monitor: Monitor):
        self._slots, self._monitor = slots, monitor
        self._consensus_distance = jax.jit(consensus_distance)  # one compile, not seconds of op-by-op dispatch
        self._bound = ConsensusBound(topology, delay=1)
        # The bound's model starts at the first round every learner has an update norm for: round 0, or after
        # --resume the furthest learner's restored iteration (the model restarts there; its state is not checkpointed).
        self._bound_round = max(s.iterations for s in slots)
        self._metrics: dict = {}  # newest consensus distance, bound and gradient similarity
        self._cosine_log = (CosineLog(monitor.run_dir, config.num_learners, config.resume)
                            if config.log_grad_cosine else None)

    def update(self, learner_params) -> dict:
        """The metrics after one more report; `learner_params` is every learner's parameters when learner 0
        finished an iteration (its reports), None otherwise."""
        # Proposition 1 model, fed once per round completed by every learner.
        while min(s.iterations for s in self._slots) > self._bound_round:
            norms = [s.update_norms[self._bound_round - s.first_iteration] for s in self._slots]
            self._metrics["consensus_bound"] = self._bound.add(float(np.sqrt(np.sum(np.square(norms)))))
            self._bound_round += 1
        if learner_params is not None:
            self._metrics["consensus_distance"] = float(self._consensus_distance(_stack(learner_params)))
            if self._cosine_log is not None and all(s.grads is not None for s in self._slots):
                flat = np.stack([np.asarray(jax.flatten_util.ravel_pytree(s.grads)[0]) for s in self._slots])
                self._metrics["grad_cosine_mean"] = self._cosine_log.add(
                    self._monitor.env_steps, np.asarray(pairwise_cosine(jnp.asarray(flat)))
                )
        return self._metrics

    def close(self) -> None:
        if self._cosine_log is not None:
            self._cosine_log.close()


class _AsyncTraining(skeleton.Loop):
    """Runs the learner threads and logs their reports until the budget is reported, the monitor stops the run or
    the threads end; then stops the threads, closes what they used and prints the gossip statistics."""

    def __init__(self, learners: _AsyncLearners, gossip_log: _AsyncGossipLog, monitor: Monitor, start: int,
                 total_iterations: int):
        self.learners, self.gossip_log, self.monitor = learners, gossip_log, monitor
        self.start, self.total_iterations = start, total_iterations

    def train(self) -> None:
        self.learners.start()
        _log_reports(self.learners, self.gossip_log, self.monitor, self.start, self.total_iterations)

    def close(self) -> None:
        self.learners.close()
        self.gossip_log.close()

    def wind_up(self, stopped: skeleton.StopCause | None) -> dict:
        """The gossip statistics (printed and in the summary) and every learner's newest state as the run's."""
        learners, monitor = self.learners, self.monitor
        if stopped is None:
            learners.group.check()
        slots = learners.slots
        gossip_stats = [learners.network.stats(i) for i in range(len(slots))]
        monitor.outputs.print(
            f"[{SYSTEM}] gossip: local iterations {[s.iterations for s in slots]}, mixes "
            f"{[g['mixes'] for g in gossip_stats]}, skipped {[g['skips'] for g in gossip_stats]}, waited "
            f"{[round(g['wait_seconds'], 2) for g in gossip_stats]} s, max staleness mixed "
            f"{[g['max_staleness_mixed'] for g in gossip_stats]}"
        )
        monitor.state = _async_snapshot(slots, int(monitor.state.update_step))
        return {"gossip": gossip_stats, "learner_iterations": [s.iterations for s in slots]}


def _log_reports(learners: _AsyncLearners, gossip_log: _AsyncGossipLog, monitor: Monitor, start: int,
                 total_iterations: int) -> None:
    """The main thread: one progress row per local iteration of any learner, with the run state at that moment."""
    done = 0
    while done < total_iterations - start:
        learners.group.check()
        try:
            with stage("wait_for_learner"):
                learner, metrics, episodes, learners_then = learners.reports.get(timeout=0.1)
        except queue.Empty:
            if not learners.group.running():
                break
            monitor.heartbeat(sum(x.env_steps_received for x in learners.executors))
            continue
        done += 1
        snapshot = _snapshot_state(learners_then, start + done)
        metrics = {k: float(v) for k, v in metrics.items()}
        metrics.update(gossip_log.update(tuple(s.params for s in learners_then.states) if learner == 0 else None))
        report = LearnerReport(snapshot, metrics, int(snapshot.update_step), int(snapshot.update_step),
                               created=learners_then.created)
        if monitor.on_report(report, episodes):
            break


def _snapshot_state(snapshot: _LearnersSnapshot, update_step: int) -> GossipState:
    states = snapshot.states
    return GossipState(
        params=tuple(s.params for s in states), opt_state=tuple(s.opt_state for s in states),
        key=tuple(s.key for s in states), update_step=np.asarray(update_step, np.int32),
        learner_steps=np.asarray(snapshot.iterations, np.int32), inbox=(),
    )


def _stack(trees: list):
    """The learners' trees stacked leafwise on the host ([n, ...] numpy leaves): one device-to-host copy of them all,
    no op-by-op dispatch per leaf and learner (the main thread holds the GIL the learners need meanwhile)."""
    return jax.tree.map(lambda *xs: np.stack(xs), *jax.device_get(list(trees)))


def _async_snapshot(slots: list[_LearnerSlot], update_step: int) -> GossipState:
    return _snapshot_state(_LearnersSnapshot(tuple(s.state for s in slots), tuple(s.iterations for s in slots)),
                           update_step)
