"""PAL: parallel actors and learners around a shared prioritized replay buffer (seed 003, section V, Figure 7).

* `num_actors` actor threads (V-A), each stepping its own EnvPool instance (`envs_per_actor` envs, synchronous
  mode) with the newest parameters from the parameter store, and inserting its transitions into the shared buffer
  (`systems.replay`: K-ary sum tree, lazy writing, two locks). EnvPool's reset steps (the step after an episode
  ends, whose action is ignored) are not transitions and are not inserted; `done` is termination only, so a
  time-limit truncation still bootstraps.
* `num_learners` learner threads (V-B), each sampling its share `batch_size / num_learners` of the global batch
  (with the PER importance weights, beta annealed linearly from `per_beta` to 1 over the run) and handing it to
  the parameter server, which computes each learner's gradient on its own sub-batch, averages them and applies one
  optimizer step (synchronous, as in the paper; `systems.offpolicy.agent` explains the vmap over learners). Each learner
  then writes its sub-batch's new priorities |TD| back.
* `update_interval` (Algorithm 1, line 11): env steps collected per optimizer step, held by `RatioGate` between the
  threads: actors wait when they are a step ahead, learners wait when there is nothing due; 0 lets both run free.
  The first `learning_starts` env steps are collected before any update (random actions for DDPG / TD3 / SAC,
  epsilon-greedy from epsilon_start for DQN).
* Design-space exploration (V-D, Eq. 5): `allocate="auto"` measures f_a and f_l on this machine and picks the
  thread counts (`systems.pal.allocate`).

Thread timing decides which transitions a batch sees, so a PAL run is not bit-reproducible (the paper's actors
and learners are asynchronous by design); seeds fix the initial parameters, env seeds and each actor's keys.

Outputs are those of the other systems (`systems.common.monitor.Monitor`): config.json, progress.csv, TensorBoard,
the progress line, evaluations, summary.json with the fingerprint, atomic checkpoints and `--resume`; with
`checkpoint_buffer` the replay buffer is saved next to each checkpoint and restored with it.

This module wires the run; the parts are `config.py` (`PALConfig`, `validate`), `actors.py` (`Actor`, `RatioGate`,
`EpisodeSink`), `learner.py` (`ParameterServer`) and `allocate.py` (Eq. 5).
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import math
import os
import queue
import sys
import threading
import time

import jax
import numpy as np

from envs.cores import usable_cores
from envs.factory import EnvSpec, make_spec
from systems.common import config as config_lib
from systems.common import limits
from systems.common import run as skeleton
from systems.common.checkpoint import Checkpointing, checkpoint_dir
from systems.common.concurrency import ParameterStore, ThreadGroup
from systems.common.evaluation import Evaluator
from systems.common.monitor import Monitor, Progress
from systems.common.profile import Bound, Profile, stage
from systems.offpolicy.agent import OffPolicyAgent, PALState, build_agent
from systems.offpolicy.config import metric_columns
from systems.pal import allocate as allocate_lib
from systems.pal.actors import POLL_SECONDS, Actor, EpisodeSink, RatioGate
from systems.pal.config import PALConfig, Plan, check_env, plan, validate
from systems.pal.learner import ParameterServer
from systems.replay import FrameStackBuffer, PrioritizedBuffer, UniformBuffer

SYSTEM = "pal"

# ----------------------------------------------------------------------------------------------- the run


def uses_frame_buffer(spec: EnvSpec) -> bool:
    """Stacked uint8 frames (Atari [4, 84, 84]) go to the frame-indexed buffer: each frame stored once."""
    return len(spec.obs_shape) == 3 and np.dtype(spec.obs_dtype) == np.uint8


def make_buffer(config: PALConfig, agent: OffPolicyAgent, capacity: int | None = None, spec: EnvSpec | None = None,
                num_envs: int | None = None):
    """The run's replay buffer. Image tasks get `FrameStackBuffer` (one stream per env of `num_envs`, default the
    config's actors x envs; `capacity` counts frame rows, about one per transition), vector tasks
    `PrioritizedBuffer` / `UniformBuffer` (all fields stored)."""
    capacity = capacity or config.buffer_size
    if spec is not None and uses_frame_buffer(spec):
        streams = num_envs or config.num_actors * config.envs_per_actor
        extras = {name: (value.shape, value.dtype) for name, value in agent.example.items()
                  if name not in ("obs", "next_obs")}
        return FrameStackBuffer(
            capacity, num_streams=streams, frame_shape=tuple(spec.obs_shape[1:]), stack=spec.obs_shape[0],
            extras=extras, alpha=config.per_alpha, beta=config.per_beta, k=config.tree_k, eps=config.priority_eps,
            seed=config.seed, prioritized=config.replay == "per",
        )
    if config.replay == "per":
        return PrioritizedBuffer(capacity, agent.example, alpha=config.per_alpha, beta=config.per_beta,
                                 k=config.tree_k, eps=config.priority_eps, seed=config.seed)
    return UniformBuffer(capacity, agent.example, k=config.tree_k, seed=config.seed)


def buffer_bytes(config: PALConfig, agent: OffPolicyAgent, spec: EnvSpec) -> int:
    """Storage of the run's buffer: frames once per row for image tasks, every field per transition otherwise."""
    example = agent.example
    if uses_frame_buffer(spec):
        frame = np.asarray(example["obs"][0]).nbytes
        extras = sum(np.asarray(v).nbytes for k, v in example.items() if k not in ("obs", "next_obs"))
        return (frame + extras) * config.buffer_size
    return sum(np.asarray(v).nbytes for v in example.values()) * config.buffer_size


