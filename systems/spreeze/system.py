"""Spreeze (seed 002, section 3): sampler processes, a shared-memory replay, one large-batch learner, weights by file.

* `num_samplers` sampler processes (3.1.1, `systems.spreeze.workers.sampler_main`), each with its own EnvPool and a
  CPU copy of the policy with exploration noise, write transitions straight into the shared-memory replay
  (`systems.spreeze.shared_replay`, 3.3.2): no queues and no pickling on the hot path, and samplers never wait for
  the learner. `replay="queue"` is the paper's ablation baseline (Table 3 rows 6-8).
* This process is the learner (3.2.1): it samples `batch_size` transitions from the shared memory and runs the
  jitted SAC / TD3 / DDPG update (`systems.offpolicy.agent`, one learner), on the accelerator when there is one. With
  `model_parallel` and two devices, SAC's actor update runs on one device and the twin critics with their targets on
  the other (3.2.2, `systems.spreeze.model_parallel`).
* Weights by file (3.3.1): every `publish_every` updates the learner writes the whole learner state to
  `<run dir>/checkpoints/weights_<updates>.msgpack` by an atomic rename (`systems.spreeze.weights`); samplers and the
  test process pick up new versions. The same files are the checkpoints: `--resume` restarts from the newest.
* The test process (3.1.2, `workers.evaluator_main`) evaluates the deterministic policy of newest weights on its own
  envs; its records form the test return curve (`evaluations.csv`: return against env steps and wall time).
* The visualization process (3.1.2, `systems.spreeze.render`, `render`) saves a rollout of the newest policy as
  an animated GIF every `render_every` seconds in `<run dir>/renders/` (drawn from observations and actions: the
  pendulum itself for Pendulum-v1, bar charts otherwise; EnvPool has no renderer).
* Automatic tuning (3.4, `systems.spreeze.tuning`): `batch_size=0` (auto) and `num_samplers=0` (auto).

Any child that dies stops the run with its error; Ctrl-C and SIGTERM stop every process; a child exits when the
learner dies. The replay segment and the processes' flags and pipes have no name in /dev/shm: the kernel frees them
with their last process, even after a SIGKILL of the whole group (`systems.spreeze.ipc`).
"""

from __future__ import annotations

import atexit
import hashlib
import multiprocessing
import os
import time

import jax
import numpy as np

from envs.cores import usable_cores
from envs.factory import make_spec
from systems.common import config as config_lib
from systems.common import limits
from systems.common import run as skeleton
from systems.common.checkpoint import Checkpointing, checkpoint_dir
from systems.common.evaluation import EvaluationRecord, reached_target
from systems.common.learner import compile_in_background
from systems.common.monitor import LearnerReport, Monitor, Progress
from systems.common.profile import Bound, Profile, stage
from systems.offpolicy.agent import PALState, build_agent
from systems.offpolicy.config import metric_columns
from systems.spreeze import ipc, workers
from systems.spreeze import render as render_lib
from systems.spreeze import tuning as tuning_lib
from systems.spreeze import weights as weights_lib
from systems.spreeze.config import REPLAYS, SYSTEM, SpreezeConfig, validate
from systems.spreeze.shared_replay import QueueTransfer, SharedReplay

__all__ = ["REPLAYS", "SYSTEM", "SpreezeConfig", "run", "validate"]
_REPORT_SECONDS = 1.0
_JOIN_SECONDS = 10.0


def run_id(run_dir: str) -> str:
    """The replay segment is named after the run directory (seen in /proc/<pid>/fd, never a file to clean up)."""
    return hashlib.sha1(os.path.abspath(run_dir).encode()).hexdigest()[:12]


# What every child imports before its first line of work (JAX, Flax, EnvPool, the agents): a forkserver imports
# them once per process and forks each child from that image, where "spawn" paid the imports (several seconds of CPU)
# once per child, all at the same moment the learner compiles.
CHILD_PRELOAD = ["systems.spreeze.workers", "systems.spreeze.ipc", "systems.spreeze.render", "systems.offpolicy.agent",
                 "systems.spreeze.weights", "systems.spreeze.shared_replay", "systems.common.evaluation",
                 "envs.factory", "envs.episodes"]


