"""Gossip averaging for GALA: topologies, the mixing step, consensus metrics and the Proposition 1 bound.

Seed paper 004, Assran et al. (2019), "Gossip-based Actor-Learner Architectures for Deep Reinforcement
Learning" (GALA):

* Algorithm 1, line 7: learner ``i`` replaces its parameters by ``(x_i + sum_j m_j) / (1 + |N_i^in|)``, the
  average of its own parameters and one message from each in-peer (footnote: all non-zero mixing weights are
  ``1 / (1 + |N_i^in|)``). ``mix`` is that step on pytrees, ``Topology.mixing_matrix`` its matrix ``P``.
* Topologies: the directed ring of the paper's experiments (learner ``i`` sends to ``i + 1, ..., i + p``) and the
  time-varying exponential graph of Stochastic Gradient Push (Assran et al., 2019), where at iteration ``k``
  learner ``i`` sends to ``i + 2^((k + j) mod log2 n)`` for ``j < p``.
* Fig. 2: ``consensus_distance`` is ``||X - X_bar||_F`` (Fig. 2a) and ``pairwise_cosine`` the learners' gradient
  cosine similarities (Fig. 2b).
* Proposition 1 / Appendix B, Eq. (6)-(9): ``ConsensusBound`` evaluates the upper bound on
  ``||X^(k+1) - X_bar^(k+1)||`` for the lock-step execution the systems use (message delay 0 or 1); see its
  docstring for how the proof's inequality is made computable.

Graph and bound math is numpy float64 (host side, once per iteration at most); pytree math is jax.
"""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np

TOPOLOGY_KINDS = ("ring", "exponential")


@dataclasses.dataclass(frozen=True)
class Topology:
    """A directed (possibly time-varying) gossip graph in which every learner has the same number of peers.

    Learner ``i`` sends its parameters to ``(i + s) % n`` for each shift ``s`` in ``shifts(iteration)`` and so
    receives from ``(i - s) % n``. Construction validates the fields (see ``make_topology``).

    Attributes:
      kind: ``"ring"`` (static shifts ``1..p``) or ``"exponential"`` (SGP's time-varying power-of-two shifts).
      num_learners: n, the number of gossiping learners.
      num_peers: p, out-peers (= in-peers) per learner and iteration; 0 exactly when n == 1.
    """

    kind: str
    num_learners: int
    num_peers: int

    def __post_init__(self):
        n, p = self.num_learners, self.num_peers
        if self.kind not in TOPOLOGY_KINDS:
            raise ValueError(f"Unknown topology kind {self.kind!r}; expected one of {TOPOLOGY_KINDS}.")
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"num_learners must be an integer >= 1, got {n!r}.")
        if not isinstance(p, (int, np.integer)):
            raise ValueError(f"num_peers must be an integer, got {p!r}.")
        # Plain ints (numpy integers are accepted) so shifts and hashes are Python values.
        n, p = int(n), int(p)
        object.__setattr__(self, "num_learners", n)
        object.__setattr__(self, "num_peers", p)
        if n == 1:
            if p != 0:
                raise ValueError(f"A single learner has no peers: num_peers must be 0 when num_learners == 1, got {p}.")
            if self.kind == "exponential":
                raise ValueError("The exponential topology needs num_learners a power of two >= 2, got 1.")
            return
        if not 1 <= p <= n - 1:
            raise ValueError(f"num_peers must be in [1, num_learners - 1] = [1, {n - 1}], got {p}.")
        if self.kind == "exponential":
            if n & (n - 1):
                raise ValueError(f"The exponential topology needs num_learners a power of two >= 2, got {n}.")
            if p > _log2(n):
                raise ValueError(
                    f"The exponential topology allows num_peers <= log2(num_learners) = {_log2(n)}, got {p}."
                )

    @property
    def period(self) -> int:
        """Number of iterations after which the graph repeats: 1 for the ring, log2(n) for the exponential graph."""
        if self.kind == "exponential":
            return _log2(self.num_learners)
        return 1

    def shifts(self, iteration: int) -> tuple[int, ...]:
        """Shifts ``s`` such that learner ``i`` sends to ``(i + s) % n`` at ``iteration`` (any integer)."""
        if self.num_learners == 1:
            return ()
        if self.kind == "ring":
            return tuple(range(1, self.num_peers + 1))
        log_n = _log2(self.num_learners)
        return tuple(2 ** ((iteration + j) % log_n) for j in range(self.num_peers))

    def out_peers(self, learner: int, iteration: int) -> tuple[int, ...]:
        """Learners that ``learner`` sends to at ``iteration``."""
        self._check_learner(learner)
        return tuple((learner + s) % self.num_learners for s in self.shifts(iteration))

    def in_peers(self, learner: int, iteration: int) -> tuple[int, ...]:
        """Learners that send to ``learner`` at ``iteration`` (the order matches ``shifts``)."""
        self._check_learner(learner)
        return tuple((learner - s) % self.num_learners for s in self.shifts(iteration))

    def mixing_matrix(self, iteration: int) -> np.ndarray:
        """Row-stochastic ``P^(k)`` ``[n, n]``: ``p_ii = p_ij = 1 / (1 + |N_i^in|)`` for in-peers ``j``.

        Row ``i`` is the convex combination learner ``i`` forms in Algorithm 1, line 7. Every learner has the
        same in- and out-degree, so ``P`` is also column-stochastic (doubly stochastic).
        """
        n = self.num_learners
        matrix = np.zeros((n, n), np.float64)
        for i in range(n):
            peers = self.in_peers(i, iteration)
            weight = 1.0 / (1 + len(peers))
            matrix[i, i] = weight
            matrix[i, list(peers)] = weight
        return matrix

    def _check_learner(self, learner: int):
        if not 0 <= learner < self.num_learners:
            raise ValueError(f"learner must be in [0, {self.num_learners}), got {learner}.")


