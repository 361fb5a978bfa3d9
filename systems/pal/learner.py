"""PAL's learners and parameter server (seed 003, section V-B): each learner samples its share of the global batch
with PER importance weights; the server averages the learners' gradients, applies one optimizer step and hands
back the new priorities."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from systems.common.concurrency import ParameterStore, StopRequested, ThreadGroup
from systems.common.learner import compile_in_background
from systems.common.monitor import LearnerReport
from systems.common.profile import stage
from systems.offpolicy.agent import OffPolicyAgent, PALState
from systems.pal.actors import POLL_SECONDS, RatioGate
from systems.pal.config import PALConfig

_REPORT_SECONDS = 1.0  # at most one progress row per second (updates can run at thousands per second)


class ParameterServer:
    """Learner threads sample sub-batches; the server thread averages their gradients into one optimizer step
    (`OffPolicyAgent.update`), hands each learner its new priorities and publishes the parameters (section V-B)."""

    def __init__(self, config: PALConfig, num_learners: int, agent: OffPolicyAgent, state: PALState, buffer,
                 store: ParameterStore, gate: RatioGate, group: ThreadGroup, reports: queue.Queue | None,
                 actor_versions):
        self.config, self.agent, self.buffer, self.store = config, agent, buffer, store
        self.gate, self.group = gate, group
        self.state = state.agent
        self.num_learners = num_learners
        self.sub_batch = config.batch_size // num_learners
        self.reports = reports
        self.actor_versions = actor_versions
        self.inbox: queue.Queue = queue.Queue()
        self.outboxes = [queue.Queue() for _ in range(self.num_learners)]
        self.finished = threading.Event()
        self.sample_seconds = np.zeros(self.num_learners)
        self.update_seconds = 0.0
        self.priorities_updated = 0
        self._last_report = time.perf_counter()
        # Besides once a second, report when the env steps cross an evaluation or checkpoint multiple, so short
        # runs are evaluated and checkpointed on their schedule.
        self._metrics = None  # the newest update's metrics (device arrays; fetched only when reported)
        # The updates a resumed run restored count as reported: a session that updates nothing reports nothing (its
        # measured interval would be 0/0).
        self._reported_updates: int | None = gate.snapshot()[1]
        self._every = min([e for e in (config.eval_every, config.checkpoint_every) if e > 0], default=0)
        self._next_due = (gate.collected // self._every + 1) * self._every if self._every else None
        self._wait_for_compile: Callable[[], None] = lambda: None

    def compile_update_ahead(self) -> None:
        """Compiles the update in the background while the actors fill the buffer up to `learning_starts` (the
        Atari DQN update compiles for tens of seconds on a small CPU machine); the server waits for it before its
        first step.
        Batches have the layout of `agent.example` (the buffers are built from it), [N learners, b, ...]."""
        n, b = self.num_learners, self.sub_batch
        batch = {name: jax.ShapeDtypeStruct((n, b, *np.shape(value)), jax.dtypes.canonicalize_dtype(
            np.asarray(value).dtype)) for name, value in self.agent.example.items()}
        weights = jax.ShapeDtypeStruct((n, b), np.float32)
        self._wait_for_compile = compile_in_background(self.agent.update, self.state, batch, weights)

    def beta(self, collected: int) -> float:
        """PER importance exponent, linear from per_beta to 1 over the run (Schaul et al. 2016, section 3.4)."""
        fraction = min(1.0, collected / max(1, self.config.total_steps))
        return self.config.per_beta + fraction * (1.0 - self.config.per_beta)

    def learner_loop(self, learner_id: int) -> None:
        rng = np.random.default_rng([self.config.seed, 1_000 + learner_id, self.gate.updates])
        while True:
            if self.group.stopping.is_set():  # free-running learners (update_interval 0) never wait in the gate
                raise StopRequested
            with stage("wait_for_gate"):
                go = not self.finished.is_set() and self.gate.learner_wait(self.group.stopping)
            if not go:
                self.inbox.put((learner_id, None))
                return
            start = time.perf_counter()
            with stage("sample"):
                sample = self.buffer.sample(self.sub_batch, rng, self.beta(self.gate.collected))
            self.sample_seconds[learner_id] += time.perf_counter() - start
            self.inbox.put((learner_id, sample))
            with stage("wait_for_server"):
                priorities = self._priorities(learner_id)
            if priorities is None:
                return
            with stage("priorities"):
                self.priorities_updated += self.buffer.update_priorities(sample.indices, priorities)

    def _priorities(self, learner_id: int):
        """The new priorities of learner `learner_id`'s sample, once the server's update has run (None: the run
        finished first)."""
        while True:
            try:
                return self.outboxes[learner_id].get(timeout=POLL_SECONDS)
            except queue.Empty:
                if self.finished.is_set():
                    return None
                if self.group.stopping.is_set():
                    raise StopRequested from None

    def server_loop(self) -> None:
        try:
            while True:
                if self.group.stopping.is_set():
                    raise StopRequested
                samples = self._samples()
                if samples is None:
                    return
                batch = {name: np.stack([s.batch[name] for s in samples]) for name in samples[0].batch}
                weights = np.stack([s.weights for s in samples])
                with stage("compile"):
                    self._wait_for_compile()
                start = time.perf_counter()
                with stage("update"):
                    self.state, metrics, priorities = self.agent.update(self.state, batch, weights)
                    priorities = np.asarray(priorities)  # [N, b]; waits for the step
                self.update_seconds += time.perf_counter() - start
                if not np.isfinite(priorities).all():  # diverged: no replay can take these priorities
                    self._report_divergence(metrics)
                    return
                for learner_id in range(self.num_learners):
                    self.outboxes[learner_id].put(priorities[learner_id])
                self.gate.add_update()
                collected, updates = self.gate.snapshot()
                with stage("publish"):
                    self.store.publish(self.agent.policy_params(self.state), updates)
                self._maybe_report(metrics, collected, updates)
        finally:
            self.finished.set()
            if self.reports is not None:
                self._maybe_report(None, *self.gate.snapshot(), force=True)
                self.reports.put(None)

    def _report_divergence(self, metrics) -> None:
        """Hands the update whose TD errors are not finite to the monitor, whose non-finite guard stops the run with
        one line and exit 3 as for any other system, instead of the buffer's ValueError from a learner thread (a
        traceback). Its parameters are not kept: the newest checkpoint stays the last finite one."""
        collected, updates = self.gate.snapshot()
        self._reported_updates = None
        self._maybe_report(metrics, collected, updates + 1, force=True)

    def _samples(self) -> list | None:
        """One sample of every learner, in learner order (None: a learner stopped)."""
        samples: list[Any] = [None] * self.num_learners
        with stage("wait_for_samples"):
            for _ in range(self.num_learners):
                learner_id, sample = self._next_sample()
                if sample is None:
                    return None
                samples[learner_id] = sample
        return samples

    def _next_sample(self):
        while True:
            try:
                return self.inbox.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if self.group.stopping.is_set():
                    raise StopRequested from None

    def _maybe_report(self, metrics, collected: int, updates: int, force: bool = False) -> None:
        if self.reports is None:
            return
        now = time.perf_counter()
        if metrics is not None:
            self._metrics = metrics
        scheduled = self._next_due is not None and collected >= self._next_due
        if not force and not scheduled and now - self._last_report < _REPORT_SECONDS:
            return
        if scheduled:
            self._next_due = (collected // self._every + 1) * self._every
        if force and updates == self._reported_updates:
            return
        self._last_report = now
        self._reported_updates = updates
        metrics = self._metrics
        host_metrics = {k: float(v) for k, v in jax.device_get(metrics).items()} if metrics is not None else {}
        host_metrics["replay_size"] = float(len(self.buffer))
        host_metrics["collected_per_update"] = self.gate.measured_interval()
        state = PALState(self.state, np.asarray(updates, np.int64), np.asarray(collected, np.int64))
        oldest_actor = min(self.actor_versions) if self.actor_versions else updates
        self.reports.put(LearnerReport(state, host_metrics, behaviour_version=int(oldest_actor),
                                       learner_version=updates))
