"""The non-finite guard every system shares: a NaN or infinite loss or parameter stops the run before it is logged
as progress, evaluated or checkpointed, with one line naming the update and the quantity.

A NaN policy cannot recover (every later update is NaN too) and evaluating it can hang (its episodes end only by
time limit, its returns are NaN), so the run stops at the first sign. The newest checkpoint on disk stays the last
finite one: `Monitor.checkpoint` refuses non-finite parameters as the last line of defence (a system that checks
only every few updates, PAL and Spreeze, may first see the NaN there).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


class NonFiniteError(RuntimeError):
    """A loss, metric or parameter became NaN or infinite. The launchers print it as one line and exit 3."""


def _inexact_leaves(tree: Any) -> list:
    return [x for x in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]


@jax.jit
def _all_finite(leaves: list) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def params_are_finite(params: Any) -> bool:
    """True when every floating-point leaf of `params` is finite (one jitted reduction: one host sync)."""
    leaves = _inexact_leaves(params)
    return not leaves or bool(_all_finite(leaves))


def restored_is_finite(tree: Any) -> bool:
    """True when every floating-point leaf of a restored checkpoint (numpy arrays) is finite; no compile."""
    for leaf in jax.tree_util.tree_leaves(tree):
        array = np.asarray(leaf)
        if np.issubdtype(array.dtype, np.inexact) and not np.isfinite(array).all():
            return False
    return True


def first_nonfinite(metrics: dict, params: Any = None) -> str | None:
    """What is not finite ("the loss is nan", "a parameter is not finite"), the metrics first; None when all is."""
    for name, value in metrics.items():
        array = np.asarray(value)
        if np.issubdtype(array.dtype, np.inexact) and not np.all(np.isfinite(array)):
            return f"the {name} is {array.tolist()}"
    if params is not None and not params_are_finite(params):
        return "a parameter is not finite"
    return None


def nonfinite_message(system: str, update: int, env_steps: int, quantity: str, run_dir: str) -> str:
    return (
        f"[{system}] update {update:,} ({env_steps:,} env steps): {quantity}; the run stopped without "
        f"checkpointing it (the newest checkpoint in {run_dir}/checkpoints, if any, is the last finite one; "
        "try a smaller --learning_rate or --max_grad_norm)"
    )
