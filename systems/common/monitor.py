"""The run harness every system composes (the main thread's side of a run): run directory, resume, progress rows
and the live line, periodic evaluation and checkpoints, the time limit, and the final `summary.json`. A system
states what it has instead of configuring hooks: its `Progress` (metric columns, how env steps count, the lag
invariant), its evaluator, and its `checkpoint.Checkpointing` (the state codec)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from agents import TrainState
from envs.factory import EnvSpec
from systems.common import config as config_lib
from systems.common import conv_tuning, hardware, rundir
from systems.common import profile as profile_lib
from systems.common.checkpoint import Checkpointing, set_aside
from systems.common.evaluation import (
    EvaluationRecord,
    Evaluator,
    final_metric,
    network_act_fn,
    reached_target,
    required_time,
)
from systems.common.finite import NonFiniteError, first_nonfinite, nonfinite_message, params_are_finite
from systems.common.learner import LearnerSetup, parameter_count
from systems.common.outputs import PROGRESS_BASE, RunOutputs, params_fingerprint


@dataclasses.dataclass
class LearnerReport:
    """What the learner hands the main thread after each update."""

    state: TrainState  # after the update
    metrics: dict  # scalar losses etc. (host values)
    behaviour_version: int  # policy version that collected the batch (PAL: the oldest version an actor holds)
    learner_version: int  # version of the parameters the update was applied to
    # time.perf_counter() when the learner made `state`; None: when the main thread takes the report. A learner that
    # runs ahead of the main thread (GALA's async threads, while an evaluation runs) sets it, so that rows and
    # evaluations carry the time their parameters existed.
    created: float | None = None


def default_run_dir(system: str, config: config_lib.TrainConfig) -> str:
    name = config.env_id.replace("/", "_")
    return os.path.join("runs", f"{system}-{name}-s{config.seed}-{time.strftime('%Y%m%d-%H%M%S')}")


def _restore_newest_readable(run_dir: str, state: Any, load_fn: Callable) -> tuple[Any, dict]:
    """`--resume`'s restore: the newest readable checkpoint. Unreadable newer files are set aside (renamed
    `*.unreadable`) with one warning each, once an older one restored; if none restores, nothing is renamed and the
    error names what was skipped."""
    skipped: list[tuple[str, str]] = []
    restored = load_fn(run_dir, state, lambda path, reason: skipped.append((path, reason)))
    if restored is None:
        detail = "; ".join(f"{os.path.basename(p)}: {r}" for p, r in skipped)
        raise config_lib.ConfigError(
            f"--resume: no readable checkpoint in {run_dir}/checkpoints "
            + (f"({detail})" if skipped else "(the run stopped before its first one)")
            + "; remove the directory to start the run again"
        )
    for path, reason in skipped:
        print(f"warning: checkpoint {path} is unreadable ({reason}); set aside as {set_aside(path)}, resuming from "
              "an older one", file=sys.stderr)
    return restored


@dataclasses.dataclass(frozen=True)
class Progress:
    """What a system logs after each update and how its env steps are counted: the system states it, the harness
    (`Monitor`) writes it. `metric_columns` follow `outputs.PROGRESS_BASE` in progress.csv (every metric still goes
    to TensorBoard). Env steps: a round of every env per update (`num_envs x sync_interval`) unless
    `steps_per_update` says otherwise (asynchronous gossip: one learner's iteration); systems whose env steps are
    not a fixed multiple of updates (PAL, Spreeze: actors and learners held only to a ratio) keep them in their
    state and give `env_steps_of(state)`. `max_policy_lag`: the lag invariant checked on every update (None: logged
    only). `sizes` replaces the start line's "envs N  alpha A"; `header` is appended to it."""

    metric_columns: tuple[str, ...] = ()
    steps_per_update: int | None = None
    env_steps_of: Callable[[Any], int] | None = None
    max_policy_lag: int | None = 1
    sizes: str | None = None
    header: str = ""


def on_policy_evaluator(config: config_lib.TrainConfig, spec: EnvSpec, setup: LearnerSetup) -> Evaluator | None:
    """The PPO / A2C systems' evaluation (seed 000 section 5's protocol), or None with `--eval_episodes=0`."""
    if config.eval_episodes <= 0:
        return None
    act = network_act_fn(setup.network, deterministic=config.eval_deterministic)
    return Evaluator(spec, None, episodes=config.eval_episodes, seed=setup.eval_seed,
                     deterministic=config.eval_deterministic, act_fn=act)


LOCK_STEP_BOUNDS = {
    "env": profile_lib.Bound("simulator-bound", "the loop waits for EnvPool: more CPU cores for the simulators "
                                                "would move it, a faster learner would not"),
    "inference": profile_lib.Bound("inference-bound", "the policy's forward pass: a larger --num_envs per pass "
                                                      "(fewer, larger batches) or an accelerator would move it"),
    "compile": profile_lib.Bound("compile-bound", "the run was short beside its compilation; a longer one is not"),
    "update": profile_lib.Bound("learner-bound", "more envs will not help; a larger --sync_interval (fewer "
                                                 "updates per env step) or a faster device for the update will"),
    "evaluation": profile_lib.Bound("evaluation-bound", "evaluate less often (--eval_every) or with fewer "
                                                        "--eval_episodes"),
    "checkpoint": profile_lib.Bound("checkpoint-bound", "checkpoint less often (--checkpoint_every)"),
}


def lock_step_profile() -> profile_lib.Profile:
    """One thread does everything (sync, BA3C, GALA's pmap mode, and the main thread of every other system that
    gives no profile): it steps the envs, acts, learns, evaluates and checkpoints in turn."""
    return profile_lib.Profile({"main": ("env", "inference", "compile", "update", "evaluation", "checkpoint")}, "main",
                               LOCK_STEP_BOUNDS)


def _close_failed_run(outputs: RunOutputs, run_directory: rundir.RunDirectory) -> None:
    """Closes a failed run's outputs and frees its directory. Its error has been raised already; a second one here
    (a full disk refusing the last flush) would only repeat it, after the run, as a traceback."""
    with contextlib.suppress(OSError):
        outputs.close()
    run_directory.release()


class Monitor:
    """The run harness every system composes: run directory, resume, progress rows and the live line, periodic
    evaluation and checkpoints, the time limit, and the final `summary.json`."""

    def __init__(
        self,
        system: str,
        config: config_lib.RunConfig,
        state: Any,
        *,
        progress: Progress = Progress(),
        evaluator: Any = None,
        policy_params: Callable[[Any], Any] | None = None,
        checkpointing: Checkpointing = Checkpointing(),
        may_change_on_resume: frozenset = frozenset(),
        plan: dict | None = None,
        profile: profile_lib.Profile | None = None,
    ):
        """`state` is the learner state (any pytree with `params` and a scalar `update_step`). `evaluator` is
        anything with `run(params) -> returns` (None: no evaluation); `policy_params(state)` picks the parameters
        it plays (systems with several parameter sets: gossip's learner 0). The run directory is claimed first
        (`systems.common.rundir`: locked, no second run without --resume, the run's defining flags unchanged on
        resume but for `may_change_on_resume`). `plan`: the values the system derived from `config` (its devices,
        scaled learning rate, ...), recorded beside it in config.json. `profile`: the system's stages by thread
        (`systems.common.profile`; default: the lock-step one, every stage on the main thread); the calling
        thread is bound to its "main" role until `finish`."""
        self.system = system
        self.config = config
        self.progress = progress
        self.checkpointing = checkpointing
        self.policy_params = policy_params or (lambda s: s.params)
        # normpath: `--logdir=a/../b` is b, and must not create an empty a on the way.
        self.run_dir = os.path.normpath(config.logdir) if config.logdir else default_run_dir(system, config)
        self._claim(may_change_on_resume, plan)
        try:
            self._resume(state)
            self.profile = profile or lock_step_profile()
            self.outputs = RunOutputs(self.run_dir, config, plan=plan, append=config.resume, quiet=config.quiet,
                                      progress_fields=PROGRESS_BASE + tuple(progress.metric_columns)
                                      + self.profile.columns(), resumed_from=self.resumed_from,
                                      system=self.system)
        except BaseException:
            self.run_directory.release()  # a run that cannot start leaves its directory free
            raise
        # `finish` closes the outputs and frees the directory; a run that fails in this process (an error, where a
        # stop still finishes) never gets there, so they are closed when its Monitor is collected.
        self._close_if_failed = weakref.finalize(self, _close_failed_run, self.outputs, self.run_directory)
        self._plan_steps()
        self.evaluator = evaluator if config.eval_episodes > 0 else None
        self._next_eval = self._next_multiple(config.eval_every)
        self._next_ckpt = self._next_multiple(config.checkpoint_every)
        self._episodes = collections.deque(maxlen=100)
        self._episode_count = 0
        self.max_policy_lag = 0
        self.last_metrics: dict = {}
        self.stopped_by_time_limit = False
        self.stopped_at_target = False
        self.outputs.print(self._start_line())
        self._t0 = time.perf_counter()
        self._last_output = self._t0
        self._state_time: float | None = None  # when `state` was made (the newest report's time)
        self.profile.bind("main")

    def _claim(self, may_change_on_resume: frozenset, plan: dict | None) -> None:
        if self.config.resume and not os.path.isdir(self.run_dir):
            raise config_lib.ConfigError(
                f"--resume needs --logdir to be an existing run directory, got '{self.config.logdir}'"
            )
        self.run_directory = rundir.claim(self.run_dir, self.config, may_change=may_change_on_resume, plan=plan,
                                          system=self.system)

    def _resume(self, state: Any) -> None:
        """The initial state, or with --resume the newest readable checkpoint's state, evaluations and wall time."""
        self.state = state
        self.evaluations: list[EvaluationRecord] = []
        self.wall_offset = 0.0
        self.resumed_from = None
        self.resumed_meta: dict = {}
        if self.config.resume:
            self.state, meta = _restore_newest_readable(self.run_dir, state, self.checkpointing.load)
            self.wall_offset = float(meta["wall_time"])
            self.evaluations = [EvaluationRecord(**r) for r in meta["evaluations"]]
            self.resumed_from = int(meta["env_steps"])
            self.resumed_meta = meta

    def _plan_steps(self) -> None:
        """Env steps per update, updates and env steps in all, and where this run starts."""
        self.steps_per_round = self.progress.steps_per_update or config_lib.steps_per_round(self.config)
        self.total_updates = config_lib.rounds(self.config.total_steps, self.steps_per_round)
        self.total_steps = self.total_updates * self.steps_per_round
        if self.progress.env_steps_of is not None:
            self.total_steps = self.config.total_steps
        self.last_checkpoint: str | None = None
        self.start_round = int(self.state.update_step)
        self.start_steps = self.env_steps

    def _start_line(self) -> str:
        config = self.config
        sizes = self.progress.sizes or f"envs {config.num_envs}  alpha {config.sync_interval}"
        preset = f"preset {config.preset}  " if getattr(config, "preset", "") else ""  # on-policy configs only
        return (
            f"[{self.system}] {config.env_id}  algo {config.algo}  {sizes}  {preset}"
            f"params {parameter_count(self.policy_params(self.state)):,}{self.progress.header}  run dir {self.run_dir}"
            + (f"  (resumed at {self.start_steps:,} steps)" if config.resume else "")
        )

    def _next_multiple(self, every: int) -> float:
        if every <= 0:
            return float("inf")
        return (self.start_steps // every + 1) * every

    @property
    def env_steps(self) -> int:
        return self._steps_of(self.state)

    def _steps_of(self, state: Any) -> int:
        if self.progress.env_steps_of is not None:
            return int(self.progress.env_steps_of(state))
        return int(state.update_step) * self.steps_per_round

    def _sps(self, elapsed: float) -> float:
        """Env steps per second of this session; a resumed run that had nothing left to train keeps the SPS its
        earlier summary reported (not 0), or the whole run's steps over its wall time where there is none."""
        if self.env_steps > self.start_steps:
            return (self.env_steps - self.start_steps) / max(elapsed, 1e-9)
        try:
            with open(os.path.join(self.run_dir, "summary.json")) as f:
                return float(json.load(f)["sps"])
        except (OSError, ValueError, KeyError, TypeError):
            return self.env_steps / max(self.wall_time(), 1e-9)

    def wall_time(self) -> float:
        return self.wall_offset + time.perf_counter() - self._t0

    def state_wall_time(self) -> float:
        """The run's wall time when `state` was made (now, before the first report)."""
        made = self._state_time if self._state_time is not None else time.perf_counter()
        return self.wall_offset + made - self._t0

    def on_report(self, report: LearnerReport, episodes: list[tuple[int, float, int]]) -> bool:
        """Logs one update; runs due evaluations/checkpoints. Returns True when the time limit stops the run.

        Raises NonFiniteError, before logging or keeping the update, when a metric or a parameter is not finite."""
        problem = first_nonfinite(report.metrics, report.state.params)
        if problem is not None:
            raise self._nonfinite(report.state, problem)
        self.state = report.state
        self._state_time = report.created if report.created is not None else time.perf_counter()
        self.last_metrics = report.metrics
        lag = report.learner_version - report.behaviour_version
        bound = self.progress.max_policy_lag
        if bound is not None and not 0 <= lag <= bound:
            raise RuntimeError(f"policy lag {lag} outside [0, {bound}]: the one-step-delay invariant is broken")
        self.max_policy_lag = max(self.max_policy_lag, lag)
        for _, episode_return, episode_length in episodes:
            self._episodes.append((episode_return, episode_length))
        self._episode_count += len(episodes)
        steps = self.env_steps
        elapsed = self._state_time - self._t0
        row = {
            "env_steps": steps,
            "wall_time": self.state_wall_time(),
            "sps": (steps - self.start_steps) / max(elapsed, 1e-9),
            "update": int(self.state.update_step),
            "learner_version": report.learner_version,
            "behaviour_version": report.behaviour_version,
            "policy_lag": lag,
            "episodes": self._episode_count,
            "episode_return": float(np.mean([e[0] for e in self._episodes])) if self._episodes else None,
            "episode_length": float(np.mean([e[1] for e in self._episodes])) if self._episodes else None,
            **{k: float(v) for k, v in report.metrics.items()},
            **self.profile.shares(),
        }
        self.profile.mark_steady()
        self.outputs.log_progress(row)
        self._last_output = time.perf_counter()
        self.outputs.progress_line(row, self.total_steps, force=steps >= self.total_steps,
                                   time_limit=self.config.time_limit)
        if steps >= self._next_eval:
            self.evaluate()
            self._next_eval = (steps // self.config.eval_every + 1) * self.config.eval_every
        if steps >= self._next_ckpt:
            self.checkpoint()
            self._next_ckpt = (steps // self.config.checkpoint_every + 1) * self.config.checkpoint_every
        if reached_target(self.evaluations, self.config):
            self.stopped_at_target = True
            return True
        if self.config.time_limit and self.wall_time() >= self.config.time_limit:
            self.stopped_by_time_limit = True
            return True
        return False

    def heartbeat(self, steps_collected: int) -> None:
        """Keeps the terminal alive between updates (the first Atari update can take minutes on a CPU)."""
        if time.perf_counter() - self._last_output < 10.0:
            return
        self._last_output = time.perf_counter()
        elapsed = time.perf_counter() - self._t0
        self.outputs.print(
            f"... collected {steps_collected:,} env steps since start ({steps_collected / max(elapsed, 1e-9):.0f} "
            f"steps/s), {int(self.state.update_step) - self.start_round} updates so far, t {self.wall_time():7.1f}s"
        )

    def evaluate(self) -> None:
        if self.evaluator is None:
            return
        if self.evaluations and self.evaluations[-1].policy_version == int(self.state.update_step):
            return
        with profile_lib.stage("evaluation"):
            returns = self.evaluator.run(self.policy_params(self.state))
        record = EvaluationRecord(
            env_steps=self.env_steps, wall_time=self.state_wall_time(), policy_version=int(self.state.update_step),
            returns=[float(r) for r in returns],
        )
        self.evaluations.append(record)
        self.outputs.log_evaluation({
            "env_steps": record.env_steps, "wall_time": record.wall_time, "policy_version": record.policy_version,
            "episodes": len(returns), "mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
        })
        if self.config.capture_video:
            self.film(self.evaluator, self.policy_params(self.state))

    def film(self, evaluator: Any, params: Any) -> None:
        """`--capture_video`: one episode of `params` filmed to `<run dir>/videos/eval-<env steps>-v<version>.mp4` (the
        policy version of the evaluation line), and logged."""
        name = f"eval-{self.env_steps:012d}-v{int(self.state.update_step)}.mp4"
        path = os.path.join(self.run_dir, "videos", name)
        self.outputs.log_video(evaluator.record_video(params, path), self.env_steps)

    def _nonfinite(self, state: Any, problem: str) -> NonFiniteError:
        return NonFiniteError(
            nonfinite_message(self.system, int(state.update_step), self._steps_of(state), problem, self.run_dir)
        )

    def checkpoint(self) -> str:
        """Writes the current state; raises NonFiniteError instead when a parameter is not finite."""
        if not params_are_finite(self.state.params):
            raise self._nonfinite(self.state, "a parameter is not finite")
        meta = {
            "env_steps": self.env_steps,
            "wall_time": self.wall_time(),
            "evaluations": [dataclasses.asdict(r) for r in self.evaluations],
            "system": self.system,
        }
        with profile_lib.stage("checkpoint"):
            if self.checkpointing.extra_meta is not None:
                meta.update(self.checkpointing.extra_meta(self.run_dir, self.env_steps))
            self.last_checkpoint = self.checkpointing.save(self.run_dir, self.env_steps, self.state, meta)
        return self.last_checkpoint

    def saved(self, stop: BaseException) -> BaseException:
        """`stop` (Ctrl-C, SIGTERM or a user's env that failed, re-raised after `finish`) marked with the checkpoint
        this run wrote last, so the launcher can say where it is; a stop that was not marked came before the run
        could save anything."""
        stop.checkpoint, stop.run_dir = self.last_checkpoint, self.run_dir
        if getattr(self.config, "process_id", 0) > 0:  # its <logdir>/process-<p>: the job resumes with the job's
            stop.run_dir = os.path.dirname(os.path.normpath(self.run_dir))  # --logdir
        return stop

    def finish(self, *, interrupted: bool = False, extra: dict | None = None) -> dict:
        """Final evaluation (unless interrupted), final checkpoint and summary.json (plus the system's `extra`
        entries); returns the summary. A state with a non-finite parameter is neither evaluated nor saved."""
        if not params_are_finite(self.state.params):
            raise self._nonfinite(self.state, "a parameter is not finite")
        kept = self._summary_of_a_resume_that_trained_nothing()
        if kept is not None:
            self.profile.unbind()
            return self._close_with(kept, f"[{self.system}] nothing left to train at {self.env_steps:,} steps: "
                                          "summary.json and the checkpoints are as the run left them")
        if not interrupted:
            self.evaluate()
        self.checkpoint()
        elapsed = time.perf_counter() - self._t0
        final = final_metric(self.evaluations)
        breakdown = self.profile.breakdown()
        self.profile.unbind()
        summary = {
            "system": self.system,
            "env_id": self.config.env_id,
            "algo": self.config.algo,
            "seed": self.config.seed,
            "env_steps": self.env_steps,
            "updates": int(self.state.update_step),
            "wall_time": self.wall_time(),
            "sps": self._sps(elapsed),
            "interrupted": interrupted,
            "stopped_by_time_limit": self.stopped_by_time_limit,
            "stopped_at_target": self.stopped_at_target,
            "max_policy_lag": self.max_policy_lag,
            "train_episodes": self._episode_count,
            "train_return_last100": float(np.mean([e[0] for e in self._episodes])) if self._episodes else None,
            "final_metric": final,
            "final_time_metric": final if self.config.time_limit else None,
            "time_limit": self.config.time_limit or None,
            "target_return": self.config.target_return,
            "required_time": required_time(self.evaluations, self.config.target_return),
            "evaluations": len(self.evaluations),
            "last_eval_return": float(np.mean(self.evaluations[-1].returns)) if self.evaluations else None,
            "last_metrics": {k: float(v) for k, v in self.last_metrics.items()},
            "param_count": parameter_count(self.policy_params(self.state)),
            "param_fingerprint": params_fingerprint(self.state.params),
            "run_dir": self.run_dir,
            "resumed_from_env_steps": self.resumed_from,
            "profile": breakdown,
            "hardware": {**hardware.card(), "conv_plans": conv_tuning.chosen()},
            **(extra or {}),
        }
        self.outputs.write_summary(summary)
        self.outputs.print(
            f"[{self.system}] done: {summary['env_steps']:,} steps in {summary['wall_time']:.1f}s "
            f"({summary['sps']:.0f} SPS), final metric {final}, fingerprint {summary['param_fingerprint'][:16]}"
        )
        for line in profile_lib.describe(breakdown):
            self.outputs.print(line)
        return self._close_with(summary)

    def _summary_of_a_resume_that_trained_nothing(self) -> dict | None:
        """summary.json of a resumed run that took no env step in this process (a finished run resumed, or one
        stopped before its first update), if it has a readable one: it stays as it is, since a summary rewritten from
        an empty session would lose its training episodes, metrics and profile."""
        if not self.config.resume or self.env_steps != self.start_steps:
            return None
        try:
            with open(os.path.join(self.run_dir, "summary.json")) as f:
                summary = json.load(f)
        except (OSError, ValueError):
            return None
        return summary if isinstance(summary, dict) and summary.get("env_steps") == self.env_steps else None

    def _close_with(self, summary: dict, line: str | None = None) -> dict:
        if line is not None:
            self.outputs.print(line)
        self._close_if_failed.detach()
        self.outputs.close()
        self.run_directory.release()
        return summary
