"""What every off-policy learner of seeds 002 and 003 reads (DQN / Double DQN, DDPG, TD3, SAC): the discount and
the target networks' Polyak rate of its TD target, the batch of one optimizer step, and the replay's capacity and
warm-up. Each algorithm's own flags sit beside it (`agents.dqn.DQNHyperparameters`,
`agents.ddpg.DDPGHyperparameters`), the optimizer's and the networks' beside them (`agents.optim`,
`agents.offpolicy_networks`)."""

from __future__ import annotations

import dataclasses

from agents.hyperparams import hyperparameter


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplayLearningHyperparameters:
    """The TD target's discount and Polyak rate (DQN: ``tau`` 1 is a hard copy every ``target_update_period``
    updates), the batch and the replay buffer of an off-policy learner."""

    gamma: float = hyperparameter(0.99, "Discount (default: preset).", group="off_policy",
                                  search=("categorical", (0.95, 0.98, 0.99, 0.995)))
    batch_size: int = hyperparameter(256, "Batch of one optimizer step (default: preset).", group="off_policy",
                                     flag_kind="string", search=("categorical", (64, 128, 256, 512)))
    buffer_size: int = hyperparameter(100_000, "Replay capacity in transitions (default: preset).", group="off_policy")
    learning_starts: int = hyperparameter(
        1_000, "Env steps collected before the first update (default: preset).", group="off_policy")
    tau: float = hyperparameter(
        1.0, "Polyak rate of the target networks (DQN: 1 = hard copies; default: preset).", group="off_policy")
