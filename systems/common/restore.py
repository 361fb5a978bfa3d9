"""Rebuilds a trained policy from a run directory, for evaluation after training (`launch.evaluate`).

The evaluated policy is the one the papers report: HTS-RL (seed 000, section 5) evaluates the current policy pi_theta
(Eq. 4-6's actor) on separate environments; BA3C (seed 001) its single replicated network; GALA (seed 004) a learner's
parameters x_i (or the consensus average xbar = (1/n) sum_i x_i of Proposition 1); PAL (seed 003) and Spreeze
(seed 002) the greedy / mean action of their off-policy actor or Q network.

What "rebuild" means: the run's config is read back from `<run>/config.json` into the system's own config dataclass
(`TrainConfig` for hts / sync, `BA3CConfig`, `GALAConfig`, `PALConfig`, `SpreezeConfig`), the system's
own constructors build the network and the initial state exactly as the run did (same torso, widths, optimizer, so
the same pytree), and the newest readable checkpoint is restored into that structure the way `--resume` does it
(`systems.common.checkpoint.load_latest_checkpoint`; Spreeze's weight files through `systems.spreeze.weights`).

This module knows no system: each system package's `entry.py` says how its runs are rebuilt (a
`systems.common.registry.SystemEntry`, built on the helpers here), and the caller passes the entries
(`systems.registry.ENTRIES`, which `launch.evaluate` uses).
Every parameter leaf's shape and dtype are then checked against the rebuilt network, so a checkpoint that does not
belong to the config is an error, never a silently wrong network. The restore is exact: the parameters' fingerprint
(`outputs.params_fingerprint`) equals the `param_fingerprint` that the run wrote to `summary.json`.

State layouts (what each system checkpoints, see `systems.common.monitor.Monitor.checkpoint`):

* hts, sync, ba3c: one `TrainState`; the data-parallel replicas are identical and one copy is saved.
* gala: a `GossipState` with every learner: `--gossip=pmap` stacks them on a leading axis `[n, ...]` (in a
  multi-process run each process saves its own `n / num_processes`), `--gossip=async` keeps a tuple of n.
* pal, spreeze: a `PALState` whose `agent` holds the off-policy learner state.

Policies (`RestoredRun.make_act(mode)`, `mode` in POLICY_MODES):

* on-policy systems: "sampled" draws a ~ pi(.|s) with one key per row, "greedy" takes the mode (argmax / Gaussian
  mean): exactly `systems.common.evaluation.Evaluator`'s two modes.
* off-policy systems: "greedy" is the system's own evaluation action (`agent.eval_act`); "sampled" is the actors'
  exploration policy at the end of training: DQN epsilon-greedy with `epsilon_end`, DDPG / TD3 Gaussian noise of
  `action_noise`, SAC a draw from its squashed Gaussian.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from flax import serialization

from envs.factory import EnvSpec, make_spec
from systems.common import checkpoint as checkpoint_lib
from systems.common.config import PLAN_KEY, SYSTEM_KEY, VERSION_KEY, ConfigError, recorded_config
from systems.common.evaluation import network_act_fn
from systems.common.registry import SystemEntry

POLICY_MODES = ("greedy", "sampled")
MEAN_LEARNER = "mean"  # --eval_learner value: the average of the learners' parameters (GALA)


@dataclasses.dataclass
class RestoredRun:
    """A run's config, env spec and newest checkpoint, rebuilt into the system's own state structure."""

    run_dir: str
    system: str  # the `system` the run's Monitor wrote into the checkpoint's meta (a registry entry's name)
    config: Any  # the system's config dataclass, as the run resolved it
    spec: EnvSpec
    state: Any  # the whole restored checkpoint state (TrainState, GossipState or PALState)
    meta: dict  # the checkpoint's meta: env_steps, wall_time, evaluations, system, ...
    checkpoint_path: str  # the file restored
    eval_seed: int  # the seed the run's own evaluator used
    num_learners: int  # parameter sets in the checkpoint (GALA: learners in this process's file; else 1)
    _policy_params: Callable[[Any, str], Any]
    _make_act: Callable[[str], Callable]

    @property
    def env_steps(self) -> int:
        """Env steps the checkpointed policy was trained for."""
        return int(self.meta["env_steps"])

    @property
    def update_step(self) -> int:
        return int(np.asarray(self.state.update_step))

    @property
    def params(self) -> Any:
        """Every trained parameter of the checkpoint (all learners): what `summary.json`'s fingerprint covers."""
        return self.state.params

    def policy_params(self, learner: str = "0") -> Any:
        """The parameters to act with. `learner`: GALA's learner index, or MEAN_LEARNER for their average; other
        systems have one parameter set and accept only "0"."""
        return self._policy_params(self.state, learner)

    def make_act(self, mode: str) -> Callable:
        """jitted `act(params, obs [B, ...], key) -> actions [B] or [B, A]` for `mode` in POLICY_MODES; `key` is a
        raw PRNG key (one per batch; split per row inside). Continuous actions are not clipped (the caller clips)."""
        if mode not in POLICY_MODES:
            raise ConfigError(f"policy mode must be one of {', '.join(POLICY_MODES)}, got '{mode}'")
        return self._make_act(mode)


