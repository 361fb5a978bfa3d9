"""Gossip receive buffers between learner threads, for GALA (seed 004: Assran et al., "Gossip-based Actor-Learner
Architectures for Deep Reinforcement Learning"), Algorithm 1 lines 5-8 and the staleness bound tau of the paragraph
right after it.

Each of n A2C learners runs Algorithm 1 in its own thread. After its local A2C step (line 4) learner i broadcasts its
parameters, without blocking, to its out-peers (line 5); if its receive buffer holds a message m_j from every in-peer
v_j it averages x_i <- (x_i + sum_j m_j) / (1 + |N_i^in|) (lines 6-7), otherwise it carries on unmixed (line 8). As in
the paper's Appendix B, the receive buffer R_i holds at most one message per in-peer: a newer message from v_j
overwrites an unread older one. The paragraph after Algorithm 1 bounds staleness: a learner blocks and waits "if more
than tau >= 0 local iterations have passed since the agent last received a message from its in-peers"; tau = None
never waits, so a slow learner never holds the others back.

This module only moves parameter objects (any pytree); it never copies or inspects them, and the averaging itself is
the caller's. Messages are delivered the moment they are sent (shared memory), so "the newest message received from
v_j" is the newest message v_j has sent. The learners are asynchronous by design ("Local iteration counters may be
out-of-sync"): which messages are mixed, and so the results of a run, depend on thread timing, whatever tau is; tau
only bounds how old a mixed message can be.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

# Initial parameters are identical on every learner (Algorithm 1's "Require"), so they count as a message that every
# learner sent at local iteration 0: before any real message has arrived, staleness is measured against iteration 0.
INITIAL_ITERATION = 0


@dataclasses.dataclass(frozen=True)
class Message:
    """One parameter message, as consumed by its receiver.

    Attributes:
      sender: the in-peer that sent it.
      sent_iteration: the sender's local iteration whose A2C step produced `params` (>= 1).
      params: exactly the object passed to `GossipNetwork.send` (not copied).
      staleness: the receiver's local iteration at consumption minus `sent_iteration` (the delay tau_{j,i}^{(k)} of
        the paper's Appendix B, counted in the receiver's iterations). Local counters are not synchronised, so it is
        negative when the sender's counter is ahead of the receiver's; the bound tau only limits it from above.
    """

    sender: int
    sent_iteration: int
    params: Any
    staleness: int


@dataclasses.dataclass
class _LearnerStats:
    messages_sent: int = 0  # messages this learner put into out-peers' buffers (one per out-peer per send)
    mixes: int = 0  # receive calls that returned messages (Algorithm 1 line 7 taken)
    skips: int = 0  # receive calls that returned None because some in-peer had no unread message (line 8)
    messages_mixed: int = 0  # messages returned by receive
    dropped_stale: int = 0  # unread messages discarded because their staleness exceeded tau
    overwritten_unread: int = 0  # unread messages in this learner's buffer replaced by a newer one from their sender
    waits: int = 0  # receive calls that had to block for a fresh-enough message (the tau bound)
    wait_seconds: float = 0.0  # total time blocked in those calls
    max_staleness_mixed: int | None = None  # largest Message.staleness ever returned; None before the first mix


class GossipNetwork:
    """Per-receiver gossip buffers for n learner threads on a static directed graph. Thread-safe.

    Iteration convention: every learner starts from the same initial parameters, which count as sent at local
    iteration 0 (`INITIAL_ITERATION`). Local iteration t = 1, 2, ... is the learner's t-th local A2C step. After the
    step of iteration t, learner i calls `send(i, t, params)` with the parameters that step produced and then
    `receive(i, t)`; if that returns messages it mixes them into its parameters, which then enter step t + 1. A message
    sent at iteration s and consumed at iteration t has staleness t - s, so a message from a peer running in lock-step
    has staleness 0.

    Staleness bound tau = `max_staleness` (None: never wait). In `receive(i, t)`:
      (a) while, for some in-peer j, the newest message ever received from j (read or unread; iteration 0 if none)
          was sent at an iteration s < t - tau, the call blocks until j sends a fresh-enough one or the run stops;
          equivalently, a learner never completes more than tau local iterations past the newest message of any
          in-peer. With tau = 0 no learner finishes iteration t before each in-peer has sent iteration t (an in-peer
          may still be ahead); tau = None never blocks;
      (b) an unread message with staleness > tau is discarded and counted in `dropped_stale`. Given (a), the unread
          message of a sender is its newest and therefore fresh enough, so this is a guard that keeps the bound true
          by construction of the returned list; `dropped_stale` is expected to stay 0;
      (c) if every in-peer now has an unread message, all of them are consumed and returned in in-peer order;
          otherwise nothing is consumed and None is returned (carry on without mixing).
    """

    def __init__(
        self,
        num_learners: int,
        in_peers: Callable[[int], Sequence[int]] | Sequence[Sequence[int]],
        max_staleness: int | None,
        stop_event: threading.Event,
        *,
        poll_seconds: float = 0.05,
    ):
        """Builds empty buffers.

        Args:
          num_learners: n, the number of learners; they are numbered 0..n-1.
          in_peers: learner i's in-peers N_i^in, as a function of i or a list indexed by i (for a directed ring with
            p peers, i-1, ..., i-p mod n). Evaluated once: the topology is static. Their order is the order in which
            `receive` returns messages.
          max_staleness: tau >= 0, or None to never wait.
          stop_event: when set, blocked `receive` calls return None (checked every `poll_seconds`).
          poll_seconds: how often a blocked `receive` re-checks `stop_event`.
        """
        if num_learners < 1:
            raise ValueError(f"num_learners must be >= 1, got {num_learners}")
        if max_staleness is not None and max_staleness < 0:
            raise ValueError(f"max_staleness must be None or >= 0, got {max_staleness}")
        if poll_seconds <= 0:
            raise ValueError(f"poll_seconds must be > 0, got {poll_seconds}")
        peers_of = in_peers if callable(in_peers) else in_peers.__getitem__
        if not callable(in_peers) and len(in_peers) != num_learners:
            raise ValueError(f"in_peers lists {len(in_peers)} learners, expected {num_learners}")
        self._in_peers: list[tuple[int, ...]] = []
        self._out_peers: list[list[int]] = [[] for _ in range(num_learners)]
        for receiver in range(num_learners):
            peers = tuple(int(j) for j in peers_of(receiver))
            if len(set(peers)) != len(peers):
                raise ValueError(f"learner {receiver} has repeated in-peers {peers}")
            for sender in peers:
                if not 0 <= sender < num_learners or sender == receiver:
                    raise ValueError(f"learner {receiver} has invalid in-peer {sender} (n = {num_learners})")
                self._out_peers[sender].append(receiver)
            self._in_peers.append(peers)

        self._num_learners = num_learners
        self._max_staleness = max_staleness
        self._stop_event = stop_event
        self._poll_seconds = poll_seconds
        self._closed = False
        self._lock = threading.Lock()
        # One condition per receiver, all on the one lock: a send wakes only its out-peers.
        self._arrivals = [threading.Condition(self._lock) for _ in range(num_learners)]
        # _unread[i][j] = (sent_iteration, params): R_i's slot for in-peer j.
        self._unread: list[dict[int, tuple[int, Any]]] = [{} for _ in range(num_learners)]
        # Delivery is immediate, so the newest message any out-peer received from j is j's newest send.
        self._last_sent = [INITIAL_ITERATION] * num_learners
        self._retired = [False] * num_learners  # will send nothing more (its budget is spent): never wait for it
        self._stats = [_LearnerStats() for _ in range(num_learners)]

    @property
    def num_learners(self) -> int:
        return self._num_learners

    def send(self, sender: int, iteration: int, params: Any) -> None:
        """Algorithm 1 line 5: puts `params`, stamped with `iteration`, into every out-peer's slot for `sender`.

        Never waits (beyond a short lock). Iterations of one sender must strictly increase and start at >= 1.
        """
        self._check_learner(sender)
        with self._lock:
            if iteration <= self._last_sent[sender]:
                raise ValueError(
                    f"learner {sender} sent iteration {iteration} after iteration {self._last_sent[sender]}"
                )
            self._last_sent[sender] = iteration
            for receiver in self._out_peers[sender]:
                slots = self._unread[receiver]
                if sender in slots:
                    self._stats[receiver].overwritten_unread += 1
                slots[sender] = (iteration, params)
                self._stats[sender].messages_sent += 1
                self._arrivals[receiver].notify_all()

    def receive(self, receiver: int, iteration: int) -> list[Message] | None:
        """Algorithm 1 lines 6-8 for `receiver` after its local step of `iteration` (rules (a)-(c) in the class doc).

        Returns:
          One message per in-peer, in in-peer order, to be averaged with the receiver's parameters with weight
          1 / (1 + number of messages) each; or None: do not mix (some in-peer has nothing unread, the receiver has
          no in-peers, or the run stopped while waiting).
        """
        self._check_learner(receiver)
        if iteration <= INITIAL_ITERATION:
            raise ValueError(f"local iterations start at {INITIAL_ITERATION + 1}, got {iteration}")
        in_peers = self._in_peers[receiver]
        tau = self._max_staleness
        with self._lock:
            stats = self._stats[receiver]
            if tau is not None and not self._wait_for_fresh(receiver, iteration - tau):
                return None
            slots = self._unread[receiver]
            if tau is not None:
                for sender in in_peers:
                    if sender in slots and iteration - slots[sender][0] > tau:
                        del slots[sender]
                        stats.dropped_stale += 1
            if not in_peers or any(sender not in slots for sender in in_peers):
                stats.skips += 1
                return None
            messages = []
            for sender in in_peers:
                sent_iteration, params = slots.pop(sender)
                messages.append(Message(sender, sent_iteration, params, iteration - sent_iteration))
            stats.mixes += 1
            stats.messages_mixed += len(messages)
            newest_staleness = max(message.staleness for message in messages)
            if stats.max_staleness_mixed is None or newest_staleness > stats.max_staleness_mixed:
                stats.max_staleness_mixed = newest_staleness
            return messages

    def stats(self, learner: int) -> dict[str, int | float | None]:
        """A snapshot of `learner`'s counters: messages_sent (as sender), mixes, skips, messages_mixed, dropped_stale,
        overwritten_unread, waits, wait_seconds, max_staleness_mixed (None before the first mix)."""
        self._check_learner(learner)
        with self._lock:
            return dataclasses.asdict(self._stats[learner])

    def retire(self, learner: int) -> None:
        """`learner` will send no more messages (it stopped): its out-peers stop waiting for it under tau."""
        self._check_learner(learner)
        with self._lock:
            self._retired[learner] = True
            for receiver in self._out_peers[learner]:
                self._arrivals[receiver].notify_all()

    def close(self) -> None:
        """Wakes every blocked `receive` (which returns None); later calls that would block return None at once."""
        with self._lock:
            self._closed = True
            for arrivals in self._arrivals:
                arrivals.notify_all()

    def _wait_for_fresh(self, receiver: int, oldest_allowed: int) -> bool:
        """Rule (a), called with the lock held. False if the run stopped before every in-peer's newest message was
        sent at `oldest_allowed` or later."""

        def fresh() -> bool:
            return all(
                self._last_sent[sender] >= oldest_allowed or self._retired[sender]
                for sender in self._in_peers[receiver]
            )

        if fresh():
            return True
        stats = self._stats[receiver]
        stats.waits += 1
        start = time.monotonic()
        try:
            while not fresh():
                if self._closed or self._stop_event.is_set():
                    return False
                self._arrivals[receiver].wait(self._poll_seconds)
            return True
        finally:
            stats.wait_seconds += time.monotonic() - start

    def _check_learner(self, learner: int) -> None:
        if not 0 <= learner < self._num_learners:
            raise ValueError(f"learner {learner} out of range (n = {self._num_learners})")