def profile_and_allocate(config: PALConfig, spec: EnvSpec, agent: OffPolicyAgent, print_fn) -> tuple[Plan, tuple]:
    """`--allocate=auto`: measures f_a(x) and f_l(x) for x = 1 .. M - 1 threads and solves Eq. 5."""
    cores = config.cores or usable_cores()
    if cores < 2:
        raise config_lib.ConfigError("--allocate=auto needs at least 2 cores (one actor, one learner)")
    seconds = config.profile_seconds
    print_fn(f"[pal] profiling actors and learners for Eq. 5 ({seconds:g} s per point, up to {cores - 1} threads)")
    scratch = make_buffer(config, agent, capacity=min(config.buffer_size, 100_000), spec=spec,
                          num_envs=(cores - 1) * config.envs_per_actor)
    actor_curve = {x: measure_actors(config, spec, agent, scratch, x, seconds) for x in range(1, cores)}
    learner_curve = {
        x: measure_learners(config, x, agent, scratch, seconds)
        for x in range(1, cores)
        if config.batch_size % x == 0
    }
    choice = allocate_lib.choose_allocation(actor_curve, learner_curve, cores=cores,
                                            update_interval=config.update_interval)
    print_fn(allocate_lib.format_profile(actor_curve, learner_curve, config.update_interval, choice, cores))
    return plan(config, choice.actors, choice.learners), (actor_curve, learner_curve, choice)


def _run_threads(group: ThreadGroup, targets, count, seconds: float) -> float:
    """Runs `targets` [(name, fn)] in `group` (the group their loops watch) for `seconds`; returns the rate of
    `count()` over that window, read when the window closes, before the threads are stopped."""
    for name, target in targets:
        group.spawn(name, target)
    start, first = time.perf_counter(), count()
    while time.perf_counter() - start < seconds and group.running():
        time.sleep(POLL_SECONDS)
        group.check()
    elapsed, last = time.perf_counter() - start, count()
    group.stop()
    group.check()
    return max(last - first, 1) / elapsed


def measure_actors(config: PALConfig, spec: EnvSpec, agent: OffPolicyAgent, buffer, threads: int,
                   seconds: float) -> float:
    """f_a(threads): env steps per second of `threads` free-running actors inserting into `buffer`."""
    store = ParameterStore(agent.policy_params(agent.initial_state.agent))
    gate = RatioGate(update_interval=0, warmup=0, collected=0, updates=0, total_steps=2**62)
    actors = [Actor(i, config, spec, agent, buffer, store, gate, EpisodeSink(), random_until=0)
              for i in range(threads)]
    group = ThreadGroup()
    try:
        for actor in actors:  # compile the policy outside the timed window
            actor.step()
        return _run_threads(group, [(f"profile-actor-{a.actor_id}", lambda a=a: a.run(group.stopping))
                                    for a in actors], lambda: gate.collected, seconds)
    finally:
        group.stop()
        for actor in actors:
            actor.close()


