"""The off-policy agent of a PAL run, built from its config: networks, optimizers, the initial learner state, the
actors' exploration policy, the evaluation policy and the parameter server's aggregated update.

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

PAL_AXIS = "pal_learner"
DISCRETE_ALGOS = ("dqn", "ddqn")
CONTINUOUS_ALGOS = ("ddpg", "td3", "sac")
ALGOS = DISCRETE_ALGOS + CONTINUOUS_ALGOS

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
    `abstract_state`: `initial_state` holds only shapes and dtypes (`_init_once`)."""
    algo = config.algo
    run_key = jax.random.PRNGKey(config.seed)
    init_key = jax.random.fold_in(run_key, _INIT)
    obs = np.zeros((1, *spec.obs_shape), spec.obs_dtype)
    hidden = _network_sizes(config.hidden_sizes)
    total_updates = max(1, config.total_steps)

    def optimizer(learning_rate):
        return make_optimizer(
            name="adam", learning_rate=learning_rate, total_updates=total_updates, anneal_lr=False,
            max_grad_norm=config.max_grad_norm, eps=config.opt_eps,
        )

    if algo in DISCRETE_ALGOS:
        if spec.continuous:
            raise ValueError(f"--algo={algo} needs a discrete action space; {spec.env_id} is continuous")
        torso = "nature_cnn" if len(spec.obs_shape) == 3 else "mlp"
        network = QNetwork(action_dim=spec.action_dim, hidden_sizes=hidden, torso=torso)
        opt = optimizer(config.learning_rate)
        dqn_config = DQNConfig(
            gamma=config.gamma, double=algo == "ddqn", loss="huber",
            target_update_period=config.target_update_period, tau=config.tau if config.tau < 1 else None,
        )
        agent_state = _init_once(lambda key: dqn_init(network.init(key, obs), optimizer=opt), init_key, abstract_state)
        update_fn = functools.partial(dqn_update, apply_fn=network.apply, optimizer=opt, config=dqn_config)

        def act(params, obs, key, epsilon):  # key: a raw uint32 key; dqn_act takes one typed key per row
            keys = jax.random.wrap_key_data(jax.random.split(key, obs.shape[0]))
            return dqn_act(params, obs, keys, epsilon, apply_fn=network.apply)

        def eval_act(params, obs, key):
            return act(params, obs, key, 0.0)

        def policy_params(state):
            return state.params

        action = np.zeros((), np.int32)
    else:
        if not spec.continuous:
            raise ValueError(f"--algo={algo} needs a continuous (Box) action space; {spec.env_id} is discrete")
        if len(spec.obs_shape) != 1:
            raise ValueError(f"--algo={algo} supports vector observations only, {spec.env_id} has {spec.obs_shape}")
        low, high = bounds_as_tuples(spec.action_low, spec.action_high)
        actor_key, critic_key, state_key = jax.random.split(init_key, 3)
        action_zero = np.zeros((1, spec.action_dim), np.float32)
        actor_opt = optimizer(config.learning_rate)
        critic_opt = optimizer(config.critic_learning_rate or config.learning_rate)
        bounds = dict(action_low=np.asarray(spec.action_low), action_high=np.asarray(spec.action_high))
        if algo == "sac":
            actor = GaussianActor(action_dim=spec.action_dim, hidden_sizes=hidden)
            critic = TwinQ(hidden_sizes=hidden)
            alpha_opt = optimizer(config.critic_learning_rate or config.learning_rate)
            agent_state = _init_once(lambda keys: sac_init(
                keys[2], actor.init(keys[0], obs), critic.init(keys[1], obs, action_zero),
                actor_optimizer=actor_opt, critic_optimizer=critic_opt, alpha_optimizer=alpha_opt,
            ), (actor_key, critic_key, state_key), abstract_state)
            sac_config = SACConfig(gamma=config.gamma, tau=config.tau)
            sac_parts = dict(actor_apply=actor.apply, critic_apply=critic.apply, actor_optimizer=actor_opt,
                             critic_optimizer=critic_opt, alpha_optimizer=alpha_opt, config=sac_config, **bounds)
            update_fn = functools.partial(sac_update, **sac_parts)

            def act(params, obs, key, explore):
                del explore  # SAC explores by sampling its own policy
                return sac_act(params, obs, key, False, actor_apply=actor.apply, **bounds)

            def eval_act(params, obs, key):
                mean, _ = actor.apply(params, obs)
                return squashed_gaussian_mode(mean, **bounds)
        else:
            actor = DeterministicActor(action_dim=spec.action_dim, action_low=low, action_high=high,
                                       hidden_sizes=hidden)
            if algo == "td3":
                ddpg_cfg = DDPGConfig(gamma=config.gamma, tau=config.tau)
                critic = TwinQ(hidden_sizes=hidden)
            else:
                ddpg_cfg = dataclasses.replace(ddpg_config(), gamma=config.gamma, tau=config.tau)
                critic = ContinuousQ(hidden_sizes=hidden)
            agent_state = _init_once(lambda keys: ddpg_init(
                keys[2], actor.init(keys[0], obs), critic.init(keys[1], obs, action_zero),
                actor_optimizer=actor_opt, critic_optimizer=critic_opt,
            ), (actor_key, critic_key, state_key), abstract_state)
            update_fn = functools.partial(
                ddpg_update, actor_apply=actor.apply, critic_apply=critic.apply, actor_optimizer=actor_opt,
                critic_optimizer=critic_opt, config=ddpg_cfg, **bounds,
            )

            def act(params, obs, key, noise_std):
                return ddpg_act(params, obs, key, noise_std, actor_apply=actor.apply, **bounds)

            def eval_act(params, obs, key):
                return ddpg_act(params, obs, key, 0.0, actor_apply=actor.apply, **bounds)

        def policy_params(state):
            return state.actor_params

        action = np.zeros((spec.action_dim,), np.float32)

    def aggregated_update(state, batch, weights):
        """N learners' sub-batches [N, b, ...] -> one optimizer step on the averaged gradient (module doc)."""
        per_learner = functools.partial(update_fn, axis_name=PAL_AXIS)
        return jax.vmap(per_learner, in_axes=(None, 0, 0), out_axes=(None, None, 0), axis_name=PAL_AXIS)(
            state, batch, weights
        )

    example = {
        "obs": np.zeros(spec.obs_shape, spec.obs_dtype),
        "action": action,
        "reward": np.zeros((), np.float32),
        "next_obs": np.zeros(spec.obs_shape, spec.obs_dtype),
        "done": np.zeros((), np.float32),
    }
    initial = PALState(agent=agent_state, update_step=np.zeros((), np.int64), env_steps=np.zeros((), np.int64))
    return OffPolicyAgent(
        algo=algo,
        initial_state=initial,
        update=jax.jit(aggregated_update),
        act=jax.jit(act),
        eval_act=jax.jit(eval_act),
        policy_params=policy_params,
        action_key=jax.random.fold_in(run_key, _ACTIONS),
        eval_seed=int(config.seed) + 1_000_000,
        discrete=algo in DISCRETE_ALGOS,
        example=example,
        sac_parts=sac_parts if algo == "sac" else None,
    )
