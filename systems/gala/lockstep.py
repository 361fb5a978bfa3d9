"""GALA's pmap mode: lock-step learners on the named axis `LEARNER_AXIS`, one-iteration-old messages through
`ppermute` (seed 004, Algorithm 1 in lock step; bit-reproducible for a seed and a device count)."""

from __future__ import annotations

import functools

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np

from agents import LEARNER_AXIS, TrainState, mean_over_axis
from agents.gossip import ConsensusBound, make_topology, mix, pairwise_cosine
from agents.parallel import one_collective_per_dtype
from envs.executor import Executor
from envs.step_time import parse_step_time
from systems.common import config as config_lib
from systems.common import distributed
from systems.common import run as skeleton
from systems.common.monitor import LearnerReport, Monitor, on_policy_evaluator
from systems.common.profile import stage
from systems.common.rollout import (
    RoundCollector,
    RoundStorage,
    make_sharded_policy_fn,
    place_on_axis,
    replica,
    shard_rollout,
    stack_host,
)
from systems.gala.config import GALAConfig, Plan
from systems.gala.learners import CosineLog, GossipState, make_agent, plan_record, progress


def _gossip_step(state: TrainState, rollout, inbox, *, update_fn, shifts, num_learners, with_cosine):
    """One lock-step GALA iteration of one learner (under pmap over LEARNER_AXIS).

    Local A2C step (Algorithm 1, lines 2-4), mixing with the messages sent one iteration earlier (lines 6-7), and
    the non-blocking broadcast of the freshly updated parameters (line 5) as `ppermute`s consumed next iteration.
    """
    new_state, metrics = update_fn(state, state.params, rollout)
    updated = new_state.params
    mixed = mix(updated, list(inbox))
    outbox = tuple(_shift(updated, s, num_learners) for s in shifts)
    update_norm_sq, consensus_sq = _sum_over_learners(jnp.square(metrics["update_norm"]), _consensus_sq(mixed))
    stats = {"consensus_distance": jnp.sqrt(consensus_sq), "update_norm_total": jnp.sqrt(update_norm_sq)}
    if with_cosine:
        grads = metrics.pop("grads")
        flat = jax.flatten_util.ravel_pytree(grads)[0]
        stats["grad_cosine"] = pairwise_cosine(jax.lax.all_gather(flat, LEARNER_AXIS))
    metrics = mean_over_axis(metrics, LEARNER_AXIS)  # logged: the learners' mean losses
    return new_state._replace(params=mixed), outbox, metrics, stats


# The messages and statistics of an iteration travel as one collective per dtype (`one_collective_per_dtype`), not one
# per leaf: across processes (gloo on a CPU) each collective is a round of messages, which XLA CPU does not combine.
def _shift(params, s: int, num_learners: int):
    """Learner i's `params` delivered to learner (i + s) mod n (one `ppermute`)."""
    perm = [(i, (i + s) % num_learners) for i in range(num_learners)]
    return one_collective_per_dtype(lambda x: jax.lax.ppermute(x, LEARNER_AXIS, perm=perm), params)


def _consensus_sq(params) -> jax.Array:
    """This learner's share of ||X - mean(X)||^2 over the learner axis, inside pmap."""
    mean = mean_over_axis(params, LEARNER_AXIS)
    return sum(jnp.sum(jnp.square(x - m)) for x, m in zip(jax.tree.leaves(params), jax.tree.leaves(mean), strict=True))


def _sum_over_learners(*scalars):
    """The learners' sums of float32 scalars, in one `psum`."""
    return tuple(jax.lax.psum(jnp.stack(scalars), LEARNER_AXIS))


def open_pmap(config: GALAConfig, run_plan: Plan) -> skeleton.Opening:
    """GALA in lock-step (Algorithm 1 on the learner axis): this process's learners, one per device, all starting
    from the same parameters (evaluation plays learner 0's)."""
    devices = _pmap_local_devices(config.num_learners)
    config = distributed.per_process_config(config)
    spec, setup, state = make_agent(config, run_plan)
    initial = _pmap_initial_state(state, len(devices), config.num_peers)
    return skeleton.Opening(
        agents=[skeleton.Agent(config, initial, on_policy_evaluator(config, spec, setup))],
        start=functools.partial(_start, config, run_plan, devices, spec, setup),
        progress=progress(config, run_plan, steps_per_update=run_plan.num_envs * config.sync_interval),
        policy_params=lambda s: replica(s.params), plan=plan_record(config, run_plan),
    )


def _start(config: GALAConfig, run_plan: Plan, devices: list, spec, setup, monitor: Monitor) -> skeleton.Loop | None:
    """One collector steps every local learner's envs, and every completed round is one iteration of all learners
    (`_LockstepGossip.on_round_complete`)."""
    first = jax.process_index() * len(devices)  # this process's first learner
    topology = make_topology(config.topology, config.num_learners, config.num_peers)
    start = int(monitor.state.update_step)
    total = run_plan.iterations
    if start >= total:
        return None
    gossip = _LockstepGossip(config, spec, setup, topology, monitor, devices, first)
    e = config.envs_per_learner
    collector = RoundCollector(
        gossip.executor, policy_fn=make_sharded_policy_fn(setup.network.apply, distributed.pmap_devices(devices), e,
                                                          env_id_offset=first * e, num_shards=len(devices),
                                                          recurrent=bool(setup.carry_size),
                                                          key_hold=setup.key_hold),
        run_key=setup.action_key, sync_interval=config.sync_interval, inference_batch=len(devices) * e,
        first_round=start, total_rounds=total, params=gossip.states.params, version=start,
        on_round_complete=gossip.on_round_complete, action_shape=setup.action_shape, action_dtype=setup.action_dtype,
        carry_size=setup.carry_size,
    )
    cosine_log = gossip.cosine_log
    return skeleton.LockstepLoop(gossip.executor, collector, monitor,
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
        with stage("update"):  # ends when the metrics are on the host: the update has run
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
            env_steps = (iteration + 1) * self._monitor.steps_per_round
            metrics["grad_cosine_mean"] = self.cosine_log.add(env_steps, np.asarray(stats["grad_cosine"]))
        return metrics

    def _snapshot(self, iterations: int) -> GossipState:
        return GossipState(
            params=self.states.params, opt_state=self.states.opt_state, key=self.states.key,
            update_step=np.asarray(iterations, np.int32),
            learner_steps=np.full((self._num_local,), iterations, np.int32), inbox=self.inbox,
        )
