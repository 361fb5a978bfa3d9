"""Spreeze's shared-memory replay (seed 002, section 3.3.2) and its queue baseline: several writer processes and one
reader, no torn transitions (every transition carries a checksum), counts add up, nothing is ever named in /dev/shm,
a writer SIGKILLed while holding the lock does not stall the others, no resource-tracker noise."""

import gc
import math
import multiprocessing
import multiprocessing.synchronize
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import numpy as np
import pytest

from systems.spreeze.shared_replay import SHM_DIR, QueueTransfer, SharedReplay, segment_name
from tests.fixtures import REPO_ROOT

CTX = multiprocessing.get_context("spawn")
WRITERS = 3
PER_WRITER = 2000
PAYLOAD = 17
FIELDS = {
    "writer": ((), np.int32),
    "seq": ((), np.int64),
    "payload": ((PAYLOAD,), np.float32),
    "checksum": ((), np.int64),
}
ROOT = REPO_ROOT
linux_shm = pytest.mark.skipif(not sys.platform.startswith("linux") or not os.path.isdir(SHM_DIR),
                               reason="needs /dev/shm (Linux)")


def new_run_id() -> str:
    return "test" + uuid.uuid4().hex[:12]


def shm_entries(run_id: str) -> list[str]:
    if not os.path.isdir(SHM_DIR):
        return []
    return sorted(e for e in os.listdir(SHM_DIR) if e.startswith(f"spreeze-{run_id}-"))


def expected_payload(writer, seq) -> np.ndarray:
    # Integers below 2**24, exact in float32: any row mixed from two transitions shows.
    base = np.asarray(writer, np.int64) * 100_000 + np.asarray(seq, np.int64)
    return (base[..., None] * PAYLOAD + np.arange(PAYLOAD)).astype(np.float32)


def checksum(writer, seq, payload) -> np.ndarray:
    weights = np.arange(1, PAYLOAD + 1, dtype=np.int64)
    return (np.asarray(writer, np.int64) * 1_000_003 + np.asarray(seq, np.int64) * 7919
            + (np.asarray(payload).astype(np.int64) * weights).sum(-1))


def make_batch(writer: int, seqs) -> dict[str, np.ndarray]:
    seqs = np.asarray(seqs, np.int64)
    writers = np.full(seqs.shape, writer, np.int32)
    payload = expected_payload(writers, seqs)
    return {"writer": writers, "seq": seqs, "payload": payload, "checksum": checksum(writers, seqs, payload)}


def assert_untorn(batch, writers=WRITERS, per_writer=PER_WRITER) -> None:
    writer, seq = batch["writer"], batch["seq"]
    assert ((writer >= 0) & (writer < writers)).all(), writer
    assert ((seq >= 0) & (seq < per_writer)).all(), seq
    np.testing.assert_array_equal(batch["payload"], expected_payload(writer, seq))
    np.testing.assert_array_equal(batch["checksum"], checksum(writer, seq, batch["payload"]))


def writer_main(handle, writer: int, count: int, start, pause: float) -> None:
    """A sampler stand-in: attaches (shared replay or queue, whichever the handle is) and inserts `count`
    transitions of its own in batches of random size 1..16."""
    replay = SharedReplay.attach(handle, writer_id=writer)
    rng = np.random.default_rng(writer)
    start.wait(60)
    seq = 0
    try:
        while seq < count:
            n = min(int(rng.integers(1, 17)), count - seq)
            replay.insert(make_batch(writer, np.arange(seq, seq + n)))
            seq += n
            if pause:
                time.sleep(pause)
    finally:
        replay.close()


def lock_holder_main(handle, ready) -> None:
    """Attaches, takes the buffer's lock as an insert would, and waits to be killed (a sampler SIGKILLed inside
    insert's critical section)."""
    replay = SharedReplay.attach(handle)
    replay._acquire()
    ready.set()
    time.sleep(120)


