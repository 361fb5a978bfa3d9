"""Named parallel axes and the one helper every cross-replica gradient reduction goes through.

Seed paper 001 (Distributed BA3C, Sec. 2.2-2.3): in synchronous training the workers' gradients are
averaged and one Adam step is applied to the shared weights. Under ``jax.pmap(..., axis_name=DEVICE_AXIS)``
that average is ``jax.lax.pmean`` over the device axis, so every replica applies the same update.
``LEARNER_AXIS`` names the axis of the gossip (GALA) learners.
"""

import jax

DEVICE_AXIS = "device"
LEARNER_AXIS = "learner"


def mean_over_axis(tree, axis_name: str | None):
    """``jax.lax.pmean(tree, axis_name)``, or ``tree`` unchanged when ``axis_name`` is None.

    Must be called inside a transformation that binds ``axis_name`` (``pmap``, ``vmap`` or
    ``shard_map`` with that axis name) unless it is None.
    """
    if axis_name is None:
        return tree
    return jax.lax.pmean(tree, axis_name)