def make_topology(kind: str, num_learners: int, num_peers: int) -> Topology:
    """Builds a validated ``Topology``.

    Raises:
      ValueError: unknown ``kind``; ``num_learners < 1``; ``num_peers`` outside ``[1, n - 1]`` for n > 1 (it must be
        0 for n == 1); exponential graph with n not a power of two >= 2 or ``num_peers > log2(n)``.
    """
    return Topology(kind=kind, num_learners=num_learners, num_peers=num_peers)


def _log2(n: int) -> int:
    return n.bit_length() - 1


def mix(own, messages):
    """Gossip average of Algorithm 1, line 7: ``(own + sum(messages)) / (1 + len(messages))`` leafwise.

    Sums in float32 in a fixed order (``own`` first, then ``messages`` in the given order) so every learner that
    receives the same messages computes bit-identical results; the result is cast back to ``own``'s leaf dtypes
    so it can replace ``own`` in a carried state.

    Args:
      own: pytree, this learner's parameters.
      messages: sequence of pytrees with ``own``'s structure and leaf shapes (one per in-peer); may be empty.
    """
    messages = list(messages)

    def _mix_leaf(own_leaf, *message_leaves):
        own_leaf = jnp.asarray(own_leaf)
        chex.assert_equal_shape([own_leaf, *message_leaves])
        total = own_leaf.astype(jnp.float32)
        for leaf in message_leaves:
            total = total + jnp.asarray(leaf).astype(jnp.float32)
        return (total / jnp.float32(1 + len(message_leaves))).astype(own_leaf.dtype)

    return jax.tree.map(_mix_leaf, own, *messages)


def _flat_learner_leaves(stacked) -> list[jax.Array]:
    """Leaves of ``stacked`` as float32 ``[n, d_leaf]`` matrices, checking they share the leading learner axis."""
    leaves = [jnp.asarray(leaf) for leaf in jax.tree.leaves(stacked)]
    if not leaves:
        raise ValueError("stacked must have at least one leaf.")
    if any(leaf.ndim < 1 for leaf in leaves):
        raise ValueError("Every leaf of stacked needs a leading learner axis.")
    chex.assert_equal_shape_prefix(leaves, prefix_len=1)
    num_learners = leaves[0].shape[0]
    return [leaf.astype(jnp.float32).reshape(num_learners, -1) for leaf in leaves]


