"""What every system does around its own loop.

* `until_stopped`: runs the loop and turns an early stop (Ctrl-C, SIGTERM, a user's env that fails, another process
  of the job that stopped) into the value it returns, after one line that says what the run saves.
* `finish`: the final evaluation, checkpoint and summary, then re-raises the stop, so the exit status tells
  SIGTERM from Ctrl-C and the launcher's last line names the checkpoint.
* `start_run` (on-policy): validate the config, build the env spec, the system's agent and the monitor (run
  directory, resume), and make the executor and round collector with the run's settings; `run_lockstep`: the
  loop of a lock-step system.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax

from agents import TrainState
from envs.executor import Executor
from envs.factory import EnvSpec, make_spec
from envs.pool_api import EnvFailed
from envs.step_time import StepTimeDistribution, parse_step_time
from systems.common import config as config_lib
from systems.common import distributed
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


def until_stopped(system: str, monitor: Monitor, loop: Callable[[], None], *,
                  saving: str = "a checkpoint of the newest parameters", collectives: bool = False) -> StopCause | None:
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


def finish(monitor: Monitor, stopped: StopCause | None, *, extra: dict | None = None) -> dict:
    """The run's final evaluation, checkpoint and summary (`Monitor.finish`, with the system's `extra` fields);
    returns the summary, or re-raises `stopped` (the same exception: the exit status tells SIGTERM from Ctrl-C)
    once its checkpoint is saved."""
    summary = monitor.finish(interrupted=stopped is not None, extra=extra)
    if stopped is not None:
        raise monitor.saved(stopped)
    return summary


@dataclasses.dataclass
class RunContext:
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

    def make_executor(self, batch_size: int, *, num_envs: int | None = None, first_env: int = 0) -> Executor:
        """The run's envs, or (multi-process) `num_envs` of them from global env id `first_env` on: env i is seeded
        with `seed + i` whichever process steps it."""
        return Executor(
            self.spec, num_envs=num_envs or self.config.num_envs, batch_size=batch_size,
            seed=self.config.seed + first_env, step_time=self.step_time, clip_actions=self.config.clip_actions,
        )

    def make_collector(
        self,
        executor: Executor,
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


def start_run(system: str, config: config_lib.TrainConfig, make_agent: AgentMaker, *,
              may_change_on_resume: frozenset = frozenset(), header: str = "", plan: dict | None = None,
              profile: Profile | None = None) -> RunContext:
    """Validates `config` (ConfigError on a bad value) and prepares the run: the env spec, the system's agent
    (`make_agent(config, spec)`) and the monitor (restoring a checkpoint on resume; `may_change_on_resume`: the
    system's fields a resumed run may change, `rundir.claim`; `header`: lines the progress output starts with,
    after the run's own; `plan`: the values the system derived, for config.json; `profile`: the system's stages by
    thread, `Monitor`'s default otherwise)."""
    config_lib.validate(config)
    step_time = parse_step_time(config.step_time)
    spec = make_spec(config.env_id, config.env_kwargs, config.frame_stack)
    setup, state = make_agent(config, spec)
    monitor = Monitor(system, config, state, progress=Progress(metric_columns=on_policy_columns(config), header=header),
                      evaluator=on_policy_evaluator(config, spec, setup), may_change_on_resume=may_change_on_resume,
                      plan=plan, profile=profile)
    return RunContext(config=config, spec=spec, setup=setup, monitor=monitor, step_time=step_time)


def run_lockstep(system: str, executor: Executor, collector: RoundCollector, monitor: Monitor,
                 *, on_exit: Callable[[], None] | None = None, summary_extra: Callable[[], dict] | None = None) -> dict:
    """The main loop of a lock-step system (sync baseline, data-parallel, pmap gossip): wait for every env of the
    executor, hand the batch to the collector (which calls the system's update at each round's end), repeat until
    the collector is finished; then the final evaluation, checkpoint and summary. Ctrl-C (or a user's env that
    fails, `EnvFailed`) saves a checkpoint of the newest parameters and re-raises it."""
    num_envs = executor.num_envs

    def loop() -> None:
        executor.start()
        while not collector.finished.is_set():
            with stage("env"):
                results = executor.take(max_items=num_envs, min_items=num_envs, timeout=1.0)
            if results is not None:
                collector.process(results)
            monitor.heartbeat(executor.env_steps_received)

    try:
        stopped = until_stopped(system, monitor, loop)
    finally:
        executor.close()
        if on_exit is not None:
            on_exit()
    return finish(monitor, stopped, extra=summary_extra() if summary_extra else None)