def restore_run(run_dir: str, entries: Mapping[str, SystemEntry]) -> RestoredRun:
    """Rebuilds the policy of the run in `run_dir` from its config.json and newest readable checkpoint, with the
    entry (of `entries`, by system name) of the system that wrote it.

    Raises ConfigError (one line) for a missing directory, a directory without config.json or checkpoint, an
    unsupported system or a checkpoint that does not fit the network the config describes."""
    if not os.path.isdir(run_dir):
        raise ConfigError(f"no run directory '{run_dir}'")
    config_path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(config_path):
        raise ConfigError(f"'{run_dir}' has no config.json: not a run directory")
    try:
        with open(config_path) as f:
            raw_config = json.load(f)
    except (OSError, json.JSONDecodeError) as error:
        raise ConfigError(f"cannot read {config_path}: {error}") from None
    if isinstance(raw_config, dict):
        raw_config = recorded_config(raw_config, config_path)
    files = _checkpoint_files(run_dir, entries)
    if not files:
        raise ConfigError(
            f"'{run_dir}' has no checkpoint ({checkpoint_lib.checkpoint_dir(run_dir)}/ckpt_*.msgpack): "
            "the run has not saved one yet"
        )
    system = _system_of(run_dir, files)
    if system not in entries:
        raise ConfigError(
            f"run '{run_dir}' was made by system '{system}', which launch.evaluate does not support "
            f"(supported: {', '.join(entries)})"
        )
    return entries[system].restore(run_dir, raw_config)


# ------------------------------------------------------------------------------------------------ helpers


def _checkpoint_files(run_dir: str, entries: Mapping[str, SystemEntry]) -> list[str]:
    """Checkpoint files of any system, newest last within each kind (Monitor's ckpt_*, Spreeze's weights_*)."""
    files = checkpoint_lib.list_checkpoints(run_dir)
    for entry in entries.values():
        if entry.checkpoint_files is not None:
            files += [path for path in entry.checkpoint_files(run_dir) if path not in files]
    return files


def _system_of(run_dir: str, files: list[str]) -> str:
    """The `system` entry of the newest decodable checkpoint's meta (every Monitor writes it), else summary.json's."""
    for path in reversed(files):
        try:
            with open(path, "rb") as f:
                raw = serialization.msgpack_restore(f.read())
            return str(json.loads(raw["meta"])["system"])
        except Exception:  # an unreadable file is skipped, as load_latest_checkpoint does
            continue
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            return str(json.load(f)["system"])
    except (OSError, ValueError, KeyError):
        raise ConfigError(f"none of the {len(files)} checkpoint file(s) in '{run_dir}' is readable") from None


