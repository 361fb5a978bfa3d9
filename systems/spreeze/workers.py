"""The child processes of a Spreeze run (seed 002, section 3.1): experience samplers and the test (evaluation)
process. Each runs on the CPU with one XLA thread, reads the newest weights from the weight files the learner
publishes (section 3.3.1) and talks to the learner only through shared memory (samplers) or a small queue of
evaluation records and finished episodes (rare messages, never transitions).

Every worker is a top-level function taking picklable arguments, forked from the run's forkserver
(`system.child_context`, which has imported the workers' modules once). A worker that fails puts `("error", name,
traceback)` on its `events` pipe and exits non-zero; the learner stops the run with that error. `stop` (a shared
flag, `systems.spreeze.ipc.Flag`) ends every loop; Ctrl-C in a worker exits it quietly (the learner handles the run);
a worker whose learner died exits at once (`ipc.exit_with_parent`).
"""

from __future__ import annotations

import os
import time
import traceback
import warnings


def _cpu_only() -> None:
    """Workers run their policy on the CPU with one XLA thread so N samplers use about N cores and leave the
    accelerator to the learner. Must run before JAX initialises a backend in this process. Also silences the
    start-up noise the learner silences (gymnasium's float64-bounds warning)."""
    warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
    os.environ["JAX_PLATFORMS"] = "cpu"
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()


def _guard(name: str, events, body) -> None:
    from systems.spreeze.ipc import exit_with_parent

    exit_with_parent()
    try:
        body()
    except KeyboardInterrupt:
        pass
    except BaseException:  # reported to the learner, which stops the run with it
        try:
            events.put(("error", name, traceback.format_exc()))
        except OSError:  # the learner is gone
            pass
        raise SystemExit(1) from None


SAMPLER_STAGES = ("weights", "inference", "env", "replay_write", "other")  # a row of the shared stage seconds
_PUBLISH_STAGES_S = 0.5


def sampler_main(index: int, config, replay_handle, weights_dir: str, stop, own_stop, steps, stage_seconds,
                 events) -> None:
    """Experience sampler `index` (section 3.1.1): its own EnvPool of `envs_per_sampler` envs and a CPU copy of the
    policy with exploration; writes transitions straight into the shared replay; never waits for the learner.

    `steps` is a shared int64 array, one slot per sampler: env steps taken (read by the learner and the others);
    `stage_seconds` a shared float64 array, one row of `SAMPLER_STAGES` per sampler: where its time went
    (`systems.common.profile`, read by the learner's profile). `stop` ends every process of the run; `own_stop` only
    this sampler (the sampler-count tuning retires samplers)."""
    _cpu_only()
    _guard(f"sampler-{index}", events,
           lambda: _sample(index, config, replay_handle, weights_dir, stop, own_stop, steps, events,
                           _StageRow(stage_seconds, index)))


class _StageRow:
    """This sampler's clock (`systems.common.profile`) and its row of the shared stage seconds, written at most
    every half second and when the sampler ends."""

    def __init__(self, shared, index: int):
        from systems.common.profile import Profile

        self._profile = Profile({"samplers": SAMPLER_STAGES[:-1]}, "samplers", {})
        self._clock = self._profile.bind("samplers")
        self._shared, self._start = shared, index * len(SAMPLER_STAGES)
        self._next = 0.0

    def publish(self, *, force: bool = False) -> None:
        import time

        now = time.perf_counter()
        if not force and now < self._next:
            return
        self._next = now + _PUBLISH_STAGES_S
        seconds = self._clock.seconds()
        for offset, name in enumerate(SAMPLER_STAGES):
            self._shared[self._start + offset] = seconds.get(name, 0.0)

    def close(self) -> None:
        self._profile.unbind()
        self.publish(force=True)


