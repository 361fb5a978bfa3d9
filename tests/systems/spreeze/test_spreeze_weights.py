"""Weights by file (systems/spreeze/weights.py): round trip, pruning, atomicity, a racing writer, broken files."""

import multiprocessing as mp
import os
import time
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
import pytest

from systems.spreeze import weights as W


class OptState(NamedTuple):  # shaped like optax's ScaleByAdamState
    count: Any
    mu: Any
    nu: Any


def _payload(v: float, n: int = 8) -> dict:
    params = {"actor": {"w": np.full((n, n), v, np.float32), "b": np.full((n,), v, np.float32)},
              "critic": {"w": jnp.full((n, 2), v, jnp.float32)}}
    return {"params": params,
            "opt": OptState(count=np.int32(v), mu={"w": np.full((n, n), v, np.float32)}, nu=np.full((3,), v))}


def _template(n: int = 8) -> dict:
    return _payload(0, n)


def _assert_filled(payload: dict, v: float) -> None:
    leaves = [payload["params"]["actor"]["w"], payload["params"]["actor"]["b"], payload["params"]["critic"]["w"],
              payload["opt"].count, payload["opt"].mu["w"], payload["opt"].nu]
    for leaf in leaves:
        assert np.all(np.asarray(leaf) == v), (v, leaf)


def test_round_trip_nested_dict_and_namedtuple(tmp_path):
    d = str(tmp_path / "w")
    path = W.publish(d, 7, _payload(7), meta={"step": 70, "note": "x"})
    assert os.path.basename(path) == "weights_000000000007.msgpack"
    assert W.list_versions(d) == [(7, path)]
    assert W.latest(d) == (7, path)
    payload, meta = W.load(path, _template())
    assert meta == {"step": 70, "note": "x"}
    assert isinstance(payload["opt"], OptState)
    _assert_filled(payload, 7)
    assert payload["params"]["actor"]["w"].dtype == np.float32 and payload["params"]["critic"]["w"].shape == (8, 2)
    assert os.listdir(d) == ["weights_000000000007.msgpack"]  # no temporary file left


def test_missing_directory_is_empty(tmp_path):
    d = str(tmp_path / "nope")
    assert W.list_versions(d) == [] and W.latest(d) is None and W.load_latest(d, _template()) is None
    assert W.WeightsWatcher(d, _template()).poll() is None


def test_keep_prunes_oldest(tmp_path):
    d = str(tmp_path)
    for v in range(1, 7):
        W.publish(d, v, _payload(v), keep=3)
    assert [v for v, _ in W.list_versions(d)] == [4, 5, 6]
    W.publish(d, 6, _payload(6), meta={"again": True}, keep=1)  # republishing the newest is allowed
    assert [v for v, _ in W.list_versions(d)] == [6]
    assert W.load_latest(d, _template())[2] == {"again": True}


def test_versions_going_backwards_rejected(tmp_path):
    W.publish(str(tmp_path), 5, _payload(5))
    with pytest.raises(ValueError, match="already holds version 5"):
        W.publish(str(tmp_path), 4, _payload(4))
    with pytest.raises(ValueError):
        W.publish(str(tmp_path), -1, _payload(4))
    with pytest.raises(ValueError):
        W.publish(str(tmp_path), 6, _payload(6), keep=0)


