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
"""

from __future__ import annotations

import dataclasses
import glob
import math
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from envs.episodes import EpisodeTracker, split_done
from envs.factory import EnvSpec, make_pool, make_spec
from systems.common import config as config_lib
from systems.common import limits
from systems.common.checkpoint import Checkpointing, checkpoint_dir
from systems.common.concurrency import ParameterStore, StopRequested, ThreadGroup
from systems.common.evaluation import Evaluator
from systems.common.learner import compile_in_background
from systems.common.monitor import LearnerReport, Monitor, Progress
from systems.offpolicy.agent import OffPolicyAgent, PALState, build_agent
from systems.offpolicy.config import (
    ALGOS,
    CONTINUOUS_ALGOS,
    DISCRETE_ALGOS,
    OffPolicyConfig,
    metric_columns,
    reached_target,
)
from systems.pal import allocate as allocate_lib
from systems.replay import FrameStackBuffer, PrioritizedBuffer, UniformBuffer

SYSTEM = "pal"
REPLAYS = ("per", "uniform")
ALLOCATIONS = ("manual", "auto")
SUPPORTED_FAMILIES = ("classic", "box2d", "mujoco", "atari")
_REPORT_SECONDS = 1.0  # at most one progress row per second (updates can run at thousands per second)
_POLL = 0.05


@dataclasses.dataclass(frozen=True)
class PALConfig(OffPolicyConfig):
    """A PAL run: the off-policy fields plus actor and learner threads and the prioritized replay. `num_envs` is
    derived (actors x envs per actor)."""

    num_actors: int = 1  # actor threads, each with its own EnvPool
    envs_per_actor: int = 4  # envs of each actor's own EnvPool
    num_learners: int = 1  # learner threads; each samples batch_size / num_learners per optimizer step
    update_interval: float = 1.0  # env steps collected per optimizer step (Alg. 1); 0: actors and learners free
    replay: str = "per"  # per | uniform
    per_alpha: float = 0.6
    per_beta: float = 0.4  # annealed linearly to 1 over the run
    priority_eps: float = 1e-6
    tree_k: int = 16
    allocate: str = "manual"  # manual | auto (Eq. 5)
    cores: int = 0  # M for allocate=auto (0: os.cpu_count())
    profile_seconds: float = 2.0  # measuring time per point of the allocate=auto profile
    checkpoint_buffer: bool = False  # save the replay buffer with each checkpoint (and restore it on --resume)


def validate(config: PALConfig) -> None:
    """Raises ConfigError with one clear line for the first bad value."""
    error = config_lib.ConfigError
    config_lib.validate_run_fields(config)
    if config.algo not in ALGOS:
        raise error(f"--algo must be one of {', '.join(ALGOS)} for launch.pal, got '{config.algo}'")
    for name in ("num_actors", "envs_per_actor", "num_learners", "batch_size", "buffer_size", "total_steps",
                 "target_update_period", "tree_k"):
        if getattr(config, name) <= 0:
            raise error(f"--{name} must be positive, got {getattr(config, name)}")
    for name in ("learning_starts", "eval_every", "eval_episodes", "checkpoint_every", "cores"):
        if getattr(config, name) < 0:
            raise error(f"--{name} must be non-negative, got {getattr(config, name)}")
    limits.require_threads(config.num_actors, "num_actors")
    limits.require_threads(config.num_learners, "num_learners")
    if config.num_actors * config.envs_per_actor > config_lib.MAX_ENVS:
        raise error(f"--num_actors x --envs_per_actor = {config.num_actors * config.envs_per_actor:,} envs is above "
                    f"the limit of {config_lib.MAX_ENVS:,} envs per run")
    if config.learning_starts >= config.total_steps:
        raise error(f"--learning_starts={config.learning_starts:,} leaves no updates within --total_steps="
                    f"{config.total_steps:,}")
    if config.tree_k < 2:
        raise error(f"--tree_k must be at least 2, got {config.tree_k}")
    if config.batch_size % config.num_learners:
        raise error(f"--num_learners={config.num_learners} must divide --batch_size={config.batch_size}")
    if config.replay not in REPLAYS:
        raise error(f"--replay must be one of {', '.join(REPLAYS)}, got '{config.replay}'")
    if config.allocate not in ALLOCATIONS:
        raise error(f"--allocate must be one of {', '.join(ALLOCATIONS)}, got '{config.allocate}'")
    if not (math.isfinite(config.update_interval) and config.update_interval >= 0):
        raise error(f"--update_interval must be finite and >= 0, got {config.update_interval}")
    if config.allocate == "auto" and config.update_interval == 0:
        raise error("--allocate=auto balances actors against learners by --update_interval, which must be > 0")
    if config.learning_rate <= 0 or config.critic_learning_rate < 0:
        raise error("--learning_rate must be positive and --critic_learning_rate non-negative")
    if not 0 < config.gamma <= 1:
        raise error(f"--gamma must be in (0, 1], got {config.gamma}")
    if not 0 < config.tau <= 1 and not (config.algo in DISCRETE_ALGOS and config.tau >= 1):
        raise error(f"--tau must be in (0, 1], got {config.tau}")
    if config.per_alpha < 0 or config.per_beta < 0 or config.priority_eps <= 0:
        raise error("--per_alpha and --per_beta must be >= 0 and --priority_eps > 0")
    if not (0 <= config.epsilon_end <= config.epsilon_start <= 1) or not 0 <= config.exploration_fraction <= 1:
        raise error("need 0 <= --epsilon_end <= --epsilon_start <= 1 and --exploration_fraction in [0, 1]")
    if config.action_noise < 0:
        raise error(f"--action_noise must be >= 0, got {config.action_noise}")
    if not config.hidden_sizes or any(h <= 0 for h in config.hidden_sizes):
        raise error(f"--hidden_sizes must be positive integers, got {config.hidden_sizes}")
    if config.profile_seconds <= 0:
        raise error(f"--profile_seconds must be positive, got {config.profile_seconds}")
    if config.time_limit < 0:
        raise error(f"--time_limit must be non-negative, got {config.time_limit}")


def check_env(config: PALConfig, spec: EnvSpec) -> None:
    """Algorithm and task must fit: discrete for DQN, continuous vectors for DDPG / TD3 / SAC."""
    if spec.family not in SUPPORTED_FAMILIES:
        raise config_lib.ConfigError(
            f"launch.pal supports {', '.join(SUPPORTED_FAMILIES)} tasks; {spec.env_id} is {spec.family}"
        )
    if config.algo in DISCRETE_ALGOS and spec.continuous:
        raise config_lib.ConfigError(
            f"--algo={config.algo} needs discrete actions; {spec.env_id} is continuous (use ddpg, td3 or sac)"
        )
    if config.algo in CONTINUOUS_ALGOS and not spec.continuous:
        raise config_lib.ConfigError(
            f"--algo={config.algo} needs continuous actions; {spec.env_id} is discrete (use dqn or ddqn)"
        )
    if config.algo in CONTINUOUS_ALGOS and len(spec.obs_shape) != 1:
        raise config_lib.ConfigError(f"--algo={config.algo} needs vector observations, {spec.env_id} has images")


# ----------------------------------------------------------------------------------------------- coordination


class RatioGate:
    """Holds Algorithm 1's update_interval U between actor and learner threads: update u (counted from the start of
    this run, from 1) may run once `warmup + u U` env steps have been collected; actors wait while the next update
    is already due, so at any time only one side can wait (no deadlock) and collected / updates stays within one
    actor step of U. With U = 0 nobody waits: actors run until `total_steps`, learners until the actors stop."""

    def __init__(self, *, update_interval: float, warmup: int, collected: int, updates: int, total_steps: int):
        self.update_interval = float(update_interval)
        self.warmup = int(warmup)
        self._collected0, self._updates0 = int(collected), int(updates)
        self.collected, self.updates = int(collected), int(updates)
        self.total_steps = int(total_steps)
        self.collection_done = False
        self._cond = threading.Condition()

    @property
    def total_updates(self) -> int | None:
        """Optimizer steps the run will take in total (None when U = 0: as many as the learners manage)."""
        if self.update_interval == 0:
            return None
        budget = self.total_steps - self._collected0 - self.warmup
        return self._updates0 + max(0, int(math.floor(budget / self.update_interval + 1e-9)))

    def _due(self) -> bool:
        """The next update may run."""
        needed = self.warmup + (self.updates - self._updates0 + 1) * self.update_interval
        return self.collected - self._collected0 >= needed

    def actor_wait(self, stopping: threading.Event) -> bool:
        """Blocks while the learners are behind; False when collection is complete."""
        with self._cond:
            while True:
                if self.collected >= self.total_steps:
                    return False
                if self.update_interval == 0 or not self._due():
                    return True
                if stopping.is_set():
                    raise StopRequested
                self._cond.wait(_POLL)

    def add_collected(self, steps: int) -> None:
        with self._cond:
            self.collected += steps
            if self.collected >= self.total_steps:
                self.collection_done = True
            self._cond.notify_all()

    def actors_finished(self) -> None:
        with self._cond:
            self.collection_done = True
            self._cond.notify_all()

    def learner_wait(self, stopping: threading.Event) -> bool:
        """Blocks until the next update is due; False when the run has taken all its updates."""
        with self._cond:
            while True:
                total = self.total_updates
                if total is not None and self.updates >= total:
                    return False
                if self.update_interval == 0:
                    if self.collection_done:
                        return False
                    if self.collected - self._collected0 >= max(self.warmup, 1):
                        return True
                elif self._due():
                    return True
                if stopping.is_set():
                    raise StopRequested
                self._cond.wait(_POLL)

    def add_update(self) -> None:
        with self._cond:
            self.updates += 1
            self._cond.notify_all()

    def measured_interval(self) -> float:
        """Env steps collected per update in this run after the warm-up (NaN before the first update)."""
        with self._cond:
            updates = self.updates - self._updates0
            return (self.collected - self._collected0 - self.warmup) / updates if updates else float("nan")

    def snapshot(self) -> tuple[int, int]:
        with self._cond:
            return self.collected, self.updates


class EpisodeSink:
    """Finished training episodes of all actors, popped by the main thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._episodes: list[tuple[int, float, int]] = []

    def add(self, episodes) -> None:
        if episodes:
            with self._lock:
                self._episodes.extend(episodes)

    def pop(self) -> list[tuple[int, float, int]]:
        with self._lock:
            episodes, self._episodes = self._episodes, []
            return episodes


