"""High-Throughput Synchronous RL (seed 000, section 4.1): executors, actors and a learner running concurrently.

* Executors: EnvPool in async mode (`envs.executor.Executor`); step-time injection optional. `--env_pools=per_actor`
  gives each actor thread a pool of its own share of the envs, which it receives from itself (`envs.actor_pools`):
  beyond the paper, whose executors serve every actor; the bits are the same (env i is seeded `seed + i` either way).
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
  `--num_actors`, `--env_pools`, `--env_threads`, `--env_batch_size` or thread timing.
* Devices and hosts (`systems.hts.layout`; beyond the paper, which trains on one desktop): actor threads run their
  forward passes on `--actor_devices`, the learner is `--learner_devices` data-parallel replicas (the storage split
  by env, gradients averaged before each optimizer step, parameters identical on every replica; `--debug` checks
  it after every update). With `--num_processes` > 1 every process steps its own share of the envs with its own
  executor and actors, and the replicas of all processes form one pmap over `jax.distributed` (gloo on CPU, NCCL on
  GPU); no other traffic crosses hosts. For a fixed seed and number of replicas the parameters do not depend on
  the actor threads, the EnvPool batch or the split over processes (up to the all-reduce's summation order: on
  CPU, gloo's across processes against XLA's within one; `--ordered_reduction` fixes that order in the program,
  `agents.parallel.mean_over_axis`, and then the split shows in no bit). One replica is the single-device
  update, bit for bit.
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from agents import TrainState, a2c_update, ppo_update
from envs.actor_pools import ActorPools
from envs.executor import Executor
from envs.factory import EnvSpec
from systems.common import config as config_lib
from systems.common import distributed, layout_rule, learner
from systems.common import run as skeleton
from systems.common.concurrency import ParameterStore, StopRequested, ThreadGroup
from systems.common.data_parallel import DataParallelLearner
from systems.common.learner import LearnerSetup, compile_in_background
from systems.common.monitor import LearnerReport, Monitor
from systems.common.profile import Bound, Profile, stage
from systems.common.rollout import (
    RoundCollector,
    RoundStorage,
    replica,
)
from systems.hts import layout as layout_lib
from systems.hts.config import (
    MAY_CHANGE_ON_RESUME,
    SYSTEM,
    HTSConfig,
    env_batch_size,
    env_plan,
    inference_batch,
    local_envs,
    validate,
)

__all__ = ["SYSTEM", "HTSConfig", "env_batch_size", "inference_batch", "local_envs", "make_agent", "run",
           "validate"]


def make_agent(config: config_lib.TrainConfig, spec: EnvSpec) -> tuple[LearnerSetup, TrainState]:
    """What HTS-RL trains: the actor-critic of the env family (`agents.networks`), its convolutions in the plan
    `--conv_plan` picks for the learner's batch; `--optimizer` (`agents.optim.make_optimizer`, optax); and
    `--algo`'s update, PPO's clipped surrogate (`agents.ppo`) or A2C with the one-step delay (`agents.a2c`, Eq. 6).
    `learner.build` jits the update and the actors' policy and initializes the state from `--seed`."""
    # The family's network with --conv_plan's convolutions; --recurrent: an LSTM or GRU core (`learner.with_memory`)
    network = learner.default_network(config, spec)
    optimizer = learner.default_optimizer_settings(config)
    if config.algo == "ppo":
        loops = learner.ppo_loop_plan(spec.obs_shape, config.num_epochs, config.num_minibatches)
        update = functools.partial(ppo_update, config=learner.algo_config(config, **loops))
    else:
        update = functools.partial(a2c_update, config=learner.algo_config(config))
    return learner.build(config, spec, network=network, optimizer_settings=optimizer, update=update)


def _resolve_layout(config: HTSConfig) -> tuple[HTSConfig, layout_lib.Layout, layout_rule.Fit]:
    """Fits the sizes to the machine under `--layout` (`systems.common.layout_rule`) and picks the devices (all
    recorded as the run's plan in config.json); process p > 0 gets its own run directory
    (`distributed.per_process_config`)."""
    config, fitted = layout_rule.applied(config, layout_rule.this_machine(), config.num_processes)
    if config.layout == "auto":  # `validate` left the batches for the sizes the rule gives: check them as if given
        validate(dataclasses.replace(config, layout="preset"))
    layout = layout_lib.resolve(config)
    if layout.num_replicas > 1 and (config.normalize_obs or config.normalize_reward):
        raise config_lib.ConfigError(
            "--normalize_obs and --normalize_reward need one learner replica (the running statistics are not kept "
            f"in lock step over {layout.num_replicas} replicas): pass --learner_devices with one device index"
        )
    return distributed.per_process_config(config), layout, fitted


