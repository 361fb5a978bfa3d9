"""Automatic tuning (systems/spreeze/tuning.py) on synthetic throughput curves."""

import json
import math
import os

import pytest

from systems.spreeze.tuning import (
    TuningResult,
    format_table,
    save_tuning,
    to_json,
    tune_batch_size,
    tune_num_samplers,
)


class Counting:
    """Wraps a synthetic curve and records every value it was measured at."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __call__(self, x):
        self.calls.append(x)
        return self.fn(x)


def saturating(b):  # GPU saturation: frames/s = peak * b / (b + half)
    return 4e5 * b / (b + 4096)


def test_batch_saturating_curve_stops_at_knee():
    m = Counting(saturating)
    res = tune_batch_size(m)
    # ratio(b -> 2b) = 2 (b + k) / (2b + k) with k = 4096: 8192 -> 16384 gains 1.2x (accepted), 16384 -> 32768 gains
    # 1.111x < 1.15x, so 16384 is kept although 32768 is a little faster.
    assert res.choice == 16384
    assert m.calls == [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    assert [r["status"] for r in res.rows] == ["start"] + ["accepted"] * 6 + ["rejected"]
    assert res.rows[-1]["gain"] == pytest.approx(saturating(32768) / saturating(16384))
    assert res.rows[-1]["gain"] < 1.15 <= res.rows[-2]["gain"]
    assert res.rows[1]["updates_per_s"] == pytest.approx(saturating(512) / 512)
    assert "32768" in res.reason and "1.15" in res.reason


def test_batch_kept_when_gain_just_below_threshold():
    # 1.149x is "faster", but not markedly: the current batch is kept
    res = tune_batch_size(lambda b: 1000.0 * 1.149 ** math.log2(b / 256), maximum=4096)
    assert res.choice == 256 and [r["value"] for r in res.rows] == [256, 512]
    res = tune_batch_size(lambda b: 1000.0 * 1.15 ** math.log2(b / 256), maximum=4096)
    assert res.choice == 4096  # exactly min_gain is accepted


def test_batch_linear_curve_stops_at_maximum():
    m = Counting(lambda b: 10.0 * b)
    res = tune_batch_size(m)
    assert res.choice == 65536 and m.calls == [256 * 2**i for i in range(9)]
    assert "maximum" in res.reason
    m = Counting(lambda b: 10.0 * b)
    res = tune_batch_size(m, start=128, maximum=5000)  # maximum off the geometric grid: not rounded up to
    assert res.choice == 4096 and m.calls[-1] == 4096


def test_batch_memory_limit_stops_early():
    m = Counting(lambda b: 10.0 * b)
    asked = []

    def memory_ok(b):
        asked.append(b)
        return b <= 4096

    res = tune_batch_size(m, memory_ok=memory_ok)
    assert res.choice == 4096
    assert m.calls == [256, 512, 1024, 2048, 4096]  # 8192 never measured
    assert asked == [512, 1024, 2048, 4096, 8192]
    assert res.rows[-1] == {**res.rows[-1], "value": 8192, "status": "skipped", "throughput": None}
    assert "memory" in res.reason


def test_batch_out_of_memory_error_stops_and_others_propagate():
    class ResourceExhausted(RuntimeError):
        pass

    def measure(b):
        if b >= 2048:
            raise ResourceExhausted("RESOURCE_EXHAUSTED: out of memory")
        return 10.0 * b

    res = tune_batch_size(measure, oom_errors=(ResourceExhausted,))
    assert res.choice == 1024 and res.rows[-1]["status"] == "skipped" and "ResourceExhausted" in res.reason
    with pytest.raises(ResourceExhausted):
        tune_batch_size(measure)


def test_batch_fractional_growth_and_extras():
    m = Counting(lambda b: (10.0 * b, {"gpu_use": min(1.0, b / 1000)}))
    res = tune_batch_size(m, start=100, maximum=1000, growth=1.5)
    assert m.calls == [100, 150, 225, 338, 507, 760]
    assert res.choice == 760 and res.rows[2]["gpu_use"] == pytest.approx(0.225)


def sampler_curve(n):  # convex up to 6 samplers (shared-memory batching pays off), then flat: the CPU is saturated
    rate = 1000.0 * min(n, 6) ** 1.2 * (1.01 ** max(0, n - 6))
    return rate, min(1.0, 0.1 * n)


def test_samplers_convex_then_flat_stops_where_gain_falls():
    m = Counting(sampler_curve)
    res = tune_num_samplers(m, maximum=16)
    assert res.choice == 6 and m.calls == [1, 2, 3, 4, 5, 6, 7]
    last = res.rows[-1]
    assert last["status"] == "rejected" and last["gain"] == pytest.approx(1.01)
    assert last["required"] == pytest.approx(1 + 0.1 / 6)
    assert res.rows[1]["required"] == pytest.approx(1.1)  # first addition needs exactly min_gain
    assert res.rows[3]["cpu_load"] == pytest.approx(0.4)


def test_samplers_linear_scaling_reaches_maximum():
    # a fixed 1.1x per added sampler would stop at 10 ((n+1)/n < 1.1 beyond); the scaled threshold does not
    m = Counting(lambda n: (1500.0 * n, n / 64))
    res = tune_num_samplers(m, maximum=32)
    assert res.choice == 32 and m.calls == list(range(1, 33)) and "maximum" in res.reason


def test_samplers_cpu_cap_stops_even_if_throughput_rises():
    m = Counting(lambda n: (1500.0 * n, n / 8))
    res = tune_num_samplers(m, maximum=32, max_cpu_load=0.9)
    assert res.choice == 7 and m.calls == list(range(1, 9))  # 8 samplers: 100 % load > 90 %
    assert res.rows[-1]["status"] == "rejected" and res.rows[-1]["gain"] > 1.1 and "CPU" in res.reason


def test_samplers_start_already_over_cap():
    m = Counting(lambda n: (1000.0 * n, 0.95))
    res = tune_num_samplers(m, start=2, maximum=8)
    assert res.choice == 2 and m.calls == [2] and "already" in res.reason


def test_each_value_measured_once():
    for fn, kw in ((saturating, {}), (lambda b: 10.0 * b, {"maximum": 8192})):
        m = Counting(fn)
        res = tune_batch_size(m, **kw)
        assert len(m.calls) == len(set(m.calls)) == len(res.rows)
    m = Counting(sampler_curve)
    res = tune_num_samplers(m, start=3, maximum=12)
    assert m.calls == [3, 4, 5, 6, 7] and len(res.rows) == 5


@pytest.mark.parametrize(
    "kwargs",
    [{"start": 512, "maximum": 256}, {"growth": 1}, {"growth": 0.5}, {"start": 0}, {"min_gain": 0.9},
     {"start": 256.0}, {"maximum": True}],
)
def test_batch_bad_arguments(kwargs):
    m = Counting(saturating)
    with pytest.raises(ValueError):
        tune_batch_size(m, **kwargs)
    assert m.calls == []


@pytest.mark.parametrize(
    "kwargs",
    [{"start": 5, "maximum": 4}, {"start": 0, "maximum": 4}, {"maximum": 4, "min_gain": 0.5},
     {"maximum": 4, "max_cpu_load": 0}, {"maximum": 4, "max_cpu_load": 1.5}],
)
def test_samplers_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        tune_num_samplers(sampler_curve, **kwargs)


def test_bad_measurements_raise():
    with pytest.raises(ValueError, match="measure"):
        tune_batch_size(lambda b: float("nan"))
    with pytest.raises(ValueError):
        tune_batch_size(lambda b: -1.0)
    with pytest.raises(ValueError):
        tune_batch_size(lambda b: (1.0, 2.0))
    with pytest.raises(ValueError):
        tune_num_samplers(lambda n: 1000.0 * n, maximum=4)  # no CPU load


def test_table_json_and_run_dir(tmp_path):
    results = {
        "batch_size": tune_batch_size(lambda b: (saturating(b), {"gpu_use": min(0.95, b / 20000)})),
        "num_samplers": tune_num_samplers(sampler_curve, maximum=16),
    }
    table = format_table(results)
    lines = table.splitlines()
    assert lines[0].startswith("| parameter | value | throughput (frames/s) | updates/s | CPU use | GPU use |")
    chosen = [line for line in lines if line.endswith("| **yes** |")]
    assert len(chosen) == 2
    assert chosen[0].startswith("| batch_size | 16384 |") and chosen[1].startswith("| num_samplers | 6 |")
    assert len([line for line in lines if line.startswith("| batch_size |")]) == len(results["batch_size"].rows)
    assert "| 3.20E+05 |" in table  # large rates in the paper's E notation
    assert "batch_size = 16384: " in table and "num_samplers = 6: " in table

    data = json.loads(to_json(results))
    assert data["batch_size"]["choice"] == 16384 and data["num_samplers"]["rows"][0]["cpu_load"] == pytest.approx(0.1)
    assert TuningResult(**data["num_samplers"]) == results["num_samplers"]

    json_path, md_path = save_tuning(str(tmp_path / "run"), results)
    assert json.load(open(json_path)) == data and open(md_path).read() == table
    assert sorted(os.listdir(tmp_path / "run")) == ["tuning.json", "tuning.md"]
    print("\n" + table)