def _sample(index: int, config, replay_handle, weights_dir: str, stop, own_stop, steps, events,
            stage_row: _StageRow) -> None:
    """The sampler's loop: pick up the newest weights, act, step the envs, put the real transitions into the replay
    (not EnvPool's reset steps) and the finished episodes on `events`."""
    import numpy as np

    from envs.episodes import EpisodeTracker, split_done
    from envs.factory import make_pool, make_spec
    from systems.common.profile import stage
    from systems.offpolicy.agent import build_agent
    from systems.spreeze import weights as weights_lib
    from systems.spreeze.shared_replay import SharedReplay

    spec = make_spec(config.env_id, config.env_kwargs, config.frame_stack)
    agent = build_agent(config, spec, abstract_state=True)  # reads published weights only
    replay = SharedReplay.attach(replay_handle)
    num_envs = config.envs_per_sampler
    first_env = index * num_envs
    pool = make_pool(spec, num_envs=num_envs, batch_size=num_envs, seed=config.seed + first_env, num_threads=1)
    watcher = weights_lib.WeightsWatcher(weights_dir, agent.initial_state)
    tracker = EpisodeTracker(num_envs, spec.family, spec.max_episode_steps)
    policy = _SamplerPolicy(config, spec, agent, index)
    params = None
    obs, _ = pool.reset()
    reset_step = np.zeros(num_envs, dtype=bool)
    step = 0
    try:
        while not stop.is_set() and not own_stop.is_set():
            with stage("weights"):
                newest = watcher.poll()
            if newest is not None:
                params = agent.policy_params(newest[1].agent)
            with stage("inference"):
                actions = policy.actions(params, obs, step, steps)
            with stage("env"):
                next_obs, rewards, terminated, truncated, info = pool.step(actions)
            term, trunc = split_done(spec.family, terminated, truncated, info, spec.max_episode_steps)
            tracker.step(np.asarray(info["env_id"]), rewards, terminated, truncated, info)
            finished = tracker.pop_finished()
            if finished:
                events.put(("episodes", index, finished))
            with stage("replay_write"):
                _insert_real(replay, ~reset_step, obs, actions, rewards, next_obs, term, policy.action_dtype)
            reset_step = (term + trunc) > 0
            obs = next_obs
            steps[index] += num_envs
            step += 1
            stage_row.publish()
    finally:
        stage_row.close()
        pool.close()
        if isinstance(replay, SharedReplay):
            replay.close()
        else:  # queue writer: the run is stopping, nobody drains; never block on a full pipe
            replay.close(flush=False)


class _SamplerPolicy:
    """A sampler's actions: uniform random until there are weights and the run has `learning_starts` env steps,
    then the policy with exploration (DDPG / TD3 noise, SAC sampling, DQN epsilon) and this sampler's own keys."""

    def __init__(self, config, spec, agent, index: int):
        import jax
        import numpy as np

        self.config, self.spec, self.agent = config, spec, agent
        self.key = jax.random.fold_in(agent.action_key, index)
        self.rng = np.random.default_rng([config.seed, index])
        self.action_dtype = agent.example["action"].dtype

    def actions(self, params, obs, step: int, steps):
        """Actions [E] or [E, A] for `obs` at this sampler's `step`; `steps`: every sampler's env steps."""
        import numpy as np

        config, spec, agent = self.config, self.spec, self.agent
        num_envs = config.envs_per_sampler
        if params is None or int(np.sum(steps[:])) < config.learning_starts:
            if agent.discrete:
                return self.rng.integers(0, spec.action_dim, num_envs).astype(self.action_dtype)
            return self.rng.uniform(spec.action_low, spec.action_high, (num_envs, spec.action_dim)).astype(
                self.action_dtype)
        explore = config.action_noise if not agent.discrete else config.epsilon_end
        return np.asarray(agent.act_at(params, obs, self.key, step, explore))


def _insert_real(replay, real, obs, actions, rewards, next_obs, term, action_dtype) -> None:
    """Writes the transitions of the envs whose step was real (`real` [E]), not an EnvPool reset step."""
    import numpy as np

    if real.any():
        replay.insert({
            "obs": np.asarray(obs[real], np.float32),
            "action": actions[real].astype(action_dtype),
            "reward": np.asarray(rewards, np.float32)[real],
            "next_obs": np.asarray(next_obs[real], np.float32),
            "done": term[real],
        })


def evaluator_main(config, weights_dir: str, stop, events, poll_seconds: float = 0.2) -> None:
    """The test process (section 3.1.2): plays the deterministic policy of the newest weights on its own envs,
    for every published version whose env steps passed the next `eval_every` multiple, and sends
    ("eval", env_steps, wall_time, version, returns) to the learner, which writes the test return curve."""
    _cpu_only()

    def body():
        from envs.factory import make_spec
        from systems.common.evaluation import Evaluator
        from systems.offpolicy.agent import build_agent
        from systems.spreeze import weights as weights_lib

        spec = make_spec(config.env_id, config.env_kwargs, config.frame_stack)
        agent = build_agent(config, spec, abstract_state=True)  # reads published weights only
        evaluator = Evaluator(spec, None, episodes=config.eval_episodes, seed=agent.eval_seed, deterministic=True,
                              act_fn=agent.eval_act)
        watcher = weights_lib.WeightsWatcher(weights_dir, agent.initial_state)
        next_eval = 0
        while not stop.is_set():
            newest = watcher.poll()
            if newest is None:
                time.sleep(poll_seconds)
                continue
            version, state = newest
            meta = watcher.meta or {}
            env_steps = int(meta.get("env_steps", int(state.env_steps)))
            if env_steps < next_eval and not meta.get("final"):
                continue
            returns = evaluator.run(agent.policy_params(state.agent))
            events.put(("eval", env_steps, float(meta.get("wall_time", 0.0)), int(version),
                        [float(r) for r in returns]))
            if config.eval_every > 0:
                next_eval = (env_steps // config.eval_every + 1) * config.eval_every

    _guard("evaluator", events, body)
