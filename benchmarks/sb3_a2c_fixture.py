"""Writes tests/data/sb3_a2c_lunarlander.npz: Stable-Baselines3's A2C on LunarLander-v3 (rl-zoo3's settings, a
constant learning rate) for a number of updates, with every rollout it trained on and its parameters before and after.
`tests/agents/test_a2c_peer_update.py` replays those rollouts through our A2C update and checks that it lands on the
peer's parameters, so the learner's equations (loss weights, GAE, RMSProp, clipping) are the peer's to float precision.

Run in the peer's venv (benchmarks/requirements-learning.txt), not the project's:
  /tmp/learn-venv/bin/python benchmarks/sb3_a2c_fixture.py [--updates=150]
"""

import argparse

import numpy as np
import torch as th
from stable_baselines3 import A2C
from stable_baselines3.common.env_util import make_vec_env

SETTINGS = dict(n_steps=5, gamma=0.995, learning_rate=8.3e-4, ent_coef=1e-5, vf_coef=0.5, max_grad_norm=0.5,
                gae_lambda=1.0)  # rl-zoo3 2.9 a2c.yml LunarLander-v3, its linear schedule left constant


def params(model) -> dict:
    return {k: v.detach().numpy().copy() for k, v in model.policy.state_dict().items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--updates", type=int, default=150)
    parser.add_argument("--out", default="tests/data/sb3_a2c_lunarlander.npz")
    args = parser.parse_args()
    th.manual_seed(0)
    env = make_vec_env("LunarLander-v3", n_envs=8, seed=0)
    model = A2C("MlpPolicy", env, seed=0, device="cpu", **SETTINGS)
    out = {f"p0/{k}": v for k, v in params(model).items()}
    _, callback = model._setup_learn(args.updates * 40, None)
    callback.on_training_start(locals(), globals())
    rollouts = {k: [] for k in ("obs", "actions", "rewards", "episode_starts", "last_obs", "last_dones")}
    for _ in range(args.updates):
        model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=5)
        buf = model.rollout_buffer
        rollouts["obs"].append(buf.observations.copy())
        rollouts["actions"].append(buf.actions[..., 0].astype(np.int32))
        rollouts["rewards"].append(buf.rewards.copy())  # with SB3's time-limit bootstrap added, as it trains on
        rollouts["episode_starts"].append(buf.episode_starts.copy())
        rollouts["last_obs"].append(np.asarray(model._last_obs, np.float32).copy())
        rollouts["last_dones"].append(np.asarray(model._last_episode_starts, np.float32).copy())
        model.train()
    out.update({f"p1/{k}": v for k, v in params(model).items()})
    out.update({f"rollout/{k}": np.stack(v) for k, v in rollouts.items()})
    out["settings"] = np.array([SETTINGS[k] for k in ("gamma", "learning_rate", "ent_coef", "vf_coef",
                                                      "max_grad_norm", "gae_lambda")], np.float64)
    np.savez_compressed(args.out, **out)
    ends = int(np.sum(out["rollout/episode_starts"][:, 1:]) + np.sum(out["rollout/last_dones"]))
    print(f"{args.updates} updates, {ends} episode ends, written to {args.out}")


if __name__ == "__main__":
    main()
