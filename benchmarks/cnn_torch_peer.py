"""The PyTorch peer of `benchmarks/cnn_cpu.py`, run by it in a benchmark-only venv (`pip install torch==2.13.0`):
CleanRL's `ppo_atari_envpool.py` actor-critic (Nature CNN on 4x84x84 frames scaled by 1/255, Linear 3136 -> 512,
policy and value heads) and the same network on GFootball's 72x96x4 super mini map (channels moved first), 2
threads, timed as the JAX rows are: actor forward at the inference batch, learner forward and forward+backward at
the minibatch, medians after two warm-up calls. The layer definitions follow CleanRL's `Agent` (torch.nn.Conv2d in
NCHW, what PyTorch runs with oneDNN); the peer's own file is a script, not an importable module.

Usage: python cnn_torch_peer.py ACTOR_BATCH LEARNER_BATCH REPEATS  -> one JSON line of rows.
"""

import json
import sys
import time

import numpy as np
import torch
from torch import nn


def agent(in_channels: int, flat: int, actions: int = 6) -> tuple[nn.Module, nn.Module, nn.Module]:
    network = nn.Sequential(
        nn.Conv2d(in_channels, 32, 8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(flat, 512), nn.ReLU(),
    )
    return network, nn.Linear(512, actions), nn.Linear(512, 1)


def timed(fn, repeats: int) -> float:
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def rows(actor_batch: int, learner_batch: int, repeats: int) -> list[dict]:
    torch.set_num_threads(2)
    out = []
    for network, shape, flat in (("nature", (4, 84, 84), 64 * 7 * 7), ("gfootball", (72, 96, 4), 64 * 5 * 8)):
        body, actor, critic = agent(4, flat)
        params = [*body.parameters(), *actor.parameters(), *critic.parameters()]

        def forward(obs):
            x = obs.float() / 255.0
            if network == "gfootball":
                x = x.permute(0, 3, 1, 2)  # SMM is channels last
            hidden = body(x)
            return actor(hidden), critic(hidden)

        rng = np.random.default_rng(0)
        obs_actor = torch.from_numpy(rng.integers(0, 255, (actor_batch, *shape), dtype=np.uint8))
        obs_learner = torch.from_numpy(rng.integers(0, 255, (learner_batch, *shape), dtype=np.uint8))

        def act():
            with torch.no_grad():
                forward(obs_actor)

        def learner_forward():
            with torch.no_grad():
                forward(obs_learner)

        def learner_grad():
            for p in params:
                p.grad = None
            logits, value = forward(obs_learner)
            loss = torch.log_softmax(logits, -1)[:, 0].sum() + (value**2).sum()
            loss.backward()

        out.append(dict(network=network, plan=f"PyTorch {torch.__version__} (peer, 2 threads)",
                        actor_forward_ms=1e3 * timed(act, repeats),
                        learner_forward_ms=1e3 * timed(learner_forward, repeats),
                        learner_grad_ms=1e3 * timed(learner_grad, repeats)))
    return out


if __name__ == "__main__":
    print(json.dumps(rows(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))))
