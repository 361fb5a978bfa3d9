"""The per-stage profile (`systems.common.profile`): stages add up to a thread's wall time, the shares of a role add
up to one, the verdict names the deciding role's largest stage (or a saturated learner), and real runs log the
columns and write the breakdown and the hardware card."""

import csv
import os
import threading
import time
import types

import pytest

from systems.common import hardware
from systems.common import profile as profile_lib
from tests.fixtures import read_summary, tiny_hts


def _profile(**kwargs) -> profile_lib.Profile:
    bounds = {"env": profile_lib.Bound("simulator-bound", "more cores"),
              "wait": profile_lib.Bound("learner-bound", "a larger alpha")}
    return profile_lib.Profile({"actors": ("env", "wait"), "learner": ("update",)}, "actors", bounds, **kwargs)


def test_nested_stages_charge_each_moment_once_and_add_up_to_the_wall_time(monkeypatch):
    now = [100.0]  # a clock the test moves by hand: exact shares, whatever the machine's load
    monkeypatch.setattr(profile_lib, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))  # this module's
    profile = _profile()
    start = now[0]
    clock = profile.bind("actors")
    try:
        with profile_lib.stage("env"):
            now[0] += 0.03
            with profile_lib.stage("wait"):  # inside env: charged to wait only
                now[0] += 0.05
        now[0] += 0.01  # outside every stage: other
        seconds = clock.seconds()
    finally:
        profile.unbind()
    assert seconds["wait"] == pytest.approx(0.05)
    assert seconds["env"] == pytest.approx(0.03)
    assert seconds["other"] == pytest.approx(0.01)
    assert sum(seconds.values()) == pytest.approx(now[0] - start)


def test_a_thread_without_a_clock_records_nothing():
    profile = _profile()
    with profile_lib.stage("env"):
        pass
    assert profile.seconds() == {}
    assert profile_lib.current() is None


def test_shares_of_each_role_add_up_to_one_and_come_at_most_once_per_interval():
    profile = _profile(row_every_s=3600.0)

    def learner():
        with profile.thread("learner"):
            with profile_lib.stage("update"):
                time.sleep(0.02)

    worker = threading.Thread(target=learner)
    worker.start()
    worker.join()
    profile.bind("actors")
    try:
        with profile_lib.stage("env"):
            time.sleep(0.02)
        row = profile.shares()
        assert profile.shares() == {}  # within the interval: no second row
    finally:
        profile.unbind()
    assert set(row) == set(profile.columns())
    for role in ("actors", "learner"):
        shares = [v for k, v in row.items() if k.startswith(f"time/{role}/")]
        assert min(shares) >= 0 and sum(shares) == pytest.approx(1.0)
    assert row["time/learner/update"] > 0.9


def test_the_verdict_is_the_deciding_roles_largest_stage_unless_the_learner_is_saturated():
    saturated = {"learner": ("update", profile_lib.Bound("learner-bound", "another device"))}
    for learner_busy, expected in ((0.05, "simulator-bound"), (0.3, "learner-bound")):
        profile = _profile(saturated=saturated)

        def learner(busy=learner_busy, profile=profile):
            with profile.thread("learner"):
                with profile_lib.stage("update"):
                    time.sleep(busy)
                time.sleep(0.3 - busy if busy < 0.3 else 0.0)

        worker = threading.Thread(target=learner)
        worker.start()
        profile.bind("actors")
        try:
            with profile_lib.stage("env"):
                time.sleep(0.2)
            with profile_lib.stage("wait"):
                time.sleep(0.05)
        finally:
            profile.unbind()
        worker.join()
        bound = profile.breakdown()["bound"]
        assert bound["verdict"] == expected, bound
        assert any(expected in line for line in profile_lib.describe(profile.breakdown()))


def test_the_hardware_card_names_the_machine():
    card = hardware.card()
    assert card["cores"] >= 1 and card["cpu"]
    assert card["backend"] == "cpu" and card["devices"]
    assert card["versions"]["jax"] and card["versions"]["envpool"]
    assert card["glibc_tunables"] == os.environ.get("GLIBC_TUNABLES", "")
    assert "cores" in hardware.describe(card)


def test_two_processors_of_one_masked_name_are_told_apart():
    """A cloud's "AMD EPYC" was a Zen 3 (AVX2) one day and another processor the next; the plan cache and the card
    must not take one for the other."""
    zen3 = "processor\t: 0\nmodel name\t: AMD EPYC\ncpu family\t: 25\nmodel\t\t: 1\nflags\t\t: fpu sse4_2 avx avx2\n"
    zen4 = zen3.replace("model\t\t: 1", "model\t\t: 17").replace("avx2", "avx2 avx512f avx512bw")
    second = "\n\nprocessor\t: 1\nmodel name\t: Other\n"
    assert hardware.describe_cpuinfo(zen3 + second) == "AMD EPYC (family 25 model 1, AVX2)"
    assert hardware.describe_cpuinfo(zen4) == "AMD EPYC (family 25 model 17, AVX512F)"
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd sve\n"
    assert hardware.describe_cpuinfo(arm).endswith("(SVE)")
    assert hardware.describe_cpuinfo("model name\t: Plain CPU\n") == "Plain CPU"


def test_an_hts_run_logs_every_threads_stages_and_names_its_bound(tmp_path):
    from systems.hts import system as hts

    config = tiny_hts(tmp_path / "run", total_steps=40 * 64, eval_every=0, checkpoint_every=0)
    hts.run(config)
    summary = read_summary(tmp_path / "run")
    roles = summary["profile"]["roles"]
    assert set(roles) == {"actors", "learner", "main"}
    for role, entry in roles.items():
        assert entry["seconds"] > 0 and sum(entry["shares"].values()) == pytest.approx(1.0), role
    # The main thread's clock starts with the monitor, as the run's wall time does.
    assert roles["main"]["seconds"] == pytest.approx(summary["wall_time"], rel=0.05)
    assert summary["profile"]["bound"]["verdict"].endswith("-bound")
    assert summary["hardware"]["cores"] >= 1
    with open(tmp_path / "run" / "progress.csv") as f:
        rows = [row for row in csv.DictReader(f) if row["time/learner/update"]]
    assert rows, "no progress row has the stage columns"
    for row in rows:
        for role in ("actors", "learner", "main"):
            shares = [float(v) for k, v in row.items() if k.startswith(f"time/{role}/")]
            assert min(shares) >= 0 and sum(shares) == pytest.approx(1.0, abs=1e-4)


def test_the_verdict_reads_the_steady_state_after_the_first_update():
    profile = _profile()
    profile.bind("actors")
    try:
        with profile_lib.stage("wait"):  # start-up: compiling, say
            time.sleep(0.15)
        profile.mark_steady()
        with profile_lib.stage("env"):
            time.sleep(0.05)
        breakdown = profile.breakdown()
    finally:
        profile.unbind()
    assert breakdown["roles"]["actors"]["shares"]["wait"] > 0.6  # over the whole run
    assert breakdown["steady"]["actors"]["shares"]["env"] > 0.8
    assert breakdown["bound"]["verdict"] == "simulator-bound" and breakdown["bound"]["steady"]
    assert "after the first update" in profile_lib.describe(breakdown)[-1]
