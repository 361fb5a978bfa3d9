"""The K-ary sum tree of PAL (seed 003, section IV-C): priorities in the leaves, every inner node the sum of its K
children, so the total is the root (Theta(1)), a priority read is one leaf (Theta(1)), an update touches one node per
level (Theta(log_K N)) and a prefix-sum search (Eq. 4, Algorithm 2 GETPREFIXSUMIDX) reads one sibling group per level.

Data layout (section IV-C-4, Figure 6): all levels live in one flat, 64-byte-aligned float64 array, root level first,
leaves last. Every sibling group of K children starts on a cache-line boundary: a group occupies `group_stride`
slots, K rounded up to whole 64-byte lines (8 float64). The paper chooses K with K % C == 0 (C = 8 float64 per line),
which makes `group_stride == K` and wastes nothing; other K (2, 3, ...) are padded with zeros so the alignment holds
for every K. The root is padded to a full group, as in the paper.

float64, not float32: the root of a million-leaf tree is a sum of a million priorities, and float32's 24-bit
mantissa would lose the small priorities in it (and prefix-sum targets near the end could not resolve single
leaves); the tree of 1M leaves with K=16 costs 8.5 MB either way (float32 would halve it).

Differences from Algorithm 2, and why:
- UPDATEVALUE propagates `delta = new - old` up the tree; rounding errors of those deltas accumulate over millions of
  updates (and a leaf set to zero can leave a tiny non-zero ancestor). Here every touched parent is recomputed as the
  sum of its K children, level by level, so an inner node is always exactly `sum(children)` whatever the history.
- GETPREFIXSUMIDX stops at the first prefix sum `>= target`; with zero priorities a target on a boundary (e.g. 0)
  would return a zero-priority leaf. Here the search takes the first prefix sum `> target`
  (`np.searchsorted(cumsum, target, side="right")` on the flat array), which never selects a zero leaf, and a target
  at or past the end of a node (`target == total`, or rounding between the stored sum and the cumulative sum of
  its children) is clamped to the last non-zero child.
- Both are batched: a batch of indices or targets moves through the tree one level at a time with numpy.

Two backends compute the same thing, bit for bit: "numpy" (the batched code above, the reference) and "numba"
(the default when numba imports): `numba.njit(nogil=True, cache=True)` kernels that write the leaves, recompute the
ancestors and walk each target down the tree without numpy temporaries, releasing the GIL so actor and learner
threads run in parallel (seed 003 / PAL). The numba kernels reproduce numpy's summation order exactly: an inner
node is `0.0 + pairwise_sum(children)` with numpy's pairwise summation (plain loop below 8 terms, 8 accumulators up
to 128, halving above), and the descent's prefix sums are the sequential `np.cumsum` of the children.

The tree is not thread-safe; `systems.replay.buffers` puts the locks of Algorithm 3 around it. `set_leaves` and
`update_ancestors` are the two halves of a priority update (Algorithm 3 lines 3-6) so the caller can hold the
leaf lock for the first half only.
"""

from __future__ import annotations

import numpy as np

try:
    import numba
except ImportError:  # pragma: no cover - exercised only where numba is missing
    numba = None

_CACHE_LINE_BYTES = 64
_ITEM_BYTES = np.dtype(np.float64).itemsize

BACKENDS = ("numba", "numpy")
DEFAULT_BACKEND = "numba" if numba is not None else "numpy"
"""Backend of a `SumTree` built without one: "numba" when numba imports, else "numpy"."""

# ----------------------------------------------------------------------------------------------- numba kernels

