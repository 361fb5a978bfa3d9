"""Gossip-based Actor-Learner Architectures (GALA, seed 004, Algorithm 1): `num_learners` A2C learners, each with
its own envs and parameters, that mix their parameters with their in-peers' after every local step,
x_i <- (x_i + sum_j m_j) / (1 + |in-peers|), on a directed ring (`--num_peers`) or a time-varying exponential graph.

Two execution modes, same learner update (`agents.a2c_update` and `agents.gossip.mix`):

* `--gossip=async` (Algorithm 1 as written): one thread per learner, each on its own device when there are enough.
  After its local A2C step a learner broadcasts its parameters without blocking (a newer message overwrites an
  unread one), mixes when it holds a message from every in-peer, and otherwise carries on
  (`systems.gala.buffers.GossipNetwork`). `--max_staleness` (tau) makes a learner wait when its newest message
  from an in-peer is more than tau local iterations old. A slow learner never holds the others back (without tau).
  Results depend on thread timing by design: a seed does not fix them. Static ring topology only.
* `--gossip=pmap`: learners on the named pmap axis `LEARNER_AXIS`, in lock-step. Each iteration a learner takes its
  local step, mixes the result with the messages its in-peers sent one iteration earlier, and sends its new
  parameters with `ppermute`; the messages are consumed the next iteration, so communication overlaps the next
  step. The messages in transit start as the (common) initial parameters. A seed and a device count fix the run
  bit for bit. Runs across hosts with `jax.distributed` (`--num_processes`).

Logged every update: the consensus distance ||X - mean(X)|| over the learners, and the Proposition 1 bound
computed from the learners' update norms (`agents.gossip.ConsensusBound`, the exact lock-step model with
one-iteration-old messages; in async mode the same model is fed per round of all learners, which makes it an
estimate there, not a guarantee; after `--resume` the learners no longer start equal, the proof's initial-spread term
is not zero and the logged bound, which restarts from the resumed iteration, may be exceeded). `--log_grad_cosine`
adds the learners' pairwise gradient cosine similarity (Fig. 2b) to `grad_cosine.csv`.

Departures from seed 004: RMSProp epsilon is 1e-5 (the paper's code; its Table 2 says 0.01); the exponential graph
needs lock-step iterations, so it runs in the pmap mode only.

The learning rate is the base rate times sqrt(number of learners) by default (seed 004, Table 2). Evaluation plays
learner 0's policy; the fingerprint in summary.json covers every learner's parameters.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import os
import queue
import threading
import time
from typing import Any, NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np

from agents import LEARNER_AXIS, TrainState, make_optimizer, scale_learning_rate
from agents.gossip import ConsensusBound, consensus_distance, make_topology, mix, pairwise_cosine
from agents.optim import LR_SCALING_RULES
from envs.executor import Executor
from envs.factory import make_spec
from envs.step_time import parse_step_time
from systems.common import config as config_lib
from systems.common import distributed
from systems.common.concurrency import StopRequested, ThreadGroup
from systems.common.learner import build, compile_in_background
from systems.common.monitor import LearnerReport, Monitor, Progress, on_policy_evaluator
from systems.common.outputs import on_policy_columns
from systems.common.rollout import (
    RoundCollector,
    RoundStorage,
    make_policy_fn,
    make_sharded_policy_fn,
    place_on_axis,
    replica,
    rollout_shapes,
    shard_rollout,
    stack_host,
)
from systems.common.run import run_lockstep
from systems.gala.buffers import GossipNetwork

SYSTEM = "gala"
MODES = ("async", "pmap")
TOPOLOGIES = ("ring", "exponential")


@dataclasses.dataclass(frozen=True)
class GALAConfig(config_lib.TrainConfig):
    """A GALA run. `num_envs` is derived (learners x envs per learner); `learning_rate` is the base rate."""

    algo: str = "a2c"
    num_learners: int = 4
    envs_per_learner: int = 16
    topology: str = "ring"  # ring | exponential (time-varying, pmap mode only)
    num_peers: int = 1  # out-peers per learner (paper: a 1-peer ring)
    gossip: str = "async"  # async | pmap
    max_staleness: int = -1  # tau in local iterations (async); -1: no bound, never wait
    lr_scaling: str = "sqrt"  # none | linear | sqrt, by the number of learners (paper: sqrt)
    log_grad_cosine: bool = False
    coordinator_address: str = ""
    num_processes: int = 1
    process_id: int = 0
    startup_timeout: int = 120  # seconds a multi-host process waits for the whole job to join


class GossipState(NamedTuple):
    """Every learner's state, checkpointed together.

    pmap mode: leaves have a leading learner axis [n, ...] and `inbox` holds the messages in transit (one pytree of
    [n, ...] per peer shift). Async mode: `params`, `opt_state` and `key` are tuples with one entry per learner and
    `inbox` is empty (messages in flight are not saved). `update_step` counts gossip iterations (pmap: lock-step
    iterations; async: local iterations summed over learners), `learner_steps` each learner's own count."""

    params: Any
    opt_state: Any
    key: Any
    update_step: Any
    learner_steps: Any
    inbox: Any


