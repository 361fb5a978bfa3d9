"""Anakin (Podracer, arXiv 2104.06272, section 3.1) for JAX envs: each round's env steps, inference and update run in
one jitted program (`systems.anakin.program`), `chunk_rounds` rounds a call, for `num_seeds` independent agents at
once (vmapped) over the local devices (pmapped, the envs split and the gradients averaged). Between calls the host
does what every run of ours does, per agent, through its own `Monitor`: progress rows and line, evaluations with the
papers' protocol, atomic checkpoints, `--resume`, the summary. With one seed the run directory is `--logdir`; with
several, agent k (seed `seed + k`) writes `<logdir>/seed_<seed + k>` and `<logdir>/summary.json` gathers them;
`--learning_rates` makes `num_seeds` agents per rate (`<logdir>/lr_<rate>_seed_<s>`), the rate a hyperparameter in
each agent's optimizer state; `--entropy_coefs` likewise per coefficient (`ent_<coef>`), the coefficient a value in
each agent's carry that its update reads (a checkpoint does not hold it: `--resume` takes it from the flags again).

Several hosts (`--num_processes > 1`, `jax.distributed`; gloo on CPU): every process runs the same program on its
local devices, the pmap spans the devices of every process, so the gradients are averaged over all of them and every
process holds the same parameters; global device g steps envs [g * n, (g + 1) * n). Process 0 owns the run
directory, evaluates and prints; process p > 0 writes `<logdir>/process-<p>` (`distributed.per_process_config`).
Each process logs the episodes of its own envs.

A stop signal (Ctrl-C, SIGTERM) is handled once the current call's rounds are handed to the Monitors (XLA cannot
stop a program midway; `stops_held`), then every agent saves its newest parameters. A resumed run restarts the
envs, as every system's does."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from agents.optim import make_optimizer
from envs import jax_pool
from envs.factory import make_spec
from systems.anakin import program as program_lib
from systems.anakin.config import (
    MAY_CHANGE_ON_RESUME,
    SYSTEM,
    AnakinConfig,
    chunk_rounds,
    entropy_coefs,
    raise_open_files_limit,
    rates,
    validate,
)
from systems.common import atomic, distributed, layout_rule, learner
from systems.common import checkpoint as checkpoint_lib
from systems.common import config as config_lib
from systems.common import run as skeleton
from systems.common.concurrency import stops_held
from systems.common.evaluation import AgentsEvaluator, Evaluator, network_act_fn, policy_act_fn
from systems.common.learner import LearnerSetup
from systems.common.monitor import LearnerReport, Monitor, Progress, default_run_dir
from systems.common.outputs import on_policy_columns
from systems.common.profile import stage
from systems.common.rollout import place_on_axis

__all__ = ["SYSTEM", "AnakinConfig", "run", "validate"]


def _devices(config: AnakinConfig) -> list:
    """This process's devices (`--num_devices` of its local ones); the envs split evenly over every process's."""
    local = jax.local_devices()
    count = config.num_devices or len(local)
    if count > len(local):
        raise config_lib.ConfigError(f"--num_devices={count} but this process has {len(local)} local devices")
    total = count * jax.process_count()
    if config.num_envs % total:
        where = f" ({jax.process_count()} processes x {count})" if jax.process_count() > 1 else ""
        raise config_lib.ConfigError(f"--num_envs={config.num_envs} does not split evenly over {total} devices{where}")
    return local[:count]


def _agent_configs(config: AnakinConfig) -> list[AnakinConfig]:
    """Each agent's config: seed `seed + k` (and its swept learning rate and entropy coefficient), its own run
    directory when there are several."""
    swept_rates, swept_coefs = rates(config), entropy_coefs(config)
    if config.num_seeds == 1 and not swept_rates and not swept_coefs:
        return [config]
    root = os.path.normpath(config.logdir) if config.logdir else default_run_dir(SYSTEM, config)
    agents = [(rate, coef, config.seed + k) for rate in swept_rates or [config.learning_rate]
              for coef in swept_coefs or [config.entropy_coef] for k in range(config.num_seeds)]

    def name(rate: float, coef: float, seed: int) -> str:
        return (f"lr_{rate:g}_" if swept_rates else "") + (f"ent_{coef:g}_" if swept_coefs else "") + f"seed_{seed}"

    return [dataclasses.replace(config, seed=seed, learning_rate=rate, entropy_coef=coef, quiet=config.quiet or i > 0,
                                logdir=os.path.join(root, name(rate, coef, seed)))
            for i, (rate, coef, seed) in enumerate(agents)]


AHEAD_SUFFIX = ".ahead"  # an agent's checkpoint newer than the agents' newest common one, set aside on --resume


def _resume_agents_together(configs: list[AnakinConfig]) -> None:
    """Makes the agents' newest checkpoints one update: each agent's checkpoints newer than the newest update every
    agent has a whole checkpoint of are set aside (renamed `*.ahead`, one warning line each), so that every agent
    resumes there. The agents are saved one after another, so a run killed or out of disk amid a checkpoint round,
    or one agent's corrupt newest file, leaves some agents an update ahead of the others."""
    saved = {c.logdir: {checkpoint_lib.checkpoint_step(p): p for p in checkpoint_lib.decodable_checkpoints(c.logdir)}
             for c in configs}
    common = set.intersection(*(set(steps) for steps in saved.values()))
    if not common:
        newest = ", ".join(f"{os.path.basename(d)}: {max(s) if s else 'none'}" for d, s in saved.items())
        raise config_lib.ConfigError(f"--resume: the agents have no checkpoint of one update in common (their newest "
                                     f"at env steps {newest}); remove the root directory to start again")
    target = max(common)
    for steps in saved.values():
        for step in sorted(s for s in steps if s > target):
            aside = checkpoint_lib.set_aside(steps[step], AHEAD_SUFFIX)
            print(f"warning: {steps[step]} is ahead of the other agents' newest checkpoint ({target:,} env steps); "
                  f"set aside as {aside}, every agent resumes there", file=sys.stderr)


