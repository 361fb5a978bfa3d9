"""The learning benchmark's bookkeeping for runs that span sessions: a resumed peer's parts join into one curve, a
resume asks rl-zoo3 for the remaining steps from the checkpoint, and every part of a run is metered to the end."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import learning, zoo_resumable
from benchmarks.common import process_cpu_s


def _write_part(folder, eval_steps, returns, episode_ends):
    """An rl-zoo3 experiment folder: evaluations.npz (10 episodes each) and a monitor file of (t, length) rows."""
    os.makedirs(folder)
    np.savez(os.path.join(folder, "evaluations.npz"), timesteps=np.array(eval_steps),
             results=np.repeat(np.array(returns, dtype=float)[:, None], 10, axis=1))
    with open(os.path.join(folder, "0.monitor.csv"), "w") as f:
        f.write('#{"t_start": 0, "env_id": "Pendulum-v1"}\nr,l,t\n')
        f.writelines(f"-1.0,{length},{t}\n" for t, length in episode_ends)


def test_a_resumed_peers_parts_join_into_one_curve(tmp_path):
    run = tmp_path / "run"
    # Part 1 evaluated at 2,500 after its checkpoint at 2,000 and was killed; part 2 resumed from 2,000.
    _write_part(run / "sac" / "Pendulum-v1_1", [1000, 2000, 2500], [-900, -500, -400],
                [(10.0, 1000), (20.0, 1000), (25.0, 500)])
    _write_part(run / "sac" / "Pendulum-v1_2", [2500, 3000], [-300, -200], [(4.0, 500), (8.0, 500)])
    (run / "zoo_parts.json").write_text(json.dumps([
        dict(folder="sac/Pendulum-v1_1", start_step=0), dict(folder="sac/Pendulum-v1_2", start_step=2000)]))

    curve = learning.peer_curve(str(run), "sac")

    np.testing.assert_array_equal(curve[:, 0], [1000, 2000, 2500, 3000])  # part 1's 2,500 was lost with it
    np.testing.assert_allclose(curve[:, 2], [-900, -500, -300, -200])
    np.testing.assert_allclose(curve[:, 1], [10.0, 20.0, 25.0 + 4.0, 25.0 + 8.0])  # part 2 after part 1's 25 s


def test_a_peer_run_from_before_the_parts_file_reads_its_one_folder(tmp_path):
    _write_part(tmp_path / "dqn" / "CartPole-v1_1", [500, 1000], [20, 40], [(1.0, 500), (2.0, 500)])
    curve = learning.peer_curve(str(tmp_path), "dqn")
    np.testing.assert_allclose(curve, [[500, 1.0, 20], [1000, 2.0, 40]])


def test_a_resume_asks_rl_zoo3_for_the_remaining_steps_from_the_checkpoint(tmp_path):
    args = ["--algo", "sac", "--env", "Hopper-v4", "--seed", "2", "-n", "300000", "-f", str(tmp_path)]
    fresh, run_dir, every, start = zoo_resumable.plan(["--checkpoint_every=30000", *args])
    assert (fresh, run_dir, every, start) == (args, str(tmp_path), 30000, 0)

    (tmp_path / "resume.json").write_text(json.dumps(dict(step=90000, checkpoint="checkpoint_000000090000")))
    resumed, _, _, start = zoo_resumable.plan(["--checkpoint_every=30000", "--resume", *args])
    assert start == 90000
    assert resumed == ["--algo", "sac", "--env", "Hopper-v4", "--seed", "90002", "-n", "210000", "-f",
                       str(tmp_path), "-i", str(tmp_path / "checkpoint_000000090000" / "model.zip")]


@pytest.mark.parametrize("argv, message", [
    (["-n", "10", "-f", "x"], "--checkpoint_every=N"),
    (["--checkpoint_every=0", "-n", "10"], "--checkpoint_every=N"),
    (["--checkpoint_every=5", "-f", "x"], "-n (the run's total env steps)"),
    (["--checkpoint_every=5", "--resume", "-n", "10", "-f", "/nonexistent"], "has no resume.json"),
])
def test_bad_driver_arguments_exit_with_one_line(argv, message):
    with pytest.raises(SystemExit, match=message.replace("(", r"\(").replace(")", r"\)")):
        zoo_resumable.plan(argv)


def test_each_part_of_a_run_is_metered_and_earlier_parts_kept(tmp_path):
    path = str(tmp_path / "run.parts.json")
    earlier = [dict(wall_s=100.0, cpu_s=150.0, mean_load=2.0)]
    with learning.PartMeter(path, earlier, period_s=0.05) as meter:
        proc = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                                 "while time.process_time() - t < 0.5: pass"])
        meter.watch(proc)
        proc.wait()
    parts = json.loads(open(path).read())
    assert parts[0] == earlier[0]
    assert len(parts) == 2
    assert parts[1]["cpu_s"] >= 0.5 and parts[1]["wall_s"] >= 0.5


def test_a_live_process_cpu_time_is_read_while_it_runs():
    proc = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                             "while time.process_time() - t < 0.4: pass\ntime.sleep(30)"])
    try:
        cpu = 0.0
        for _ in range(100):  # until it has spun 0.4 CPU-s, then it sleeps
            cpu = process_cpu_s(proc.pid)
            if cpu >= 0.4:
                break
            subprocess.run(["sleep", "0.1"])
        assert 0.4 <= cpu < 5.0
    finally:
        proc.kill()
        proc.wait()
    assert process_cpu_s(proc.pid) == 0.0


def _results(root, monkeypatch):
    results = root / "benchmarks" / "results"
    (results / "learning").mkdir(parents=True)
    monkeypatch.setattr(learning, "ROOT", str(root))
    monkeypatch.setattr(learning, "RUNS_CSV", str(results / "learning_cpu_runs.csv"))
    monkeypatch.setattr(learning, "CURVES_DIR", str(results / "learning"))
    return results


def _row(task, side, seed, final):
    return dict({field: "" for field in learning.RUN_FIELDS}, task=task, side=side, seed=str(seed),
                final_metric=str(final), machine="AMD EPYC, 2 cores")


def test_landing_a_worktrees_runs_replaces_them_in_place_with_their_curves(tmp_path, monkeypatch):
    here = _results(tmp_path / "main", monkeypatch)
    there = tmp_path / "worktree" / "benchmarks" / "results"
    (there / "learning" / "Hopper-v4_sac").mkdir(parents=True)
    learning._write_runs([_row("Hopper-v4 sac", "pal_td3", 0, 1.0), _row("Hopper-v4 sac", "pal_td3", 1, 2.0)])
    learning._write_runs([_row("Hopper-v4 sac", "pal_td3", 0, 10.0), _row("Hopper-v4 sac", "pal_td3", 2, 30.0),
                          _row("Hopper-v4 sac", "pal_sac", 0, 99.0)], str(there / "learning_cpu_runs.csv"))
    for seed in (0, 2):
        (there / "learning" / "Hopper-v4_sac" / f"pal_td3-s{seed}.csv").write_bytes(b"env_steps\r\n%d\r\n" % seed)

    keys = [("Hopper-v4 sac", "pal_td3", seed) for seed in (0, 1, 2)]
    assert learning.land_runs(str(tmp_path / "worktree"), keys) == [keys[0], keys[2]]  # seed 1 unfinished there

    rows = learning.read_runs()
    assert [(r["seed"], r["final_metric"]) for r in rows] == [("0", "10.0"), ("1", "2.0"), ("2", "30.0")]
    assert b"\n" not in (here / "learning_cpu_runs.csv").read_bytes().replace(b"\r\n", b"")  # csv's own endings
    assert (here / "learning" / "Hopper-v4_sac" / "pal_td3-s2.csv").read_bytes() == b"env_steps\r\n2\r\n"


def test_the_table_names_each_sides_machines():
    xeon = "Intel(R) Xeon(R) Processor (family 6 model 167, AVX512F), 2 cores"
    assert learning.short_machine(xeon) == "Intel Xeon"
    assert learning.short_machine("AMD EPYC (family 25 model 1, AVX2), 2 cores") == "AMD EPYC"
    assert learning.short_machine("AMD EPYC, 2 cores") == "AMD EPYC"
    assert learning.short_machine("") == "n/a"
    rows = [dict(machine=xeon), dict(machine="AMD EPYC, 2 cores"), dict(machine="AMD EPYC (family 25 model 1)")]
    assert learning.machines_text(rows[:1]) == "Intel Xeon"
    assert learning.machines_text(rows) == "AMD EPYC x2, Intel Xeon x1"
