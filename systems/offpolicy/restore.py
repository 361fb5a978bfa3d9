"""Rebuilding a PAL or Spreeze run for evaluation (`systems.common.restore`): `build_agent`'s initial state from
config.json, the newest checkpoint restored into it, and the two policy modes."""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp

from systems.common import restore as lib
from systems.offpolicy.agent import build_agent


def restore_off_policy(run_dir: str, raw: dict, system: str, config_cls: type,
                       load: Callable | None = None) -> lib.RestoredRun:
    """`load(run_dir, target, on_skip) -> (state, meta, path) | None` replaces Monitor's checkpoint files (Spreeze's
    weight files)."""
    config = lib.config_from_json(config_cls, raw)
    spec = lib.spec_of(config)
    try:
        agent = build_agent(config, spec)
    except ValueError as error:
        raise lib.ConfigError(str(error)) from None
    state, meta, path = lib.restore_into(run_dir, system, agent.initial_state, load)

    def policy_params(state, learner):
        if learner not in ("0", 0):
            raise lib.ConfigError(f"--eval_learner={learner}: a {system} run has one policy (its learners share it)")
        return agent.policy_params(state.agent)

    return lib.RestoredRun(
        run_dir=run_dir, system=system, config=config, spec=spec, state=state, meta=meta, checkpoint_path=path,
        eval_seed=agent.eval_seed, num_learners=1, _policy_params=policy_params,
        _make_act=off_policy_act(agent, config),
    )


def off_policy_act(agent, config) -> Callable[[str], Callable]:
    """PAL / Spreeze: greedy is `agent.eval_act`; sampled is the actors' exploration at the end of training."""
    explore = config.epsilon_end if agent.discrete else config.action_noise

    def make(mode: str) -> Callable:
        if mode == "greedy":
            return agent.eval_act
        return lambda params, obs, key: agent.act(params, obs, key, jnp.float32(explore))

    return make