def _sweep_optimizer(config: AnakinConfig) -> optax.GradientTransformation | None:
    """With --learning_rates: the optimizer at a unit rate, then each agent's rate, a hyperparameter in its optimizer
    state (`_with_rate`), so that one vmapped program trains every rate; None without a sweep."""
    if not rates(config):
        return None
    total_updates = config_lib.total_rounds(config) * learner.optimizer_steps_per_update(config)
    unit = make_optimizer(**dict(config.optimizer_settings(total_updates), learning_rate=1.0))
    return optax.chain(unit, optax.inject_hyperparams(optax.scale)(step_size=1.0))


def _with_rate(state, config: AnakinConfig):
    """`state` whose optimizer applies `config.learning_rate` (a sweep's agent); unchanged without a sweep."""
    if not config.learning_rates:
        return state
    *inner, scale = state.opt_state
    scale = scale._replace(hyperparams={"step_size": jnp.asarray(config.learning_rate, jnp.float32)})
    return state._replace(opt_state=(*inner, scale))


def _agents(configs: list[AnakinConfig], spec, setup: LearnerSetup) -> tuple[list[skeleton.Agent],
                                                                           AgentsEvaluator | None]:
    """One agent per config (each with its own Monitor: the first prints the progress line), each with its own
    initial state and evaluation seed but one compiled initializer for all, and one evaluator that evaluates every
    agent in one call."""
    evaluation, evaluators = None, [None] * len(configs)
    if configs[0].eval_episodes > 0 and setup.carry_size:  # a recurrent policy's evaluation keeps states in Python
        evaluators = [Evaluator(spec, None, episodes=c.eval_episodes, seed=learner.eval_seed(c.seed),
                                deterministic=c.eval_deterministic,
                                act_fn=network_act_fn(setup.network, deterministic=c.eval_deterministic))
                      for c in configs]
    elif configs[0].eval_episodes > 0:
        act = policy_act_fn(setup.network.apply, deterministic=configs[0].eval_deterministic)
        evaluation = AgentsEvaluator(spec, act, episodes=configs[0].eval_episodes,
                                     seeds=[learner.eval_seed(c.seed) for c in configs])
        evaluators = [evaluation.agent(k) for k in range(len(configs))]
    return [skeleton.Agent(c, _with_rate(setup.initial_state(c.seed), c), evaluators[k])
            for k, c in enumerate(configs)], evaluation