# ----------------------------------------------------------------------------------------------- actors


class Actor:
    """One actor thread's state: its EnvPool, current observations and exploration (seed 003, section V-A)."""

    def __init__(self, actor_id: int, config: PALConfig, spec: EnvSpec, agent: OffPolicyAgent, buffer,
                 store: ParameterStore, gate: RatioGate, episodes: EpisodeSink, *, random_until: int):
        self.actor_id = actor_id
        self.config, self.spec, self.agent = config, spec, agent
        self.buffer, self.store, self.gate, self.episodes = buffer, store, gate, episodes
        self.random_until = random_until  # collected env steps below which continuous actors act uniformly
        self.num_envs = config.envs_per_actor
        first_env = actor_id * self.num_envs
        self.pool = make_pool(spec, num_envs=self.num_envs, batch_size=self.num_envs, seed=config.seed + first_env,
                              num_threads=1)
        self.tracker = EpisodeTracker(self.num_envs, spec.family, spec.max_episode_steps)
        self.key = jax.random.fold_in(agent.action_key, actor_id)
        self.rng = np.random.default_rng([config.seed, actor_id])
        self.steps = 0
        self.version = 0
        self.obs = None
        self.reset_step = np.zeros(self.num_envs, dtype=bool)  # this env's next step is EnvPool's reset step
        self.continues = np.zeros(self.num_envs, dtype=bool)  # the env's obs is its previous transition's next_obs
        self.streams = first_env + np.arange(self.num_envs)  # FrameStackBuffer stream ids (global env ids)

    def explore(self, collected: int) -> float:
        """DQN epsilon (linear decay over exploration_fraction of total_steps) or DDPG / TD3 noise scale."""
        config = self.config
        if config.algo in DISCRETE_ALGOS:
            horizon = config.exploration_fraction * config.total_steps
            fraction = 1.0 if horizon <= 0 else min(1.0, collected / horizon)
            return config.epsilon_start + fraction * (config.epsilon_end - config.epsilon_start)
        return config.action_noise

    def step(self) -> int:
        """One synchronous step of this actor's envs; inserts the transitions; returns env steps taken."""
        if self.obs is None:
            self.obs, _ = self.pool.reset()
        self.version, params = self.store.latest()
        collected = self.gate.collected
        if self.agent.discrete or collected >= self.random_until:
            key = jax.random.fold_in(self.key, self.steps)
            actions = np.asarray(self.agent.act(params, self.obs, key, self.explore(collected)))
        else:
            actions = self.rng.uniform(self.spec.action_low, self.spec.action_high,
                                       (self.num_envs, self.spec.action_dim)).astype(np.float32)
        next_obs, rewards, terminated, truncated, info = self.pool.step(actions)
        env_ids = np.asarray(info["env_id"])
        if not np.array_equal(env_ids, np.arange(self.num_envs)):  # synchronous pools answer in env order
            raise RuntimeError(f"actor {self.actor_id}: EnvPool returned envs {env_ids} out of order")
        term, trunc = split_done(self.spec.family, terminated, truncated, info, self.spec.max_episode_steps)
        self.tracker.step(env_ids, rewards, terminated, truncated, info)
        self.episodes.add(self.tracker.pop_finished())
        real = ~self.reset_step
        if real.any():
            transitions = {
                "obs": self.obs[real],
                "action": actions[real].astype(self.agent.example["action"].dtype),
                "reward": np.asarray(rewards, np.float32)[real],
                "next_obs": next_obs[real],
                "done": term[real],
            }
            if isinstance(self.buffer, FrameStackBuffer):
                obs = transitions.pop("obs")
                self.buffer.insert(self.streams[real], obs, continues=self.continues[real], **transitions)
            else:
                self.buffer.insert(transitions)
        self.reset_step = (term + trunc) > 0
        self.continues = real & ~self.reset_step
        self.obs = next_obs
        self.steps += 1
        return self.num_envs

    def run(self, stopping: threading.Event) -> None:
        while not stopping.is_set() and self.gate.actor_wait(stopping):
            self.gate.add_collected(self.step())

    def close(self) -> None:
        self.pool.close()