def _plan(config: HTSConfig, layout: layout_lib.Layout, fitted: layout_rule.Fit) -> dict:
    """config.json's plan: the sizes the layout rule chose, the devices the layout chose, as the flags would name
    them, EnvPool's layout (per pool: its envs, batch, threads and first pinned core) and the batches used."""
    pools = env_plan(config)
    return dict(layout=fitted.record(),
                actor_devices=layout_lib.indices_text(layout.actor_devices),
                learner_devices=layout_lib.indices_text(layout.learner_devices), learner_replicas=layout.num_replicas,
                env_pools=dict(layout=config.env_pools, **pools._asdict()),
                batches=dict(env=pools.batches[0] if config.env_pools == "shared" else pools.batches,
                             inference=inference_batch(config)))


def _env_text(config: HTSConfig) -> str:
    """The start line's account of EnvPool where a flag moved it from the shared pool's defaults ("" otherwise)."""
    if config.env_pools == "shared" and not config.env_threads and config.env_thread_affinity < 0:
        return ""
    plan = env_plan(config)
    pinned = (f", pinned from core{'s' if len(plan.pinned_from) > 1 else ''} {_listed(plan.pinned_from)}"
              if plan.pinned_from[0] >= 0 else "")
    if config.env_pools == "shared":
        threads = plan.threads[0]
        return (f"\n  EnvPool: one pool for every actor thread, {plan.envs[0]} envs, batch {plan.batches[0]}, "
                f"{threads} worker thread{'s' if threads != 1 else ''}{pinned}")
    return (f"\n  EnvPool: a pool per actor thread, each received by the thread that owns it: "
            f"{' + '.join(map(str, plan.envs))} envs, batches {_listed(plan.batches)}, worker threads "
            f"{_listed(plan.threads)}{pinned}")


def _listed(values: list[int]) -> str:
    return ", ".join(map(str, values))


def accelerator_hint(num_envs: int, sync_interval: int, layout: layout_lib.Layout) -> str:
    """A line for a run whose actors use an accelerator with few envs (the CPU presets' 8), else "": each forward
    pass is then a host-device round trip for a handful of observations, and the actors, not the accelerator, bound
    the run. On Breakout on a GPU, 128 envs x 8 steps with 4 actor threads (the same 1,024-step round as 8 x 128)
    runs about three times the SPS of the 8-env preset and reaches its return sooner (`benchmarks/gpu_check.sh`)."""
    platform = layout.actor_devices[0].platform
    if platform == "cpu" or num_envs >= 64:
        return ""
    wide_envs, round_steps = 128, num_envs * sync_interval  # the hint keeps the run's env steps per update
    return (f"\n  hint: {num_envs} envs with the actors on {platform}: their forward passes will bound this run; "
            f"--num_envs={wide_envs} --num_actors=4 --sync_interval={max(1, round_steps // wide_envs)} (about the same "
            f"{round_steps:,}-step round) learned Breakout 3.2x faster on an H200 (one seed; "
            "benchmarks/results/gpu_first_run.md)")


def run(config: HTSConfig) -> dict:
    """Trains with HTS-RL; returns the summary (also written to `<run dir>/summary.json`)."""
    return skeleton.run(SYSTEM, config, _open, validate=validate)


def _open(config: HTSConfig) -> skeleton.Opening:
    """The layout on this machine, the agent (`make_agent`) and the monitor's parts."""
    config, layout, fitted = _resolve_layout(config)
    header = (f"  {fitted.describe()}\n{layout.describe()}" + _env_text(config)
              + accelerator_hint(config.num_envs, config.sync_interval, layout))
    return skeleton.open_on_policy(config, make_agent, functools.partial(_start, layout),
                                   may_change_on_resume=MAY_CHANGE_ON_RESUME, header=header,
                                   plan=_plan(config, layout, fitted), profile=hts_profile())