def consensus_distance(stacked) -> jax.Array:
    """``||X - X_bar||_F`` (Proposition 1's left-hand side; Fig. 2a), a float32 scalar.

    ``X`` is the ``[n, d]`` matrix whose row ``i`` is learner ``i``'s flattened parameters and ``X_bar`` has every
    row equal to the mean row. Computed leaf by leaf, so ``X`` is never materialised; works under jit.

    Args:
      stacked: pytree whose leaves have a leading learner axis ``[n, ...]``.
    """
    squared = jnp.float32(0.0)
    for x in _flat_learner_leaves(stacked):  # [n, d_leaf]
        squared = squared + jnp.sum(jnp.square(x - jnp.mean(x, axis=0, keepdims=True)))
    return jnp.sqrt(squared)


def pairwise_cosine(stacked) -> jax.Array:
    """Cosine similarity ``[n, n]`` between the learners' flattened vectors (e.g. gradients; Fig. 2b).

    A learner whose vector is exactly zero gets similarity 0 with everyone (itself included) instead of NaN.

    Args:
      stacked: pytree whose leaves have a leading learner axis ``[n, ...]``.
    """
    flat = _flat_learner_leaves(stacked)
    gram = sum(jnp.matmul(x, x.T, precision=jax.lax.Precision.HIGHEST) for x in flat)  # [n, n]
    norms = jnp.sqrt(jnp.diagonal(gram))  # [n]
    denominator = jnp.maximum(norms[:, None] * norms[None, :], jnp.finfo(jnp.float32).tiny)  # [n, n]
    return jnp.clip(gram / denominator, -1.0, 1.0)


def augmented_mixing_matrix(topology: Topology, delay: int, iteration: int) -> np.ndarray:
    """``P~^(k)`` of Eq. (7) for the lock-step execution with message ``delay`` 0 or 1.

    delay 0 (``[n, n]``): ``X^(k+1) = P^(k) (X^k + U^k)``, so ``P~^(k) = P^(k)``.

    delay 1 (``[2n, 2n]``): learner ``i`` mixes its fresh ``Y^k_i = X^k_i + U^k_i`` with the messages its in-peers
    sent at iteration ``k - 1``, ``X^(k+1)_i = (Y^k_i + sum_{j in N_i^in(k-1)} Y^(k-1)_j) / (1 + |N_i^in(k-1)|)``.
    The messages in transit are the paper's virtual nodes, ``M^k = Y^(k-1)``, and with ``Z^k = [X^k; M^k]``

        Z^(k+1) = [[D, A], [I, 0]] (Z^k + [U^k; 0]),

    where ``D + A = P^(k-1)``, ``D`` its diagonal.
    """
    mixing = topology.mixing_matrix(iteration - delay)
    if delay == 0:
        return mixing
    if delay != 1:
        raise ValueError(f"delay must be 0 or 1, got {delay}.")
    n = topology.num_learners
    diagonal = np.diag(np.diag(mixing))
    augmented = np.zeros((2 * n, 2 * n), np.float64)
    augmented[:n, :n] = diagonal
    augmented[:n, n:] = mixing - diagonal
    augmented[n:, :n] = np.eye(n)
    return augmented


def _complement_basis(size: int) -> np.ndarray:
    """``Q`` ``[size - 1, size]``: orthonormal rows spanning the complement of ``span{1}``."""
    seed = np.eye(size)
    seed[:, 0] = 1.0
    orthonormal, _ = np.linalg.qr(seed)  # first column is proportional to 1
    return orthonormal[:, 1:].T


