"""Optimizers for the actor-critic learners.

Seed paper 000 (HTS-RL) Eq. (6), theta_{j+1} = theta_j + eta * grad: the step size eta and its
schedule come from here. Choices follow the reference implementations: RMSprop with PyTorch
semantics for A2C (HTS-RL / GALA Atari, alpha 0.99) and Adam for PPO (CleanRL, eps 1e-5), both
behind a global gradient-norm clip and an optional linear learning-rate decay to 0.
"""

import optax

OPTIMIZERS = ("adam", "rmsprop")


def make_optimizer(
    *,
    name: str,
    learning_rate: float,
    total_updates: int,
    anneal_lr: bool,
    max_grad_norm: float,
    eps: float,
    rmsprop_decay: float = 0.99,
) -> optax.GradientTransformation:
    """Builds ``clip_by_global_norm -> adam | rmsprop`` with a constant or linearly decaying step.

    Args:
      name: ``"adam"`` or ``"rmsprop"``.
      learning_rate: initial learning rate.
      total_updates: number of ``optimizer.update`` calls over the run, i.e. the decay horizon. Note
        PPO calls it ``num_epochs * num_minibatches`` times per ``ppo_update``.
      anneal_lr: decay the learning rate linearly from ``learning_rate`` to 0 over
      ``total_updates``.
      max_grad_norm: global gradient-norm clip.
      eps: Adam epsilon, or RMSprop epsilon added *outside* the square root (PyTorch semantics).
      rmsprop_decay: RMSprop smoothing constant (PyTorch ``alpha``).
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"Unknown optimizer {name!r}; expected one of {OPTIMIZERS}.")
    if anneal_lr and total_updates < 1:
        raise ValueError(f"total_updates must be >= 1 when anneal_lr, got {total_updates}.")
    schedule = (
        optax.linear_schedule(learning_rate, 0.0, total_updates) if anneal_lr else learning_rate
    )
    if name == "adam":
        base = optax.adam(schedule, eps=eps)
    else:
        # PyTorch RMSprop: v = alpha v + (1 - alpha) g^2, step = g / (sqrt(v) + eps), v starts at 0.
        # optax's default puts eps inside the sqrt, which behaves very differently for eps = 1e-5.
        base = optax.rmsprop(schedule, decay=rmsprop_decay, eps=eps, eps_in_sqrt=False)
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), base)