def _start(layout: layout_lib.Layout, ctx: skeleton.RunContext) -> skeleton.Loop:
    """The learner on its devices, the two storages between it and the actors, the executor, the actors' policy and
    the round collector; the update compiles while the first round is collected."""
    config, monitor, start_round = ctx.config, ctx.monitor, ctx.start_round
    learner = _Learner(ctx.setup, layout, monitor.state, debug=config.debug, ordered=config.ordered_reduction)
    group = ThreadGroup()
    handover = _Handover(learner.published(learner.state.params), start_round, group.stopping)
    reports: queue.Queue[LearnerReport] = queue.Queue()
    executor, takes = _executors(ctx, layout)
    policy = _ActorPolicy(ctx.setup.policy, len(layout.actor_devices), env_id_offset=layout.first_env)
    collector = ctx.make_collector(
        executor, inference_batch=inference_batch(config), on_round_complete=handover.on_round_complete,
        policy_fn=policy, params=handover.store.latest()[1].actors, first_env=layout.first_env,
    )
    wait_for_compile = learner.compile_ahead(collector.rollout_shapes())  # overlaps the first round's collection
    profile = monitor.profile
    learn = functools.partial(_learner_loop, handover, learner, wait_for_compile, reports, start_round, profile)
    workers = [*((f"actor-{i}", functools.partial(_actor_loop, takes[i], collector, policy, group.stopping, i,
                                                  profile)) for i in range(config.num_actors)), ("learner", learn)]
    distributed.check_same_start(start_round)
    return _Training(workers, group, executor, reports, monitor, ctx.total_rounds - start_round)


def _executors(ctx: skeleton.RunContext, layout: layout_lib.Layout) -> tuple[Executor | ActorPools, list[Callable]]:
    """This process's envs as `env_plan` lays them out, and each actor thread's `take`: one shared executor every
    actor takes from, or a pool per actor thread (`envs.actor_pools`) that actor k alone takes from."""
    config, plan = ctx.config, env_plan(ctx.config)
    if config.env_pools == "per_actor":
        pools = ctx.make_actor_pools(*plan, first_env=layout.first_env)
        return pools, [functools.partial(pools.take_from, k) for k in range(config.num_actors)]
    executor = ctx.make_executor(plan.batches[0], num_envs=layout.local_envs, first_env=layout.first_env,
                                 num_threads=plan.threads[0], thread_affinity_offset=plan.pinned_from[0])
    return executor, [executor.take] * config.num_actors


_SATURATED_LEARNER = Bound(
    "learner-bound", "the learner updates almost all the time; more envs will not help, a larger --sync_interval "
    "(fewer updates per env step) or another learner device (--learner_devices) will")


def hts_profile() -> Profile:
    """HTS-RL's threads: the actors (stepping EnvPool, their forward passes, waiting for the learner at a round's
    end), the learner (waiting for a round, its update, publishing the parameters) and the main thread (the
    learner's reports, evaluations, checkpoints). The actors' time names the bound: they wait for whichever of the
    simulators and the learner is slower, or are themselves busy."""
    bounds = {
        "env": Bound("simulator-bound", "the actors wait for EnvPool: more CPU cores for the simulators would move it, "
                                        "a faster learner or more actor threads would not"),
        "inference": Bound("actor-bound", "the actors' forward passes: more --num_actors threads or an accelerator "
                                          "for them (--actor_devices) would move it"),
        "wait_for_learner": Bound("learner-bound", "the actors wait for the learner at each round's end: more envs "
                                                   "will not help, a larger --sync_interval (fewer updates per env "
                                                   "step) or another learner device (--learner_devices) will"),
    }
    return Profile({"actors": ("env", "inference", "wait_for_learner"),
                    "learner": ("wait_for_data", "compile", "update", "publish"),
                    "main": ("wait_for_learner", "evaluation", "checkpoint")}, "actors", bounds,
                   saturated={"learner": ("update", _SATURATED_LEARNER)})


class _Published(NamedTuple):
    """One parameter version as the learner holds it (replicated over its devices) and as each actor device does."""

    learner: Any
    actors: tuple


