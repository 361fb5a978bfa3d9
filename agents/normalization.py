"""Running observation normalization and reward scaling for continuous-control PPO / A2C.

What CleanRL's ``ppo_continuous_action.py`` (gymnasium's ``NormalizeObservation`` / ``NormalizeReward``) and
Stable-Baselines3's ``VecNormalize`` do, as pure functions whose state lives in the parameter pytree, so the
statistics travel with the parameters: to the actors, into checkpoints, and to evaluation.

* Observations: ``clip((o - mean) / sqrt(var + 1e-8), -obs_clip, obs_clip)`` with the running mean and variance
  of every training observation seen so far (all envs), merged batch by batch with Chan et al.'s parallel update.
* Rewards: divided by the running standard deviation of the discounted return ``R <- gamma R + r`` (reset at an
  episode's end), clipped to ``[-reward_clip, reward_clip]``; each env keeps its own ``R`` across rounds.

Departure from the peers, for HTS-RL's determinism (seed 000, Sec. 4.1): the peers update the statistics at every
env step in the order the envs return; here the learner updates them once per round from the round storage, in
(step, env) order, so the bits cannot depend on actor threads or EnvPool's batch size. A round is normalised with
the statistics its behaviour policy acted with (the stored-observation semantics of CleanRL), its raw observations
are then merged into the learner's statistics, and rewards are scaled by the return statistics after merging the
round's returns (SB3 merges, then scales, at every step; here per round).

Variables layout: ``{"params": ..., "obs_norm": {"mean", "var", "count"}, "reward_norm": {"mean", "var", "count",
"returns"}}``; only ``params`` is optimised.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp

from agents.hyperparams import hyperparameter
from agents.types import Rollout, TrainState

OBS_NORM = "obs_norm"
REWARD_NORM = "reward_norm"
_VAR_EPS = 1e-8


def init_stats(shape: tuple = ()) -> dict:
    """Empty running statistics (mean 0, variance 1, count 0: the identity normalization until data arrives)."""
    return {
        "mean": jnp.zeros(shape, jnp.float32),
        "var": jnp.ones(shape, jnp.float32),
        "count": jnp.zeros((), jnp.int32),
    }


def update_stats(stats: dict, x: jax.Array, valid: jax.Array) -> dict:
    """Merges the rows of ``x`` (``[N, *shape]``) where ``valid`` (``[N]``) is 1 into ``stats`` (Chan et al. 1979).

    Exact in the count (int32); the moments in float32. No valid row leaves ``stats`` unchanged.
    """
    chex.assert_rank(valid, 1)
    chex.assert_axis_dimension(x, 0, valid.shape[0])
    x = x.astype(jnp.float32)
    weights = valid.astype(jnp.float32).reshape((-1,) + (1,) * (x.ndim - 1))
    n = jnp.sum(valid.astype(jnp.int32))
    n_f = jnp.maximum(n, 1).astype(jnp.float32)
    batch_mean = jnp.sum(x * weights, axis=0) / n_f
    batch_var = jnp.sum(jnp.square(x - batch_mean) * weights, axis=0) / n_f
    count = stats["count"].astype(jnp.float32)
    n_rows = n.astype(jnp.float32)
    safe_total = jnp.maximum(count + n_rows, 1.0)
    delta = batch_mean - stats["mean"]
    mean = stats["mean"] + delta * n_rows / safe_total
    m2 = stats["var"] * count + batch_var * n_rows + jnp.square(delta) * count * n_rows / safe_total
    var = m2 / safe_total
    has_rows = n > 0
    return {
        "mean": jnp.where(has_rows, mean, stats["mean"]),
        "var": jnp.where(has_rows, var, stats["var"]),
        "count": stats["count"] + n,
    }


def normalize(stats: dict, x: jax.Array, clip: float) -> jax.Array:
    """``clip((x - mean) / sqrt(var + 1e-8), -clip, clip)`` in float32; ``clip <= 0`` means no clipping."""
    out = (x.astype(jnp.float32) - stats["mean"]) / jnp.sqrt(stats["var"] + _VAR_EPS)
    return jnp.clip(out, -clip, clip) if clip > 0 else out


def init_reward_state(num_envs: int) -> dict:
    """Return statistics plus each env's running discounted return."""
    return dict(init_stats(()), returns=jnp.zeros((num_envs,), jnp.float32))


def scale_rewards(
    reward_state: dict,
    rewards: jax.Array,
    episode_ends: jax.Array,
    valid: jax.Array,
    *,
    gamma: float,
    clip: float,
) -> tuple[dict, jax.Array]:
    """Discounted-return scaling of a round's ``[T, B]`` rewards (SB3 ``VecNormalize``, per round).

    ``R_t = gamma R_{t-1} + r_t`` per env (``R`` set to 0 after a step that ended the episode); the return
    statistics absorb every valid ``R_t`` of the round, then each reward is divided by their standard deviation.

    Returns:
      ``(new_reward_state, scaled_rewards)``.
    """
    chex.assert_rank(rewards, 2)
    chex.assert_equal_shape([rewards, episode_ends, valid])
    chex.assert_shape(reward_state["returns"], (rewards.shape[1],))

    def step(returns, row):
        reward, ended = row
        returns = returns * gamma + reward
        return returns * (1.0 - ended), returns

    rewards = rewards.astype(jnp.float32)
    final_returns, returns = jax.lax.scan(step, reward_state["returns"], (rewards, episode_ends.astype(jnp.float32)))
    stats = update_stats(
        {k: reward_state[k] for k in ("mean", "var", "count")}, returns.reshape(-1), valid.reshape(-1)
    )
    scaled = rewards / jnp.sqrt(stats["var"] + _VAR_EPS)
    if clip > 0:
        scaled = jnp.clip(scaled, -clip, clip)
    return dict(stats, returns=final_returns), scaled


