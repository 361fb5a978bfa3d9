"""Named parallel axes and the one helper every cross-replica gradient reduction goes through.

Seed paper 001 (Distributed BA3C, Sec. 2.2-2.3): in synchronous training the workers' gradients are
averaged and one Adam step is applied to the shared weights. Under ``jax.pmap(..., axis_name=DEVICE_AXIS)``
that average is ``jax.lax.pmean`` over the device axis, so every replica applies the same update.
``LEARNER_AXIS`` names the axis of the gossip (GALA) learners.
"""

import jax
import jax.numpy as jnp
import numpy as np

DEVICE_AXIS = "device"
LEARNER_AXIS = "learner"


def mean_over_axis(tree, axis_name: str | None, *, ordered: bool = False):
    """``jax.lax.pmean(tree, axis_name)``, or ``tree`` unchanged when ``axis_name`` is None.

    Must be called inside a transformation that binds ``axis_name`` (``pmap``, ``vmap`` or
    ``shard_map`` with that axis name) unless it is None.

    ``ordered``: gather every replica's values (``all_gather``, pure data movement) and add them up in replica
    order, left to right, then divide by the replica count. The summation order is then part of the program
    instead of the collective's implementation (XLA's in-process all-reduce, gloo or NCCL across processes), so
    the mean is bit-identical however the replicas are split over processes, at R times pmean's memory and
    traffic for R replicas. Equal to pmean up to rounding.
    """
    if axis_name is None:
        return tree
    if not ordered:
        return one_collective_per_dtype(lambda x: jax.lax.pmean(x, axis_name), tree)

    def ordered_mean(x):
        gathered = jax.lax.all_gather(x, axis_name)  # [R, ...], row r from replica r
        total = gathered[0]
        for r in range(1, gathered.shape[0]):
            total = total + gathered[r]
        return total / gathered.shape[0]

    return one_collective_per_dtype(ordered_mean, tree)


def one_collective_per_dtype(reduce_fn, tree):
    """``jax.tree.map(reduce_fn, tree)`` for an elementwise collective (a mean, a sum, a ``ppermute``), done as one
    call on the concatenation of the leaves of each dtype. Each element is reduced as before; what changes is the
    number of collectives: a network's gradients and metrics are a dozen or more leaves, and across processes (gloo
    on CPU) each collective is a round of messages and thread wake-ups, which XLA CPU does not combine."""
    leaves, treedef = jax.tree.flatten(tree)
    if len(leaves) <= 1:
        return jax.tree.map(reduce_fn, tree)
    groups: dict = {}
    for i, leaf in enumerate(leaves):
        groups.setdefault(jnp.result_type(leaf), []).append(i)
    reduced = list(leaves)
    for indices in groups.values():
        flat = reduce_fn(jnp.concatenate([jnp.ravel(leaves[i]) for i in indices]))
        offset = 0
        for i in indices:
            size = int(np.prod(jnp.shape(leaves[i])))
            reduced[i] = flat[offset:offset + size].reshape(jnp.shape(leaves[i]))
            offset += size
    return jax.tree.unflatten(treedef, reduced)
