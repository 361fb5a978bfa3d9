"""Spreeze (seed 002, section 3): sampler processes, a shared-memory replay, one large-batch learner, weights by file.

* `num_samplers` sampler processes (3.1.1, `systems.spreeze.workers.sampler_main`), each with its own EnvPool and a
  CPU copy of the policy with exploration noise, write transitions straight into the shared-memory replay
  (`systems.spreeze.shared_replay`, 3.3.2): no queues and no pickling on the hot path, and samplers never wait for
  the learner. `replay="queue"` is the paper's ablation baseline (Table 3 rows 6-8).
* This process is the learner (3.2.1): it samples `batch_size` transitions from the shared memory and runs the
  jitted SAC / TD3 / DDPG update (`systems.pal.agent`, one learner), on the accelerator when there is one. With
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
with their last process, even after a SIGKILL of the whole group (`systems.spreeze.ipc`, issue 13).
"""

from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
import os
import time

import jax
import numpy as np

from envs.factory import make_spec
from systems.common import config as config_lib
from systems.common.checkpoint import checkpoint_dir
from systems.common.evaluation import EvaluationRecord
from systems.common.learner import compile_in_background
from systems.common.monitor import LearnerReport, Monitor
from systems.pal.agent import CONTINUOUS_ALGOS, PALState, build_agent
from systems.pal.system import PALConfig, reached_target
from systems.spreeze import ipc
from systems.spreeze import render as render_lib
from systems.spreeze import tuning as tuning_lib
from systems.spreeze import weights as weights_lib
from systems.spreeze import workers
from systems.spreeze.shared_replay import QueueTransfer, SharedReplay

SYSTEM = "spreeze"
REPLAYS = ("shm", "queue")
_REPORT_SECONDS = 1.0
_JOIN_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class SpreezeConfig(PALConfig):
    """A Spreeze run: the off-policy fields of PALConfig plus the process layout. `num_envs` is derived."""

    algo: str = "sac"
    num_samplers: int = 2  # sampler processes (0: auto)
    envs_per_sampler: int = 1
    batch_size: int = 256  # learner batch (0: auto)
    publish_every: int = 50  # updates between weight files
    transfer: str = "shm"  # shm | queue (ablation)
    model_parallel: bool = False
    replay: str = "uniform"
    update_interval: float = 0.0  # unused: samplers and learner run free (kept for the shared config)
    eval_every: int = 5_000
    render: bool = False  # a visualization process saving rollout GIFs of the newest policy (renders/)
    render_every: float = 30.0  # seconds between GIFs
    render_steps: int = 200  # steps per rollout
    tune_seconds: float = 3.0  # measuring time per value tried by the automatic tuning
    max_batch_size: int = 65_536  # the largest batch --batch_size=auto may try


def validate(config: SpreezeConfig) -> None:
    error = config_lib.ConfigError
    config_lib.require_finite_numbers(config)
    if config.algo not in CONTINUOUS_ALGOS:
        raise error(f"--algo must be one of {', '.join(CONTINUOUS_ALGOS)} for launch.spreeze, got '{config.algo}'")
    for name in ("envs_per_sampler", "publish_every", "buffer_size", "total_steps"):
        if getattr(config, name) <= 0:
            raise error(f"--{name} must be positive, got {getattr(config, name)}")
    if config.learning_starts >= config.total_steps:
        raise error(f"--learning_starts={config.learning_starts:,} leaves no updates within --total_steps="
                    f"{config.total_steps:,}")
    for name in ("num_samplers", "batch_size", "learning_starts", "eval_every", "eval_episodes"):
        if getattr(config, name) < 0:
            raise error(f"--{name} must be non-negative, got {getattr(config, name)}")
    if config.transfer not in REPLAYS:
        raise error(f"--transfer must be one of {', '.join(REPLAYS)}, got '{config.transfer}'")
    if config.learning_rate <= 0 or not 0 < config.tau <= 1 or not 0 < config.gamma <= 1:
        raise error("need --learning_rate > 0, --tau in (0, 1] and --gamma in (0, 1]")
    if config.time_limit < 0:
        raise error(f"--time_limit must be non-negative, got {config.time_limit}")


