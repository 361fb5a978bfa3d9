"""Tests of the GALA gossip buffers (seed 004, Algorithm 1 lines 5-8 and the staleness bound tau), with real threads."""

import random
import threading
import time

import pytest

from systems.gala.buffers import GossipNetwork, Message


def _ring_in_peers(num_learners, num_peers):
    """Directed ring: learner i hears from i-1, ..., i-num_peers (mod n)."""
    return [[(i - k) % num_learners for k in range(1, num_peers + 1)] for i in range(num_learners)]


class _Run:
    """Runs one learner loop per thread (sleep as the local step; send; receive) and records what they observed.

    A learner writes `sending[i] = t` just before `send(i, t, ...)`, so after a receive returns, `sending[j]` is at
    least the iteration of the newest message the network can have had from j: `t - sending[j] > tau` then proves
    that the receiver ran past the staleness bound.
    """

    def __init__(self, network, stop, in_peers, step_seconds, max_iterations, max_staleness):
        self.network = network
        self.stop = stop
        self.in_peers = in_peers
        self.step_seconds = step_seconds
        self.max_iterations = max_iterations
        self.max_staleness = max_staleness
        n = network.num_learners
        self.sending = [0] * n
        self.iterations = [0] * n
        self.staleness = [[] for _ in range(n)]
        self.errors = []

    def _learner(self, learner):
        rng = random.Random(learner)
        try:
            iteration = 0
            while iteration < self.max_iterations and not self.stop.is_set():
                time.sleep(self.step_seconds(learner, rng))
                iteration += 1
                self.sending[learner] = iteration
                self.network.send(learner, iteration, (learner, iteration))
                messages = self.network.receive(learner, iteration)
                if self.stop.is_set():  # a None caused by the stop says nothing about the bound
                    break
                if self.max_staleness is not None:
                    for sender in self.in_peers[learner]:
                        assert iteration - self.sending[sender] <= self.max_staleness, (learner, iteration, sender)
                if messages is not None:
                    assert [m.sender for m in messages] == self.in_peers[learner]
                    for message in messages:
                        assert message.params == (message.sender, message.sent_iteration)
                        assert message.staleness == iteration - message.sent_iteration
                        self.staleness[learner].append(message.staleness)
                self.iterations[learner] = iteration
        except BaseException as error:  # re-raised in the test thread
            self.errors.append(error)
            self.stop.set()

    def run(self, seconds):
        """Runs all learners until they finish or `seconds` pass (then sets stop); re-raises the first error."""
        threads = [
            threading.Thread(target=self._learner, args=(i,), daemon=True) for i in range(self.network.num_learners)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + seconds
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.stop.set()
        for thread in threads:
            thread.join(2.0)
        assert not any(thread.is_alive() for thread in threads), "a learner did not stop"
        if self.errors:
            raise self.errors[0]


def test_bounded_staleness_all_learners_finish():
    in_peers = _ring_in_peers(4, 1)
    stop = threading.Event()
    network = GossipNetwork(4, in_peers, max_staleness=2, stop_event=stop)
    run = _Run(network, stop, in_peers, lambda i, rng: rng.uniform(0.0, 0.002), 200, max_staleness=2)
    run.run(seconds=10.0)

    assert run.iterations == [200] * 4
    for learner in range(4):
        assert run.staleness[learner], "learner never mixed"
        assert max(run.staleness[learner]) <= 2
        stats = network.stats(learner)
        assert stats["mixes"] + stats["skips"] == 200
        assert stats["messages_mixed"] == stats["mixes"] == len(run.staleness[learner])
        assert stats["max_staleness_mixed"] == max(run.staleness[learner])
        assert stats["dropped_stale"] == 0
        assert stats["messages_sent"] == 200


def test_no_bound_slow_learner_holds_nobody_back():
    in_peers = _ring_in_peers(4, 1)
    stop = threading.Event()
    network = GossipNetwork(4, in_peers, max_staleness=None, stop_event=stop)
    run = _Run(network, stop, in_peers, lambda i, rng: 0.02 if i == 0 else 0.001, 10**9, max_staleness=None)
    run.run(seconds=1.0)

    slow = run.iterations[0]
    assert slow >= 5
    for learner in (1, 2, 3):
        assert run.iterations[learner] >= 5 * slow, run.iterations
    for learner in range(4):
        assert network.stats(learner)["waits"] == 0
        assert network.stats(learner)["wait_seconds"] == 0.0
    # Learner 1 can mix only when the slow learner 0 has sent; those messages are many of its iterations old.
    out_peer = network.stats(1)
    assert 1 <= out_peer["mixes"] <= network.stats(0)["messages_sent"]  # each message of learner 0 mixed at most once
    assert out_peer["skips"] > out_peer["mixes"]
    assert out_peer["max_staleness_mixed"] > 10
    # Learner 0 hears from the fast learner 3: unread messages are overwritten, and the newest is from "its future".
    assert network.stats(0)["overwritten_unread"] > 0
    assert min(run.staleness[0]) < 0


def test_bound_makes_the_slow_learners_out_peer_wait():
    in_peers = _ring_in_peers(4, 1)
    stop = threading.Event()
    network = GossipNetwork(4, in_peers, max_staleness=1, stop_event=stop)
    run = _Run(network, stop, in_peers, lambda i, rng: 0.01 if i == 0 else rng.uniform(0.0, 0.001), 30, max_staleness=1)
    run.run(seconds=10.0)

    assert run.iterations == [30] * 4
    out_peer = network.stats(1)
    assert out_peer["waits"] > 0
    assert out_peer["wait_seconds"] > 0.05
    for learner in range(4):
        assert max(run.staleness[learner]) <= 1
        assert network.stats(learner)["dropped_stale"] == 0


def test_newer_message_overwrites_unread_one():
    network = GossipNetwork(2, [[1], [0]], max_staleness=None, stop_event=threading.Event())
    older, newer = object(), object()
    network.send(0, 1, older)
    network.send(0, 2, newer)

    messages = network.receive(1, 3)

    assert messages == [Message(sender=0, sent_iteration=2, params=newer, staleness=1)]
    assert messages[0].params is newer
    assert network.stats(1)["overwritten_unread"] == 1
    assert network.stats(0)["messages_sent"] == 2
    assert network.receive(1, 4) is None  # consumed


def test_mixes_only_with_a_message_from_every_in_peer():
    # Learner 0 hears from 2 and 1, in that order; a failed receive must not consume what did arrive.
    in_peers = {0: [2, 1], 1: [0], 2: [1]}
    network = GossipNetwork(3, lambda i: in_peers[i], max_staleness=None, stop_event=threading.Event())
    from_1, from_2 = object(), object()
    network.send(1, 1, from_1)

    assert network.receive(0, 1) is None

    network.send(2, 1, from_2)
    messages = network.receive(0, 2)

    assert [(m.sender, m.params, m.staleness) for m in messages] == [(2, from_2, 1), (1, from_1, 1)]
    stats = network.stats(0)
    assert (stats["mixes"], stats["skips"], stats["messages_mixed"], stats["max_staleness_mixed"]) == (1, 1, 2, 1)


def _receive_promptly(network, receiver, iteration):
    """Calls `receive` in a thread so that a receive that wrongly blocks fails the test instead of hanging it."""
    result = []
    thread = threading.Thread(target=lambda: result.append(network.receive(receiver, iteration)), daemon=True)
    thread.start()
    thread.join(2.0)
    assert not thread.is_alive(), "receive blocked although the run is stopped"
    return result[0]


def test_staleness_bound_counts_from_the_initial_parameters_and_read_messages():
    stop = threading.Event()
    stop.set()  # a receive that would block returns None at once and counts a wait
    network = GossipNetwork(2, [[1], [0]], max_staleness=1, stop_event=stop)

    assert _receive_promptly(network, 0, 1) is None  # iteration 1 - 0 (initial parameters) <= tau
    assert network.stats(0)["waits"] == 0
    assert _receive_promptly(network, 0, 2) is None  # nothing received, 2 - 0 > tau: would block
    assert network.stats(0)["waits"] == 1

    network.send(1, 1, "p")
    assert _receive_promptly(network, 0, 2)[0].params == "p"
    assert _receive_promptly(network, 0, 2) is None  # newest message was already read; still fresh enough, no wait
    assert network.stats(0)["waits"] == 1
    assert _receive_promptly(network, 0, 3) is None  # 3 - 1 > tau
    assert network.stats(0)["waits"] == 2


def test_blocked_receive_wakes_on_a_fresh_message():
    # A long poll interval: only the sender's notification can wake the receiver within the test's time.
    network = GossipNetwork(2, [[1], [0]], max_staleness=0, stop_event=threading.Event(), poll_seconds=30.0)
    result = []
    receiver = threading.Thread(target=lambda: result.append(network.receive(0, 1)), daemon=True)
    receiver.start()
    time.sleep(0.1)
    assert receiver.is_alive()

    network.send(1, 1, "fresh")
    receiver.join(1.0)

    assert not receiver.is_alive(), "send did not wake the waiting receiver"
    assert result == [[Message(sender=1, sent_iteration=1, params="fresh", staleness=0)]]
    assert network.stats(0)["wait_seconds"] >= 0.05


@pytest.mark.parametrize("how", ["stop_event", "close"])
def test_stop_unblocks_a_waiting_receive(how):
    stop = threading.Event()
    network = GossipNetwork(2, [[1], [0]], max_staleness=0, stop_event=stop)
    result = []
    receiver = threading.Thread(target=lambda: result.append(network.receive(0, 1)), daemon=True)
    receiver.start()
    time.sleep(0.2)
    assert receiver.is_alive()

    stopped_at = time.monotonic()
    if how == "stop_event":
        stop.set()
    else:
        network.close()
    receiver.join(1.0)

    assert not receiver.is_alive()
    assert time.monotonic() - stopped_at < 0.5
    assert result == [None]
    assert network.stats(0)["waits"] == 1
    assert network.stats(0)["wait_seconds"] >= 0.15


def test_rejects_bad_topologies_and_iterations():
    stop = threading.Event()
    with pytest.raises(ValueError, match="invalid in-peer"):
        GossipNetwork(2, [[0], [0]], max_staleness=None, stop_event=stop)
    with pytest.raises(ValueError, match="invalid in-peer"):
        GossipNetwork(2, [[2], [0]], max_staleness=None, stop_event=stop)
    with pytest.raises(ValueError, match="expected 3"):
        GossipNetwork(3, [[1], [0]], max_staleness=None, stop_event=stop)
    with pytest.raises(ValueError, match="max_staleness"):
        GossipNetwork(2, [[1], [0]], max_staleness=-1, stop_event=stop)
    network = GossipNetwork(2, [[1], [0]], max_staleness=None, stop_event=stop)
    network.send(0, 2, "p")
    with pytest.raises(ValueError, match="after iteration 2"):
        network.send(0, 2, "p")
    with pytest.raises(ValueError, match="start at 1"):
        network.receive(1, 0)


def test_retired_in_peer_releases_a_waiting_receiver():
    stop = threading.Event()
    network = GossipNetwork(2, [[1], [0]], max_staleness=0, stop_event=stop)
    released = []

    def wait():
        released.append(network.receive(0, 3))

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.2)
    assert thread.is_alive()  # learner 1 has sent nothing: learner 0 waits (tau = 0)
    network.retire(1)
    thread.join(timeout=1.0)
    assert not thread.is_alive() and released == [None]
    assert network.stats(0)["waits"] == 1