@pytest.mark.parametrize("capacity", [8192, 97])
def test_writers_and_reader_no_torn_transitions(capacity):
    run_id = new_run_id()
    replay = SharedReplay.create(capacity, FIELDS, run_id=run_id, ctx=CTX)
    try:
        start = CTX.Event()
        procs = [CTX.Process(target=writer_main, args=(replay.handle(), w, PER_WRITER, start, 0.002))
                 for w in range(WRITERS)]
        for p in procs:
            p.start()
        start.set()
        rng = np.random.default_rng(0)
        samples, deadline = 0, time.monotonic() + 60
        while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
            if replay.size == 0:
                time.sleep(0.001)
                continue
            assert_untorn(replay.sample(int(rng.choice([256, 4096])), rng))
            samples += 1
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
        assert samples > 10  # the reader really ran while the writers wrote
        if capacity < WRITERS * PER_WRITER:  # writers lapped the ring during gathers: the redraw path really ran
            assert replay.retries > 0

        counts = replay.snapshot_counts()
        total = WRITERS * PER_WRITER
        assert counts["total_inserted"] == replay.total_inserted == total
        assert counts["size"] == replay.size == min(total, capacity)
        assert counts["per_writer"][:WRITERS] == [PER_WRITER] * WRITERS
        assert sum(counts["per_writer"]) == total

        content = replay.snapshot()
        assert_untorn(content)
        assert len(content["seq"]) == min(total, capacity)
        for w in range(WRITERS):  # FIFO: each writer's transitions in insertion order
            assert (np.diff(content["seq"][content["writer"] == w]) > 0).all()
        if capacity >= total:  # every (writer, seq) exactly once
            keys = content["writer"].astype(np.int64) * PER_WRITER + content["seq"]
            np.testing.assert_array_equal(np.sort(keys), np.arange(total))
        assert_untorn(replay.sample(10_000, rng))
    finally:
        replay.unlink()
    assert shm_entries(run_id) == []


class RacyReplay(SharedReplay):
    """Runs `hook` (a concurrent writer) right after the gather of the first field of a sample."""

    hook = None

    def _gather_field(self, name, view, slots):
        out = super()._gather_field(name, view, slots)
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return out


def test_sample_redraws_rows_overwritten_during_the_gather():
    with RacyReplay.create(8, FIELDS, run_id=new_run_id()) as replay:
        replay.insert(make_batch(0, np.arange(8)))
        # Control: the same race without the check returns torn rows (field "writer" old, the rest new).
        slots = np.arange(64) % 8
        torn = {"writer": replay._views["writer"][slots]}
        replay.insert(make_batch(1, np.arange(4)))  # overwrites slots 0..3
        torn.update({k: replay._views[k][slots] for k in ("seq", "payload", "checksum")})
        with pytest.raises(AssertionError):
            assert_untorn(torn)
        # The real sample: the hook overwrites slots 4..7 between its first and second field.
        replay.hook = lambda: replay.insert(make_batch(1, np.arange(4, 8)))
        batch = replay.sample(256, np.random.default_rng(0))
        assert replay.hook is None and replay.retries > 0
        assert_untorn(batch)
        assert (batch["writer"] == 1).all()  # after both inserts the ring holds writer 1's seqs 0..7 only
        assert replay.total_inserted == 16


class InterruptedReplay(SharedReplay):
    """Raises KeyboardInterrupt (Ctrl-C) inside insert's critical section after `fail_after` field copies."""

    fail_after = None

    def _write_field(self, view, source, first):
        if self.fail_after is not None:
            if self.fail_after == 0:
                self.fail_after = None
                raise KeyboardInterrupt
            self.fail_after -= 1
        super()._write_field(view, source, first)


def test_interrupted_insert_leaves_no_torn_rows():
    with InterruptedReplay.create(8, FIELDS, run_id=new_run_id()) as replay:
        replay.insert(make_batch(0, np.arange(8)))
        replay.fail_after = 2  # writer and seq of slots 0..2 written, payload and checksum not
        with pytest.raises(KeyboardInterrupt):
            replay.insert(make_batch(1, np.arange(3)))
        assert replay.total_inserted == 8 and replay.size == 5
        rng = np.random.default_rng(1)
        batch = replay.sample(1000, rng)  # the lock was released and slots 0..2 are excluded
        assert_untorn(batch)
        assert set(batch["seq"]) == {3, 4, 5, 6, 7} and (batch["writer"] == 0).all()
        np.testing.assert_array_equal(replay.snapshot()["seq"], [3, 4, 5, 6, 7])
        replay.insert(make_batch(1, np.arange(2)))  # rewrites slots 0, 1; slot 2 still excluded
        assert replay.size == 7
        assert_untorn(replay.sample(1000, rng))
        replay.insert(make_batch(1, [2]))
        assert replay.size == 8 and replay.total_inserted == 11
        content = replay.snapshot()
        assert_untorn(content)
        np.testing.assert_array_equal(content["seq"], [3, 4, 5, 6, 7, 0, 1, 2])