def measure_learners(config: PALConfig, num_learners: int, agent: OffPolicyAgent, buffer, seconds: float) -> float:
    """f_l(num_learners): optimizer steps per second with `num_learners` learner threads on `buffer`."""
    gate = RatioGate(update_interval=0, warmup=0, collected=2, updates=0, total_steps=2**62)
    gate._collected0 = 1  # one step "collected": learners may run, nothing else is gated
    group = ThreadGroup()
    store = ParameterStore(agent.policy_params(agent.initial_state.agent))
    server = ParameterServer(config, num_learners, agent, agent.initial_state, buffer, store, gate, group, None, [])
    sub = config.batch_size // num_learners
    warm = [buffer.sample(sub) for _ in range(num_learners)]  # compile outside the timed window
    jax.block_until_ready(agent.update(server.state, {k: np.stack([s.batch[k] for s in warm]) for k in warm[0].batch},
                                       np.stack([s.weights for s in warm])))
    targets = [("profile-server", server.server_loop)] + [
        (f"profile-learner-{i}", lambda i=i: server.learner_loop(i)) for i in range(num_learners)
    ]
    try:
        return _run_threads(group, targets, lambda: gate.updates, seconds)
    finally:
        server.finished.set()
        group.stop()


def _restore_buffer(buffer, directory: str, name: str) -> str | None:
    """Loads the replay buffer saved with the restored checkpoint (`name`); if that file is gone or unreadable,
    the newest older readable `buffer_*.npz` (the previous checkpoint's: transitions up to one checkpoint interval
    older, which off-policy learning can use), with one warning per file passed over. Returns the file of the
    non-empty buffer restored, or None: the buffer stays empty and the run refills it before learning."""
    older = sorted((p for p in glob.glob(os.path.join(directory, "buffer_*.npz")) if os.path.basename(p) < name),
                   reverse=True)
    for path in [os.path.join(directory, name), *older]:
        try:
            buffer.load(path)
        except ValueError as error:
            print(f"warning: {error}", file=sys.stderr)
            continue
        return os.path.basename(path) if len(buffer) > 0 else None
    return None


def run(config: PALConfig) -> dict:
    """Trains with PAL; returns the summary (also written to `<run dir>/summary.json`).

    Section V as steps: size the replay buffer, split the cores between actors and learners (V-D, with
    `allocate="auto"`), open the outputs and restore (or plan to refill) the buffer, run the asynchronous actors
    (V-A) and the parallel learners with their parameter server (V-B) until the run ends (`_Framework`), then write
    the summary."""
    return skeleton.run(SYSTEM, config, _open, validate=validate)


def _open(config: PALConfig) -> skeleton.Opening:
    """The agent, the replay buffer's size checked against the memory, the thread counts (measured with
    `allocate="auto"`, Eq. 5), the buffer, and the monitor's parts."""
    spec = make_spec(config.env_id, config.env_kwargs, config.frame_stack)
    check_env(config, spec)
    agent = build_agent(config, spec)
    needed = buffer_bytes(config, agent, spec)
    limits.require_memory(needed, f"--buffer_size={config.buffer_size:,} (the replay buffer)")
    if config.checkpoint_buffer and uses_frame_buffer(spec):
        raise config_lib.ConfigError("--checkpoint_buffer is not supported yet for image tasks (frame-indexed buffer)")
    profile, threads = None, plan(config)
    if config.allocate == "auto":
        threads, profile = profile_and_allocate(config, spec, agent, (lambda line: None) if config.quiet else print)
    buffer = make_buffer(config, agent, spec=spec, num_envs=threads.num_envs)
    return _opening(config, threads, spec, agent, buffer, needed, profile)