class _Learner:
    """The learner's update over its devices (`systems.hts.layout`): one replica is the jitted update on its device;
    R > 1 replicas are a pmap over `DEVICE_AXIS` whose gradients are averaged before each optimizer step (the
    update's `axis_name`), each replica learning from its own envs' columns of the round (`shard_rollout`)."""

    def __init__(self, setup: LearnerSetup, layout: layout_lib.Layout, state: TrainState, *, debug: bool,
                 ordered: bool):
        self._layout = layout
        self._parallel = None
        if layout.num_replicas > 1:
            self._parallel = DataParallelLearner(setup.update_fn, list(layout.pmap_devices),
                                                 len(layout.learner_devices), state, ordered=ordered, debug=debug)
            self.state = self._parallel.state
        else:
            self._update = setup.update
            self.state = _on_device(state, layout.learner_devices[0])

    def compile_ahead(self, rollout_shapes) -> Callable[[], None]:
        """Compiles the update in the background while the first round is collected (`compile_in_background`)."""
        if self._parallel is not None:
            return self._parallel.compile_ahead(rollout_shapes)
        return compile_in_background(self._update, self.state, self.state.params, rollout_shapes)

    def learn(self, state: TrainState, behaviour_params, storage: RoundStorage) -> tuple[TrainState, dict]:
        """One update on the round's storage; with `--debug`, RuntimeError unless every replica holds the same bits."""
        if self._parallel is not None:
            return self._parallel.learn(state, behaviour_params, storage)
        return self._update(state, behaviour_params, storage.to_rollout())

    def host_view(self, tree: Any) -> Any:
        """What the monitor keeps: one replica's values (read from this process's first learner device)."""
        return replica(tree) if self._parallel is not None else tree

    def published(self, params) -> _Published:
        """The learner's parameters and a copy on every actor device (made here, off the actors' path)."""
        if self._parallel is not None:
            one = replica(params)
            return _Published(params, tuple(jax.device_put(one, device) for device in self._layout.actor_devices))
        return _Published(params, tuple(_on_device(params, device) for device in self._layout.actor_devices))


def _on_device(tree: Any, device) -> Any:
    """`tree` committed to `device`; unchanged where the single-device run keeps it (the default device), so that
    run stays today's program, bit for bit."""
    if device == jax.local_devices()[0] and all(not isinstance(x, jax.Array) or x.devices() == {device}
                                          for x in jax.tree_util.tree_leaves(tree)):
        return tree
    return jax.device_put(tree, device)


class _ActorPolicy:
    """The actors' forward pass: actor thread i on actor device i mod k (its own copy of the parameters), with
    action keys from global env ids (this process's first env id + local id). Every device runs the same program
    on the same padded batch shape, so the actions do not depend on which device computed them."""

    def __init__(self, policy: Callable, num_devices: int, *, env_id_offset: int):
        self._policy = policy
        self._num_devices = num_devices
        self._offset = env_id_offset
        self._thread = threading.local()

    def bind(self, actor_index: int) -> None:
        """Called by actor thread `actor_index` before it acts."""
        self._thread.slot = actor_index % self._num_devices

    def __call__(self, params: tuple, obs, env_ids, env_steps, run_key):
        slot = getattr(self._thread, "slot", 0)
        return self._policy(params[slot], obs, env_ids + self._offset, env_steps, run_key)


class _Handover:
    """The two storages between the actors and the learner, and the parameters they exchange.

    Batch synchronization (seed 000, section 4.1): at the end of round r the actors wait until the learner has
    finished every batch handed to it (so the storage they fill next is free and theta_r exists), hand over round
    r's storage and go on with the newest parameters: round r >= 2 is collected with theta_{r-1} (Eq. 6). The
    learner takes the storages in round order; `None` follows the last one.
    """

    def __init__(self, params: _Published, start_round: int, stopping: threading.Event):
        self.store = ParameterStore(params, version=start_round)
        self._start_round = start_round
        self._stopping = stopping
        self._jobs: queue.Queue[RoundStorage | None] = queue.Queue(maxsize=1)
        self._submitted = 0

    def on_round_complete(self, storage: RoundStorage, last: bool):
        """The collector's call at the end of a round: the behaviour parameters of the next round, or None."""
        # The learner must be done with every batch handed to it before the roles of the storages swap; the version
        # it has then is the next round's (theta_{r-1}). Not the store's latest after the hand-over: a learner quick
        # enough to learn from this storage first would make the next round's parameters depend on thread timing.
        version = self._start_round + self._submitted
        with stage("wait_for_learner"):
            published = self.store.wait_for(version, self._stopping)
        self._jobs.put(storage)
        self._submitted += 1
        if last:
            self._jobs.put(None)
            return None
        return version, published.actors

    def next_batch(self) -> RoundStorage | None:
        """The learner's next storage (None after the last round); StopRequested once the run is stopping (no update
        starts after that)."""
        while not self._stopping.is_set():
            try:
                return self._jobs.get(timeout=0.05)
            except queue.Empty:
                pass
        raise StopRequested