def test_wrap_around_keeps_the_newest():
    with SharedReplay.create(10, FIELDS, run_id=new_run_id()) as replay:
        for lo in range(0, 25, 7):  # batches of 7 cross the end of the ring
            replay.insert(make_batch(0, np.arange(lo, min(lo + 7, 25))))
        assert replay.total_inserted == 25 and replay.size == 10
        np.testing.assert_array_equal(replay.snapshot()["seq"], np.arange(15, 25))
        batch = replay.sample(500, np.random.default_rng(2))
        assert_untorn(batch, per_writer=25)
        assert set(batch["seq"]) == set(range(15, 25))
        replay.insert(make_batch(0, np.arange(100, 123)))  # one batch larger than the capacity
        assert replay.total_inserted == 48 and replay.size == 10
        np.testing.assert_array_equal(replay.snapshot()["seq"], np.arange(113, 123))
        assert replay.snapshot_counts()["per_writer"][0] == 0  # no writer id given


def test_bad_input_raises_and_writes_nothing():
    with SharedReplay.create(16, FIELDS, run_id=new_run_id()) as replay:
        with pytest.raises(ValueError, match="empty"):
            replay.sample(4, np.random.default_rng(0))
        good = make_batch(0, np.arange(4))
        replay.insert(good)
        before = replay.snapshot()
        bad_batches = [
            ({k: v for k, v in good.items() if k != "checksum"}, "missing"),
            ({**good, "extra": good["seq"]}, "unexpected"),
            ({**good, "payload": good["payload"][:, :16]}, "shape"),
            ({**good, "seq": good["seq"][:, None]}, "shape"),
            ({**good, "seq": good["seq"][:3]}, "rows"),
            ({**good, "checksum": good["checksum"].astype(np.float64)}, "dtype"),
            ({**good, "writer": np.array(["a", "b", "c", "d"])}, "dtype"),
            (np.zeros(3), "dict"),
        ]
        for batch, match in bad_batches:
            with pytest.raises(ValueError, match=match):
                replay.insert(batch)
        with pytest.raises(ValueError, match="writer_id"):
            replay.insert(good, writer_id=10_000)
        assert replay.total_inserted == 4
        after = replay.snapshot()
        for name in FIELDS:
            np.testing.assert_array_equal(after[name], before[name])
        # float64 -> float32 and python ints convert ("same_kind"); a batch of 0 rows is a no-op.
        replay.insert({**make_batch(0, [4]), "payload": expected_payload(0, [4]).astype(np.float64)})
        replay.insert({k: v[:0] for k, v in good.items()})
        assert replay.total_inserted == 5
    for fields in ({}, {"x": ((-1,), np.float32)}, {"x": ((2,), object)}, {"x": np.float32}):
        with pytest.raises(ValueError):
            SharedReplay.create(4, fields, run_id=new_run_id())
    with pytest.raises(ValueError, match="run_id"):
        SharedReplay.create(4, FIELDS, run_id="a/b")
    with pytest.raises(ValueError, match="capacity"):
        SharedReplay.create(0, FIELDS, run_id=new_run_id())


def test_attach_close_unlink_and_memory():
    run_id = new_run_id()
    replay = SharedReplay.create(1000, FIELDS, run_id=run_id)
    assert replay.memory_bytes >= 1000 * (4 + 8 + 4 * PAYLOAD + 8)
    assert replay.segment == segment_name(run_id)
    with pytest.raises(TypeError):
        pickle.dumps(replay)
    reader = SharedReplay.attach(replay.handle(), writer_id=2)  # same process: untracked attach
    reader.insert(make_batch(2, np.arange(5)))
    assert replay.snapshot_counts()["per_writer"][2] == 5
    with pytest.raises(RuntimeError):
        reader.unlink()
    reader.close()
    reader.close()
    with pytest.raises(RuntimeError, match="closed"):
        reader.sample(1)
    replay.insert(make_batch(0, [5]))  # the reader's close left the owner's descriptor and mapping alone
    assert replay.total_inserted == 6
    assert shm_entries(run_id) == []  # never a name in /dev/shm
    replay.close()
    replay.unlink()
    replay.unlink()
    with pytest.raises(RuntimeError, match="closed"):
        replay.handle()