def _opening(config: PALConfig, threads: Plan, spec: EnvSpec, agent: OffPolicyAgent, buffer, needed: int,
             profile) -> skeleton.Opening:
    """The monitor's parts; with `checkpoint_buffer` each checkpoint also saves the replay buffer (`_save_buffer`).
    The loop (`_Framework`) starts after the buffer is restored (or planned to be refilled) on `--resume`."""

    def checkpoint_extra(run_dir: str, env_steps: int) -> dict:
        return _save_buffer(buffer, run_dir, env_steps) if config.checkpoint_buffer else {}

    def start(monitor: Monitor) -> _Framework:
        warmup, buffer_restored = _restore_replay(config, monitor, buffer)
        return _Framework(config, threads, spec, agent, buffer, monitor, warmup,
                          summary=functools.partial(_summary_extra, config, threads, buffer=buffer, needed=needed,
                                                    profile=profile, buffer_restored=buffer_restored))

    evaluator = None
    if config.eval_episodes > 0:
        evaluator = Evaluator(spec, None, episodes=config.eval_episodes, seed=agent.eval_seed, deterministic=True,
                              act_fn=agent.eval_act)
    sizes = (f"actors {threads.num_actors}x{config.envs_per_actor} envs  learners {threads.num_learners}  batch "
             f"{config.batch_size}  update_interval {config.update_interval:g}  replay {config.replay} "
             f"{config.buffer_size:,} ({needed / 2**30:.2f} GiB)")
    progress = Progress(
        metric_columns=metric_columns(config.algo) + ("replay_size", "collected_per_update"), steps_per_update=1,
        env_steps_of=lambda s: int(s.env_steps), max_policy_lag=None, sizes=sizes,
    )
    return skeleton.Opening(
        agents=[skeleton.Agent(config, agent.initial_state, evaluator)], start=start, progress=progress,
        policy_params=lambda s: agent.policy_params(s.agent), checkpointing=Checkpointing(extra_meta=checkpoint_extra),
        plan=dataclasses.asdict(threads), profile=pal_profile(),
    )


_SATURATED_SERVER = Bound("learner-bound", "the parameter server updates almost all the time: more actors will not "
                                           "help; a larger --update_interval (fewer updates per env step) will")


def pal_profile() -> Profile:
    """PAL's threads (Figure 7): actors (waiting at the ratio gate, their forward passes, EnvPool, inserting into
    the replay), learners (waiting at the gate, sampling, waiting for the server's update, writing priorities), the
    parameter server (waiting for the learners' samples, the update, publishing) and the main thread. The gate holds
    actors and learners to `--update_interval`, so the actors' time names the bound."""
    bounds = {
        "wait_for_gate": Bound("learner-bound", "the ratio gate holds the actors back for the learners: more "
                                                "--num_learners, a smaller --batch_size or a larger --update_interval "
                                                "would move it"),
        "env": Bound("simulator-bound", "the actors wait for EnvPool: more actors (--num_actors) or more envs per "
                                        "actor (--envs_per_actor) would move it"),
        "inference": Bound("actor-bound", "the actors' forward passes: more --envs_per_actor per pass or more actors "
                                          "would move it"),
        "replay_insert": Bound("replay-bound", "inserting into the buffer (its write lock included): fewer, larger "
                                               "inserts (--envs_per_actor) would move it"),
    }
    return Profile({"actors": ("wait_for_gate", "inference", "env", "replay_insert"),
                    "learners": ("wait_for_gate", "sample", "wait_for_server", "priorities"),
                    "server": ("wait_for_samples", "compile", "update", "publish"),
                    "main": ("wait_for_learner", "evaluation", "checkpoint")}, "actors", bounds,
                   saturated={"server": ("update", _SATURATED_SERVER)})