def config_from_json(config_cls: type, values: dict) -> Any:
    """The config dataclass from its `dataclasses.asdict` JSON: lists back to tuples where the field's default is a
    tuple (PAL's `hidden_sizes`); keys the class does not know are an error (a config of another system). The run's
    plan (`PLAN_KEY`, derived values), the system's name (`SYSTEM_KEY`) and the version that wrote it
    (`VERSION_KEY`) are not part of the config."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    values = {name: value for name, value in values.items() if name not in (PLAN_KEY, SYSTEM_KEY, VERSION_KEY)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"config.json has fields {config_cls.__name__} does not know: {', '.join(unknown)} (a run "
                          "of another system)")
    kwargs = {}
    for name, value in values.items():
        if isinstance(value, list) and isinstance(fields[name].default, tuple):
            value = tuple(value)
        kwargs[name] = value
    try:
        return config_cls(**kwargs)
    except TypeError as error:
        raise ConfigError(f"config.json does not describe a {config_cls.__name__}: {error}") from None


def spec_of(config) -> EnvSpec:
    try:
        return make_spec(config.env_id, config.env_kwargs, config.frame_stack)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _warn_skipped(path: str, reason: str) -> None:
    print(f"warning: checkpoint {path} is unreadable ({reason}); trying an older one", file=sys.stderr)


def restore_into(run_dir: str, system: str, target: Any, load: Callable | None = None) -> tuple[Any, dict, str]:
    """(state, meta, path) of the newest checkpoint restorable into `target`; leaf shapes and dtypes checked."""
    if load is None:
        restored = checkpoint_lib.load_latest_checkpoint(run_dir, target, _warn_skipped)
        if restored is not None:
            state, meta = restored
            path = os.path.join(checkpoint_lib.checkpoint_dir(run_dir), f"ckpt_{int(meta['env_steps']):012d}.msgpack")
    else:
        restored = load(run_dir, target, _warn_skipped)
        if restored is not None:
            state, meta, path = restored
    if restored is None:
        raise ConfigError(
            f"no checkpoint in {checkpoint_lib.checkpoint_dir(run_dir)} can be restored into the {system} state "
            "rebuilt from config.json"
        )
    _check_leaves(target.params, state.params, path)
    return state, meta, path


def _check_leaves(expected: Any, restored: Any, path: str) -> None:
    """Every restored parameter has the rebuilt network's shape and dtype (flax restores values without checking)."""
    want = jax.tree_util.tree_flatten_with_path(expected)[0]
    got = jax.tree_util.tree_flatten_with_path(restored)[0]
    if [p for p, _ in want] != [p for p, _ in got]:
        raise ConfigError(f"{path} holds other parameters than the network rebuilt from config.json")
    for (key, a), (_, b) in zip(want, got, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            raise ConfigError(
                f"{path}: parameter {jax.tree_util.keystr(key)} is {b.dtype}{list(b.shape)}, the network rebuilt "
                f"from config.json has {a.dtype}{list(a.shape)}"
            )


def single_params(state: Any, learner: str) -> Any:
    if learner not in ("0", 0):
        raise ConfigError(f"--eval_learner={learner}: this run has one parameter set (learner 0)")
    return state.params


def on_policy_act(network) -> Callable[[str], Callable]:
    """Evaluator's two modes (systems.common.evaluation) of an actor-critic: the mode of pi(.|s), or one draw per
    row (a recurrent one's `RecurrentAct`, which keeps its episodes' states)."""

    def make(mode: str) -> Callable:
        return network_act_fn(network, deterministic=mode == "greedy")

    return make


# ------------------------------------------------------------------------------------------------ on-policy


def restore_train_state(run_dir: str, raw: dict, system: str, config_cls: type, make_agent: Callable) -> RestoredRun:
    """hts, sync and anakin: the network and state of the system's agent, `make_agent(config, spec)` (for hts and
    sync the agent `run.open_on_policy` made)."""
    config = config_from_json(config_cls, raw)
    spec = spec_of(config)
    setup, target = make_agent(config, spec)
    state, meta, path = restore_into(run_dir, system, target)
    return RestoredRun(
        run_dir=run_dir, system=system, config=config, spec=spec, state=state, meta=meta, checkpoint_path=path,
        eval_seed=setup.eval_seed, num_learners=1, _policy_params=single_params,
        _make_act=on_policy_act(setup.network),
    )
