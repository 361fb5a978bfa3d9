"""The one skeleton every system runs through, in the spirit of Acme's builders: a system supplies its own parts
(its plan, its agent, its loop) and `run` does what every run does around them.

* `run(system, config, open_run, validate=...)`: joins a multi-host job (`distributed.initialize`), validates the
  config, calls the system's `open_run(config) -> Opening` (its plan and its agent: network, optimizer, update),
  opens the run directory through the `Monitor` (restoring the newest checkpoint on `--resume`), asks the opening
  for its `Loop` over the restored state, runs the loop's `train` under the one stop handling (`until_stopped`),
  closes the loop whatever happened and finishes: the final evaluation, checkpoint and summary, or after a stop the
  saved checkpoint and the stop re-raised (`finish`).
* `open_on_policy`: the opening of the round-collecting on-policy systems (HTS, the sync baseline): the env spec,
  the agent and the evaluator, and a `RunContext` that makes the executor and round collector with the run's
  settings; `LockstepLoop`: the loop of a lock-step system (sync baseline, BA3C, GALA pmap).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import jax

from agents import TrainState
from envs.actor_pools import ActorPools
from envs.executor import Executor
from envs.factory import EnvSpec, make_spec
from envs.pool_api import EnvFailed
from envs.step_time import StepTimeDistribution, parse_step_time
from systems.common import config as config_lib
from systems.common import distributed
from systems.common.checkpoint import Checkpointing
from systems.common.learner import LearnerSetup, compile_in_background
from systems.common.monitor import Monitor, Progress, on_policy_evaluator
from systems.common.outputs import on_policy_columns
from systems.common.profile import Profile, stage
from systems.common.rollout import RoundCollector, RoundStorage

AgentMaker = Callable[[config_lib.TrainConfig, EnvSpec], tuple[LearnerSetup, TrainState]]
"""A system's agent: `(config, spec) -> (LearnerSetup, initial TrainState)` (`learner.build` of its parts)."""

StopCause = KeyboardInterrupt | EnvFailed
"""What ends a run early and still saves it: Ctrl-C, `launch.common.Terminated` (SIGTERM) and
`distributed.PeerStopped` are KeyboardInterrupts; `EnvFailed` is a user's env that failed."""


class Loop:
    """A system's training loop over the state its Monitor restored. The skeleton calls `train` under the stop
    handling, then `close` (always), then `wind_up` (after a stop too) and finally `summary`."""

    saving = "a checkpoint of the newest parameters"
    """What the run saves when it stops early (the line it prints)."""
    collectives = False
    """True where the updates all-reduce over a multi-process job: a failed collective then means another process
    stopped, and this one stops as after a Ctrl-C (`until_stopped`)."""

    def train(self) -> None:
        """Trains until the run's end (or a stop, raised)."""
        raise NotImplementedError

    def close(self) -> None:
        """Stops the loop's threads, processes and envs and frees what they hold; called whatever happened."""

    def wind_up(self, stopped: StopCause | None) -> dict | None:
        """After `close`: the Monitor's final state where the loop kept it elsewhere, and the system's own entries
        of summary.json (None: none). A worker's error is raised here."""
        return None

    def summary(self, summaries: list[dict]) -> dict:
        """What `run` returns of the finished Monitors' summaries (one per agent of the run)."""
        return summaries[0]


@dataclasses.dataclass
class Agent:
    """One learner state of a run and what records it (a population has one per agent, each with its own Monitor
    and run directory)."""

    config: Any
    state: Any
    evaluator: Any = None


@dataclasses.dataclass
class Opening:
    """What a system hands the skeleton before its loop: its agents (one, or Anakin's population), the Monitor's
    parts, and `start(*monitors) -> Loop | None`, called once the Monitors have restored the run's state (None:
    nothing is left to train)."""

    agents: list[Agent]
    start: Callable[..., Loop | None]
    progress: Progress = dataclasses.field(default_factory=Progress)
    policy_params: Callable[[Any], Any] | None = None
    checkpointing: Checkpointing = dataclasses.field(default_factory=Checkpointing)
    may_change_on_resume: frozenset = frozenset()
    plan: dict | None = None
    profile: Profile | None = None

    def monitors(self, system: str) -> list[Monitor]:
        """One Monitor per agent, made last to first: the stage clock of the calling thread is the last one bound,
        so the first agent's summary carries the run's profile."""
        made = [Monitor(system, agent.config, agent.state, progress=self.progress, evaluator=agent.evaluator,
                        policy_params=self.policy_params, checkpointing=self.checkpointing,
                        may_change_on_resume=self.may_change_on_resume, plan=self.plan, profile=self.profile)
                for agent in reversed(self.agents)]
        return made[::-1]