def _save_buffer(buffer, run_dir: str, env_steps: int) -> dict:
    """Saves the replay buffer next to the checkpoint of `env_steps`, keeping the last two checkpoints' buffers;
    returns the checkpoint's meta entry naming the file."""
    directory = checkpoint_dir(run_dir)
    os.makedirs(directory, exist_ok=True)
    name = f"buffer_{env_steps:012d}.npz"
    buffer.save(os.path.join(directory, name))
    for old in sorted(glob.glob(os.path.join(directory, "buffer_*.npz")))[:-2]:  # the last two checkpoints'
        os.remove(old)
    return {"buffer_file": name}


def _restore_replay(config: PALConfig, monitor: Monitor, buffer) -> tuple[int, str | None]:
    """On `--resume` with `checkpoint_buffer`, reloads the replay buffer saved with the restored checkpoint.
    Returns the env steps to collect before the first update (`learning_starts`, or 0 when the buffer came back)
    and the buffer file restored (None: none)."""
    state: PALState = monitor.state
    collected0, updates0 = int(state.env_steps), int(state.update_step)
    warmup = config.learning_starts
    buffer_restored = None
    if config.resume and config.checkpoint_buffer and monitor.resumed_meta.get("buffer_file"):
        buffer_restored = _restore_buffer(buffer, checkpoint_dir(monitor.run_dir), monitor.resumed_meta["buffer_file"])
        warmup = 0 if buffer_restored else warmup
    if config.resume:
        monitor.outputs.print(
            f"[pal] resumed at {collected0:,} env steps, {updates0:,} updates; replay buffer "
            + (f"restored ({len(buffer):,} transitions from {buffer_restored})" if buffer_restored
               else f"empty: refilling {warmup:,} env steps before learning")
        )
    return warmup, buffer_restored


class _Framework(skeleton.Loop):
    """The running framework of Figure 7: `num_actors` actor threads (V-A) and `num_learners` learner threads with
    the parameter server thread (V-B) around the shared buffer, the `RatioGate` between them (Algorithm 1's
    `update_interval`) and the parameter store. Building it opens the actors' EnvPools and starts compiling the
    update; `train` runs the threads, handing the server's reports to the monitor, until the run ends; `close` stops
    every thread and closes every EnvPool; `wind_up` raises another thread's error and makes the final state.
    `summary(framework, updates, elapsed)`: PAL's entries of summary.json."""

    def __init__(self, config: PALConfig, threads: Plan, spec: EnvSpec, agent: OffPolicyAgent, buffer,
                 monitor: Monitor, warmup: int, summary):
        self.config, self.threads, self.monitor, self._summary = config, threads, monitor, summary
        self._started, self._elapsed, self._ended = 0.0, 0.0, False  # when `train` started, its seconds, its end
        state: PALState = monitor.state
        self.collected0, self.updates0 = int(state.env_steps), int(state.update_step)
        self.gate = RatioGate(update_interval=config.update_interval, warmup=warmup, collected=self.collected0,
                              updates=self.updates0, total_steps=config.total_steps)
        self.group = ThreadGroup()
        store = ParameterStore(agent.policy_params(state.agent), version=self.updates0)
        self.reports: queue.Queue = queue.Queue()
        self.episodes = EpisodeSink()
        random_until = self.collected0 + warmup  # DDPG / TD3 / SAC act uniformly while the buffer warms up
        self.actors = [Actor(i, config, spec, agent, buffer, store, self.gate, self.episodes, random_until=random_until)
                       for i in range(threads.num_actors)]
        self.actor_versions = [self.updates0] * threads.num_actors
        self.server = ParameterServer(config, threads.num_learners, agent, state, buffer, store, self.gate, self.group,
                                      self.reports, self.actor_versions)
        self.server.compile_update_ahead()
        self._actors_left = threads.num_actors
        self._actors_lock = threading.Lock()

    def train(self) -> None:
        self._started = time.perf_counter()
        self._spawn(self.monitor.profile)
        self._follow(self.monitor)
        self._ended = True

    def close(self) -> None:
        self._elapsed = time.perf_counter() - self._started
        if not self._ended:
            self._free_actors_blocked_in_an_env()
        self.group.stop()
        for actor in self.actors:
            actor.close()

    def wind_up(self, stopped: skeleton.StopCause | None) -> dict:
        if stopped is None:
            self.group.check()
        collected, updates = self.gate.snapshot()
        self.monitor.state = PALState(self.server.state, np.asarray(updates, np.int64),
                                      np.asarray(collected, np.int64))
        return self._summary(self, updates, self._elapsed)

    def _free_actors_blocked_in_an_env(self) -> None:
        """A stop (or an env's failure) while an actor waits in a hung env's step: the threads get a moment to stop;
        an actor still inside its step then has its pool closed (its hung worker process killed), which ends the
        step with an error the stopping run ignores."""
        self.group.stop(timeout=1.0, patience=0)
        if any(name.startswith("actor-") for name in self.group.running_names()):
            for actor in self.actors:
                actor.close()

    def _spawn(self, profile: Profile) -> None:
        for actor in self.actors:
            self.group.spawn(f"actor-{actor.actor_id}",
                             profile.timed("actors", lambda actor=actor: self._actor_loop(actor)))
        for i in range(self.threads.num_learners):
            self.group.spawn(f"learner-{i}", profile.timed("learners", lambda i=i: self.server.learner_loop(i)))
        self.group.spawn("parameter-server", profile.timed("server", self.server.server_loop))

    def _actor_loop(self, actor: Actor) -> None:
        """One actor thread (V-A): steps its envs whenever the gate lets it; the last actor to stop tells the
        gate, so the learners do not wait for data that will never come."""
        try:
            while not self.group.stopping.is_set() and self._actor_may_step():
                self.gate.add_collected(actor.step())
                self.actor_versions[actor.actor_id] = actor.version
        finally:
            with self._actors_lock:
                self._actors_left -= 1
                if self._actors_left == 0:
                    self.gate.actors_finished()

    def _actor_may_step(self) -> bool:
        with stage("wait_for_gate"):
            return self.gate.actor_wait(self.group.stopping)

    def _follow(self, monitor: Monitor) -> None:
        """The main thread: passes each report to the monitor until the server's last (None), the monitor's stop
        (time limit, total steps) or the evaluation target."""
        while True:
            self.group.check()
            try:
                with stage("wait_for_learner"):
                    report = self.reports.get(timeout=0.1)
            except queue.Empty:
                monitor.heartbeat(self.gate.collected - self.collected0)
                continue
            if report is None:
                return
            if monitor.on_report(report, self.episodes.pop()):  # the time limit or --stop_at_target
                return