def _actor_loop(take: Callable, collector: RoundCollector, policy: _ActorPolicy, stopping: threading.Event,
                actor_index: int, profile: Profile) -> None:
    """One actor thread: takes whatever observations are ready (from the shared executor or its own pool) and runs
    one batched forward pass on them."""
    policy.bind(actor_index)
    with profile.thread("actors"):
        while not stopping.is_set() and not collector.finished.is_set():
            with stage("env"):
                results = take(max_items=collector.num_envs, timeout=0.05)
            if results is not None:
                collector.process(results)


def _learner_loop(handover: _Handover, learner: _Learner, wait_for_compile: Callable[[], None], reports: queue.Queue,
                  start_round: int, profile: Profile) -> None:
    """The learner thread: learns from each handed-over storage with that round's behaviour parameters (Eq. 6),
    publishes the new parameters as the next version and reports both versions (the policy lag)."""
    with profile.thread("learner"):
        state, learner_version = learner.state, start_round
        while True:
            with stage("wait_for_data"):
                storage = handover.next_batch()
            if storage is None:
                break
            # Read before publishing: once the new version is out the actors may refill this storage for a later round.
            behaviour_version = storage.behaviour_version
            behaviour_params = handover.store.get(behaviour_version).learner
            with stage("compile"):
                wait_for_compile()
            with stage("update"):  # ends when the metrics are on the host: the update has run
                state, metrics = learner.learn(state, behaviour_params, storage)
                metrics = jax.device_get(learner.host_view(metrics))
            with stage("publish"):
                handover.store.publish(learner.published(state.params), learner_version + 1)
            reports.put(LearnerReport(learner.host_view(state), metrics, behaviour_version, learner_version))
            learner_version += 1


class _Training(skeleton.Loop):
    """The actor and learner threads and the executor; the main thread hands the learner's reports to the monitor
    until the last round or an early stop (in a multi-process job a failed collective too). Another worker's error
    is re-raised after they stop."""

    collectives = True

    def __init__(self, workers: list[tuple[str, Callable[[], None]]], group: ThreadGroup,
                 executor: Executor | ActorPools,
                 reports: queue.Queue, monitor: Monitor, num_rounds: int):
        self.workers, self.group, self.executor = workers, group, executor
        self.reports, self.monitor, self.num_rounds = reports, monitor, num_rounds

    def train(self) -> None:
        for name, target in self.workers:
            self.group.spawn(name, target)
        self.executor.start()
        for _ in range(self.num_rounds):
            report = _next_report(self.reports, self.group, self.executor, self.monitor)
            if self.monitor.on_report(report, self.executor.pop_episodes()):
                break

    def close(self) -> None:
        # Joins the learner: an update (or its collective) under way completes (or fails) first.
        self.group.stop(waiting=lambda names: self.monitor.outputs.print(
            f"[hts] stopping: waiting for the update in progress ({', '.join(names)} thread)"))
        self.executor.close()

    def wind_up(self, stopped: skeleton.StopCause | None) -> None:
        if stopped is None:
            self.group.check()
        elif jax.process_count() > 1:
            _log_finished_updates(self.reports, self.monitor)


def _log_finished_updates(reports: queue.Queue, monitor: Monitor) -> None:
    """Multi-process stop: logs the updates the learner finished but the monitor had not taken yet, so every process
    checkpoints the same newest update (an update's collective completes on all processes or on none) and the job
    resumes from one round (`distributed.check_same_start` refuses to resume otherwise)."""
    while True:
        try:
            report = reports.get_nowait()
        except queue.Empty:
            return
        monitor.on_report(report, [])


def _next_report(reports: queue.Queue, group: ThreadGroup, executor: Executor | ActorPools,
                 monitor: Monitor) -> LearnerReport:
    while True:
        group.check()
        executor.raise_if_failed()
        try:
            with stage("wait_for_learner"):
                return reports.get(timeout=0.1)
        except queue.Empty:
            monitor.heartbeat(executor.env_steps_received)