@dataclasses.dataclass(frozen=True, kw_only=True)
class NormalizationHyperparameters:
    """Which normalizations a run uses (the flags ``--normalize_obs``, ``--normalize_reward``) and their clips."""

    normalize_obs: bool = hyperparameter(
        False, "Normalize vector observations by their running mean/std over all training envs (default: preset; "
        "MuJoCo on).", group="normalization")
    obs_clip: float = hyperparameter(10.0, "Clip normalized observations to [-v, v] (default 10; 0: no clip).",
                                     group="normalization")
    normalize_reward: bool = hyperparameter(
        False, "Divide rewards by the running std of the discounted return (default: preset; MuJoCo on).",
        group="normalization")
    reward_clip: float = hyperparameter(10.0, "Clip scaled rewards to [-v, v] (default 10; 0: no clip).",
                                        group="normalization")


@dataclasses.dataclass(frozen=True, kw_only=True)
class NormalizationConfig(NormalizationHyperparameters):
    """What the normalizations run with: the hyperparameters and the discount of the scaled return."""

    gamma: float = 0.99

    @property
    def enabled(self) -> bool:
        return self.normalize_obs or self.normalize_reward


class NormalizedNetwork:
    """An actor-critic whose ``apply`` normalizes observations with the ``obs_norm`` statistics in its variables.

    Duck-types a Flax module's ``init`` / ``apply``, so actors, evaluation and restore use it like the network it
    wraps; ``init`` adds the statistics (and the reward state, sized ``num_envs``) beside ``params``. Inputs after
    the observations (a recurrent network's states and first flags, ``agents.recurrent``) pass through unchanged.
    """

    def __init__(self, network: Any, config: NormalizationConfig, *, obs_shape: tuple, num_envs: int):
        self.network = network
        self.config = config
        self.obs_shape = tuple(obs_shape)
        self.num_envs = num_envs

    def init(self, key: jax.Array, obs: jax.Array, *inputs) -> dict:
        variables = dict(self.network.init(key, obs, *inputs))
        if self.config.normalize_obs:
            variables[OBS_NORM] = init_stats(self.obs_shape)
        if self.config.normalize_reward:
            variables[REWARD_NORM] = init_reward_state(self.num_envs)
        return variables

    def apply(self, variables: dict, obs: jax.Array, *inputs):
        if self.config.normalize_obs:
            obs = normalize(variables[OBS_NORM], obs, self.config.obs_clip)
        return self.network.apply({"params": variables["params"]}, obs, *inputs)


def trainable(variables: dict) -> dict:
    """The optimised part of the variables (what the optimizer state is built on)."""
    return {"params": variables["params"]}


def normalized_update(update: Callable, config: NormalizationConfig) -> Callable:
    """Wraps ``update(state, behaviour_params, rollout) -> (state, metrics)`` (PPO or A2C, on ``{"params"}`` only).

    The wrapped update reads the full variables: it normalizes the round's observations (``obs[0..T]``, bootstrap
    included) with the *behaviour* statistics, scales the rewards with the learner's return statistics, runs
    ``update`` on the trainable part, then merges the round's raw observations into the learner's statistics.
    Metrics gain ``obs_norm_count`` and ``reward_scale`` (the std rewards were divided by).
    """

    def wrapped(state: TrainState, behaviour_params: dict, rollout: Rollout):
        metrics_extra = {}
        new_variables = dict(state.params)
        raw_obs = rollout.obs
        if config.normalize_obs:
            rollout = rollout._replace(obs=normalize(behaviour_params[OBS_NORM], raw_obs, config.obs_clip))
        if config.normalize_reward:
            episode_ends = jnp.maximum(rollout.terminations, rollout.truncations)
            reward_state, scaled = scale_rewards(
                state.params[REWARD_NORM], rollout.rewards, episode_ends, rollout.valid,
                gamma=config.gamma, clip=config.reward_clip,
            )
            rollout = rollout._replace(rewards=scaled)
            new_variables[REWARD_NORM] = reward_state
            metrics_extra["reward_scale"] = jnp.sqrt(reward_state["var"] + _VAR_EPS)
        inner_state = state._replace(params=trainable(state.params))
        new_inner, metrics = update(inner_state, trainable(behaviour_params), rollout)
        new_variables["params"] = new_inner.params["params"]
        if config.normalize_obs:
            steps = raw_obs[:-1]
            flat = steps.reshape((steps.shape[0] * steps.shape[1], *steps.shape[2:]))
            new_variables[OBS_NORM] = update_stats(state.params[OBS_NORM], flat, rollout.valid.reshape(-1))
            metrics_extra["obs_norm_count"] = new_variables[OBS_NORM]["count"]
        return new_inner._replace(params=new_variables), dict(metrics, **metrics_extra)

    return wrapped