def test_failed_rename_leaves_previous_intact(tmp_path, monkeypatch):
    d = str(tmp_path)
    W.publish(d, 1, _payload(1))
    before = open(W.weights_path(d, 1), "rb").read()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(W.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        W.publish(d, 2, _payload(2))
    monkeypatch.undo()
    assert sorted(os.listdir(d)) == ["weights_000000000001.msgpack"]
    assert open(W.weights_path(d, 1), "rb").read() == before
    assert W.load_latest(d, _template())[0] == 1
    assert W.WeightsWatcher(d, _template()).poll()[0] == 1


def test_stray_temp_files_of_dead_writers_removed_live_ones_kept(tmp_path):
    d = str(tmp_path)
    proc = mp.get_context("spawn").Process(target=int)
    proc.start()
    proc.join()
    dead = os.path.join(d, f".weights-tmp-{proc.pid}-abc123")
    live = os.path.join(d, f".weights-tmp-{os.getppid()}-def456")  # our parent: alive while we run
    mine = os.path.join(d, f".weights-tmp-{os.getpid()}-0a0b0c")  # another thread of ours might be writing it
    old_live = os.path.join(d, f".weights-tmp-{os.getppid()}-0d0e0f")  # alive pid but untouched for ages: pid reuse
    for p in (dead, live, mine, old_live):
        open(p, "wb").write(b"partial")
    os.utime(old_live, (time.time() - 2 * W.STALE_TMP_S,) * 2)
    assert W.list_versions(d) == []  # temp files never look like versions
    W.publish(d, 1, _payload(1))
    assert not os.path.exists(dead) and not os.path.exists(old_live)
    assert os.path.exists(live) and os.path.exists(mine)


def test_truncated_file_skipped(tmp_path):
    d = str(tmp_path)
    W.publish(d, 1, _payload(1))
    W.publish(d, 2, _payload(2))
    good = open(W.weights_path(d, 2), "rb").read()
    with open(W.weights_path(d, 3), "wb") as f:  # a broken disk: half a file under the final name
        f.write(good[: len(good) // 2])
    with pytest.raises(ValueError, match="weights_000000000003"):
        W.load(W.weights_path(d, 3), _template())
    version, payload, _ = W.load_latest(d, _template())
    assert version == 2
    _assert_filled(payload, 2)
    watcher = W.WeightsWatcher(d, _template())
    version, payload = watcher.poll()
    assert version == 2
    _assert_filled(payload, 2)
    assert watcher.poll() is None  # the broken file is not retried into an error, nothing newer
    W.publish(d, 4, _payload(4))
    assert watcher.poll()[0] == 4 and watcher.poll() is None


def test_wrong_template_is_a_clear_error(tmp_path):
    path = W.publish(str(tmp_path), 1, _payload(1, n=8))
    with pytest.raises(ValueError, match="shape"):
        W.load(path, _template(n=4))
    with pytest.raises(ValueError, match="corrupt or incompatible"):
        W.load(path, {"other": np.zeros(2)})
    with open(path, "wb") as f:
        f.write(b"\x00garbage")
    with pytest.raises(ValueError, match="corrupt"):
        W.load(path, _template())


def test_watcher_falls_back_when_newest_vanishes(tmp_path, monkeypatch):
    d = str(tmp_path)
    W.publish(d, 1, _payload(1))
    W.publish(d, 2, _payload(2))
    watcher = W.WeightsWatcher(d, _template())
    real_load = W.load

    def racing_load(path, template):  # the writer prunes version 2 right after the watcher listed it
        if path.endswith("weights_000000000002.msgpack") and os.path.exists(path):
            os.remove(path)
        return real_load(path, template)

    monkeypatch.setattr(W, "load", racing_load)
    assert watcher.poll()[0] == 1
    assert watcher.poll() is None


def test_watcher_is_cheap_when_nothing_changed(tmp_path, monkeypatch):
    d = str(tmp_path)
    W.publish(d, 1, _payload(1))
    watcher = W.WeightsWatcher(d, _template())
    assert watcher.poll()[0] == 1
    assert watcher.meta == {}
    opened = []
    monkeypatch.setattr(W, "load", lambda *a: opened.append(a))
    for _ in range(100):
        assert watcher.poll() is None
    assert opened == []


def _writer(directory: str, seconds: float, started, done) -> None:
    version = 0
    deadline = time.monotonic() + seconds
    started.set()
    while time.monotonic() < deadline:
        version += 1
        W.publish(directory, version, _payload(version, n=256), meta={"version": version}, keep=2)
    done.set()


def test_concurrent_writer_and_polling_reader(tmp_path):
    d = str(tmp_path)
    ctx = mp.get_context("spawn")
    started, done = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_writer, args=(d, 2.0, started, done))
    proc.start()
    try:
        assert started.wait(60), "writer did not start"
        watcher = W.WeightsWatcher(d, _template(n=256))
        seen, resumed = [], 0
        while True:
            finished = done.is_set()
            got = watcher.poll()
            if got is not None:
                version, payload = got
                _assert_filled(payload, version)
                assert watcher.meta == {"version": version}
                seen.append(version)
            if len(seen) % 10 == 1:  # --resume readers race the writer too
                out = W.load_latest(d, _template(n=256))
                if out is not None:
                    _assert_filled(out[1], out[0])
                    assert out[2] == {"version": out[0]}
                    resumed += 1
            if finished:
                break
        proc.join(30)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()
    final = W.latest(d)[0]
    assert seen and seen == sorted(set(seen)), seen[:20]
    assert seen[-1] == final  # the last poll after the writer stopped saw the final version
    assert len(seen) >= 3 and resumed >= 1
    assert len(W.list_versions(d)) == 2
    assert [n for n in os.listdir(d) if not n.startswith("weights_")] == []