def join_job(config: Any) -> None:
    """Joins the multi-host job the config names (`distributed.initialize`; nothing for one process or a system
    without one). First of all: JAX must not have started before it (a gymnax task's validation builds its env)."""
    if hasattr(config, "coordinator_address"):
        distributed.initialize(config.coordinator_address, config.num_processes, config.process_id,
                               config.startup_timeout)


def run(system: str, config: Any, open_run: Callable[[Any], Opening], *,
        validate: Callable[[Any], None] = config_lib.validate) -> dict:
    """Runs one training run of `system` (see the module docstring); returns its summary (also written to
    `<run dir>/summary.json`)."""
    join_job(config)
    validate(config)
    opening = open_run(config)
    monitors = opening.monitors(system)
    loop = opening.start(*monitors)
    if loop is None:
        return monitors[0].finish()
    try:
        stopped = until_stopped(system, monitors[0], loop.train, saving=loop.saving, collectives=loop.collectives)
    finally:
        loop.close()
    extra = loop.wind_up(stopped)
    return loop.summary(finish(monitors, stopped, extra=extra))


def until_stopped(system: str, monitor: Monitor, loop: Callable[[], None], *,
                  saving: str = Loop.saving, collectives: bool = False) -> StopCause | None:
    """Runs `loop` (a system's training loop) and returns what stopped it early, or None when it ran to its end.
    A stop prints one line saying the run saves `saving`; any other error propagates. `collectives`: the loop's
    updates all-reduce over a multi-process job, where a failed collective means another process stopped: this
    one then stops as after a Ctrl-C (`distributed.PeerStopped`), so every process keeps its newest checkpoint."""
    try:
        loop()
    except KeyboardInterrupt as stop:
        monitor.outputs.print(f"[{system}] interrupted: saving {saving}")
        return stop
    except EnvFailed as failure:  # a user's env: the run keeps what it learned (the launcher says what failed)
        monitor.outputs.print(f"[{system}] an env failed: saving {saving}")
        return failure
    except jax.errors.JaxRuntimeError as error:
        if not collectives or jax.process_count() == 1:
            raise
        reason = str(error).strip().splitlines()[0]
        monitor.outputs.print(f"[{system}] a collective with the other processes failed ({reason}): another "
                              f"process stopped; saving {saving}")
        return distributed.PeerStopped()
    return None


def finish(monitors: list[Monitor], stopped: StopCause | None, *, extra: dict | None = None) -> list[dict]:
    """The run's final evaluations, checkpoints and summaries (`Monitor.finish`, with the system's `extra` fields),
    last agent first; returns the summaries, or re-raises `stopped` (the same exception: the exit status tells
    SIGTERM from Ctrl-C) once the checkpoints are saved, marked with the first agent's checkpoint and the directory
    a `--resume` takes (a population's: the directory above its agents')."""
    summaries = [m.finish(interrupted=stopped is not None, extra=extra) for m in monitors[::-1]][::-1]
    if stopped is not None:
        stop = monitors[0].saved(stopped)
        if len(monitors) > 1:
            stop.run_dir = os.path.dirname(stop.run_dir)
        raise stop
    return summaries


