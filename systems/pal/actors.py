"""PAL's actors (seed 003, section V-A) and what paces them: `RatioGate` holds `update_interval` env steps per
optimizer step (Algorithm 1, line 11) between actor and learner threads; `EpisodeSink` gathers the actors' finished
episodes for the progress rows."""

from __future__ import annotations

import math
import threading

import jax
import numpy as np

from envs.episodes import EpisodeTracker, split_done
from envs.factory import EnvSpec, make_pool
from systems.common.concurrency import ParameterStore, StopRequested
from systems.common.profile import stage
from systems.offpolicy.agent import OffPolicyAgent
from systems.offpolicy.config import DISCRETE_ALGOS
from systems.pal.config import PALConfig
from systems.replay import FrameStackBuffer

POLL_SECONDS = 0.05  # how long a waiting actor, learner or the run's loop sleeps before it looks again


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
                self._cond.wait(POLL_SECONDS)

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
                self._cond.wait(POLL_SECONDS)

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
            with stage("inference"):
                actions = np.asarray(self.agent.act_at(params, self.obs, self.key, self.steps, self.explore(collected)))
        else:
            actions = self.rng.uniform(self.spec.action_low, self.spec.action_high,
                                       (self.num_envs, self.spec.action_dim)).astype(np.float32)
        with stage("env"):
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
            with stage("replay_insert"):  # the buffer's write lock included
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
        """Closes the envs (again: nothing)."""
        if not getattr(self, "_closed", False):
            self._closed = True
            self.pool.close()