if numba is not None:

    @numba.njit(nogil=True, cache=True)
    def _pairwise_sum(array, start, n):  # pragma: no cover - compiled
        """numpy's `pairwise_sum` for float64 (the inner loop of `np.add.reduce` along a contiguous axis) over
        `array[start : start + n]`, same operations in the same order."""
        if n < 8:
            res = -0.0
            for i in range(n):
                res += array[start + i]
            return res
        if n <= 128:
            r0 = array[start]
            r1 = array[start + 1]
            r2 = array[start + 2]
            r3 = array[start + 3]
            r4 = array[start + 4]
            r5 = array[start + 5]
            r6 = array[start + 6]
            r7 = array[start + 7]
            i = 8
            end = n - n % 8
            while i < end:
                r0 += array[start + i]
                r1 += array[start + i + 1]
                r2 += array[start + i + 2]
                r3 += array[start + i + 3]
                r4 += array[start + i + 4]
                r5 += array[start + i + 5]
                r6 += array[start + i + 6]
                r7 += array[start + i + 7]
                i += 8
            res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
            while i < n:
                res += array[start + i]
                i += 1
            return res
        n2 = n // 2
        n2 -= n2 % 8
        return _pairwise_sum(array, start, n2) + _pairwise_sum(array, start + n2, n - n2)

    @numba.njit(nogil=True, cache=True)
    def _sorted_unique(indices):  # pragma: no cover - compiled
        """np.unique of an int64 array (sorted distinct values)."""
        nodes = np.sort(indices)
        count = 0
        for i in range(nodes.size):
            if count == 0 or nodes[i] != nodes[count - 1]:
                nodes[count] = nodes[i]
                count += 1
        return nodes[:count]

    @numba.njit(nogil=True, cache=True)
    def _set_leaves_kernel(array, leaf_offset, k, stride, indices, priorities):  # pragma: no cover - compiled
        """Writes leaves in order (the last write of an index wins); returns the sorted distinct indices."""
        for i in range(indices.size):
            index = indices[i]
            array[leaf_offset + (index // k) * stride + index % k] = priorities[i]
        return _sorted_unique(indices)

    @numba.njit(nogil=True, cache=True)
    def _set_live_leaves_kernel(array, leaf_offset, k, stride, indices, priorities):  # pragma: no cover - compiled
        """`_set_leaves_kernel` for leaves that are currently > 0 only (a zero leaf is a slot mid-write, which a
        priority update must not make sampleable); returns (sorted distinct indices written, number of entries
        written counting repeats, max value written or -1.0 if none)."""
        written = np.empty(indices.size, dtype=np.int64)
        count = 0
        top = -1.0
        for i in range(indices.size):
            index = indices[i]
            position = leaf_offset + (index // k) * stride + index % k
            if array[position] > 0.0:
                array[position] = priorities[i]
                written[count] = index
                count += 1
                if priorities[i] > top:
                    top = priorities[i]
        return _sorted_unique(written[:count]), count, top

    @numba.njit(nogil=True, cache=True)
    def _update_ancestors_kernel(array, offsets, k, stride, indices):  # pragma: no cover - compiled
        """Recomputes every ancestor of leaves `indices`, level by level from the leaves up, as
        `0.0 + pairwise_sum(children)` (what `level[parents, :k].sum(axis=1)` computes)."""
        nodes = _sorted_unique(indices)
        count = nodes.size
        for h in range(offsets.size - 1, 0, -1):
            parents = 0
            for i in range(count):  # sorted nodes give sorted parents: drop consecutive repeats
                parent = nodes[i] // k
                if parents == 0 or parent != nodes[parents - 1]:
                    nodes[parents] = parent
                    parents += 1
            count = parents
            for i in range(count):
                parent = nodes[i]
                total = 0.0 + _pairwise_sum(array, offsets[h] + parent * stride, k)
                array[offsets[h - 1] + (parent // k) * stride + parent % k] = total

    @numba.njit(nogil=True, cache=True)
    def _sample_kernel(array, offsets, k, stride, values):  # pragma: no cover - compiled
        """Per target, the numpy `sample` descent: sequential cumulative sums of the children, the first child
        whose cumulative sum is > the remaining target, past the end the last non-zero child (k - 1 if none)."""
        out = np.empty(values.size, dtype=np.int64)
        for b in range(values.size):
            remaining = values[b]
            node = 0
            for h in range(1, offsets.size):
                base = offsets[h] + node * stride
                cumulative = 0.0
                left = 0.0
                child = k
                for j in range(k):
                    # np.cumsum: cumulative[0] = children[0], then cumulative[j - 1] + children[j]
                    cumulative = array[base] if j == 0 else cumulative + array[base + j]
                    if cumulative > remaining:
                        child = j
                        break
                    left = cumulative  # cumulative[child - 1] once the loop stops
                if child == k:  # remaining >= sum of the children: target == total, or rounding
                    child = k - 1
                    for j in range(k - 1, -1, -1):
                        if array[base + j] > 0:
                            child = j
                            break
                    left = 0.0
                    if child > 0:  # cumulative[child - 1]
                        left = array[base]
                        for j in range(1, child):
                            left = left + array[base + j]
                remaining = remaining - left  # left is 0.0 for child 0, as np.where gives
                node = node * k + child
            out[b] = node
        return out


class SumTree:
    """K-ary sum tree over `capacity` non-negative float64 priorities (seed 003, section IV-C)."""

    def __init__(self, capacity: int, k: int = 16, backend: str | None = None):
        """Args:
        capacity: number of leaves N (>= 1); leaves start at priority 0.
        k: fan-out K (>= 2). K a multiple of 8 fills whole cache lines with no padding (seed 003 chooses
          K % C == 0; 16 is a good default, see the paper's Fig. 9 for the trade-off in K).
        backend: "numba" (njit kernels that release the GIL) or "numpy" (the batched reference); both give
          bit-identical trees and samples. None: `DEFAULT_BACKEND` ("numba" when numba imports).
        """
        if backend is None:
            backend = DEFAULT_BACKEND
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if backend == "numba" and numba is None:
            raise ValueError('backend="numba" needs numba, which is not installed')
        self._backend = backend
        if isinstance(capacity, bool) or not isinstance(capacity, int | np.integer) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 2:
            raise ValueError(f"k must be an integer >= 2, got {k!r}")
        self._capacity = int(capacity)
        self._k = int(k)
        # The largest priority a leaf may hold: the sum of every leaf (the root) then stays finite in float64.
        self.max_leaf = float(np.finfo(np.float64).max / (2 * self._capacity))
        per_line = _CACHE_LINE_BYTES // _ITEM_BYTES
        self._stride = -(-self._k // per_line) * per_line  # K rounded up to whole cache lines

        # Nodes per level, leaves first; always at least one level above the leaves so the root is not a leaf.
        sizes = [self._capacity]
        while len(sizes) == 1 or sizes[-1] > 1:
            sizes.append(-(-sizes[-1] // self._k))
        sizes.reverse()  # sizes[0] == 1 is the root level
        groups = [1] + sizes[:-1]  # level h has one sibling group per node of level h - 1
        length = sum(groups) * self._stride

        # Over-allocate by one cache line and offset the view so element 0 sits on a 64-byte boundary.
        raw = np.zeros(length + per_line, dtype=np.float64)
        shift = (-raw.ctypes.data % _CACHE_LINE_BYTES) // _ITEM_BYTES
        self._array = raw[shift : shift + length]
        self._levels: list[np.ndarray] = []  # level h as [groups_h, stride] views into self._array
        offset = 0
        for n_groups in groups:
            self._levels.append(self._array[offset : offset + n_groups * self._stride].reshape(n_groups, self._stride))
            offset += n_groups * self._stride
        self._sizes = tuple(sizes)
        self._leaves = self._levels[-1]
        self._offsets = np.cumsum([0] + groups[:-1], dtype=np.int64) * self._stride  # [H] start of each level

    # ----------------------------------------------------------------------------------------------- properties

    @property
    def capacity(self) -> int:
        """Number of leaves N."""
        return self._capacity

    @property
    def k(self) -> int:
        """Fan-out K."""
        return self._k

    @property
    def backend(self) -> str:
        """The backend: "numba" or "numpy"."""
        return self._backend

    @property
    def group_stride(self) -> int:
        """Slots per sibling group: K rounded up to whole 64-byte cache lines."""
        return self._stride

    @property
    def height(self) -> int:
        """Number of levels, root level and leaf level included (H in seed 003)."""
        return len(self._levels)

    @property
    def level_sizes(self) -> tuple[int, ...]:
        """Real nodes per level, root (1) first, leaves (capacity) last."""
        return self._sizes

    @property
    def levels(self) -> tuple[np.ndarray, ...]:
        """Read-only views of the levels, root first: level h is `[groups_h, group_stride]` and row g holds the K
        children of node g of level h - 1 (the root level has one row: the root and its padding)."""
        views = []
        for level in self._levels:
            view = level.view()
            view.flags.writeable = False
            views.append(view)
        return tuple(views)

    @property
    def nbytes(self) -> int:
        """Bytes used by the node array (padding included)."""
        return self._array.nbytes

    # ----------------------------------------------------------------------------------------------- reads

    def total(self) -> float:
        """Sum of all priorities: the root, Theta(1)."""
        return float(self._levels[0][0, 0])

    def get(self, indices) -> np.ndarray:
        """Priorities of leaves `indices` ([B] ints in [0, capacity)), read from the leaf level directly: Theta(1)
        each (section IV-C-1). Returns a float64 array [B]."""
        indices = self._check_indices(indices)
        return self._leaves[indices // self._k, indices % self._k]

    def leaf_values(self) -> np.ndarray:
        """A copy of all priorities [capacity], in leaf order."""
        return self._leaves[:, : self._k].reshape(-1)[: self._capacity].copy()

    # ----------------------------------------------------------------------------------------------- writes

    def set(self, indices, priorities) -> None:
        """Sets leaves `indices` ([B] ints) to `priorities` ([B] or scalar, finite, >= 0) and recomputes their
        ancestors (Algorithm 2 UPDATEVALUE, batched). Duplicate indices: the last one wins. Bad input raises
        (IndexError for indices, ValueError for priorities) before anything is written."""
        self.update_ancestors(self.set_leaves(indices, priorities))

    def set_leaves(self, indices, priorities) -> np.ndarray:
        """First half of a priority update (Algorithm 3 line 4, UPDATELASTLEVEL): writes the leaves only and
        returns the distinct indices written (sorted). The inner nodes are stale until `update_ancestors` is
        called with them; until then only `get` is meaningful."""
        indices = self._check_indices(indices)
        priorities = np.broadcast_to(np.asarray(priorities, dtype=np.float64), indices.shape)
        if not np.all(np.isfinite(priorities)) or np.any(priorities < 0):
            raise ValueError("priorities must be finite and >= 0")
        if self._backend == "numba":
            return _set_leaves_kernel(
                self._array,
                self._offsets[-1],
                self._k,
                self._stride,
                np.ascontiguousarray(indices),
                np.ascontiguousarray(priorities),
            )
        # Keep the last occurrence of each index (numpy does not promise an order for repeated fancy assignment).
        unique, last_from_end = np.unique(indices[::-1], return_index=True)
        values = priorities[::-1][last_from_end]
        self._leaves[unique // self._k, unique % self._k] = values
        return unique

    def update_ancestors(self, indices) -> None:
        """Second half of a priority update (Algorithm 3 line 6, UPDATEINTERMEDIATELEVEL): recomputes every
        ancestor of leaves `indices`, level by level, as the sum of its K children (no accumulated deltas).

        numpy backend: batched over the indices, one gather [P, K] and one row sum per level for the P distinct
        parents. numba backend: the same parents in the same order, summed in numpy's order, without the GIL.
        """
        if self._backend == "numba":
            indices = np.ascontiguousarray(self._check_indices(indices))
            _update_ancestors_kernel(self._array, self._offsets, self._k, self._stride, indices)
            return
        nodes = np.unique(self._check_indices(indices))  # sorted, so parents below come out sorted too
        k = self._k
        for h in range(len(self._levels) - 1, 0, -1):
            parents = nodes // k
            if parents.size > 1:
                parents = parents[np.concatenate(([True], parents[1:] != parents[:-1]))]
            sums = self._levels[h][parents, :k].sum(axis=1)  # [P]
            self._levels[h - 1][parents // k, parents % k] = sums
            nodes = parents

    # ----------------------------------------------------------------------------------------------- sampling

    def sample(self, values) -> np.ndarray:
        """Prefix-sum index search (Eq. 4, Algorithm 2 GETPREFIXSUMIDX), batched.

        Args:
          values: [B] targets in [0, total()].
        Returns:
          [B] int64 leaf indices i with cumsum[i - 1] <= target < cumsum[i] (the first leaf whose prefix sum
          exceeds the target); always a leaf with priority > 0. A target equal to total() (rounding) gives the last
          non-zero leaf.

        The whole batch walks down one level at a time: gather the K children of each current node [B, K],
        cumulative-sum them, take the first child whose cumulative sum exceeds the remaining target, subtract the
        sum of its left siblings (Theorem 2: the cutoff node of level m + 1 is a child of the cutoff node of level
        m). The numba backend walks each target down on its own with the same arithmetic, without the [B, K]
        temporaries and without the GIL.
        """
        values = np.asarray(values, dtype=np.float64)
        if values.ndim > 1:
            raise ValueError(f"values must be a scalar or 1-D, got shape {values.shape}")
        values = np.atleast_1d(values)
        total = self.total()
        if total <= 0:
            raise ValueError("cannot sample from a sum tree whose total priority is 0")
        if not np.all(np.isfinite(values)) or np.any(values < 0) or np.any(values > total):
            raise ValueError(f"sample targets must lie in [0, total={total!r}]")
        if self._backend == "numba":
            return _sample_kernel(self._array, self._offsets, self._k, self._stride, np.ascontiguousarray(values))
        k = self._k
        remaining = values.copy()  # [B]
        node = np.zeros(values.shape, dtype=np.int64)  # [B] index of the cutoff node within its level
        rows = np.arange(values.size)
        for level in self._levels[1:]:
            children = level[node, :k]  # [B, K]
            cumulative = np.cumsum(children, axis=1)  # [B, K], non-decreasing since children >= 0
            child = np.count_nonzero(cumulative <= remaining[:, None], axis=1)  # first cumsum > remaining
            past_end = child == k  # remaining >= sum of the children: target == total, or rounding
            if np.any(past_end):
                positive = children[past_end] > 0  # the node itself is > 0, so some child is
                child[past_end] = k - 1 - np.argmax(positive[:, ::-1], axis=1)
            left = np.where(child > 0, cumulative[rows, np.maximum(child - 1, 0)], 0.0)  # sum of left siblings
            remaining = remaining - left  # >= 0: left <= remaining by the choice of child
            node = node * k + child
        return node

    def sample_proportional(self, rng: np.random.Generator, batch_size: int, stratified: bool = False) -> np.ndarray:
        """Draws `batch_size` leaf indices with probability priority / total (section IV-A-2).

        Targets are uniform in [0, total) (independent draws), or with `stratified=True` one uniform target in
        each of `batch_size` equal segments of [0, total) (the PER paper's sampling; lower variance, indices come
        out in increasing order). Raises ValueError if the total priority is 0.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        total = self.total()
        if total <= 0:
            raise ValueError("cannot sample from a sum tree whose total priority is 0")
        uniform = rng.random(batch_size)  # [B] in [0, 1)
        if stratified:
            uniform = (np.arange(batch_size) + uniform) / batch_size
        return self.sample(np.minimum(uniform * total, total))  # the product can round up to total; sample clamps

    # ----------------------------------------------------------------------------------------------- helpers

    def _check_indices(self, indices) -> np.ndarray:
        indices = np.asarray(indices)
        if indices.ndim > 1:
            raise IndexError(f"indices must be a scalar or 1-D, got shape {indices.shape}")
        indices = np.atleast_1d(indices)
        if indices.size == 0:
            return indices.astype(np.int64)
        if indices.dtype == np.bool_ or not np.issubdtype(indices.dtype, np.integer):
            raise IndexError(f"indices must be integers, got dtype {indices.dtype}")
        if indices.min() < 0 or indices.max() >= self._capacity:
            raise IndexError(f"indices must lie in [0, {self._capacity}), got [{indices.min()}, {indices.max()}]")
        return indices.astype(np.int64, copy=False)