def run_id(run_dir: str) -> str:
    """The replay segment is named after the run directory (seen in /proc/<pid>/fd, never a file to clean up)."""
    return hashlib.sha1(os.path.abspath(run_dir).encode()).hexdigest()[:12]


# What every child imports before its first line of work (JAX, Flax, EnvPool, the agents): a forkserver imports
# them once per process and forks each child from that image, where "spawn" paid the imports (several seconds of CPU)
# once per child, all at the same moment the learner compiles.
CHILD_PRELOAD = ["systems.spreeze.workers", "systems.spreeze.ipc", "systems.spreeze.render", "systems.pal.agent",
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
    return ctx


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
    """Trains with Spreeze; returns the summary (also written to `<run dir>/summary.json`)."""
    validate(config)
    spec = make_spec(config.env_id)
    if not spec.continuous or len(spec.obs_shape) != 1:
        raise config_lib.ConfigError(f"launch.spreeze needs continuous actions and vector observations; "
                                     f"{config.env_id} has {'continuous' if spec.continuous else 'discrete'} actions")
    agent = build_agent(config, spec)
    monitor = Monitor(
        SYSTEM, config, spec, None, agent.initial_state, steps_per_update=1,
        policy_params=lambda s: agent.policy_params(s.agent), env_steps_of=lambda s: int(s.env_steps),
        evaluator=None, max_policy_lag=None,
        sizes=f"samplers {config.num_samplers or 'auto'}x{config.envs_per_sampler} envs  "
              f"batch {config.batch_size or 'auto'}  transfer {config.transfer}",
        save_fn=lambda run_dir, steps, state, meta: weights_lib.publish(
            checkpoint_dir(run_dir), int(state.update_step), state, meta),
        load_fn=lambda run_dir, state, on_skip: _load_latest(checkpoint_dir(run_dir), state, on_skip),
    )
    state: PALState = monitor.state
    weights_dir = checkpoint_dir(monitor.run_dir)
    os.makedirs(weights_dir, exist_ok=True)
    collected0, updates0 = int(state.env_steps), int(state.update_step)

    ctx = child_context()
    rid = run_id(monitor.run_dir)
    fields = {name: (np.asarray(v).shape, np.float32 if name != "action" else np.asarray(v).dtype)
              for name, v in agent.example.items()}
    max_samplers = config.num_samplers or max(1, (os.cpu_count() or 2) - 1)
    children = Children(ctx, max_samplers)
    if config.transfer == "shm":
        replay = SharedReplay.create(config.buffer_size, fields, run_id=rid, ctx=ctx)
    else:
        replay = QueueTransfer.create(config.buffer_size, fields, run_id=rid, ctx=ctx)
    steps = ctx.Array("q", max_samplers, lock=False)
    sampler_stops = children.sampler_stops

    def start_sampler(i: int) -> None:
        children.start(f"sampler-{i}", workers.sampler_main, i, config, replay.handle(), weights_dir,
                       children.stop, sampler_stops[i], steps)

    episodes: list[tuple[int, float, int]] = []
    monitor.state = state
    monitor.checkpoint()  # version 0 (or the resumed version) for the samplers and the evaluator

    rng = np.random.default_rng([config.seed, 7])
    ones = np.ones((1, max(config.batch_size, 1)), np.float32)
    learner = _Learner(config, agent, state.agent, monitor)
    learner.compile_ahead(fields, config.batch_size)
    tuning: dict = {}
    updates = updates0
    interrupted: KeyboardInterrupt | None = None  # Ctrl-C, or launch.common.Terminated (SIGTERM)
    start = time.perf_counter()
    last_report = start
    sample_seconds = update_seconds = 0.0
    try:
        if config.num_samplers:
            for i in range(config.num_samplers):
                start_sampler(i)
        else:
            tuning["num_samplers"] = _tune_samplers(config, children, start_sampler, sampler_stops, steps,
                                                    max_samplers, monitor)
            config = dataclasses.replace(config, num_samplers=tuning["num_samplers"].choice)
        if not config.batch_size:
            tuning["batch_size"] = _tune_batch(config, children, replay, learner, steps, monitor, rng)
            config = dataclasses.replace(config, batch_size=tuning["batch_size"].choice)
            ones = np.ones((1, config.batch_size), np.float32)
        if tuning:
            tuning_lib.save_tuning(monitor.run_dir, tuning)
            monitor.outputs.print(tuning_lib.format_table(tuning))
        if config.eval_episodes > 0:
            children.start("evaluator", workers.evaluator_main, config, weights_dir, children.stop)
        if config.render:
            children.start("render", render_lib.render_main, config, weights_dir,
                           os.path.join(monitor.run_dir, "renders"), children.stop,
                           every_seconds=config.render_every, max_steps=config.render_steps)
        metrics = None
        while True:
            children.check()
            _drain_events(children, monitor, episodes)
            collected = collected0 + int(np.sum(steps[:]))
            if collected >= config.total_steps or reached_target(monitor, config):
                break
            if config.transfer == "queue":
                replay.drain()
            if replay.size < max(config.learning_starts, 1):
                time.sleep(0.01)
                monitor.heartbeat(collected - collected0)
                continue
            t0 = time.perf_counter()
            batch = replay.sample(config.batch_size, rng)
            t1 = time.perf_counter()
            metrics = learner.step(batch, ones)
            update_seconds += time.perf_counter() - t1
            sample_seconds += t1 - t0
            updates += 1
            now = time.perf_counter()
            if updates % config.publish_every == 0 or now - last_report >= _REPORT_SECONDS:
                current = PALState(learner.state(), np.asarray(updates, np.int64), np.asarray(collected, np.int64))
                if updates % config.publish_every == 0:
                    monitor.state = current
                    monitor.checkpoint()
                if now - last_report >= _REPORT_SECONDS:
                    last_report = now
                    host = {k: float(v) for k, v in jax.device_get(metrics).items()}
                    host["replay_size"] = float(replay.size)
                    popped, episodes[:] = list(episodes), []
                    if monitor.on_report(LearnerReport(current, host, updates, updates), popped):
                        break
    except KeyboardInterrupt as stop:
        interrupted = stop
        monitor.outputs.print("[spreeze] interrupted: stopping every process and saving the newest weights")
    finally:
        elapsed = time.perf_counter() - start
        children.shutdown()
        children.channel.close()
        replay.close()
        replay.unlink()
    if interrupted is None:
        _drain_events(children, monitor, episodes)
        children.check()
    collected = collected0 + int(np.sum(steps[:]))
    monitor.state = PALState(learner.state(), np.asarray(updates, np.int64), np.asarray(collected, np.int64))
    if config.eval_episodes > 0 and interrupted is None:  # the final policy, evaluated here (the test process is gone)
        from systems.common.evaluation import Evaluator

        evaluator = Evaluator(spec, None, episodes=config.eval_episodes, seed=agent.eval_seed, deterministic=True,
                              act_fn=agent.eval_act)
        returns = evaluator.run(agent.policy_params(monitor.state.agent))
        _record_evaluation(monitor, collected, monitor.wall_time(), updates, [float(r) for r in returns])
    new_updates = updates - updates0
    extra = {
        "num_samplers": config.num_samplers,
        "tuning": {name: result.to_dict() for name, result in tuning.items()},
        "envs_per_sampler": config.envs_per_sampler,
        "batch_size": config.batch_size,
        "transfer": config.transfer,
        "sampling_fps": (collected - collected0) / max(elapsed, 1e-9),
        "update_frequency_hz": new_updates / max(elapsed, 1e-9),
        "update_fps": new_updates * config.batch_size / max(elapsed, 1e-9),
        "learner_sample_seconds": sample_seconds,
        "learner_update_seconds": update_seconds,
        "optimizer_steps": updates,
        "model_parallel": learner.devices,
        **first_reached(monitor.evaluations, config.target_return),
    }
    summary = monitor.finish(interrupted=interrupted is not None, extra=extra)
    if interrupted is not None:
        raise monitor.saved(interrupted)  # the same exception: the exit status tells SIGTERM from Ctrl-C
    return summary


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