# ----------------------------------------------------------------------------------------------- learners


class ParameterServer:
    """Learner threads sample sub-batches; the server thread averages their gradients into one optimizer step
    (`OffPolicyAgent.update`), hands each learner its new priorities and publishes the parameters (section V-B)."""

    def __init__(self, config: PALConfig, agent: OffPolicyAgent, state: PALState, buffer, store: ParameterStore,
                 gate: RatioGate, group: ThreadGroup, reports: queue.Queue | None, actor_versions):
        self.config, self.agent, self.buffer, self.store = config, agent, buffer, store
        self.gate, self.group = gate, group
        self.state = state.agent
        self.num_learners = config.num_learners
        self.sub_batch = config.batch_size // config.num_learners
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
        self._reported_updates: int | None = None
        self._every = min([e for e in (config.eval_every, config.checkpoint_every) if e > 0], default=0)
        self._next_due = (gate.collected // self._every + 1) * self._every if self._every else None
        self._wait_for_compile: Callable[[], None] = lambda: None

    def compile_update_ahead(self) -> None:
        """Compiles the update in the background while the actors fill the buffer up to `learning_starts` (the
        Atari DQN update compiles for tens of seconds on 2 cores); the server waits for it before its first step.
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
            if self.finished.is_set() or not self.gate.learner_wait(self.group.stopping):
                self.inbox.put((learner_id, None))
                return
            start = time.perf_counter()
            sample = self.buffer.sample(self.sub_batch, rng, self.beta(self.gate.collected))
            self.sample_seconds[learner_id] += time.perf_counter() - start
            self.inbox.put((learner_id, sample))
            while True:
                try:
                    priorities = self.outboxes[learner_id].get(timeout=_POLL)
                    break
                except queue.Empty:
                    if self.finished.is_set():
                        return
                    if self.group.stopping.is_set():
                        raise StopRequested from None
            self.priorities_updated += self.buffer.update_priorities(sample.indices, priorities)

    def server_loop(self) -> None:
        try:
            while True:
                if self.group.stopping.is_set():
                    raise StopRequested
                samples: list[Any] = [None] * self.num_learners
                for _ in range(self.num_learners):
                    learner_id, sample = self._next_sample()
                    if sample is None:
                        return
                    samples[learner_id] = sample
                batch = {name: np.stack([s.batch[name] for s in samples]) for name in samples[0].batch}
                weights = np.stack([s.weights for s in samples])
                self._wait_for_compile()
                start = time.perf_counter()
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

    def _next_sample(self):
        while True:
            try:
                return self.inbox.get(timeout=_POLL)
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


# ----------------------------------------------------------------------------------------------- the run


def uses_frame_buffer(spec: EnvSpec) -> bool:
    """Stacked uint8 frames (Atari [4, 84, 84]) go to the frame-indexed buffer: each frame stored once."""
    return len(spec.obs_shape) == 3 and np.dtype(spec.obs_dtype) == np.uint8


def make_buffer(config: PALConfig, agent: OffPolicyAgent, capacity: int | None = None, spec: EnvSpec | None = None):
    """The run's replay buffer. Image tasks get `FrameStackBuffer` (one stream per env; `capacity` counts frame
    rows, about one per transition), vector tasks `PrioritizedBuffer` / `UniformBuffer` (all fields stored)."""
    capacity = capacity or config.buffer_size
    if spec is not None and uses_frame_buffer(spec):
        streams = config.num_actors * config.envs_per_actor
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


def profile_and_allocate(config: PALConfig, spec: EnvSpec, agent: OffPolicyAgent, print_fn) -> tuple[PALConfig, tuple]:
    """`--allocate=auto`: measures f_a(x) and f_l(x) for x = 1 .. M - 1 threads and solves Eq. 5."""
    cores = config.cores or os.cpu_count() or 2
    if cores < 2:
        raise config_lib.ConfigError("--allocate=auto needs at least 2 cores (one actor, one learner)")
    seconds = config.profile_seconds
    print_fn(f"[pal] profiling actors and learners for Eq. 5 ({seconds:g} s per point, up to {cores - 1} threads)")
    scratch = make_buffer(dataclasses.replace(config, num_actors=cores - 1), agent,
                          capacity=min(config.buffer_size, 100_000), spec=spec)
    actor_curve = {x: measure_actors(config, spec, agent, scratch, x, seconds) for x in range(1, cores)}
    learner_curve = {
        x: measure_learners(dataclasses.replace(config, num_learners=x), agent, scratch, seconds)
        for x in range(1, cores)
        if config.batch_size % x == 0
    }
    choice = allocate_lib.choose_allocation(actor_curve, learner_curve, cores=cores,
                                            update_interval=config.update_interval)
    print_fn(allocate_lib.format_profile(actor_curve, learner_curve, config.update_interval, choice, cores))
    return dataclasses.replace(config, num_actors=choice.actors, num_learners=choice.learners,
                               num_envs=choice.actors * config.envs_per_actor), (actor_curve, learner_curve, choice)


def _run_threads(group: ThreadGroup, targets, count, seconds: float) -> float:
    """Runs `targets` [(name, fn)] in `group` (the group their loops watch) for `seconds`; returns the rate of
    `count()` over that window, read when the window closes, before the threads are stopped."""
    for name, target in targets:
        group.spawn(name, target)
    start, first = time.perf_counter(), count()
    while time.perf_counter() - start < seconds and group.running():
        time.sleep(_POLL)
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


def measure_learners(config: PALConfig, agent: OffPolicyAgent, buffer, seconds: float) -> float:
    """f_l(num_learners): optimizer steps per second with `config.num_learners` learner threads on `buffer`."""
    gate = RatioGate(update_interval=0, warmup=0, collected=2, updates=0, total_steps=2**62)
    gate._collected0 = 1  # one step "collected": learners may run, nothing else is gated
    group = ThreadGroup()
    store = ParameterStore(agent.policy_params(agent.initial_state.agent))
    server = ParameterServer(config, agent, agent.initial_state, buffer, store, gate, group, None, [])
    sub = config.batch_size // config.num_learners
    warm = [buffer.sample(sub) for _ in range(config.num_learners)]  # compile outside the timed window
    jax.block_until_ready(agent.update(server.state, {k: np.stack([s.batch[k] for s in warm]) for k in warm[0].batch},
                                       np.stack([s.weights for s in warm])))
    targets = [("profile-server", server.server_loop)] + [
        (f"profile-learner-{i}", lambda i=i: server.learner_loop(i)) for i in range(config.num_learners)
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
    validate(config)
    spec = make_spec(config.env_id)
    check_env(config, spec)
    agent = build_agent(config, spec)
    needed = buffer_bytes(config, agent, spec)
    limits.require_memory(needed, f"--buffer_size={config.buffer_size:,} (the replay buffer)")
    if config.checkpoint_buffer and uses_frame_buffer(spec):
        raise config_lib.ConfigError("--checkpoint_buffer is not supported yet for image tasks (frame-indexed buffer)")
    profile = None
    if config.allocate == "auto":
        config, profile = profile_and_allocate(config, spec, agent, (lambda line: None) if config.quiet else print)
    buffer = make_buffer(config, agent, spec=spec)
    monitor = _make_monitor(config, spec, agent, buffer, needed)
    warmup, buffer_restored = _restore_replay(config, monitor, buffer)
    framework = _Framework(config, spec, agent, buffer, monitor.state, warmup)
    interrupted, elapsed = framework.train(monitor)
    collected, updates = framework.gate.snapshot()
    monitor.state = PALState(framework.server.state, np.asarray(updates, np.int64), np.asarray(collected, np.int64))
    extra = _summary_extra(config, framework, updates, elapsed, buffer, needed, profile, buffer_restored)
    summary = monitor.finish(interrupted=interrupted is not None, extra=extra)
    if interrupted is not None:
        raise monitor.saved(interrupted)  # the same exception: the exit status tells SIGTERM from Ctrl-C
    return summary


def _make_monitor(config: PALConfig, spec: EnvSpec, agent: OffPolicyAgent, buffer, needed: int) -> Monitor:
    """The run's outputs (and, with `--resume`, its restored state); with `checkpoint_buffer` each checkpoint also
    saves the replay buffer (`_save_buffer`)."""

    def checkpoint_extra(env_steps: int) -> dict:
        return _save_buffer(buffer, monitor.run_dir, env_steps) if config.checkpoint_buffer else {}

    evaluator = None
    if config.eval_episodes > 0:
        evaluator = Evaluator(spec, None, episodes=config.eval_episodes, seed=agent.eval_seed, deterministic=True,
                              act_fn=agent.eval_act)
    sizes = (f"actors {config.num_actors}x{config.envs_per_actor} envs  learners {config.num_learners}  batch "
             f"{config.batch_size}  update_interval {config.update_interval:g}  replay {config.replay} "
             f"{config.buffer_size:,} ({needed / 2**30:.2f} GiB)")
    progress = Progress(
        metric_columns=metric_columns(config.algo) + ("replay_size", "collected_per_update"), steps_per_update=1,
        env_steps_of=lambda s: int(s.env_steps), max_policy_lag=None, sizes=sizes,
    )
    monitor = Monitor(
        SYSTEM, config, agent.initial_state, progress=progress, evaluator=evaluator,
        policy_params=lambda s: agent.policy_params(s.agent), checkpointing=Checkpointing(extra_meta=checkpoint_extra),
    )
    return monitor


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


class _Framework:
    """The running framework of Figure 7: `num_actors` actor threads (V-A) and `num_learners` learner threads with
    the parameter server thread (V-B) around the shared buffer, the `RatioGate` between them (Algorithm 1's
    `update_interval`) and the parameter store. Building it opens the actors' EnvPools and starts compiling the
    update; `train` runs the threads until the run ends and closes everything."""

    def __init__(self, config: PALConfig, spec: EnvSpec, agent: OffPolicyAgent, buffer, state: PALState,
                 warmup: int):
        self.config = config
        self.collected0, self.updates0 = int(state.env_steps), int(state.update_step)
        self.gate = RatioGate(update_interval=config.update_interval, warmup=warmup, collected=self.collected0,
                              updates=self.updates0, total_steps=config.total_steps)
        self.group = ThreadGroup()
        store = ParameterStore(agent.policy_params(state.agent), version=self.updates0)
        self.reports: queue.Queue = queue.Queue()
        self.episodes = EpisodeSink()
        random_until = self.collected0 + warmup  # DDPG / TD3 / SAC act uniformly while the buffer warms up
        self.actors = [Actor(i, config, spec, agent, buffer, store, self.gate, self.episodes, random_until=random_until)
                       for i in range(config.num_actors)]
        self.actor_versions = [self.updates0] * config.num_actors
        self.server = ParameterServer(config, agent, state, buffer, store, self.gate, self.group, self.reports,
                                      self.actor_versions)
        self.server.compile_update_ahead()
        self._actors_left = config.num_actors
        self._actors_lock = threading.Lock()

    def train(self, monitor: Monitor) -> tuple[KeyboardInterrupt | None, float]:
        """Runs the threads, handing the server's reports to `monitor`, until the run ends; returns the Ctrl-C /
        SIGTERM (`launch.common.Terminated`) that stopped it, if one did, and the seconds it ran. A thread's error
        is raised here; every thread is stopped and every EnvPool closed either way."""
        interrupted: KeyboardInterrupt | None = None
        start = time.perf_counter()
        try:
            self._spawn()
            self._follow(monitor)
        except KeyboardInterrupt as stop:
            interrupted = stop
            monitor.outputs.print("[pal] interrupted: saving a checkpoint of the newest parameters")
        finally:
            self.group.stop()
            for actor in self.actors:
                actor.close()
        if interrupted is None:
            self.group.check()
        return interrupted, time.perf_counter() - start

    def _spawn(self) -> None:
        for actor in self.actors:
            self.group.spawn(f"actor-{actor.actor_id}", lambda actor=actor: self._actor_loop(actor))
        for i in range(self.config.num_learners):
            self.group.spawn(f"learner-{i}", lambda i=i: self.server.learner_loop(i))
        self.group.spawn("parameter-server", self.server.server_loop)

    def _actor_loop(self, actor: Actor) -> None:
        """One actor thread (V-A): steps its envs whenever the gate lets it; the last actor to stop tells the
        gate, so the learners do not wait for data that will never come."""
        try:
            while not self.group.stopping.is_set() and self.gate.actor_wait(self.group.stopping):
                self.gate.add_collected(actor.step())
                self.actor_versions[actor.actor_id] = actor.version
        finally:
            with self._actors_lock:
                self._actors_left -= 1
                if self._actors_left == 0:
                    self.gate.actors_finished()

    def _follow(self, monitor: Monitor) -> None:
        """The main thread: passes each report to the monitor until the server's last (None), the monitor's stop
        (time limit, total steps) or the evaluation target."""
        while True:
            self.group.check()
            try:
                report = self.reports.get(timeout=0.1)
            except queue.Empty:
                monitor.heartbeat(self.gate.collected - self.collected0)
                continue
            if report is None:
                return
            if monitor.on_report(report, self.episodes.pop()) or reached_target(monitor.evaluations, self.config):
                return


def _summary_extra(config: PALConfig, framework: _Framework, updates: int, elapsed: float, buffer, needed: int,
                   profile, buffer_restored: str | None) -> dict:
    """PAL's own entries of summary.json: the layout, the throughputs, the replay and (allocate=auto) the Eq. 5
    profile and choice."""
    server, gate, updates0 = framework.server, framework.gate, framework.updates0
    extra = {
        "num_actors": config.num_actors,
        "envs_per_actor": config.envs_per_actor,
        "num_learners": config.num_learners,
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
            "cores": config.cores or os.cpu_count(),
            "actor_env_steps_per_second": {str(k): v for k, v in actor_curve.items()},
            "learner_optimizer_steps_per_second": {str(k): v for k, v in learner_curve.items()},
            "actors": choice.actors, "learners": choice.learners, "imbalance": choice.imbalance,
        }
    return extra
