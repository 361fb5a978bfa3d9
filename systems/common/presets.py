"""The on-policy systems' presets, by env family and algorithm and by task, from the papers and peers (REFERENCE.md),
and the one precedence rule the launchers apply (`launch.common.config_from_flags`): a flag given > the system's own
values below (BA3C's optimizer) > the task's preset > the family's preset > the config field's default.
`config.json` records which preset filled a run (`TrainConfig.preset`). The off-policy systems' presets are
`systems.offpolicy.presets`."""

from __future__ import annotations

import dataclasses

from systems.common.config import TrainConfig

# Defaults by (env family, algo). Sources: REFERENCE.md ("Settings the seeds' authors used").
# Our value loss is value_coef * 0.5 * (R - V)^2, CleanRL's and Kostrikov's PPO form. Kostrikov's A2C and
# Stable-Baselines3 (A2C and PPO) weigh the squared error itself (value_loss_coef * MSE), so their coefficient c is
# our 2c (tests/agents/test_a2c_peer_update.py replays SB3's A2C training onto its weights with value_coef = 2 * 0.5).
# HTS-RL's A2C is Kostrikov's: 16 envs, 5 steps, RMSProp 7e-4 (eps 1e-5, PyTorch semantics), n-step returns (GAE
# lambda 1), entropy 0.01, value 0.5 x MSE (our 1.0), gradient norm 0.5. The families differ only in gamma, entropy
# and run length.
_KOSTRIKOV_A2C = dict(
    num_envs=16, sync_interval=5, learning_rate=7e-4, anneal_lr=False, optimizer="rmsprop", opt_eps=1e-5,
    gamma=0.99, gae_lambda=1.0, entropy_coef=0.01, value_coef=1.0, max_grad_norm=0.5,
)
PRESETS: dict[tuple[str, str], dict] = {
    # CleanRL / Cleanba PPO Atari.
    ("atari", "ppo"): dict(
        num_envs=8, sync_interval=128, learning_rate=2.5e-4, anneal_lr=True, optimizer="adam", opt_eps=1e-5,
        gamma=0.99, gae_lambda=0.95, clip_eps=0.1, entropy_coef=0.01, value_coef=0.5, max_grad_norm=0.5,
        num_epochs=4, num_minibatches=4, total_steps=10_000_000,
    ),
    # HTS-RL Atari: A2C, 20M env steps.
    ("atari", "a2c"): dict(_KOSTRIKOV_A2C, total_steps=20_000_000),
    # HTS-RL GFootball scripts (PPO, 16 envs, 4 actors, sync every 128 steps, 5M steps).
    ("gfootball", "ppo"): dict(
        num_envs=16, num_actors=4, sync_interval=128, learning_rate=3.43e-4, anneal_lr=True, optimizer="adam",
        opt_eps=1e-5, gamma=0.993, gae_lambda=0.95, clip_eps=0.08, entropy_coef=0.003, value_coef=0.5,
        max_grad_norm=0.64, num_epochs=2, num_minibatches=8, total_steps=5_000_000,
    ),
    ("gfootball", "a2c"): dict(_KOSTRIKOV_A2C, gamma=0.993, total_steps=5_000_000),
    # CleanRL ppo.py (classic control).
    ("classic", "ppo"): dict(
        num_envs=4, sync_interval=128, learning_rate=2.5e-4, anneal_lr=True, optimizer="adam", opt_eps=1e-5,
        gamma=0.99, gae_lambda=0.95, clip_eps=0.2, entropy_coef=0.01, value_coef=0.5, max_grad_norm=0.5,
        num_epochs=4, num_minibatches=4, total_steps=500_000,
    ),
    ("classic", "a2c"): dict(_KOSTRIKOV_A2C, total_steps=500_000),
    # CleanRL ppo_continuous_action.py (MuJoCo) with its wrappers: observation normalization (clip 10), reward
    # scaling by the discounted return's std (clip 10), clipped actions, clipped value loss.
    ("mujoco", "ppo"): dict(
        num_envs=1, sync_interval=2048, learning_rate=3e-4, anneal_lr=True, optimizer="adam", opt_eps=1e-5,
        gamma=0.99, gae_lambda=0.95, clip_eps=0.2, entropy_coef=0.0, value_coef=0.5, max_grad_norm=0.5,
        num_epochs=10, num_minibatches=32, total_steps=1_000_000, clip_value_loss=True, normalize_obs=True,
        normalize_reward=True,
    ),
    ("mujoco", "a2c"): dict(
        _KOSTRIKOV_A2C, entropy_coef=0.0, total_steps=1_000_000, normalize_obs=True, normalize_reward=True
    ),
}
# gymnax's MinAtar games (10x10 images, MinAtar's CNN): many envs a round, as the JAX-first peers run them (a starting
# point checked at 500k env steps by `benchmarks/anakin.py`; MinAtar's own runs take 5-10M steps).
PRESETS[("minatar", "ppo")] = dict(
    num_envs=64, sync_interval=128, learning_rate=5e-4, anneal_lr=True, optimizer="adam", opt_eps=1e-5, gamma=0.99,
    gae_lambda=0.95, clip_eps=0.2, entropy_coef=0.01, value_coef=0.5, max_grad_norm=0.5, num_epochs=4,
    num_minibatches=8, total_steps=10_000_000,
)
# Brax's tasks (JAX envs): purejaxrl's ppo_continuous_action.py for Brax (2048 envs x 10 steps, NormalizeVecObservation
# and NormalizeVecReward, clipped value loss, tanh MLP 256x256), a GPU's scale: on a CPU pass a smaller --num_envs.
# A2C: MuJoCo's.
PRESETS[("brax", "ppo")] = dict(
    num_envs=2048, sync_interval=10, learning_rate=3e-4, anneal_lr=False, optimizer="adam", opt_eps=1e-5, gamma=0.99,
    gae_lambda=0.95, clip_eps=0.2, entropy_coef=0.0, value_coef=0.5, max_grad_norm=0.5, num_epochs=4,
    num_minibatches=32, total_steps=50_000_000, clip_value_loss=True, normalize_obs=True, normalize_reward=True,
    hidden_sizes=(256, 256),
)
PRESETS[("brax", "a2c")] = PRESETS[("mujoco", "a2c")]
PRESETS[("box2d", "ppo")] = PRESETS[("classic", "ppo")]
PRESETS[("box2d", "a2c")] = PRESETS[("classic", "a2c")]