@linux_shm
def test_a_writer_killed_holding_the_lock_does_not_stall_the_others(monkeypatch):
    """The kernel releases a dead process's record lock, so the next insert goes through (a multiprocessing lock
    stayed held forever); the buffer is never named in /dev/shm and no semaphore is created. Semaphores are
    counted by the names this process gives them (the other test worker may hold its own in /dev/shm meanwhile)."""
    named = []
    make_name = multiprocessing.synchronize.SemLock._make_name
    monkeypatch.setattr(multiprocessing.synchronize.SemLock, "_make_name",
                        staticmethod(lambda: named.append(make_name()) or named[-1]))
    run_id = new_run_id()
    with SharedReplay.create(64, FIELDS, run_id=run_id) as replay:
        replay.insert(make_batch(0, np.arange(4)))
        assert named == []  # the buffer's lock is a record lock on its descriptor, not a semaphore
        ready = CTX.Event()
        proc = CTX.Process(target=lock_holder_main, args=(replay.handle(), ready))
        proc.start()
        assert ready.wait(60)
        done = threading.Event()
        inserter = threading.Thread(target=lambda: (replay.insert(make_batch(0, [4])), done.set()), daemon=True)
        inserter.start()
        assert not done.wait(0.5)  # the lock really is held by the child
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        assert done.wait(30), "the insert stayed blocked after the lock holder died"
        assert replay.total_inserted == 5
        assert_untorn(replay.sample(100, np.random.default_rng(0)), writers=1)
        assert shm_entries(run_id) == []
    del ready
    gc.collect()  # the test's own Event (its semaphores) is unlinked by its finalizer
    assert named and not {f"sem.{name.lstrip('/')}" for name in named} & set(os.listdir(SHM_DIR))


def test_queue_transfer_round_trip():
    queue = QueueTransfer.create(4096, FIELDS, run_id=new_run_id(), ctx=CTX)
    try:
        with pytest.raises(ValueError, match="empty"):
            queue.sample(4)
        with pytest.raises(ValueError, match="missing"):
            queue.insert({"seq": np.arange(3)})
        start = CTX.Event()
        count = 500
        procs = [CTX.Process(target=writer_main, args=(queue.handle(), w, count, start, 0.0)) for w in range(2)]
        for p in procs:
            p.start()
        start.set()
        moved, spent, deadline = 0, 0.0, time.monotonic() + 60
        while queue.total_inserted < 2 * count and time.monotonic() < deadline:
            n, seconds = queue.drain(timeout=0.1)
            moved, spent = moved + n, spent + seconds
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
        assert moved == queue.total_inserted == queue.size == 2 * count and spent > 0
        assert queue.snapshot_counts()["per_writer"] == [count, count]
        content = queue.snapshot()
        assert_untorn(content, writers=2, per_writer=count)
        keys = content["writer"].astype(np.int64) * count + content["seq"]
        np.testing.assert_array_equal(np.sort(keys), np.arange(2 * count))
        batch = queue.sample(256, np.random.default_rng(0))
        assert batch["payload"].shape == (256, PAYLOAD)
        assert_untorn(batch, writers=2, per_writer=count)
        assert queue.memory_bytes == sum(4096 * math.prod(shape) * np.dtype(d).itemsize
                                         for shape, d in FIELDS.values())
        # Local insert goes through the queue too; drain honours max_items.
        queue.insert(make_batch(0, [0]))
        queue.insert(make_batch(0, [1]))
        assert queue.drain(max_items=1, timeout=5.0)[0] == 1
        assert queue.drain(timeout=5.0)[0] == 1
    finally:
        queue.close()
        queue.unlink()


TRACKER_SCRIPT = textwrap.dedent("""
    import multiprocessing, os, sys, uuid
    import numpy as np
    sys.path.insert(0, {root!r})
    from systems.spreeze.shared_replay import SharedReplay
    from tests.systems.spreeze.test_spreeze_shared_replay import FIELDS, writer_main

    if __name__ == "__main__":
        for method in ("spawn", "forkserver"):
            ctx = multiprocessing.get_context(method)
            replay = SharedReplay.create(256, FIELDS, run_id="test" + uuid.uuid4().hex[:12])
            start = ctx.Event()
            procs = [ctx.Process(target=writer_main, args=(replay.handle(), w, 100, start, 0.0)) for w in range(2)]
            for p in procs:
                p.start()
            start.set()
            for p in procs:
                p.join()
                assert p.exitcode == 0
            assert replay.total_inserted == 200
            replay.sample(64, np.random.default_rng(0))
            replay.unlink()
        print("OK")
""")


@linux_shm
def test_no_resource_tracker_warnings():
    """Run in a fresh interpreter so the resource tracker's exit (where leak warnings and KeyErrors appear) is
    observed: children of both start methods attach, write and exit, and nobody complains."""
    script = TRACKER_SCRIPT.format(root=ROOT)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "OK"
    for bad in ("leaked", "Traceback", "KeyError", "Warning"):
        assert bad not in out.stderr, out.stderr