def _summary_extra(config: PALConfig, threads: Plan, framework: _Framework, updates: int, elapsed: float, *, buffer,
                   needed: int, profile, buffer_restored: str | None) -> dict:
    """PAL's own entries of summary.json: the layout, the throughputs, the replay and (allocate=auto) the Eq. 5
    profile and choice."""
    server, gate, updates0 = framework.server, framework.gate, framework.updates0
    extra = {
        "num_actors": threads.num_actors,
        "envs_per_actor": config.envs_per_actor,
        "num_learners": threads.num_learners,
        "batch_size": config.batch_size,
        "update_interval": config.update_interval,
        "replay": config.replay,
        "optimizer_steps": updates,
        "optimizer_steps_per_second": (updates - updates0) / max(elapsed, 1e-9),
        "learned_transitions_per_second": (updates - updates0) * config.batch_size / max(elapsed, 1e-9),
        "collected_per_update": None if math.isnan(gate.measured_interval()) else gate.measured_interval(),
        "replay_size": len(buffer),
        "replay_bytes": needed,
        "priorities_updated": server.priorities_updated,
        "sample_seconds_per_learner": [float(s) for s in server.sample_seconds],
        "update_seconds": server.update_seconds,
        "buffer_restored": buffer_restored is not None,
    }
    if profile is not None:
        actor_curve, learner_curve, choice = profile
        extra["allocation"] = {
            "cores": config.cores or usable_cores(),
            "actor_env_steps_per_second": {str(k): v for k, v in actor_curve.items()},
            "learner_optimizer_steps_per_second": {str(k): v for k, v in learner_curve.items()},
            "actors": choice.actors, "learners": choice.learners, "imbalance": choice.imbalance,
        }
    return extra