# Tuned settings of single tasks, over their family's preset: (env id, algo) -> (source, values). Only where the
# tuned setting learns at least as well as the family preset at the same env steps (`benchmarks/learning.py`).
# rl-zoo3's PPO for Hopper-v4 is left out: it plateaus at about 1,000 (github.com/DLR-RM/rl-baselines3-zoo/issues/376)
# where CleanRL's MuJoCo preset reaches three times that.
_ZOO_PPO = "rl-zoo3 2.9 hyperparams/ppo.yml"  # its vf_coef doubled: see _KOSTRIKOV_A2C's note
TASK_PRESETS: dict[tuple[str, str], tuple[str, dict]] = {
    # Departure: rl-zoo3 anneals the clip range too (lin_0.2); ours is constant.
    ("CartPole-v1", "ppo"): (_ZOO_PPO, dict(
        num_envs=8, sync_interval=32, num_minibatches=1, num_epochs=20, gae_lambda=0.8, gamma=0.98,
        entropy_coef=0.0, learning_rate=1e-3, anneal_lr=True, clip_eps=0.2, value_coef=1.0, max_grad_norm=0.5,
        clip_value_loss=False,
    )),
    # VecNormalize (observations and rewards), constant learning rate.
    ("Acrobot-v1", "ppo"): (_ZOO_PPO, dict(
        num_envs=16, sync_interval=256, num_minibatches=64, num_epochs=4, gae_lambda=0.94, gamma=0.99,
        entropy_coef=0.0, learning_rate=3e-4, anneal_lr=False, clip_eps=0.2, value_coef=1.0, max_grad_norm=0.5,
        clip_value_loss=False, normalize_obs=True, normalize_reward=True,
    )),
    # ReLU 256x256, log-std -2, no orthogonal init, one env of 512 steps in 64-sample minibatches, VecNormalize.
    ("HalfCheetah-v4", "ppo"): (_ZOO_PPO, dict(
        num_envs=1, sync_interval=512, num_minibatches=8, num_epochs=20, gae_lambda=0.92, gamma=0.98,
        entropy_coef=0.000401762, learning_rate=2.0633e-05, anneal_lr=False, clip_eps=0.1, value_coef=1.16192,
        max_grad_norm=0.8, clip_value_loss=False, normalize_obs=True, normalize_reward=True, hidden_sizes=(256, 256),
        activation="relu", orthogonal_init=False, log_std_init=-2.0, opt_eps=1e-5,
    )),
}
# A2C (rl-zoo3 2.9 hyperparams/a2c.yml over SB3's A2C defaults, which are Kostrikov's, as the family preset). The
# launchers of several learners keep their own layout (GALA's envs per learner, BA3C's local batch) and never
# normalize; what they take from these is the entropy coefficient, gamma and the learning-rate schedule. On
# CartPole-v1 (`benchmarks/learning.py`) no side's interval moved clear of the family preset's.
_ZOO_A2C = "rl-zoo3 2.9 hyperparams/a2c.yml"
TASK_PRESETS.update({
    ("CartPole-v1", "a2c"): (_ZOO_A2C, dict(num_envs=8, entropy_coef=0.0)),
    ("Acrobot-v1", "a2c"): (_ZOO_A2C, dict(num_envs=16, entropy_coef=0.0, normalize_obs=True,
                                           normalize_reward=True)),
    # rl-zoo3 has LunarLander-v3, gymnasium 1.x's name of EnvPool's LunarLander-v2 (same dynamics; v3 fixed
    # determinism and the wind).
    ("LunarLander-v2", "a2c"): (_ZOO_A2C, dict(num_envs=8, gamma=0.995, learning_rate=8.3e-4, anneal_lr=True,
                                               entropy_coef=1e-5)),
})
# GFootball's empty-goal scenario: the HTS-RL scripts' preset with rounds of 64 steps instead of 128 (four 256-frame
# minibatches, so the same minibatch size and gradient steps per env step, each update on fresher data). Not
# published: the ten-evaluation average reaches 0.8 in fewer env steps at the same SPS (`benchmarks/cpu_e2e.py`).
TASK_PRESETS[("gfootball/academy_empty_goal_close-v1", "ppo")] = (
    "HTS-RL scripts, rounds of 64 steps: results/gfootball_time_to_score_notes.md",
    dict(sync_interval=64, num_minibatches=4))
