"""The terminal's progress line: the estimated time left comes from the recent rate (not the average since the
start, which counts the first compile), is capped by --time_limit, and reads as a duration."""

import collections

import pytest

from systems.common.outputs import eta_seconds, format_duration
from tests.fixtures import REPO_ROOT


def test_eta_uses_the_recent_rate_not_the_average_since_start():
    recent = collections.deque(maxlen=3)
    for wall, steps in [(30.0, 1_000), (31.0, 2_000), (32.0, 3_000), (33.0, 4_000)]:  # 30 s compile, then 1k/s
        recent.append((wall, steps))
    assert eta_seconds(recent, total_steps=10_000) == 6.0  # 6,000 steps left at 1,000/s (not 4,000 / 33 s)
    assert eta_seconds(recent, total_steps=4_000) == 0.0


def test_eta_is_unknown_without_a_rate_and_capped_by_the_time_limit():
    assert eta_seconds([(5.0, 100)], total_steps=1_000) is None
    assert eta_seconds([(5.0, 100), (5.0, 100)], total_steps=1_000) is None  # no progress yet
    assert eta_seconds([(5.0, 100)], total_steps=1_000, time_limit=60.0) == 55.0
    assert eta_seconds([(10.0, 0), (20.0, 100)], total_steps=1_000_000, time_limit=60.0) == 40.0
    assert eta_seconds([(10.0, 0), (90.0, 100)], total_steps=1_000, time_limit=60.0) == 0.0


def test_durations_read_as_seconds_minutes_hours():
    assert [format_duration(s) for s in (None, 0.4, 45, 59.6, 725, 3599, 3600, 11_220)] == [
        "n/a", "0s", "45s", "1m00s", "12m05s", "59m59s", "1h00m", "3h07m"]


@pytest.mark.slow
def test_a_mujoco_run_prints_no_warning(tmp_path):
    """No warning a user cannot act on: a MuJoCo run's terminal (stdout and stderr) holds none."""
    import os
    import subprocess
    import sys

    root = REPO_ROOT
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    result = subprocess.run(
        [sys.executable, "-m", "launch.hts", "--env=Hopper-v4", "--total_steps=2048", "--eval_episodes=1",
         f"--logdir={tmp_path / 'run'}"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert "warn" not in output.lower(), output
    assert "eta " in output  # the progress line with the time left