def _stack(trees: list, devices: list | None):
    """[devices, agents, ...] arrays of per-agent, per-device pytrees (`trees[d][k]`), placed as the program's pmap
    places its outputs (`place_on_axis`: else its second call compiles it again)."""
    stacked = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]),
                           *[jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *per_device)
                             for per_device in trees])
    return place_on_axis(stacked, devices, program_lib.DEVICE_AXIS)


def run(config: AnakinConfig) -> dict:
    """Trains `num_seeds` agents in one program; returns the (first agent's, or the gathered) summary."""
    return skeleton.run(SYSTEM, config, _open, validate=validate)


def _open(config: AnakinConfig) -> skeleton.Opening:
    """The sizes fitted to the machine (`layout_rule`: on an accelerator only), the devices, the agents (one per seed
    and swept value) and their agent: one network, optimizer and update."""
    config, fitted = layout_rule.applied(config, layout_rule.this_machine(), config.num_processes,
                                         scale_on_cpu=False, split_over=config.num_devices or jax.local_device_count(),
                                         run_dir=_agent_configs(config)[0].logdir)  # the first agent's sizes
    if fitted.rule != "preset":
        validate(config)
    devices = _devices(config)
    if (config.normalize_obs or config.normalize_reward) and len(devices) * jax.process_count() > 1:
        raise config_lib.ConfigError(
            "--normalize_obs and --normalize_reward need one device (each device would keep its own running statistics "
            "of its envs): set --num_devices=1")
    config = distributed.per_process_config(config)  # process 0 owns the run directory and the evaluations
    spec = make_spec(config.env_id, config.env_kwargs, config.frame_stack)
    configs = _agent_configs(config)
    raise_open_files_limit(config)
    if config.resume and len(configs) > 1:
        _resume_agents_together(configs)
    setup, _ = learner.build(config, spec, optimizer=_sweep_optimizer(config))
    agents, evaluation = _agents(configs, spec, setup)
    progress = Progress(metric_columns=on_policy_columns(config),
                        header=f"  {fitted.describe()}\n  anakin: {len(configs)} agent(s) in one program")
    return skeleton.Opening(agents=agents, start=functools.partial(_start, config, configs, devices, setup, evaluation),
                            progress=progress, may_change_on_resume=MAY_CHANGE_ON_RESUME,
                            plan=dict(layout=fitted.record()))


