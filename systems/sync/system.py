"""The synchronous baseline HTS-RL is measured against (A2C/PPO as in Kostrikov's and CleanRL's code; seed 000,
Fig. 2(a)): every step waits for all envs, a round of `sync_interval` steps is collected with the current
parameters, then the learner updates (behaviour parameters == current parameters), then the next round starts.
Rollout and learning alternate; nothing overlaps. Uses the same executor, storage, actor logic and agent updates
as HTS, with EnvPool's batch equal to the number of envs."""

from __future__ import annotations

import jax

from agents import TrainState
from envs.factory import EnvSpec
from systems.common import learner
from systems.common import run as skeleton
from systems.common.monitor import LearnerReport
from systems.common.profile import stage
from systems.common.rollout import RoundStorage
from systems.sync.config import SYSTEM, SyncConfig, own_config, validate

__all__ = ["SYSTEM", "SyncConfig", "make_agent", "run", "validate"]


def make_agent(config: SyncConfig, spec: EnvSpec) -> tuple[learner.LearnerSetup, TrainState]:
    """HTS-RL's agent (`systems.hts.system.make_agent`: the same network, optimizer and update, so that the baseline
    differs from HTS in its schedule alone), from `learner.build`'s default parts: `default_network`,
    `default_optimizer_settings` and `algo_update` (here with behaviour parameters equal to the current ones)."""
    return learner.build(config, spec, network=learner.default_network(config, spec),
                         optimizer_settings=learner.default_optimizer_settings(config),
                         update=learner.algo_update(config, spec))


def run(config: SyncConfig) -> dict:
    """Trains with the synchronous baseline; returns the summary (also written to `<run dir>/summary.json`)."""
    return skeleton.run(SYSTEM, own_config(config), lambda c: skeleton.open_on_policy(c, make_agent, _start),
                        validate=validate)


def _start(ctx: skeleton.RunContext) -> skeleton.Loop:
    """Rollout and learning in turn: every env's result before acting, the update at each round's end."""
    config, monitor, setup = ctx.config, ctx.monitor, ctx.setup
    executor = ctx.make_executor(config.num_envs)
    stop = [False]

    def on_round_complete(storage: RoundStorage, last: bool):
        current = monitor.state
        version = int(current.update_step)
        with stage("compile"):
            wait_for_compile()
        with stage("update"):  # ends when the metrics are on the host: the update has run
            new_state, metrics = setup.update(current, current.params, storage.to_rollout())
            metrics = jax.device_get(metrics)
        report = LearnerReport(new_state, metrics, storage.behaviour_version, version)
        stop[0] = monitor.on_report(report, executor.pop_episodes())
        return None if stop[0] else (version + 1, new_state.params)

    collector = ctx.make_collector(executor, inference_batch=config.num_envs, on_round_complete=on_round_complete)
    wait_for_compile = ctx.compile_update_ahead(collector)
    # Lock-step: wait for every env's result before acting (A2C/PPO's per-step synchronization).
    return skeleton.LockstepLoop(executor, collector, monitor)