@dataclasses.dataclass
class RunContext:
    """An on-policy run once its Monitor is open: its config, env spec, agent and step-time injection, and the
    executor and round collector made with the run's settings."""

    config: config_lib.TrainConfig
    spec: EnvSpec
    setup: LearnerSetup
    monitor: Monitor
    step_time: StepTimeDistribution

    @property
    def start_round(self) -> int:
        """Rounds already learned (non-zero after --resume)."""
        return int(self.monitor.state.update_step)

    @property
    def total_rounds(self) -> int:
        return config_lib.total_rounds(self.config)

    def make_executor(self, batch_size: int, *, num_envs: int | None = None, first_env: int = 0,
                      num_threads: int = 0, thread_affinity_offset: int = -1) -> Executor:
        """The run's envs, or (multi-process) `num_envs` of them from global env id `first_env` on: env i is seeded
        with `seed + i` whichever process steps it. EnvPool's worker threads: `num_threads` (0: one per usable
        core, at most one per env), pinned from core `thread_affinity_offset` on (-1: not pinned)."""
        return Executor(
            self.spec, num_envs=num_envs or self.config.num_envs, batch_size=batch_size,
            seed=self.config.seed + first_env, step_time=self.step_time, clip_actions=self.config.clip_actions,
            num_threads=num_threads or None, thread_affinity_offset=thread_affinity_offset,
        )

    def make_actor_pools(self, envs: list[int], batches: list[int], threads: list[int], pinned_from: list[int], *,
                         first_env: int = 0) -> ActorPools:
        """`make_executor`'s envs as one pool per actor thread (`envs.actor_pools`): pool k holds the next `envs[k]`
        envs (env i still seeded `seed + i`), with EnvPool batch `batches[k]` and `threads[k]` worker threads,
        pinned from core `pinned_from[k]` on (-1: not pinned)."""
        return ActorPools.make(self.spec, envs, batches, threads, pinned_from, seed=self.config.seed + first_env,
                               step_time=self.step_time, clip_actions=self.config.clip_actions)

    def make_collector(
        self,
        executor: Executor | ActorPools,
        *,
        inference_batch: int,
        on_round_complete: Callable[[RoundStorage, bool], tuple | None],
        policy_fn: Callable | None = None,
        params=None,
        first_env: int = 0,
    ) -> RoundCollector:
        """The round collector of `executor`; a system may give its own `policy_fn` (and the `params` it takes);
        `first_env`: the global id of the executor's env 0 (multi-process), which places its rows in the forward
        pass as a single-process run does."""
        return RoundCollector(
            executor, policy_fn=policy_fn or self.setup.policy, run_key=self.setup.action_key,
            sync_interval=self.config.sync_interval, inference_batch=inference_batch, first_round=self.start_round,
            total_rounds=self.total_rounds, params=self.monitor.state.params if params is None else params,
            version=self.start_round,
            on_round_complete=on_round_complete, action_shape=self.setup.action_shape,
            action_dtype=self.setup.action_dtype, env_id_offset=first_env, carry_size=self.setup.carry_size,
        )

    def compile_update_ahead(self, collector: RoundCollector) -> Callable[[], None]:
        """Compiles the update in the background while the first round is collected (`compile_in_background`);
        the learner calls the returned `wait` before every update."""
        state = self.monitor.state
        return compile_in_background(self.setup.update, state, state.params, collector.rollout_shapes())


def open_on_policy(config: config_lib.TrainConfig, make_agent: AgentMaker, start: Callable[[RunContext], Loop], *,
                   may_change_on_resume: frozenset = frozenset(), header: str = "", plan: dict | None = None,
                   profile: Profile | None = None) -> Opening:
    """The opening of a round-collecting on-policy run (its `config` validated by `run` first, and again by the
    system where it changed it): the env spec, the system's agent (`make_agent(config, spec)`) and its evaluator;
    `start(ctx)` makes the loop once the Monitor is open, unless every round is already learned.
    `may_change_on_resume`: the system's fields a resumed run may change (`rundir.claim`); `header`: lines the
    progress output starts with, after the run's own; `plan`: the values the system derived, for config.json;
    `profile`: the system's stages by thread."""
    step_time = parse_step_time(config.step_time)
    spec = make_spec(config.env_id, config.env_kwargs, config.frame_stack)
    setup, state = make_agent(config, spec)

    def start_loop(monitor: Monitor) -> Loop | None:
        ctx = RunContext(config=config, spec=spec, setup=setup, monitor=monitor, step_time=step_time)
        return None if ctx.start_round >= ctx.total_rounds else start(ctx)

    return Opening(agents=[Agent(config, state, on_policy_evaluator(config, spec, setup))], start=start_loop,
                   progress=Progress(metric_columns=on_policy_columns(config), header=header),
                   may_change_on_resume=may_change_on_resume, plan=plan, profile=profile)


class LockstepLoop(Loop):
    """The loop of a lock-step system (sync baseline, data-parallel, pmap gossip): wait for every env of the
    executor, hand the batch to the collector (which calls the system's update at each round's end), repeat until
    the collector is finished. `on_exit`: what the system closes besides the executor."""

    def __init__(self, executor: Executor, collector: RoundCollector, monitor: Monitor, *,
                 on_exit: Callable[[], None] | None = None):
        self.executor, self.collector, self.monitor, self.on_exit = executor, collector, monitor, on_exit

    def train(self) -> None:
        executor, collector = self.executor, self.collector
        num_envs = executor.num_envs
        executor.start()
        while not collector.finished.is_set():
            with stage("env"):
                results = executor.take(max_items=num_envs, min_items=num_envs, timeout=1.0)
            if results is not None:
                collector.process(results)
            self.monitor.heartbeat(executor.env_steps_received)

    def close(self) -> None:
        self.executor.close()
        if self.on_exit is not None:
            self.on_exit()