def _start(config: AnakinConfig, configs: list[AnakinConfig], devices: list, setup: LearnerSetup,
           evaluation: AgentsEvaluator | None, *monitors: Monitor) -> skeleton.Loop:
    """Every agent's envs and state as the program's carry (this process's share of the envs on each of its
    devices) and the program of `chunk_rounds` rounds."""
    start = {int(m.state.update_step) for m in monitors}
    if len(start) > 1:
        raise config_lib.ConfigError(f"--resume: the agents' newest checkpoints are at different updates "
                                     f"{sorted(start)}; remove the newer ones so that all agents restart together")
    distributed.check_same_start(min(start))  # a job's processes, too (a stopped job's may be a round apart)
    reset_one, step_one = jax_pool.env_functions(config.env_id, config.env_kwargs, config.frame_stack)
    first_device = jax.process_index() * len(devices)  # this process's first device on the pmap axis
    shard = config.num_envs // (len(devices) * jax.process_count())
    swept_coef = bool(entropy_coefs(config))
    carries = [[program_lib.initial_carry(m.state, learner.action_key(c.seed),
                                          jnp.arange(g * shard, (g + 1) * shard), c.seed, reset_one,
                                          entropy_coef=c.entropy_coef if swept_coef else None,
                                          carry_size=setup.carry_size)
                for c, m in zip(configs, monitors, strict=True)]
               for g in range(first_device, first_device + len(devices))]
    pmap_devices = distributed.pmap_devices(devices)
    carry = _stack(carries, pmap_devices)
    one_round = program_lib.make_round(step_one, setup.network.apply, setup.update_fn, config.sync_interval,
                                       axis_name=program_lib.DEVICE_AXIS if len(devices) * jax.process_count() > 1
                                       else None, delayed=config.delayed_update, key_hold=setup.key_hold)
    program = program_lib.make_program(one_round, pmap_devices, chunk_rounds(config))
    return _Training(config, configs, functools.partial(_train, config, program, carry, list(monitors), start.pop(),
                                                        evaluation, first_env=first_device * shard))


class _Training(skeleton.Loop):
    """The program's calls (`_train`); the summaries of several agents gathered into one (`_gather`)."""

    saving = "a checkpoint of every agent's newest parameters"
    collectives = True

    def __init__(self, config: AnakinConfig, configs: list[AnakinConfig], calls: Callable[[], None]):
        self.config, self.configs, self._calls = config, configs, calls

    def train(self) -> None:
        self._calls()

    def summary(self, summaries: list[dict]) -> dict:
        return summaries[0] if len(summaries) == 1 else _gather(self.config, self.configs, summaries)


# Without --chunk_rounds, one call of the program lasts about this long at most: a stop signal, the progress line and
# --time_limit are handled between calls, and a chunk of 64 Brax rounds takes minutes on a CPU.
CALL_SECONDS = 5.0


