"""What GALA's two modes share: the learners' state, the agent, the progress columns and the gradient-cosine log."""

from __future__ import annotations

import csv
import dataclasses
import os
from typing import Any, NamedTuple

import numpy as np

from envs.factory import make_spec
from systems.common import layout_rule
from systems.common.learner import build
from systems.common.monitor import Progress
from systems.common.outputs import on_policy_columns
from systems.gala.config import GALAConfig, Plan


class GossipState(NamedTuple):
    """Every learner's state, checkpointed together.

    pmap mode: leaves have a leading learner axis [n, ...] and `inbox` holds the messages in transit (one pytree of
    [n, ...] per peer shift). Async mode: `params`, `opt_state` and `key` are tuples with one entry per learner and
    `inbox` is empty (messages in flight are not saved). `update_step` counts gossip iterations (pmap: lock-step
    iterations; async: local iterations summed over learners), `learner_steps` each learner's own count."""

    params: Any
    opt_state: Any
    key: Any
    update_step: Any
    learner_steps: Any
    inbox: Any


class CosineLog:
    """grad_cosine.csv: the learners' pairwise gradient cosine similarity (seed 004, Fig. 2b), and its running mean."""

    def __init__(self, run_dir: str, num_learners: int, append: bool):
        path = os.path.join(run_dir, "grad_cosine.csv")
        exists = append and os.path.exists(path)
        self._handle = open(path, "a" if exists else "w", newline="")
        self._writer = csv.writer(self._handle)
        if not exists:
            self._writer.writerow(["env_steps", "learner_i", "learner_j", "cosine"])
        self.total = np.zeros((num_learners, num_learners))
        self.count = 0

    def add(self, env_steps: int, matrix: np.ndarray) -> float:
        """Logs one matrix; returns the mean off-diagonal similarity."""
        n = matrix.shape[0]
        for i in range(n):
            for j in range(n):
                self._writer.writerow([env_steps, i, j, f"{float(matrix[i, j]):.6g}"])
        self._handle.flush()
        self.total += matrix
        self.count += 1
        return float((matrix.sum() - np.trace(matrix)) / max(n * (n - 1), 1))

    def close(self) -> None:
        self._handle.close()


def make_agent(config: GALAConfig, run_plan: Plan):
    spec = make_spec(config.env_id, config.env_kwargs, config.frame_stack)
    optimizer_settings = dict(config.optimizer_settings(run_plan.iterations), learning_rate=run_plan.learning_rate)
    setup, state = build(config, spec, optimizer_settings=optimizer_settings)
    return spec, setup, state


def metric_columns(config: GALAConfig) -> tuple[str, ...]:
    """progress.csv: the A2C learners' metrics, the consensus distance ||X - mean(X)|| and its Proposition 1 bound
    (seed 004, Fig. 2a), and with --log_grad_cosine the mean pairwise gradient cosine (Fig. 2b)."""
    columns = on_policy_columns(config) + ("consensus_distance", "consensus_bound")
    return columns + (("grad_cosine_mean",) if config.log_grad_cosine else ())


def layout(config: GALAConfig) -> layout_rule.Fit:
    """Each learner's envs and rollout as given: GALA's preset fits every machine (`layout_rule.GALA_PRESET_WHY`)."""
    sizes = layout_rule.Sizes(config.envs_per_learner, config.sync_interval, 0)
    return layout_rule.preset_fit(sizes, layout_rule.this_machine(), layout_rule.GALA_PRESET_WHY)


def plan_record(config: GALAConfig, run_plan: Plan) -> dict:
    """config.json's plan: the run's derived values and its layout."""
    return dict(dataclasses.asdict(run_plan), layout=layout(config).record())


def progress(config: GALAConfig, run_plan: Plan, steps_per_update: int | None = None) -> Progress:
    """The start line (the layout, learners, graph, gossip mode, staleness bound, the plan's learning rate) and the
    columns."""
    tau = "none" if config.max_staleness < 0 else str(config.max_staleness)
    header = (f"  {layout(config).describe()}\n"
              f"  learners {config.num_learners} x {config.envs_per_learner} envs  {config.topology} "
              f"{config.num_peers} peer(s)  gossip {config.gossip}  tau {tau}  lr {run_plan.learning_rate:g}")
    return Progress(metric_columns=metric_columns(config), steps_per_update=steps_per_update,
                    sizes=f"envs {run_plan.num_envs}  alpha {config.sync_interval}", header=header)