def child_context():
    """The multiprocessing context of the run's children: a forkserver with the children's imports preloaded.

    The forkserver imports JAX but never initialises a backend (none of the preloaded modules computes at import),
    so each child still chooses its own platform and XLA flags (`workers._cpu_only`) before its first JAX call, as
    under "spawn". A forked child inherits the environment the forkserver started with (at the process's first run;
    it serves every later run of the same process), not the environment of the moment it is forked."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(CHILD_PRELOAD)
    global _stop_registered
    if not _stop_registered:
        atexit.register(_stop_forkserver)
        _stop_registered = True
    return ctx


_stop_registered = False


def _stop_forkserver() -> None:
    """At exit: stops the forkserver and waits for it. It reaps the children it forked, so their CPU time is in its
    own; left to end after this process, it is reaped by init and a parent's `wait4` / `time` counted none of it
    (a Spreeze run's CPU time read a third of what the machine spent). CPython's own stop, a private method."""
    from multiprocessing import forkserver

    stop = getattr(forkserver._forkserver, "_stop", None)
    if stop is not None:
        stop()


class Children:
    """The run's child processes: start, watch (a dead child stops the run with its error), stop and join.

    Nothing they share has a name in /dev/shm (`systems.spreeze.ipc`): `stop` and the samplers' own stops are flags
    in unlinked shared memory, each child sends its messages on a pipe of its own (`channel.writer()`), and a child
    exits when the learner dies."""

    def __init__(self, ctx, num_sampler_stops: int):
        self.ctx = ctx
        flags = ipc.Flags(ctx, num_sampler_stops + 1)
        self.stop = flags[0]
        self.sampler_stops = [flags[i + 1] for i in range(num_sampler_stops)]
        self.channel = ipc.EventChannel(ctx)
        self.processes: dict[str, multiprocessing.Process] = {}
        self.errors: list[str] = []

    def start(self, name: str, target, *args, **kwargs) -> None:
        """Starts `target(*args, **kwargs, events=...)`, `events` being the child's end of its own message pipe."""
        process = self.ctx.Process(target=target, args=args, kwargs={**kwargs, "events": self.channel.writer()},
                                   name=name, daemon=True)
        process.start()
        self.processes[name] = process

    def check(self) -> None:
        if self.errors:
            raise RuntimeError(self.errors[0])
        for name, process in self.processes.items():
            if process.exitcode not in (None, 0) and not self.stop.is_set():
                raise RuntimeError(f"{name} exited with code {process.exitcode}")

    def shutdown(self) -> None:
        self.stop.set()
        deadline = time.monotonic() + _JOIN_SECONDS
        for process in self.processes.values():
            process.join(timeout=max(0.1, deadline - time.monotonic()))
        for process in self.processes.values():
            if process.is_alive():
                process.terminate()
                process.join(timeout=2.0)


def run(config: SpreezeConfig) -> dict:
    """Trains with Spreeze; returns the summary (also written to `<run dir>/summary.json`).

    Section 3 as steps: open the outputs and the variable transmission (3.3: the weight files, the shared-memory
    replay), start the sampler processes (3.1.1) with the hyperparameter adaptation (3.4) and the test and
    visualization processes (3.1.2), learn with large batches (3.2) until the run ends, stop every process, evaluate
    the final policy and write the summary (`_SpreezeRun`)."""
    return skeleton.run(SYSTEM, config, _open, validate=validate)


def _open(config: SpreezeConfig) -> skeleton.Opening:
    """The agent and the shared replay's size checked against the memory; the monitor's checkpoints are the weight
    files (3.3.1), and `--resume` restarts from the newest."""
    spec = make_spec(config.env_id, config.env_kwargs, config.frame_stack)
    if not spec.continuous or len(spec.obs_shape) != 1:
        raise config_lib.ConfigError(f"launch.spreeze needs continuous actions and vector observations; "
                                     f"{config.env_id} has {'continuous' if spec.continuous else 'discrete'} actions")
    agent = build_agent(config, spec)
    row_bytes = sum(np.asarray(v, np.float32).nbytes for v in agent.example.values())  # the replay stores float32
    limits.require_memory(row_bytes * config.buffer_size, f"--buffer_size={config.buffer_size:,} (the shared replay)")
    progress = Progress(
        metric_columns=metric_columns(config.algo) + ("replay_size",), steps_per_update=1,
        env_steps_of=lambda s: int(s.env_steps), max_policy_lag=None,
        sizes=f"samplers {config.num_samplers or 'auto'}x{config.envs_per_sampler} envs  "
              f"batch {config.batch_size or 'auto'}  transfer {config.transfer}",
    )
    weight_files = Checkpointing(
        save=lambda run_dir, steps, state, meta: weights_lib.publish(
            checkpoint_dir(run_dir), int(state.update_step), state, meta),
        load=lambda run_dir, state, on_skip: _load_latest(checkpoint_dir(run_dir), state, on_skip),
    )
    # The test process evaluates (no evaluator here): its returns arrive as events and join monitor.evaluations.
    return skeleton.Opening(agents=[skeleton.Agent(config, agent.initial_state)],
                            start=lambda monitor: _SpreezeRun(config, spec, agent, monitor), progress=progress,
                            checkpointing=weight_files, policy_params=lambda s: agent.policy_params(s.agent),
                            profile=spreeze_profile())


def spreeze_profile() -> Profile:
    """The learner's time (this process's main thread, 3.2.1): starting the children and the automatic tuning,
    waiting for `learning_starts` transitions, sampling the shared replay, the update and the weight files (the
    checkpoints); and each sampler process's (3.1.1: new weights, its forward pass, EnvPool, writing the replay),
    shared through memory. The samplers never wait for the learner, so the learner's time names the bound; the test
    and visualization processes are not timed."""
    bounds = {
        "update": Bound("learner-bound", "the updates: a larger --batch_size per update (Sec. 3.2.1), "
                                         "--model_parallel over two devices or an accelerator would move it"),
        "sample": Bound("replay-bound", "sampling the shared replay: a smaller --batch_size would move it"),
        "wait_for_data": Bound("sampler-bound", "the learner waits for --learning_starts transitions: more "
                                                "--num_samplers or a smaller --learning_starts would move it"),
        "start_and_tune": Bound("start-bound", "the run was short beside starting its processes (and, with "
                                               "automatic sizes, the tuning of Sec. 3.4); a longer run is not"),
        "checkpoint": Bound("publish-bound", "writing the weight files: a larger --publish_every would move it"),
    }
    return Profile({"main": ("start_and_tune", "wait_for_data", "sample", "compile", "update", "checkpoint"),
                    "samplers": workers.SAMPLER_STAGES[:-1]}, "main", bounds)


class _SpreezeRun(skeleton.Loop):
    """One Spreeze run's pieces: the child processes, the replay they write, their step counters, the learner and
    the run's counters. Building it opens the replay, publishes the first weights and starts compiling the update;
    `train` starts the children and learns until the run ends; `close` stops every process and frees the replay;
    `wind_up` raises a child's error, makes the final state and evaluates the final policy."""

    saving = "the newest weights, stopping every process"

    def __init__(self, config: SpreezeConfig, spec, agent, monitor: Monitor):
        self.config, self.spec, self.agent, self.monitor = config, spec, agent, monitor
        state: PALState = monitor.state
        self.weights_dir = checkpoint_dir(monitor.run_dir)
        os.makedirs(self.weights_dir, exist_ok=True)
        self.collected0, self.updates0 = int(state.env_steps), int(state.update_step)
        # Variable transmission (3.3): transitions through shared memory, one step counter per sampler.
        ctx = child_context()
        fields = {name: (np.asarray(v).shape, np.float32 if name != "action" else np.asarray(v).dtype)
                  for name, v in agent.example.items()}
        self.max_samplers = config.num_samplers or max(1, usable_cores() - 1)
        self.children = Children(ctx, self.max_samplers)
        transfer = SharedReplay if config.transfer == "shm" else QueueTransfer
        self.replay = transfer.create(config.buffer_size, fields, run_id=run_id(monitor.run_dir), ctx=ctx)
        self.steps = ctx.Array("q", self.max_samplers, lock=False)
        self.stage_seconds = ctx.Array("d", self.max_samplers * len(workers.SAMPLER_STAGES), lock=False)
        monitor.profile.add_source(self._sampler_seconds)
        self.episodes: list[tuple[int, float, int]] = []
        monitor.state = state
        monitor.checkpoint()  # version 0 (or the resumed version) for the samplers and the evaluator
        # Large-batch learner (3.2), compiling while the samplers start.
        self.rng = np.random.default_rng([config.seed, 7])
        # The sizes the run uses: the config's, or the tuning's choice (`_start_children`; 0 until then).
        self.num_samplers, self.batch_size = config.num_samplers, config.batch_size
        self.ones = np.ones((1, max(config.batch_size, 1)), np.float32)
        self.learner = _Learner(config, agent, state.agent, monitor)
        self.learner.compile_ahead(fields, config.batch_size)
        self.tuning: dict = {}
        self.updates = self.updates0
        self.sample_seconds = self.update_seconds = 0.0
        self.elapsed = 0.0
        self._started = self._last_report = 0.0  # when `train` started; the last progress report was made

    def _sampler_seconds(self) -> list[tuple[str, dict]]:
        """The samplers' clocks (`systems.common.profile`), from their rows of the shared stage seconds: one entry
        per sampler that has started."""
        n = len(workers.SAMPLER_STAGES)
        rows = np.frombuffer(self.stage_seconds, np.float64).reshape(self.max_samplers, n)
        return [("samplers", dict(zip(workers.SAMPLER_STAGES, map(float, row), strict=True)))
                for row in rows if row.sum() > 0]

    def collected(self) -> int:
        """Env steps collected by the whole run (the resumed ones included)."""
        return self.collected0 + int(np.sum(self.steps[:]))

    def train(self) -> None:
        self._started = self._last_report = time.perf_counter()
        with stage("start_and_tune"):
            self._start_children()
        self._learn()

    def close(self) -> None:
        self.elapsed = time.perf_counter() - self._started
        self.children.shutdown()
        self.children.channel.close()
        self.replay.close()
        self.replay.unlink()

    def wind_up(self, stopped: skeleton.StopCause | None) -> dict:
        config, monitor = self.config, self.monitor
        if stopped is None:
            _drain_events(self.children, monitor, self.episodes)
            self.children.check()
        collected = self.collected()
        monitor.state = PALState(self.learner.state(), np.asarray(self.updates, np.int64),
                                 np.asarray(collected, np.int64))
        # The final policy, evaluated here (the test process is gone); a resumed run that collected nothing has its
        # own.
        if config.eval_episodes > 0 and stopped is None and collected > monitor.start_steps:
            _evaluate_final_policy(config, self.spec, self.agent, monitor, collected, self.updates)
        return self.summary_extra(collected)

    def _start_sampler(self, i: int) -> None:
        self.children.start(f"sampler-{i}", workers.sampler_main, i, self.config, self.replay.handle(),
                            self.weights_dir, self.children.stop, self.children.sampler_stops[i], self.steps,
                            self.stage_seconds)

    def _start_children(self) -> None:
        """The sampler processes (3.1.1; `num_samplers=0`: as many as the tuning chooses, 3.4), the batch size
        (`batch_size=0`: tuned on the samplers' data, 3.4), then the test and visualization processes (3.1.2)."""
        config, children, monitor = self.config, self.children, self.monitor
        if config.num_samplers:
            for i in range(config.num_samplers):
                self._start_sampler(i)
        else:
            self.tuning["num_samplers"] = _tune_samplers(config, children, self._start_sampler, children.sampler_stops,
                                                         self.steps, self.max_samplers, monitor)
            self.num_samplers = self.tuning["num_samplers"].choice
        if not config.batch_size:
            self.tuning["batch_size"] = _tune_batch(config, children, self.replay, self.learner, self.steps, monitor,
                                                    self.rng)
            self.batch_size = self.tuning["batch_size"].choice
            self.ones = np.ones((1, self.batch_size), np.float32)
        if self.tuning:
            tuning_lib.save_tuning(monitor.run_dir, self.tuning)
            monitor.outputs.print(tuning_lib.format_table(self.tuning))
        if config.eval_episodes > 0:
            children.start("evaluator", workers.evaluator_main, config, self.weights_dir, children.stop)
        if config.render:
            children.start("render", render_lib.render_main, config, self.weights_dir,
                           os.path.join(monitor.run_dir, "renders"), children.stop,
                           every_seconds=config.render_every, max_steps=config.render_steps)

    def _learn(self) -> None:
        """The network update process (3.2.1): one large-batch update after another on the shared replay, once it
        holds `learning_starts` transitions, until `total_steps`, the target or the monitor's stop."""
        config, monitor, replay = self.config, self.monitor, self.replay
        while True:
            self.children.check()
            _drain_events(self.children, monitor, self.episodes)
            collected = self.collected()
            if collected >= config.total_steps or reached_target(monitor.evaluations, config):
                return
            if config.transfer == "queue":
                replay.drain()
            if replay.size < max(config.learning_starts, 1):
                with stage("wait_for_data"):
                    time.sleep(0.01)
                monitor.heartbeat(collected - self.collected0)
                continue
            metrics = self._update()
            if self._publish_and_report(metrics, collected):
                return

    def _update(self):
        """Samples `batch_size` transitions and takes one optimizer step; returns its metrics."""
        t0 = time.perf_counter()
        with stage("sample"):
            batch = self.replay.sample(self.batch_size, self.rng)
        t1 = time.perf_counter()
        with stage("update"):
            metrics = self.learner.step(batch, self.ones)
        self.update_seconds += time.perf_counter() - t1
        self.sample_seconds += t1 - t0
        self.updates += 1
        return metrics

    def _publish_and_report(self, metrics, collected: int) -> bool:
        """Every `publish_every` updates, the weight file (3.3.1); at most once a second, a progress report.
        Returns whether the monitor ends the run."""
        updates, monitor = self.updates, self.monitor
        now = time.perf_counter()
        if updates % self.config.publish_every == 0 or now - self._last_report >= _REPORT_SECONDS:
            current = PALState(self.learner.state(), np.asarray(updates, np.int64), np.asarray(collected, np.int64))
            if updates % self.config.publish_every == 0:
                monitor.state = current
                monitor.checkpoint()
            if now - self._last_report >= _REPORT_SECONDS:
                self._last_report = now
                host = {k: float(v) for k, v in jax.device_get(metrics).items()}
                host["replay_size"] = float(self.replay.size)
                popped, self.episodes[:] = list(self.episodes), []
                if monitor.on_report(LearnerReport(current, host, updates, updates), popped):
                    return True
        return False

    def summary_extra(self, collected: int) -> dict:
        """Spreeze's own entries of summary.json: the layout and tuning, the throughputs (Table 2) and the time to
        the target (Table 1)."""
        config, elapsed = self.config, self.elapsed
        new_updates = self.updates - self.updates0
        return {
            "num_samplers": self.num_samplers,
            "tuning": {name: result.to_dict() for name, result in self.tuning.items()},
            "envs_per_sampler": config.envs_per_sampler,
            "batch_size": self.batch_size,
            "transfer": config.transfer,
            "sampling_fps": (collected - self.collected0) / max(elapsed, 1e-9),
            "update_frequency_hz": new_updates / max(elapsed, 1e-9),
            "update_fps": new_updates * self.batch_size / max(elapsed, 1e-9),
            "learner_sample_seconds": self.sample_seconds,
            "learner_update_seconds": self.update_seconds,
            "optimizer_steps": self.updates,
            "model_parallel": self.learner.devices,
            **first_reached(self.monitor.evaluations, config.target_return),
        }


def _evaluate_final_policy(config: SpreezeConfig, spec, agent, monitor: Monitor, collected: int, updates: int) -> None:
    """The final policy's evaluation, run in the learner once the test process is gone."""
    from systems.common.evaluation import Evaluator

    evaluator = Evaluator(spec, None, episodes=config.eval_episodes, seed=agent.eval_seed, deterministic=True,
                          act_fn=agent.eval_act)
    returns = evaluator.run(agent.policy_params(monitor.state.agent))
    _record_evaluation(monitor, collected, monitor.wall_time(), updates, [float(r) for r in returns])
    if config.capture_video:  # the test process has no video: the final policy is filmed here
        monitor.film(evaluator, agent.policy_params(monitor.state.agent))


class _Learner:
    """One update at a time: the jitted single-device update, or SAC's actor-critic model parallelism (section
    3.2.2) when `model_parallel` is set and there are two devices (one device: the plain update, said once)."""

    def __init__(self, config: SpreezeConfig, agent, agent_state, monitor: Monitor):
        self._agent = agent
        self._mp = None
        self.devices = None
        if config.model_parallel:
            if agent.sac_parts is None:
                raise config_lib.ConfigError("--model_parallel splits SAC's actor and critics; use --algo=sac")
            from systems.spreeze.model_parallel import ModelParallelSAC

            devices = jax.local_devices()
            critic_device = devices[1] if len(devices) > 1 else devices[0]
            self._mp = ModelParallelSAC(**agent.sac_parts, actor_device=devices[0], critic_device=critic_device)
            self._split = self._mp.place(agent_state)
            self.devices = {"actor": str(devices[0]), "critic": str(critic_device)}
            if len(devices) < 2:
                monitor.outputs.print("[spreeze] --model_parallel: one device only, running the plain SAC update")
        self._state = agent_state
        self._wait_for_compile = lambda: None

    def compile_ahead(self, fields: dict, batch_size: int) -> None:
        """Compiles the plain update in the background while the samplers start and fill the replay up to
        `learning_starts` (the learner only waits then); `fields`: name -> (shape, dtype) of one transition."""
        if self._mp is not None or batch_size <= 0:
            return
        batch = {name: jax.ShapeDtypeStruct((1, batch_size, *shape), dtype) for name, (shape, dtype) in fields.items()}
        weights = jax.ShapeDtypeStruct((1, batch_size), np.float32)
        self._wait_for_compile = compile_in_background(self._agent.update, self._state, batch, weights)

    def step(self, batch: dict, weights: np.ndarray):
        with stage("compile"):  # inside the caller's "update": charged here alone
            self._wait_for_compile()
        if self._mp is not None:
            self._split, metrics, _ = self._mp.update(self._split, batch, weights[0])
            jax.block_until_ready(self._split)
            self._state = None
            return metrics
        self._state, metrics, _ = self._agent.update(self._state, {k: v[None] for k, v in batch.items()}, weights)
        jax.block_until_ready(self._state)
        return metrics

    def trial(self, batch: dict, weights: np.ndarray) -> None:
        """One update whose result is thrown away (for `--batch_size=auto`'s measurements)."""
        if self._mp is not None:
            jax.block_until_ready(self._mp.update(self._split, batch, weights[0]))
        else:
            jax.block_until_ready(self._agent.update(self._state, {k: v[None] for k, v in batch.items()}, weights))

    def state(self):
        if self._state is None:
            self._state = self._mp.gather(self._split)
        return self._state


def _load_latest(directory: str, template, on_skip):
    loaded = weights_lib.load_latest(directory, template, on_skip)
    if loaded is None:
        return None
    _, payload, meta = loaded
    return payload, meta


def _drain_events(children: Children, monitor: Monitor, episodes: list) -> None:
    for event in children.channel.get_all():
        kind = event[0]
        if kind == "error":
            children.errors.append(f"{event[1]} failed:\n{event[2]}")
        elif kind == "episodes":
            episodes.extend(event[2])
        elif kind == "eval":
            _record_evaluation(monitor, *event[1:])
        elif kind == "render":
            monitor.outputs.print(f"[spreeze] rollout GIF of policy v{event[1]}: {event[2]}")


def cpu_busy() -> tuple[int, int] | None:
    """(busy, total) jiffies of the whole machine from /proc/stat (None off Linux)."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


def _tune_samplers(config, children, start_sampler, sampler_stops, steps, maximum, monitor):
    """`--num_samplers=auto` (section 3.4): add samplers one at a time while the sampling frame rate still rises
    markedly and the machine's CPU load leaves room for the learner; samplers above the choice are retired."""
    running = [0]

    def measure(n: int):
        while running[0] < n:
            start_sampler(running[0])
            running[0] += 1
        deadline = time.monotonic() + 120
        while steps[n - 1] == 0 and time.monotonic() < deadline:  # the newest sampler has started stepping
            children.check()
            time.sleep(0.05)
        time.sleep(0.5)
        before, cpu_before, t0 = int(np.sum(steps[:])), cpu_busy(), time.perf_counter()
        time.sleep(config.tune_seconds)
        after, cpu_after, t1 = int(np.sum(steps[:])), cpu_busy(), time.perf_counter()
        load = 0.0
        if cpu_before and cpu_after and cpu_after[1] > cpu_before[1]:
            load = (cpu_after[0] - cpu_before[0]) / (cpu_after[1] - cpu_before[1])
        children.check()
        return (after - before) / (t1 - t0), load

    monitor.outputs.print(f"[spreeze] tuning --num_samplers: up to {maximum}, {config.tune_seconds:g} s each")
    result = tuning_lib.tune_num_samplers(measure, start=1, maximum=maximum)
    for i in range(result.choice, running[0]):
        sampler_stops[i].set()
    return result


def _tune_batch(config, children, replay, learner, steps, monitor, rng):
    """`--batch_size=auto` (section 3.4): grow the batch geometrically while the update frame rate (batch x
    updates/s, measured on the replay's real data, results discarded) still rises markedly and memory allows."""
    while replay.size < max(config.learning_starts, 1):
        children.check()
        if config.transfer == "queue":
            replay.drain()
        time.sleep(0.05)
    monitor.outputs.print(f"[spreeze] tuning --batch_size: {config.tune_seconds:g} s per size")

    def measure(batch_size: int) -> float:
        batch = replay.sample(batch_size, rng)
        weights = np.ones((1, batch_size), np.float32)
        learner.trial(batch, weights)  # compile
        count, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < config.tune_seconds:
            learner.trial(replay.sample(batch_size, rng), weights)
            count += 1
        children.check()
        return count * batch_size / (time.perf_counter() - t0)

    oom = tuple(e for e in (getattr(jax.errors, "JaxRuntimeError", None),) if e is not None)
    return tuning_lib.tune_batch_size(measure, start=256, maximum=config.max_batch_size, oom_errors=oom)


def first_reached(records, target: float | None) -> dict:
    """Wall time and env steps of the first evaluation whose mean return reaches `target` (None if never)."""
    for record in records:
        if target is not None and float(np.mean(record.returns)) >= target:
            return {"time_to_target": record.wall_time, "steps_to_target": record.env_steps}
    return {"time_to_target": None, "steps_to_target": None}


def _record_evaluation(monitor: Monitor, env_steps: int, wall_time: float, version: int, returns: list) -> None:
    """One point of the test return curve (return against env steps and wall time)."""
    monitor.evaluations.append(EvaluationRecord(env_steps=env_steps, wall_time=wall_time, policy_version=version,
                                                returns=returns))
    monitor.outputs.log_evaluation({
        "env_steps": env_steps, "wall_time": wall_time, "policy_version": version, "episodes": len(returns),
        "mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
    })