def validate(config: GALAConfig) -> None:
    config_lib.require_finite_numbers(config)
    if config.normalize_obs or config.normalize_reward:
        raise config_lib.ConfigError(config_lib.NORMALIZATION_SINGLE_LEARNER)
    bad = config_lib.ConfigError
    if config.num_learners < 1:
        raise bad(f"--num_learners must be positive, got {config.num_learners}")
    if config.envs_per_learner < 1:
        raise bad(f"--envs_per_learner must be positive, got {config.envs_per_learner}")
    if config.gossip not in MODES:
        raise bad(f"--gossip must be async or pmap, got '{config.gossip}'")
    if config.topology not in TOPOLOGIES:
        raise bad(f"--topology must be ring or exponential, got '{config.topology}'")
    if config.topology == "exponential" and config.gossip == "async":
        raise bad("--topology=exponential is time-varying and needs lock-step iterations: use --gossip=pmap")
    if config.max_staleness < -1:
        raise bad(f"--max_staleness must be -1 (no bound) or >= 0, got {config.max_staleness}")
    if config.lr_scaling not in LR_SCALING_RULES:
        raise bad(f"--lr_scaling must be none, linear or sqrt, got '{config.lr_scaling}'")
    if config.algo != "a2c":
        raise bad("launch.gala trains A2C learners; --algo must be a2c")
    if config.gossip == "async" and config.num_processes > 1:
        raise bad("--gossip=async runs on one host; use --gossip=pmap with --num_processes > 1")
    try:
        make_topology(config.topology, config.num_learners, config.num_peers)
    except ValueError as error:
        raise bad(str(error)) from None


def resolve(config: GALAConfig) -> GALAConfig:
    resolved = dataclasses.replace(
        config,
        num_envs=config.num_learners * config.envs_per_learner,
        learning_rate=scale_learning_rate(config.learning_rate, config.num_learners, config.lr_scaling),
    )
    config_lib.validate(resolved)
    return resolved


class CosineLog:
    """grad_cosine.csv: the learners' pairwise gradient cosine similarity (seed 004, Fig. 2b), and its running mean."""

    def __init__(self, run_dir: str, num_learners: int, append: bool):
        path = os.path.join(run_dir, "grad_cosine.csv")
        exists = append and os.path.exists(path)
        self._handle = open(path, "a" if exists else "w", newline="")
        self._writer = csv.writer(self._handle)
        if not exists:
            self._writer.writerow(["env_steps", "learner_i", "learner_j", "cosine"])
        self.total = np.zeros((num_learners, num_learners))
        self.count = 0

    def add(self, env_steps: int, matrix: np.ndarray) -> float:
        """Logs one matrix; returns the mean off-diagonal similarity."""
        n = matrix.shape[0]
        for i in range(n):
            for j in range(n):
                self._writer.writerow([env_steps, i, j, f"{float(matrix[i, j]):.6g}"])
        self._handle.flush()
        self.total += matrix
        self.count += 1
        return float((matrix.sum() - np.trace(matrix)) / max(n * (n - 1), 1))

    def close(self) -> None:
        self._handle.close()