PRESET_CHOICES = ("task", "family")  # --preset: the task's own where there is one, else the family's; the family's


def preset(family: str, algo: str, config_cls: type = TrainConfig) -> dict:
    """The preset of `family` and `algo`, restricted to the fields `config_cls` has (HTS's GFootball preset also
    sets `num_actors`, which only `HTSConfig` holds)."""
    fields = {field.name for field in dataclasses.fields(config_cls)}
    values = PRESETS.get((family, algo), PRESETS[("classic", algo)])
    return {name: value for name, value in values.items() if name in fields}


def preset_values(env_id: str, family: str, algo: str, config_cls: type = TrainConfig,
                  choice: str = "task") -> tuple[str, dict]:
    """(name, values) of the preset a run uses: the task's own tuned one (`TASK_PRESETS`) over the family's when
    `choice` is "task" and the task has one, else the family's alone."""
    if family == "gymnax" and env_id.endswith("-MinAtar"):
        family = "minatar"  # a family of its own among gymnax's tasks: images
    values = preset(family, algo, config_cls)
    name = f"family {family if (family, algo) in PRESETS else 'classic'} {algo}"
    if choice == "task" and (env_id, algo) in TASK_PRESETS:
        source, task_values = TASK_PRESETS[(env_id, algo)]
        fields = {field.name for field in dataclasses.fields(config_cls)}
        values.update({k: v for k, v in task_values.items() if k in fields})
        name = f"task {env_id} {algo} ({source})"
    return name, values


# The launchers of several learners never normalize (`config.NORMALIZATION_SINGLE_LEARNER`).
NO_NORMALIZATION = dict(normalize_obs=False, normalize_reward=False)
# BA3C's optimizer (seed 001, Table 1 and Sec. 2.4) unless `--optimizer` names another (then the family preset's
# learning rate and epsilon apply); epsilon None: the optimizer's own (`agents.optim.LARGE_BATCH_EPS`).
BA3C_OPTIMIZER = dict(optimizer="adam_large_batch", learning_rate=1e-3, anneal_lr=False, opt_eps=None)
# GALA's envs per learner where a family's differ from the config field's (seed 004's 16). GFootball's engine holds
# tens of megabytes per env: 4 learners x 16 envs outgrow a small machine's memory (`benchmarks/presets.py` measures
# the peak), so its preset keeps HTS's GFootball total of 16 envs.
GALA_ENVS_PER_LEARNER = {"gfootball": 4}
# GALA's learning-rate scaling over its learners where a task's departs from seed 004's sqrt (Table 2). The consensus
# of n learners moves by about one learner's step per iteration while it takes n learners' env steps, so it learns
# more slowly per env step than one learner at the base rate; sqrt offsets half of that and linear all of it. On
# CartPole-v1 (4 learners x 16 envs, RMSProp 7e-4) the linear rate holds the solved policy in both gossip modes, where
# sqrt reaches it and falls back (the GALA CartPole notes of the benchmarks).
GALA_LR_SCALING = {"CartPole-v1": "linear"}
