"""The synchronous data-parallel learner of Distributed BA3C (seed 001, sections 2.2-2.5) and of HTS over devices.

R replicas of the update run as one `jax.pmap` over `DEVICE_AXIS` (on `pmap_devices`: this process's learner
devices, or every process's in a multi-host job). Each replica learns from its own envs' columns of the round
(`shard_rollout`: env block d on replica d) and the gradients are averaged over the axis before each optimizer
step (the update's `axis_name`), so every replica applies the same step and holds the same parameters.
`ordered`: that average in a fixed replica order (`agents.parallel.mean_over_axis`), so its bits do not depend on
how the replicas are split over processes; `debug`: check after every update that the replicas are bit-identical.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

from agents import DEVICE_AXIS, TrainState
from systems.common import distributed
from systems.common.learner import compile_in_background
from systems.common.rollout import RoundStorage, place_on_axis, replica, shard_rollout, sharded_shapes, stack_host


class DataParallelLearner:
    """`update_fn(state, behaviour_params, rollout, *, axis_name, ordered_mean)` on `num_local` local replicas of
    `state` (placed as the pmap places its outputs, so the first update compiles once)."""

    def __init__(self, update_fn: Callable, pmap_devices: list | tuple | None, num_local: int, state: TrainState,
                 *, ordered: bool = False, debug: bool = False):
        self.num_local = num_local
        update = functools.partial(update_fn, axis_name=DEVICE_AXIS, ordered_mean=ordered)
        self.update = jax.pmap(update, axis_name=DEVICE_AXIS, devices=pmap_devices)
        self.state = place_on_axis(stack_host(state, num_local), pmap_devices, DEVICE_AXIS)
        self._spread = distributed.make_replica_check(pmap_devices, DEVICE_AXIS) if debug else None

    def compile_ahead(self, rollout_shapes: Any) -> Callable[[], None]:
        """Compiles the update for this process's whole round (`RoundCollector.rollout_shapes`) in the background
        (`compile_in_background`); call the returned `wait` before every update."""
        return compile_in_background(self.update, self.state, self.state.params,
                                     sharded_shapes(rollout_shapes, self.num_local))

    def learn(self, state: TrainState, behaviour_params: Any, storage: RoundStorage) -> tuple[TrainState, Any]:
        """One update on the round's storage; returns the replicated state and metrics (`replica` reads one).
        With `debug`, RuntimeError unless every replica holds the same bits."""
        state, metrics = self.update(state, behaviour_params, shard_rollout(storage, self.num_local))
        if self._spread is not None:
            gap = float(replica(self._spread(state.params)))
            if gap != 0.0:
                raise RuntimeError(f"data-parallel replicas diverged (max |difference| {gap:g})")
        return state, metrics
