"""Our A2C update is Stable-Baselines3's, to float precision: replaying the peer's own rollouts (LunarLander-v3,
rl-zoo3's settings, 150 updates with 37 episode ends; `benchmarks/sb3_a2c_fixture.py` wrote them) through
`a2c_update` from the peer's initial weights lands on the peer's final weights. Loss weights, GAE with lambda 1,
PyTorch's RMSProp (epsilon outside the root), the gradient-norm clip and the separate 64x64 tanh networks all enter
(the initial weights are the peer's); taking SB3's value coefficient as ours (half the weight), or moving RMSProp's
epsilon inside the root, moves the weights by far more than the tolerance (checked when the test was written)."""

import functools
import pathlib

import chex
import jax
import jax.numpy as jnp
import numpy as np

from agents import A2CConfig, a2c_update
from agents.networks import make_network
from agents.optim import make_optimizer
from agents.types import Rollout, TrainState

FIXTURE = pathlib.Path(__file__).parents[1] / "data" / "sb3_a2c_lunarlander.npz"


def _params_from_torch(data, prefix: str) -> dict:
    """SB3's MlpPolicy state dict -> our ActorCritic's parameters (torch's weight is [out, in])."""
    def dense(name):
        weight, bias = data[f"{prefix}/{name}.weight"], data[f"{prefix}/{name}.bias"]
        return {"kernel": jnp.asarray(weight.T), "bias": jnp.asarray(bias)}

    return {"params": {
        "Dense_0": dense("value_net"), "Dense_1": dense("action_net"),
        "actor_torso": {"Dense_0": dense("mlp_extractor.policy_net.0"), "Dense_1": dense("mlp_extractor.policy_net.2")},
        "critic_torso": {"Dense_0": dense("mlp_extractor.value_net.0"), "Dense_1": dense("mlp_extractor.value_net.2")},
    }}


def _rollout(data, i: int, params, apply_fn) -> Rollout:
    """The peer's i-th rollout in our layout. SB3 has no reset steps (every row valid) and adds its time-limit
    bootstrap into the reward, so each of its episode ends is a termination here."""
    obs = np.concatenate([data["rollout/obs"][i], data["rollout/last_obs"][i][None]])  # [T + 1, B, 8]
    starts = data["rollout/episode_starts"][i]  # [T, B]: obs[t] opened an episode
    ends = np.concatenate([starts[1:], data["rollout/last_dones"][i][None]]).astype(np.float32)
    steps, envs = ends.shape
    _, values = apply_fn(params, jnp.asarray(obs[:-1]).reshape(steps * envs, -1))
    zeros = np.zeros_like(ends)
    return Rollout(obs=jnp.asarray(obs), actions=jnp.asarray(data["rollout/actions"][i]),
                   rewards=jnp.asarray(data["rollout/rewards"][i]), terminations=jnp.asarray(ends),
                   truncations=jnp.asarray(zeros), valid=jnp.ones_like(jnp.asarray(ends)),
                   behaviour_log_probs=jnp.asarray(zeros),
                   behaviour_values=values.reshape(steps, envs))


def test_our_a2c_update_replays_the_peers_training_onto_its_weights():
    data = np.load(FIXTURE)
    gamma, learning_rate, entropy_coef, vf_coef, max_grad_norm, gae_lambda = data["settings"]
    network = make_network((8,), 4, False, hidden_sizes=(64, 64), activation="tanh", orthogonal_init=True)
    optimizer = make_optimizer(name="rmsprop", learning_rate=float(learning_rate), total_updates=1, anneal_lr=False,
                               max_grad_norm=float(max_grad_norm), eps=1e-5)
    # SB3's value loss is vf_coef * MSE; ours is value_coef * 0.5 * MSE.
    config = A2CConfig(gamma=float(gamma), gae_lambda=float(gae_lambda), value_coef=2 * float(vf_coef),
                       entropy_coef=float(entropy_coef))
    update = jax.jit(functools.partial(a2c_update, apply_fn=network.apply, optimizer=optimizer, config=config))
    params = _params_from_torch(data, "p0")
    state = TrainState(params=params, opt_state=optimizer.init(params), key=jax.random.PRNGKey(0),
                       update_step=jnp.zeros([], jnp.int32))
    assert float(np.sum(data["rollout/episode_starts"][:, 1:]) + np.sum(data["rollout/last_dones"])) > 10
    for i in range(len(data["rollout/obs"])):
        state, _ = update(state, state.params, _rollout(data, i, state.params, network.apply))
    moved = jax.tree.map(lambda a, b: np.max(np.abs(np.asarray(a) - np.asarray(b))), _params_from_torch(data, "p1"),
                         _params_from_torch(data, "p0"))
    assert min(jax.tree.leaves(moved)) > 1e-3  # every layer trained: the comparison below is not vacuous
    chex.assert_trees_all_close(state.params, _params_from_torch(data, "p1"), rtol=1e-4, atol=1e-5)
