"""What every replay buffer here shares (seed 003, section IV): the priority parameters, the slots' K-ary sum tree
with its two locks (Algorithm 3's global tree lock and last-level lock), the checks of `sample` and
`update_priorities`, the stored priority (p + eps) ** alpha and PER's importance weights. `ReplayBuffer` (one slot per
transition) and `FrameStackBuffer` (one row per frame) add their storage, insert and gather."""

from __future__ import annotations

import math
import threading

import numpy as np

from systems.replay.sum_tree import SumTree


def check_priority_params(alpha, beta, eps) -> tuple[float, float, float]:
    """(alpha, beta, eps) as floats: alpha and beta finite and >= 0, eps finite and > 0."""
    for name, value in (("alpha", alpha), ("beta", beta)):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be finite and > 0 (it keeps every stored transition sampleable), got {eps!r}")
    return float(alpha), float(beta), float(eps)


def importance_weights(prioritized: bool, size: int, probabilities: np.ndarray, beta: float) -> np.ndarray:
    """[B] float32 PER weights (N P(i)) ** -beta / max over the batch (see `ReplayBuffer.sample`); ones if uniform."""
    if not prioritized:
        return np.ones(probabilities.shape, dtype=np.float32)
    weights = (size * probabilities) ** -beta  # [B]
    return (weights / weights.max()).astype(np.float32)


class PriorityTreeBuffer:
    """The shared part of a buffer: set up by `_init_tree`; subclasses keep `_size` (slots holding a transition or
    being written) and `_max_priority` (the running max of stored priorities, at least 1) up to date."""

    _prioritized: bool

    def _init_tree(self, capacity: int, *, alpha: float, beta: float, eps: float, k: int, seed: int | None) -> None:
        self._capacity = int(capacity)
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self._tree = SumTree(self._capacity, k)
        self._size = 0
        self._max_priority = 1.0  # PER: new transitions get max_i p_i
        self._rng = np.random.default_rng(seed)  # used only under the tree (or global) lock
        self._tree_lock = threading.Condition(threading.Lock())  # global_tree_lock; inserters wait on busy slots
        self._leaf_lock = threading.Lock()  # last_level_lock

    # ----------------------------------------------------------------------------------------------- info

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def prioritized(self) -> bool:
        return self._prioritized

    @property
    def max_priority(self) -> float:
        """The priority new transitions get: running max of stored priorities, at least 1 (1 for uniform)."""
        return self._max_priority

    @property
    def tree(self) -> SumTree:
        """The slots' sum tree, for diagnostics and tests; reading it while other threads run is not locked."""
        return self._tree

    def __len__(self) -> int:
        """Transitions stored or being written."""
        return self._size

    # ----------------------------------------------------------------------------------------------- checks

    def _sampling(self, batch_size, rng: np.random.Generator | None, beta: float | None):
        """`sample`'s arguments checked: (the generator to use, beta)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        beta = self.beta if beta is None else float(beta)
        if not (math.isfinite(beta) and beta >= 0):
            raise ValueError(f"beta must be finite and >= 0, got {beta!r}")
        return (self._rng if rng is None else rng), beta

    def _weights(self, size: int, probabilities: np.ndarray, beta: float) -> np.ndarray:
        return importance_weights(self._prioritized, size, probabilities, beta)

    def _stored_priorities(self, indices: np.ndarray, priorities) -> np.ndarray:
        """Raw priorities ([B] |TD error|, finite and >= 0) as stored: (p + eps) ** alpha, each below the tree's
        largest leaf so that the sum over every slot stays finite; anything else raises ValueError."""
        priorities = np.asarray(priorities, dtype=np.float64)
        if priorities.shape != indices.shape:
            raise ValueError(f"priorities have shape {priorities.shape}, indices {indices.shape}")
        if priorities.size and not (np.isfinite(priorities).all() and priorities.min() >= 0):
            raise ValueError("priorities must be finite and >= 0")
        stored = (priorities + self.eps) ** self.alpha
        if stored.size and not stored.max() <= self._tree.max_leaf:  # NaN or inf fail this comparison too
            raise ValueError(f"(priority + eps) ** alpha must stay below {self._tree.max_leaf:.3g}, so that the sum "
                             "over every slot stays finite")
        return stored

    def _set_priorities(self, indices, values):
        """Algorithm 3 lines 3-6 (leaves under the leaf lock, then their ancestors); the caller holds the tree lock."""
        with self._leaf_lock:
            written = self._tree.set_leaves(indices, values)
        self._tree.update_ancestors(written)


def checked_indices(indices, upper: int, name: str) -> np.ndarray:
    """[B] int64 slot ids in [0, upper), or IndexError naming the bound (`name`, e.g. "len")."""
    indices = np.asarray(indices)
    if indices.ndim != 1:
        raise IndexError(f"indices must be 1-D, got shape {indices.shape}")
    if indices.size == 0:
        return indices.astype(np.int64)
    if indices.dtype == np.bool_ or not np.issubdtype(indices.dtype, np.integer):
        raise IndexError(f"indices must be integers, got dtype {indices.dtype}")
    if indices.min() < 0 or indices.max() >= upper:
        raise IndexError(f"indices must lie in [0, {name}={upper}), got [{indices.min()}, {indices.max()}]")
    return indices.astype(np.int64, copy=False)