class ConsensusBound:
    """Proposition 1's bound on the distance from consensus, made exact and computable for lock-step gossip.

    The learners start from equal parameters and follow ``Z^(k+1) = P~^(k) (Z^k + U~^k)`` (Eq. 7; see
    ``augmented_mixing_matrix``; ``U~^k = U^k`` for delay 0, ``[U^k; 0]`` for delay 1). For delay 1 the initial
    in-transit messages are defined to be the initial parameters, so the model holds exactly from ``k = 0`` and
    ``Q Z^0 = 0``. With ``Q`` ``[n~ - 1, n~]`` an orthonormal basis of the complement of ``span{1}``,
    ``Q P~ = P~' Q`` for ``P~' = Q P~ Q^T`` (``P~`` is row-stochastic), and Eq. (8)-(9) give

        ||X^(k+1) - X_bar^(k+1)|| <= ||Z^(k+1) - Z_bar^(k+1)|| = ||Q Z^(k+1)||
                                   <= sum_{s=0}^{k} c(s, k+1-s) ||U^s||_F,
        c(s, m) = ||P~'^(s+m-1) ... P~'^(s)||_2.

    The first inequality holds because the mean minimises the summed squared distance, so the n real learners are
    no farther from their own mean than from the mean of all n~ nodes; the last uses ``||Q U~^s|| <= ||U^s||``.

    This is the inequality of the proof *before* ``beta`` is introduced. Replacing ``c(s, m)`` by ``beta^m`` with
    ``beta`` the one-step norm is only valid when that norm is below 1; for delay 1 it is not (about 1.144 for
    the ring), so the exact product norms are used. ``P~^(k)`` depends only on ``k mod period``, hence
    ``c(s, m)`` only on ``s mod period`` and ``m``; the table is precomputed per phase.

    Truncation: ``c`` is tabulated for ``m = 1..M``, with M the first ``m`` at which ``c(phase, m) <=
    rel_tol * c(phase, 1)`` for every phase (or ``max_terms``). The older terms are not dropped, so the result is
    a valid upper bound at every iteration: writing ``m = q M + r`` (``0 <= r < M``) and using
    submultiplicativity of the spectral norm, ``c(s, m) <= C gamma^q`` with ``gamma = max_phase c(phase, M) < 1``
    and ``C = max(1, max c)``. All ``s`` with the same ``s mod M`` reach the next ``q`` at the same iteration, so
    ``sum_{s: k+1-s > M} gamma^q(s) ||U^s||`` is kept exactly in M accumulators, one per residue. When M is
    reached by ``rel_tol`` this tail is below ``rel_tol`` relative; when ``max_terms`` caps M (slowly mixing
    graphs, e.g. a delay-1 ring of 64) it stays valid and bounded but is looser.

    ``add`` costs O(M) time and memory: only the last M update norms and the M tail accumulators are kept.
    """

    def __init__(self, topology: Topology, delay: int, *, rel_tol: float = 1e-9, max_terms: int = 5000):
        """Precomputes the coefficients.

        Args:
          topology: the gossip graph.
          delay: 0 (mix with messages of this iteration) or 1 (with messages sent one iteration earlier).
          rel_tol: the table stops once every phase's product norm is below ``rel_tol`` times its one-step norm.
          max_terms: cap on M.

        Raises:
          ValueError: bad ``delay``, ``rel_tol`` or ``max_terms``, or products that have not contracted below 1
            after ``max_terms`` iterations (the bound would be vacuous).
        """
        if delay not in (0, 1):
            raise ValueError(f"delay must be 0 or 1, got {delay!r}.")
        if not 0.0 < rel_tol < 1.0:
            raise ValueError(f"rel_tol must be in (0, 1), got {rel_tol}.")
        if max_terms < 1:
            raise ValueError(f"max_terms must be >= 1, got {max_terms}.")
        self._topology = topology
        self._delay = delay
        self._iteration = 0  # number of updates added so far
        if topology.num_learners == 1:
            # A single learner is always at consensus.
            self._coefficients = np.zeros((topology.period, 0), np.float64)
            self._gamma = self._tail_scale = 0.0
        else:
            self._coefficients = _product_norms(topology, delay, rel_tol, max_terms)
            self._gamma = float(np.max(self._coefficients[:, -1]))
            if self._gamma >= 1.0:
                raise ValueError(
                    f"Mixing products did not contract below 1 within max_terms={max_terms} iterations "
                    f"(norm {self._gamma}); increase max_terms."
                )
            self._tail_scale = max(1.0, float(np.max(self._coefficients)))  # C
        # Circular buffer: slot s % M holds ||U^s|| for the last M iterations s.
        self._recent_norms = np.zeros(self.num_terms, np.float64)
        # Slot r holds sum of gamma^floor((k+1-s)/M) ||U^s|| over the s = r mod M older than M iterations.
        self._tail = np.zeros(self.num_terms, np.float64)

    @property
    def topology(self) -> Topology:
        return self._topology

    @property
    def delay(self) -> int:
        return self._delay

    @property
    def num_terms(self) -> int:
        """M, the number of tabulated product lengths."""
        return self._coefficients.shape[1]

    def coefficients(self, phase: int) -> np.ndarray:
        """``[M]`` ``c(s, m)`` for ``m = 1..M`` and any ``s`` with ``s % period == phase % period``."""
        return self._coefficients[phase % self._topology.period].copy()

    def one_step_beta(self) -> float:
        """``max_s ||P~'^(s)||_2``, the paper's one-step ``beta``; may exceed 1 for delay 1 (see class docstring)."""
        if self.num_terms == 0:
            return 0.0
        return float(np.max(self._coefficients[:, 0]))

    def add(self, update_norm: float) -> float:
        """Records ``||U^k||_F`` of the next iteration k; returns the bound on ``||X^(k+1) - X_bar^(k+1)||_F``.

        Args:
          update_norm: Frobenius norm of the ``[n, d]`` matrix of the learners' applied updates at iteration k
            (the change each learner made before mixing).
        """
        update_norm = float(update_norm)
        if not np.isfinite(update_norm) or update_norm < 0.0:
            raise ValueError(f"update_norm must be finite and >= 0, got {update_norm}.")
        iteration = self._iteration
        self._iteration += 1
        num_terms = self.num_terms
        if num_terms == 0:
            return 0.0
        # Every age grows by one: the tail sources with k + 1 - s = 0 mod M, i.e. s = k + 1 mod M, gain a factor.
        self._tail[(iteration + 1) % num_terms] *= self._gamma
        slot = iteration % num_terms
        if iteration >= num_terms:
            # U^(k - M) reaches age M + 1 and moves to the tail with weight gamma^floor((M + 1) / M).
            self._tail[slot] += self._gamma ** ((num_terms + 1) // num_terms) * self._recent_norms[slot]
        self._recent_norms[slot] = update_norm
        ages = np.arange(1, min(num_terms, iteration + 1) + 1)  # m = k + 1 - s
        sources = iteration + 1 - ages  # s
        recent = self._coefficients[sources % self._topology.period, ages - 1] @ self._recent_norms[sources % num_terms]
        return float(recent + self._tail_scale * np.sum(self._tail))


def _product_norms(topology: Topology, delay: int, rel_tol: float, max_terms: int) -> np.ndarray:
    """``[period, M]`` table of ``c(phase, m) = ||P~'^(phase+m-1) ... P~'^(phase)||_2``."""
    period = topology.period
    size = topology.num_learners * (1 + delay)
    basis = _complement_basis(size)  # [size - 1, size]
    reduced = np.stack(
        [basis @ augmented_mixing_matrix(topology, delay, phase) @ basis.T for phase in range(period)]
    )  # [period, size - 1, size - 1]
    phases = np.arange(period)
    products = np.broadcast_to(np.eye(size - 1), reduced.shape).copy()  # [period, size - 1, size - 1]
    columns = []
    for length in range(1, max_terms + 1):
        products = reduced[(phases + length - 1) % period] @ products
        # Largest singular value via the symmetric eigenproblem (several times faster than an SVD).
        gram = np.swapaxes(products, 1, 2) @ products  # [period, size - 1, size - 1]
        norms = np.sqrt(np.maximum(np.linalg.eigvalsh(gram)[:, -1], 0.0))  # [period]
        columns.append(norms)
        if np.all(norms <= rel_tol * columns[0]):  # <= so an exactly averaging graph (c = 0) stops at once
            break
    return np.stack(columns, axis=1)
