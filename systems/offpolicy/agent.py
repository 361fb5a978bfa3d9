"""The off-policy agent of a PAL or Spreeze run, built from its config: networks, optimizers, the initial learner
state, the actors' exploration policy, the evaluation policy and the parameter server's aggregated update.

Parallel learners (seed 003, section V-B): "Each learner independently samples one batch of data from the Replay
Buffer and computes the sub-gradients. The parameter server aggregates the gradients and updates the weights."
Here the N learners' sub-batches arrive stacked `[N, B / N, ...]` and the update is
`jax.vmap(update, axis_name=PAL_AXIS)`: each learner's gradient is computed on its own sub-batch, the gradients are
averaged over the axis (`agents.mean_over_axis`, inside `dqn_update` / `ddpg_update` / `sac_update`) and one
optimizer step is applied to the single (unbatched) learner state. Because each loss is a mean over equal-size
sub-batches, the step equals one step on their concatenation, so `--num_learners` changes where the sampling work
runs, not what a step computes (up to float reassociation and, for TD3 / SAC, which noise draws a row gets).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from agents import (
    DQNConfig,
    SACConfig,
    ddpg_act,
    ddpg_config,
    ddpg_init,
    ddpg_update,
    dqn_act,
    dqn_init,
    dqn_update,
    make_optimizer,
    sac_act,
    sac_init,
    sac_update,
)
from agents.ddpg import DDPGConfig
from agents.offpolicy_networks import (
    ContinuousQ,
    DeterministicActor,
    GaussianActor,
    QNetwork,
    TwinQ,
    bounds_as_tuples,
    squashed_gaussian_mode,
)
from envs.factory import EnvSpec
from systems.offpolicy.config import ALGOS, CONTINUOUS_ALGOS, DISCRETE_ALGOS  # noqa: F401 - re-exported

PAL_AXIS = "pal_learner"

# fold_in streams of the run key.
_INIT, _LEARNER, _ACTIONS, _EVAL = 0, 1, 2, 3


class PALState(NamedTuple):
    """What a PAL checkpoint holds besides the replay buffer: the agent's learner state, the optimizer steps taken
    and the env steps collected when it was taken (int64 scalars)."""

    agent: Any  # DQNState | DDPGState | SACState
    update_step: Any
    env_steps: Any

    @property
    def params(self):
        """Every trained network (for the fingerprint): DQN the Q network, DDPG / TD3 actor and critic, SAC actor,
        critic and log temperature."""
        agent = self.agent
        if hasattr(agent, "log_alpha"):
            return {"actor": agent.actor_params, "critic": agent.critic_params, "log_alpha": agent.log_alpha}
        if hasattr(agent, "actor_params"):
            return {"actor": agent.actor_params, "critic": agent.critic_params}
        return agent.params


@dataclasses.dataclass
class OffPolicyAgent:
    algo: str
    initial_state: PALState
    update: Callable  # jitted (agent state, batch {f: [N, b, ...]}, weights [N, b]) -> (state, metrics, [N, b])
    act: Callable  # jitted (policy params, obs [E, ...], key, explore) -> actions [E] or [E, A]
    act_at: Callable  # jitted (policy params, obs, key, step, explore): `act` with `step` folded into `key` inside
    eval_act: Callable  # jitted (policy params, obs, key) -> greedy / mean actions
    policy_params: Callable[[Any], Any]  # agent state -> the parameters the actors and the evaluator use
    action_key: jax.Array  # actors fold (actor, step) into it
    eval_seed: int
    discrete: bool
    example: dict  # one transition, field -> array (the replay buffer's layout)
    sac_parts: dict | None = None  # SAC only: the keyword arguments of `sac_update` (Spreeze's model parallelism)


def _network_sizes(hidden_sizes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(h) for h in hidden_sizes)


def _init_once(init: Callable, keys: Any, abstract: bool) -> Any:
    """The initial agent state from one compiled program (run op by op, every layer's initializer, optimizer state
    and target copy compiled on its own: seconds per process; the values are the same), or with `abstract` only its
    shapes and dtypes (`jax.ShapeDtypeStruct` leaves, nothing compiled): enough for a process that only reads
    published weights into that structure (Spreeze's samplers and evaluator)."""
    return jax.eval_shape(init, keys) if abstract else jax.jit(init)(keys)


def build_agent(config, spec: EnvSpec, *, abstract_state: bool = False) -> OffPolicyAgent:
    """`config` is a `systems.pal.system.PALConfig` (algo, hidden sizes, learning rate, gamma, target settings).
    `abstract_state`: `initial_state` holds only shapes and dtypes (`_init_once`).

    The steps: the algorithm's networks, optimizers and initial state with its per-learner update and policies
    (`_q_learning_parts` for DQN / DDQN, `_actor_critic_parts` for DDPG / TD3 / SAC), then the parameter server's
    aggregated update over the N learners (section V-B, `aggregated_update`) and the replay buffer's layout."""
    algo = config.algo
    run_key = jax.random.PRNGKey(config.seed)
    init_key = jax.random.fold_in(run_key, _INIT)
    obs = np.zeros((1, *spec.obs_shape), spec.obs_dtype)
    hidden = _network_sizes(config.hidden_sizes)
    if algo in DISCRETE_ALGOS:
        parts = _q_learning_parts(config, spec, obs, hidden, init_key, abstract_state)
    else:
        parts = _actor_critic_parts(config, spec, obs, hidden, init_key, abstract_state)
    initial = PALState(agent=parts.agent_state, update_step=np.zeros((), np.int64), env_steps=np.zeros((), np.int64))
    return OffPolicyAgent(
        algo=algo,
        initial_state=initial,
        update=jax.jit(functools.partial(aggregated_update, update_fn=parts.update)),
        act=jax.jit(parts.act),
        act_at=jax.jit(functools.partial(_act_at, act=parts.act)),
        eval_act=jax.jit(parts.eval_act),
        policy_params=parts.policy_params,
        action_key=jax.random.fold_in(run_key, _ACTIONS),
        eval_seed=int(config.seed) + 1_000_000,
        discrete=algo in DISCRETE_ALGOS,
        example=_example_transition(spec, parts.action),
        sac_parts=parts.sac_parts,
    )


class _AlgoParts(NamedTuple):
    """What one algorithm family brings to `build_agent`."""

    agent_state: Any  # the initial learner state (or its shapes, `abstract_state`)
    update: Callable  # one learner's update: (state, batch, weights, axis_name=...) -> (state, metrics, priorities)
    act: Callable  # (policy params, obs, key, explore) -> actions: the actors' exploration policy
    eval_act: Callable  # (policy params, obs, key) -> greedy / mean actions
    policy_params: Callable[[Any], Any]  # agent state -> the parameters `act` and `eval_act` read
    action: np.ndarray  # one action as the replay buffer stores it
    sac_parts: dict | None = None  # SAC only: the keyword arguments of `sac_update`


def _optimizer(config, learning_rate: float):
    """Adam with the run's clipping and epsilon, no learning-rate annealing."""
    return make_optimizer(
        name="adam", learning_rate=learning_rate, total_updates=max(1, config.total_steps), anneal_lr=False,
        max_grad_norm=config.max_grad_norm, eps=config.opt_eps,
    )


def _q_learning_parts(config, spec: EnvSpec, obs, hidden, init_key, abstract_state: bool) -> _AlgoParts:
    """DQN / DDQN: one Q network (Nature CNN torso on images), epsilon-greedy actors, greedy evaluation."""
    algo = config.algo
    if spec.continuous or spec.factored:
        raise ValueError(f"--algo={algo} needs one Discrete action; {spec.env_id} has "
                         f"{'a continuous' if spec.continuous else 'a MultiDiscrete / MultiBinary'} action")
    torso = "nature_cnn" if len(spec.obs_shape) == 3 else "mlp"
    network = QNetwork(action_dim=spec.action_dim, hidden_sizes=hidden, torso=torso, dense_init=config.network_init)
    opt = _optimizer(config, config.learning_rate)
    dqn_config = DQNConfig(
        gamma=config.gamma, double=algo == "ddqn", loss="huber",
        target_update_period=config.target_update_period, tau=config.tau if config.tau < 1 else None,
    )
    agent_state = _init_once(lambda key: dqn_init(network.init(key, obs), optimizer=opt), init_key, abstract_state)
    return _AlgoParts(
        agent_state=agent_state,
        update=functools.partial(dqn_update, apply_fn=network.apply, optimizer=opt, config=dqn_config),
        act=functools.partial(_epsilon_greedy, apply_fn=network.apply),
        eval_act=functools.partial(_greedy, apply_fn=network.apply),
        policy_params=_q_params,
        action=np.zeros((), np.int32),
    )


def _actor_critic_parts(config, spec: EnvSpec, obs, hidden, init_key, abstract_state: bool) -> _AlgoParts:
    """DDPG / TD3 / SAC on vector observations and a Box action space: an actor and a critic (twin for TD3 and
    SAC), each with its own optimizer (SAC: also its temperature's)."""
    algo = config.algo
    if not spec.continuous:
        raise ValueError(f"--algo={algo} needs a continuous (Box) action space; {spec.env_id} is discrete")
    if len(spec.obs_shape) != 1:
        raise ValueError(f"--algo={algo} supports vector observations only, {spec.env_id} has {spec.obs_shape}")
    low, high = bounds_as_tuples(spec.action_low, spec.action_high)
    actor_key, critic_key, state_key = jax.random.split(init_key, 3)
    keys = (actor_key, critic_key, state_key)
    action_zero = np.zeros((1, spec.action_dim), np.float32)
    actor_opt = _optimizer(config, config.learning_rate)
    critic_opt = _optimizer(config, config.critic_learning_rate or config.learning_rate)
    bounds = dict(action_low=np.asarray(spec.action_low), action_high=np.asarray(spec.action_high))
    action = np.zeros((spec.action_dim,), np.float32)
    if algo == "sac":
        actor = GaussianActor(action_dim=spec.action_dim, hidden_sizes=hidden, dense_init=config.network_init)
        critic = TwinQ(hidden_sizes=hidden, dense_init=config.network_init)
        alpha_opt = _optimizer(config, config.critic_learning_rate or config.learning_rate)
        agent_state = _init_once(lambda keys: sac_init(
            keys[2], actor.init(keys[0], obs), critic.init(keys[1], obs, action_zero),
            actor_optimizer=actor_opt, critic_optimizer=critic_opt, alpha_optimizer=alpha_opt,
        ), keys, abstract_state)
        sac_parts = dict(actor_apply=actor.apply, critic_apply=critic.apply, actor_optimizer=actor_opt,
                         critic_optimizer=critic_opt, alpha_optimizer=alpha_opt,
                         config=SACConfig(gamma=config.gamma, tau=config.tau), **bounds)
        return _AlgoParts(
            agent_state=agent_state, update=functools.partial(sac_update, **sac_parts),
            act=functools.partial(_sac_sample, actor_apply=actor.apply, **bounds),
            eval_act=functools.partial(_sac_mean, actor_apply=actor.apply, **bounds),
            policy_params=_actor_params, action=action, sac_parts=sac_parts,
        )
    actor = DeterministicActor(action_dim=spec.action_dim, action_low=low, action_high=high, hidden_sizes=hidden,
                               dense_init=config.network_init)
    if algo == "td3":
        ddpg_cfg = DDPGConfig(gamma=config.gamma, tau=config.tau)
        critic = TwinQ(hidden_sizes=hidden, dense_init=config.network_init)
    else:
        ddpg_cfg = dataclasses.replace(ddpg_config(), gamma=config.gamma, tau=config.tau)
        critic = ContinuousQ(hidden_sizes=hidden, dense_init=config.network_init)
    agent_state = _init_once(lambda keys: ddpg_init(
        keys[2], actor.init(keys[0], obs), critic.init(keys[1], obs, action_zero),
        actor_optimizer=actor_opt, critic_optimizer=critic_opt,
    ), keys, abstract_state)
    return _AlgoParts(
        agent_state=agent_state,
        update=functools.partial(ddpg_update, actor_apply=actor.apply, critic_apply=critic.apply,
                                 actor_optimizer=actor_opt, critic_optimizer=critic_opt, config=ddpg_cfg, **bounds),
        act=functools.partial(ddpg_act, actor_apply=actor.apply, **bounds),  # (params, obs, key, noise_std)
        eval_act=functools.partial(_ddpg_noiseless, actor_apply=actor.apply, **bounds),
        policy_params=_actor_params, action=action,
    )


def aggregated_update(state, batch, weights, *, update_fn: Callable):
    """N learners' sub-batches [N, b, ...] -> one optimizer step on the averaged gradient (module doc)."""
    per_learner = functools.partial(update_fn, axis_name=PAL_AXIS)
    return jax.vmap(per_learner, in_axes=(None, 0, 0), out_axes=(None, None, 0), axis_name=PAL_AXIS)(
        state, batch, weights
    )


def _example_transition(spec: EnvSpec, action: np.ndarray) -> dict:
    """One transition, field -> zeros: the replay buffer's layout."""
    return {
        "obs": np.zeros(spec.obs_shape, spec.obs_dtype),
        "action": action,
        "reward": np.zeros((), np.float32),
        "next_obs": np.zeros(spec.obs_shape, spec.obs_dtype),
        "done": np.zeros((), np.float32),
    }


def _act_at(params, obs, key, step, explore, *, act):
    """An actor's step `step`: its key folded with the step inside the program; `jax.random.fold_in` run op by op
    before the call cost more than a small policy's whole call."""
    return act(params, obs, jax.random.fold_in(key, step), explore)


def _epsilon_greedy(params, obs, key, epsilon, *, apply_fn):
    """DQN actors. `key`: a raw uint32 key; `dqn_act` takes one typed key per row."""
    keys = jax.random.wrap_key_data(jax.random.split(key, obs.shape[0]))
    return dqn_act(params, obs, keys, epsilon, apply_fn=apply_fn)


def _greedy(params, obs, key, *, apply_fn):
    return _epsilon_greedy(params, obs, key, 0.0, apply_fn=apply_fn)


def _sac_sample(params, obs, key, explore, *, actor_apply, action_low, action_high):
    del explore  # SAC explores by sampling its own policy
    return sac_act(params, obs, key, False, actor_apply=actor_apply, action_low=action_low, action_high=action_high)


def _sac_mean(params, obs, key, *, actor_apply, action_low, action_high):
    mean, _ = actor_apply(params, obs)
    return squashed_gaussian_mode(mean, action_low=action_low, action_high=action_high)


def _ddpg_noiseless(params, obs, key, *, actor_apply, action_low, action_high):
    return ddpg_act(params, obs, key, 0.0, actor_apply=actor_apply, action_low=action_low, action_high=action_high)


def _q_params(state):
    return state.params


def _actor_params(state):
    return state.actor_params