def run(config: GALAConfig) -> dict:
    """Trains GALA-A2C; returns the summary (also written to `<run dir>/summary.json`)."""
    validate(config)
    distributed.initialize(config.coordinator_address, config.num_processes, config.process_id,
                           config.startup_timeout)
    config = resolve(config)
    if config.gossip == "pmap":
        return _run_pmap(config)
    return _run_async(config)


def make_agent(config: GALAConfig):
    spec = make_spec(config.env_id)
    optimizer = make_optimizer(
        name=config.optimizer, learning_rate=config.learning_rate, total_updates=_iterations(config),
        anneal_lr=config.anneal_lr, max_grad_norm=config.max_grad_norm, eps=config.opt_eps,
    )
    setup, state = build(config, spec, optimizer=optimizer)
    return spec, setup, state


def _iterations(config: GALAConfig) -> int:
    """Local iterations per learner over the run (the learning-rate decay horizon)."""
    per_iteration = config.envs_per_learner * config.sync_interval
    return max(1, -(-config.total_steps // (per_iteration * config.num_learners)))


def _metric_columns(config: GALAConfig) -> tuple[str, ...]:
    """progress.csv: the A2C learners' metrics, the consensus distance ||X - mean(X)|| and its Proposition 1 bound
    (seed 004, Fig. 2a), and with --log_grad_cosine the mean pairwise gradient cosine (Fig. 2b)."""
    columns = on_policy_columns(config) + ("consensus_distance", "consensus_bound")
    return columns + (("grad_cosine_mean",) if config.log_grad_cosine else ())


def _header(config: GALAConfig) -> str:
    tau = "none" if config.max_staleness < 0 else str(config.max_staleness)
    return (f"  learners {config.num_learners} x {config.envs_per_learner} envs  {config.topology} "
            f"{config.num_peers} peer(s)  gossip {config.gossip}  tau {tau}  lr {config.learning_rate:g}")


# --------------------------------------------------------------------------------------------------------------
# pmap mode: lock-step learners on a named axis, one-iteration-old messages through ppermute.


def _gossip_step(state: TrainState, rollout, inbox, *, update_fn, shifts, num_learners, with_cosine):
    """One lock-step GALA iteration of one learner (under pmap over LEARNER_AXIS).

    Local A2C step (Algorithm 1, lines 2-4), mixing with the messages sent one iteration earlier (lines 6-7), and
    the non-blocking broadcast of the freshly updated parameters (line 5) as `ppermute`s consumed next iteration.
    """
    new_state, metrics = update_fn(state, state.params, rollout)
    updated = new_state.params
    mixed = mix(updated, list(inbox))
    outbox = tuple(
        jax.lax.ppermute(updated, LEARNER_AXIS, perm=[(i, (i + s) % num_learners) for i in range(num_learners)])
        for s in shifts
    )
    stats = {
        "consensus_distance": _axis_consensus_distance(mixed),
        "update_norm_total": jnp.sqrt(jax.lax.psum(jnp.square(metrics["update_norm"]), LEARNER_AXIS)),
    }
    if with_cosine:
        grads = metrics.pop("grads")
        flat = jax.flatten_util.ravel_pytree(grads)[0]
        stats["grad_cosine"] = pairwise_cosine(jax.lax.all_gather(flat, LEARNER_AXIS))
    metrics = jax.lax.pmean(metrics, LEARNER_AXIS)  # logged: the learners' mean losses
    return new_state._replace(params=mixed), outbox, metrics, stats


def _axis_consensus_distance(params) -> jax.Array:
    """||X - mean(X)|| over the learner axis, inside pmap."""
    mean = jax.lax.pmean(params, LEARNER_AXIS)
    sq = sum(jnp.sum(jnp.square(x - m)) for x, m in zip(jax.tree.leaves(params), jax.tree.leaves(mean), strict=True))
    return jnp.sqrt(jax.lax.psum(sq, LEARNER_AXIS))


def _run_pmap(config: GALAConfig) -> dict:
    """GALA in lock-step (Algorithm 1 on the learner axis): one collector steps every local learner's envs, and
    every completed round is one iteration of all learners (`_LockstepGossip.on_round_complete`)."""
    devices = _pmap_local_devices(config.num_learners)
    first = jax.process_index() * len(devices)  # this process's first learner
    config = distributed.per_process_config(config)
    spec, setup, state = make_agent(config)
    topology = make_topology(config.topology, config.num_learners, config.num_peers)
    monitor = Monitor(
        SYSTEM, config, _pmap_initial_state(state, len(devices), config.num_peers),
        progress=Progress(metric_columns=_metric_columns(config), header=_header(config)),
        evaluator=on_policy_evaluator(config, spec, setup), policy_params=lambda s: replica(s.params),
    )
    start = int(monitor.state.update_step)
    total = config_lib.total_rounds(config)
    if start >= total:
        return monitor.finish()
    gossip = _LockstepGossip(config, spec, setup, topology, monitor, devices, first)
    e = config.envs_per_learner
    collector = RoundCollector(
        gossip.executor, policy_fn=make_sharded_policy_fn(setup.network.apply, distributed.pmap_devices(devices), e,
                                                          env_id_offset=first * e, num_shards=len(devices)),
        run_key=setup.action_key, sync_interval=config.sync_interval, inference_batch=len(devices) * e,
        first_round=start, total_rounds=total, params=gossip.states.params, version=start,
        on_round_complete=gossip.on_round_complete, action_shape=setup.action_shape, action_dtype=setup.action_dtype,
    )
    cosine_log = gossip.cosine_log
    return run_lockstep(SYSTEM, gossip.executor, collector, monitor,
                        on_exit=cosine_log.close if cosine_log is not None else None)


def _pmap_local_devices(n: int) -> list:
    """This process's devices, one per learner of this process (the learners are split evenly over processes)."""
    local = jax.local_devices()
    num_local = n // jax.process_count()
    if num_local * jax.process_count() != n or num_local > len(local):
        raise config_lib.ConfigError(
            f"--gossip=pmap puts one learner per device: --num_learners={n} needs {n} devices, this job has "
            f"{len(local)} per process x {jax.process_count()} process(es) (on CPU, XLA_FLAGS="
            "--xla_force_host_platform_device_count=N; on one GPU use --gossip=async)"
        )
    if jax.process_count() > 1 and num_local != len(local):
        raise config_lib.ConfigError("with several processes every local device hosts one learner")
    return local[:num_local]


def _pmap_initial_state(state: TrainState, num_local: int, num_peers: int) -> GossipState:
    """This process's learners with a leading learner axis, all starting equal (as Proposition 1 assumes), and the
    messages in transit starting as the same initial parameters."""

    def stacked(tree):
        return stack_host(tree, num_local)

    return GossipState(
        params=stacked(state.params), opt_state=stacked(state.opt_state), key=stacked(state.key),
        update_step=np.zeros((), np.int32), learner_steps=np.zeros((num_local,), np.int32),
        inbox=tuple(stacked(state.params) for _ in range(num_peers)),
    )


def _pmap_iterations(config: GALAConfig, update_fn, topology, devices: list) -> dict:
    """The pmapped `_gossip_step` for each phase of the (possibly time-varying) topology."""
    if config.log_grad_cosine:
        update_fn = functools.partial(update_fn, return_grads=True)
    return {
        phase: jax.pmap(
            functools.partial(_gossip_step, update_fn=update_fn, shifts=topology.shifts(phase),
                              num_learners=config.num_learners, with_cosine=config.log_grad_cosine),
            axis_name=LEARNER_AXIS, devices=distributed.pmap_devices(devices),
        )
        for phase in range(topology.period)
    }


class _LockstepGossip:
    """The pmap mode between rounds: this process's learners and the messages in transit (on the learner axis),
    the compiled iteration of each topology phase, the executor of every local learner's envs, and the logs."""

    def __init__(self, config: GALAConfig, spec, setup, topology, monitor: Monitor, devices: list, first: int):
        restored = monitor.state
        # Host arrays with a leading learner axis: pmap puts learner i's row on device i at the first step.
        states = TrainState(params=restored.params, opt_state=restored.opt_state, key=restored.key,
                            update_step=np.asarray(restored.learner_steps))
        inbox = tuple(restored.inbox)
        self._config, self._monitor, self._period, self._num_local = config, monitor, topology.period, len(devices)
        self._steps = _pmap_iterations(config, setup.update_fn, topology, devices)
        self._bound = ConsensusBound(topology, delay=1)
        self.cosine_log = (CosineLog(monitor.run_dir, config.num_learners, config.resume)
                           if config.log_grad_cosine else None)
        e = config.envs_per_learner
        self.executor = Executor(
            spec, num_envs=len(devices) * e, batch_size=len(devices) * e, seed=config.seed + first * e,
            step_time=parse_step_time(config.step_time),
        )
        self.states, self.inbox = place_on_axis((states, inbox), distributed.pmap_devices(devices), LEARNER_AXIS)

    def on_round_complete(self, storage: RoundStorage, last: bool):
        """One GALA iteration of every learner on the round just collected (local A2C step, mixing with the
        in-peers' messages of the previous iteration, broadcast), then its report to the monitor."""
        iteration = int(self._monitor.state.update_step)
        step = self._steps[iteration % self._period]
        self.states, self.inbox, metrics, stats = step(self.states, shard_rollout(storage, self._num_local),
                                                       self.inbox)
        metrics = self._metrics(iteration, metrics, stats)
        report = LearnerReport(self._snapshot(iteration + 1), metrics, iteration, iteration)
        if self._monitor.on_report(report, self.executor.pop_episodes()):
            return None
        return iteration + 1, self.states.params

    def _metrics(self, iteration: int, metrics: dict, stats: dict) -> dict:
        """The learners' mean losses with the consensus distance, the Proposition 1 bound and the gradient
        similarity of this iteration."""
        stats = replica(stats)
        metrics = {k: v for k, v in replica(metrics).items() if k != "grads"}
        metrics["consensus_distance"] = float(stats["consensus_distance"])
        metrics["consensus_bound"] = self._bound.add(float(stats["update_norm_total"]))
        if self.cosine_log is not None:
            env_steps = (iteration + 1) * self._config.num_envs * self._config.sync_interval
            metrics["grad_cosine_mean"] = self.cosine_log.add(env_steps, np.asarray(stats["grad_cosine"]))
        return metrics

    def _snapshot(self, iterations: int) -> GossipState:
        return GossipState(
            params=self.states.params, opt_state=self.states.opt_state, key=self.states.key,
            update_step=np.asarray(iterations, np.int32),
            learner_steps=np.full((self._num_local,), iterations, np.int32), inbox=self.inbox,
        )


# --------------------------------------------------------------------------------------------------------------
# async mode: one thread per learner, non-blocking gossip through GossipNetwork.


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


def _run_async(config: GALAConfig) -> dict:
    """GALA as Algorithm 1 is written: one thread per learner runs its own local iterations
    (`_AsyncLearners.on_round_complete`), and the main thread logs their reports with the gossip metrics."""
    spec, setup, state = make_agent(config)
    topology = make_topology(config.topology, config.num_learners, config.num_peers)
    progress = Progress(metric_columns=_metric_columns(config), header=_header(config),
                        steps_per_update=config.envs_per_learner * config.sync_interval)
    monitor = Monitor(
        SYSTEM, config, _async_initial_state(state, config.num_learners), progress=progress,
        evaluator=on_policy_evaluator(config, spec, setup), policy_params=lambda s: s.params[0],
    )
    total_iterations = monitor.total_updates
    start = int(monitor.state.update_step)
    if start >= total_iterations:
        return monitor.finish()
    learners = _AsyncLearners(config, spec, setup, topology, monitor.state, start, total_iterations)
    gossip_log = _AsyncGossipLog(config, topology, learners.slots, monitor)
    interrupted = _train_async(learners, gossip_log, monitor, start, total_iterations)
    return _finish_async(learners, monitor, interrupted)


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


def _offset_policy(policy, env_id_offset: int, params, obs, env_ids, env_steps, run_key):
    """`policy` for one learner's envs, numbered after the envs of the learners before it."""
    return policy(params, obs, env_ids + env_id_offset, env_steps, run_key)


class _AsyncLearners:
    """The async mode's learner threads and what they share: each learner's slot, device and executor, the gossip
    network, the compiled update and mix, the reports to the main thread, and the run's iteration budget."""

    def __init__(self, config: GALAConfig, spec, setup, topology, restored: GossipState, start: int,
                 total_iterations: int):
        n, e = config.num_learners, config.envs_per_learner
        self._config, self._setup = config, setup
        self._devices = jax.local_devices()
        self.slots = [_restored_slot(restored, i, self._device(i)) for i in range(n)]
        self.group = ThreadGroup()
        tau = None if config.max_staleness < 0 else config.max_staleness
        self.network = GossipNetwork(n, [topology.in_peers(i, 0) for i in range(n)], tau, self.group.stopping)
        self._update = jax.jit(functools.partial(setup.update_fn, return_grads=True) if config.log_grad_cosine
                               else setup.update_fn)
        self._mix = jax.jit(mix)
        example_rollout = rollout_shapes(config.sync_interval, e, spec.obs_shape, spec.obs_dtype, setup.action_shape,
                                         setup.action_dtype)
        first_state = self.slots[0].state
        self._wait_for_compile = compile_in_background(self._update, first_state, first_state.params, example_rollout)
        self._policy = make_policy_fn(setup.network.apply)
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
            self.group.spawn(f"learner-{i}", functools.partial(self._learner_loop, i))

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
            action_dtype=setup.action_dtype,
        )
        try:
            if not self.claim_iteration():
                return
            executor.start()
            while not collector.finished.is_set():
                if self.group.stopping.is_set():
                    raise StopRequested
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
        self._wait_for_compile()
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


def _train_async(learners: _AsyncLearners, gossip_log: _AsyncGossipLog, monitor: Monitor, start: int,
                 total_iterations: int) -> KeyboardInterrupt | None:
    """Runs the learner threads and logs their reports until the budget is reported, the monitor stops the run or
    the threads end; then stops the threads and closes what they used. Returns Ctrl-C (or launch.common.Terminated,
    SIGTERM) when it came."""
    try:
        learners.start()
        _log_reports(learners, gossip_log, monitor, start, total_iterations)
    except KeyboardInterrupt as stop:
        monitor.outputs.print(f"[{SYSTEM}] interrupted: saving a checkpoint of the newest parameters")
        return stop
    finally:
        learners.close()
        gossip_log.close()
    return None


def _log_reports(learners: _AsyncLearners, gossip_log: _AsyncGossipLog, monitor: Monitor, start: int,
                 total_iterations: int) -> None:
    """The main thread: one progress row per local iteration of any learner, with the run state at that moment."""
    done = 0
    while done < total_iterations - start:
        learners.group.check()
        try:
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


def _finish_async(learners: _AsyncLearners, monitor: Monitor, interrupted: KeyboardInterrupt | None) -> dict:
    """Prints the gossip statistics, then the final evaluation, checkpoint and summary; re-raises Ctrl-C."""
    if interrupted is None:
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
    summary = monitor.finish(interrupted=interrupted is not None, extra={"gossip": gossip_stats,
                                                              "learner_iterations": [s.iterations for s in slots]})
    if interrupted is not None:
        raise monitor.saved(interrupted)  # the same exception: the exit status tells SIGTERM from Ctrl-C
    return summary


def _snapshot_state(snapshot: _LearnersSnapshot, update_step: int) -> GossipState:
    states = snapshot.states
    return GossipState(
        params=tuple(s.params for s in states), opt_state=tuple(s.opt_state for s in states),
        key=tuple(s.key for s in states), update_step=np.asarray(update_step, np.int32),
        learner_steps=np.asarray(snapshot.iterations, np.int32), inbox=(),
    )


def _stack(trees: list):
    return jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(np.asarray(x)) for x in xs]), *trees)


def _async_snapshot(slots: list[_LearnerSlot], update_step: int) -> GossipState:
    return _snapshot_state(_LearnersSnapshot(tuple(s.state for s in slots), tuple(s.iterations for s in slots)),
                           update_step)