def _train(config: AnakinConfig, program, carry, monitors: list[Monitor], first_round: int,
           evaluation: AgentsEvaluator | None, first_env: int = 0) -> None:
    """Calls the program chunk by chunk and hands each agent's newest state, metrics and episodes (of this
    process's envs, global ids from `first_env`) to its Monitor (and every agent's parameters to the evaluator,
    which evaluates them together when the Monitors ask). The round count is traced (no second compile), so the
    calls' lengths are free: the first runs one round (the profile's "compile" stage is the compile, not a chunk's
    work, and the first progress line comes early); every call ends on or before a multiple of the chunk length
    (the evaluation and checkpoint grid); and without --chunk_rounds the run times its rounds and keeps a call under
    CALL_SECONDS (in a multi-process job process 0's count holds for all: their programs meet in collectives)."""
    total = config_lib.total_rounds(config)
    per_call = chunk_rounds(config)
    timed = not config.chunk_rounds
    round_index, round_seconds = first_round, None
    while round_index < total:
        rounds = min((round_index // per_call + 1) * per_call, total) - round_index
        if round_index == first_round or (timed and round_seconds is None):
            rounds = 1
        elif timed:
            rounds = min(rounds, max(1, int(CALL_SECONDS / round_seconds)))
        with stops_held():  # a stop keeps the rounds this call finishes (the job's processes then agree)
            if timed:
                rounds = distributed.agreed(rounds)
            started = time.perf_counter()
            with stage("update" if round_index > first_round else "compile"):  # the first call compiles
                carry, (metrics, episodes) = program(carry, np.int32(rounds))
                metrics, episodes, trains = jax.device_get((metrics, episodes, carry.train))
            if round_index > first_round:
                round_seconds = (time.perf_counter() - started) / rounds
            round_index += rounds
            stops = _report(config, monitors, evaluation, metrics, episodes, trains, rounds, round_index, first_env)
        if all(stops):
            return


def _report(config: AnakinConfig, monitors: list[Monitor], evaluation: AgentsEvaluator | None, metrics, episodes,
            trains, rounds: int, round_index: int, first_env: int) -> list[bool]:
    """Hands a chunk's newest states, last metrics and episodes to each agent's Monitor (and every agent's
    parameters to the evaluator); returns each Monitor's wish to stop."""
    metrics = {name: value[:, :, :rounds] for name, value in metrics.items()}
    episodes = jax.tree.map(lambda x: x[:, :, :rounds], episodes)
    if evaluation is not None:
        evaluation.offer(monitors[0].policy_params(jax.tree.map(lambda x: x[0], trains)))
    stops = []
    for k, monitor in enumerate(monitors):
        state = jax.tree.map(lambda x, k=k: x[0, k], trains)  # device 0's replica of agent k
        last = {name: value[0, k, -1] for name, value in metrics.items()}
        behaviour = round_index - 1 - (1 if config.delayed_update and round_index > 1 else 0)
        report = LearnerReport(state, last, behaviour_version=behaviour, learner_version=round_index - 1)
        stops.append(monitor.on_report(report, _episodes(episodes, k, first_env)))
    return stops


def _episodes(episodes: program_lib.Episodes, agent: int, first_env: int = 0) -> list[tuple[int, float, int]]:
    """(env id, return, length) of agent `agent`'s episodes that ended in the chunk, in step order (env ids are
    device-major, as the shards, from `first_env`)."""
    def step_major(x):  # agent's [devices, rounds, T, n] -> [rounds, T, devices, n]
        return np.moveaxis(np.asarray(x[:, agent]), 0, 2)

    ended = step_major(episodes.ended)
    r, t, d, i = np.nonzero(ended)  # row-major: rounds, then steps, then devices, then envs
    n = ended.shape[-1]
    return list(zip((first_env + d * n + i).tolist(), step_major(episodes.returns)[r, t, d, i].astype(float).tolist(),
                    step_major(episodes.lengths)[r, t, d, i].astype(int).tolist(), strict=True))


def _gather(config: AnakinConfig, configs: list[AnakinConfig], summaries: list[dict]) -> dict:
    """`<logdir>/summary.json` of a several-agent run: each agent's final metric and run directory, their mean."""
    finals = [s["final_metric"] for s in summaries]
    known = [f for f in finals if f is not None]
    root = os.path.dirname(configs[0].logdir)
    summary = {
        "system": SYSTEM, "env_id": config.env_id, "algo": config.algo, "num_seeds": config.num_seeds,
        "interrupted": False,  # gathered only when every agent finished
        "final_metric": float(np.mean(known)) if known else None,  # what a sweep or a study reads of a run
        "num_agents": len(configs),
        "seeds": [c.seed for c in configs], "learning_rates": [c.learning_rate for c in configs],
        "entropy_coefs": [c.entropy_coef for c in configs],
        "final_metrics": finals,
        "final_metric_mean": float(np.mean(known)) if known else None,
        "final_metric_min": float(np.min(known)) if known else None,
        "final_metric_max": float(np.max(known)) if known else None,
        "env_steps_per_agent": summaries[0]["env_steps"],
        "sps_all_agents": float(sum(s["sps"] for s in summaries)),
        "run_dirs": [s["run_dir"] for s in summaries], "run_dir": root,
    }
    atomic.write_atomic(os.path.join(root, "summary.json"), json.dumps(summary, indent=2, sort_keys=True) + "\n")
    if not config.quiet:
        print(f"[{SYSTEM}] {len(configs)} agents: final metric mean {summary['final_metric_mean']} "
              f"(min {summary['final_metric_min']}, max {summary['final_metric_max']}), "
              f"{summary['sps_all_agents']:.0f} env steps/s over all agents; summary in {root}/summary.json")
    return summary
