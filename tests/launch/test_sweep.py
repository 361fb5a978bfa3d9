"""`python -m launch.sweep` and `analysis/grid.py`: grid expansion and run names, argument splitting,
validation, command lines, finished-run detection, manifest compatibility, the runner (parallel limit, failures,
Ctrl-C) with stand-in children, and one real sweep of two tiny HTS CartPole runs, rerun (all skipped) and resumed."""

import io
import json
import os
import signal
import subprocess
import sys
import threading

import pytest
from absl.testing import flagsaver

from analysis import grid as grid_lib
from launch import sweep
from tests.faults import start_run_dir_holder
from tests.fixtures import REPO_ROOT

ROOT = REPO_ROOT


# --- grids, names, seeds --------------------------------------------------------------------------------------------


def test_parse_sweep_values_and_list_values():
    assert grid_lib.parse_sweep("num_actors=1,4,8") == ("num_actors", ("1", "4", "8"))
    assert grid_lib.parse_sweep("gamma= 0.99 , 0.9") == ("gamma", ("0.99", "0.9"))
    assert grid_lib.parse_sweep("hidden_sizes=64,64;256,256") == ("hidden_sizes", ("64,64", "256,256"))
    assert grid_lib.parse_sweep("step_time=const:0.01") == ("step_time", ("const:0.01",))


@pytest.mark.parametrize(
    "text,message",
    [("num_actors", "expected NAME=V1"), ("--num_actors=1,2", "expected NAME=V1"), ("=1,2", "expected NAME=V1"),
     ("num actors=1", "expected NAME=V1"), ("num_actors=", "empty value"), ("num_actors=1,,2", "empty value"),
     ("num_actors=1,2,1", "repeated value 1")],
)
def test_parse_sweep_rejects_malformed(text, message):
    with pytest.raises(ValueError, match=message):
        grid_lib.parse_sweep(text)


def test_build_grid_rejects_duplicates_and_reserved_flags():
    assert grid_lib.build_grid(["a=1,2", "b=x"]) == (("a", ("1", "2")), ("b", ("x",)))
    with pytest.raises(ValueError, match="swept twice"):
        grid_lib.build_grid(["a=1", "a=2"])
    for name, hint in (("seed", "use --seeds"), ("logdir", "sets it"), ("resume", "sets it")):
        with pytest.raises(ValueError, match=hint):
            grid_lib.build_grid([f"{name}=1,2"])


def test_parse_seeds():
    assert grid_lib.parse_seeds(["2", " 0", "1"]) == (2, 0, 1)
    for values, message in ((["0", "0"], "repeated"), (["x"], "not an integer"), (["-1"], "negative"),
                            ([], "at least one")):
        with pytest.raises(ValueError, match=message):
            grid_lib.parse_seeds(values)


def test_expand_order_product_and_names():
    grid = grid_lib.build_grid(["num_actors=1,4", "sync_interval=16,64,128"])
    runs = grid_lib.expand(grid, (0, 1))
    assert len(runs) == 2 * 3 * 2
    # Seeds outermost, then the --sweep flags in order, the last one fastest.
    assert [r.name for r in runs[:4]] == [
        "num_actors=1.sync_interval=16.seed=0", "num_actors=1.sync_interval=64.seed=0",
        "num_actors=1.sync_interval=128.seed=0", "num_actors=4.sync_interval=16.seed=0",
    ]
    assert runs[6].name == "num_actors=1.sync_interval=16.seed=1"
    assert runs[5].flags == (("num_actors", "4"), ("sync_interval", "128")) and runs[5].seed == 0
    assert len({r.name for r in runs}) == len(runs)
    assert grid_lib.expand(grid, (0, 1)) == runs  # stable
    assert [r.name for r in grid_lib.expand((), (3, 1))] == ["seed=3", "seed=1"]  # seeds only


def test_run_names_are_filesystem_safe_unique_and_bounded():
    assert grid_lib.run_name((("env", "gfootball/academy_3_vs_1"), ("step_time", "exp:0.01")), 2) == (
        "env=gfootball_academy_3_vs_1.step_time=exp_0.01.seed=2")
    assert grid_lib.run_name((("hidden_sizes", "64,64"),), 0) == "hidden_sizes=64,64.seed=0"
    long_a = grid_lib.run_name((("step_time", "const:" + "1" * 300),), 0)
    long_b = grid_lib.run_name((("step_time", "const:" + "1" * 299 + "2"),), 0)
    assert len(long_a) <= 180 and long_a != long_b and "/" not in long_a
    with pytest.raises(ValueError, match="share the run directory"):
        grid_lib.expand(grid_lib.build_grid(["step_time=exp:1,exp/1"]), (0,))


# --- command lines ----------------------------------------------------------------------------------------------------


def test_split_argv_separates_sweep_flags_from_passed_flags():
    args = ["--system=hts", "--env=CartPole-v1", "--sweep", "num_actors=1,2", "--total_steps", "4096",
            "--sweep=gamma=0.9,0.99", "--nodry_run", "-parallel=2", "--quiet", "--verbosity=1", "--", "--seeds=5"]
    mine, passed = sweep.split_argv(args)
    assert mine == ["--system=hts", "--sweep", "num_actors=1,2", "--sweep=gamma=0.9,0.99", "--nodry_run",
                    "-parallel=2"]
    assert passed == ["--env=CartPole-v1", "--total_steps", "4096", "--quiet", "--verbosity=1", "--", "--seeds=5"]


def test_parse_flags_returns_passthrough_and_resets_earlier_values():
    passed = sweep.parse_flags(["sweep", "--system=sync", "--env=CartPole-v1", "--seeds=3,4", "--dry_run"])
    assert passed == ["sweep", "--env=CartPole-v1"]
    assert sweep.SWEEP_FLAGS.system == "sync" and sweep.SWEEP_FLAGS.seeds == ["3", "4"]
    assert sweep.SWEEP_FLAGS.dry_run is True
    sweep.parse_flags(["sweep", "--system=hts"])
    assert sweep.SWEEP_FLAGS.seeds == ["0"] and sweep.SWEEP_FLAGS.dry_run is False


def test_check_passthrough():
    grid = grid_lib.build_grid(["num_actors=1,2"])
    sweep.check_passthrough(["--env=CartPole-v1", "--total_steps", "64", "--quiet"], grid)
    for token, message in (("--seed=3", "use --seeds"), ("--logdir=/tmp/x", "set by the sweep"),
                           ("--noresume", "set by the sweep"), ("--num_actors=4", "both swept and passed")):
        with pytest.raises(ValueError, match=message):
            sweep.check_passthrough(["--env=CartPole-v1", token], grid)


def test_run_args_and_command():
    run = grid_lib.expand(grid_lib.build_grid(["num_actors=4", "sync_interval=64"]), (2,))[0]
    args = sweep.run_args(["--env=CartPole-v1", "--quiet"], run, "sw/x")
    assert args == ["--env=CartPole-v1", "--quiet", "--num_actors=4", "--sync_interval=64", "--seed=2",
                    "--logdir=sw/x"]
    assert sweep.build_command("hts", args, resume=False, python="py") == ["py", "-m", "launch.hts", *args]
    assert sweep.build_command("spreeze", args, resume=True, python="py")[2:] == ["launch.spreeze", *args, "--resume"]


def test_default_sweep_dir_and_passthrough_value():
    assert sweep.passthrough_value(["--env", "Pong-v5", "--env=CartPole-v1", "--quiet"], "env") == "CartPole-v1"
    assert sweep.passthrough_value(["--env", "Pong-v5", "--quiet"], "env") == "Pong-v5"
    assert sweep.passthrough_value(["--quiet"], "env") is None
    now = 1_700_000_000.0  # mid-November 2023 in every time zone
    runs = os.path.join("runs", "")
    assert sweep.default_sweep_dir("hts", (), ["--env=gfootball/x-v1"], now=now).startswith(
        f"{runs}sweep-hts-gfootball_x-v1-202311")
    assert sweep.default_sweep_dir("pal", (), ["--game=Pong"], now=now).startswith(f"{runs}sweep-pal-Pong-202311")
    swept_env = grid_lib.build_grid(["env=CartPole-v1,Acrobot-v1"])
    assert sweep.default_sweep_dir("hts", swept_env, ["--game=Pong"], now=now).startswith(f"{runs}sweep-hts-202311")


def test_check_against_launcher():
    grid = grid_lib.build_grid(["num_actors=1,x"])
    named = [("num_actors=1.seed=0", ["--num_actors=1"]), ("num_actors=x.seed=0", ["--num_actors=x"])]
    probe = {"flags": ["env", "num_actors", "seed"], "resume": True, "errors": [None, "flag --num_actors=x:\n bad"]}
    with pytest.raises(ValueError, match=r"rejects the flags of run num_actors=x.seed=0: flag --num_actors=x: bad$"):
        sweep.check_against_launcher("hts", grid, named, probe)
    with pytest.raises(ValueError, match=r"has no flag --num_actor \(did you mean --num_actors\?\)"):
        sweep.check_against_launcher("hts", grid_lib.build_grid(["num_actor=1"]), named[:1], probe)
    sweep.check_against_launcher("hts", grid, named[:1], dict(probe, errors=[None]))


def test_probe_main_parses_and_validates_each_command_line(monkeypatch, capsys):
    """What the probe child does, here in-process (flagsaver restores the flags it parses)."""
    argvs = [["--env=CartPole-v1", "--num_envs=4", "--seed=0"], ["--env=CartPole-v1", "--num_envs=0"],
             ["--env=CartPole-v1", "--bogus=1"], ["--env=CartPole-v1", "stray"], ["--num_envs=4"]]
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({"system": "hts", "argvs": argvs})))
    with flagsaver.flagsaver():
        sweep.probe_main()
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("sweep-probe: ")
    answer = json.loads(line[len("sweep-probe: "):])
    assert answer["resume"] is True and {"env", "num_actors", "sync_interval", "seed", "logdir"} <= set(answer["flags"])
    ok, bad_value, unknown, stray, no_env = answer["errors"]
    assert ok is None
    assert "--num_envs must be positive" in bad_value  # the launcher's config validation, not only absl's parse
    assert "bogus" in unknown
    assert stray == "unexpected argument 'stray'"
    assert "exactly one of --game" in no_env


# --- run directories and manifests -----------------------------------------------------------------------------------


def _write(path, text=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_run_state_and_plan_action(tmp_path):
    run_dir = str(tmp_path / "run")
    assert grid_lib.run_state(run_dir) == grid_lib.NEW
    _write(os.path.join(run_dir, "launch.log"), "died at start-up")
    assert grid_lib.run_state(run_dir) == grid_lib.NEW
    _write(os.path.join(run_dir, "summary.json"), "{not json")
    assert grid_lib.run_state(run_dir) == grid_lib.NEW
    _write(os.path.join(run_dir, "checkpoints", "ckpt_000000000064.msgpack"))
    assert grid_lib.run_state(run_dir) == grid_lib.CHECKPOINTED
    _write(os.path.join(run_dir, "summary.json"), json.dumps({"interrupted": True}))
    assert grid_lib.run_state(run_dir) == grid_lib.CHECKPOINTED
    _write(os.path.join(run_dir, "summary.json"), json.dumps({"interrupted": False, "final_metric": 1.0}))
    assert grid_lib.run_state(run_dir) == grid_lib.FINISHED
    spreeze_dir = str(tmp_path / "spreeze")
    _write(os.path.join(spreeze_dir, "checkpoints", "weights_000000000050.msgpack"))
    assert grid_lib.run_state(spreeze_dir) == grid_lib.CHECKPOINTED

    assert sweep.plan_action(grid_lib.FINISHED, supports_resume=True) == sweep.SKIP
    assert sweep.plan_action(grid_lib.CHECKPOINTED, supports_resume=True) == sweep.RESUME
    assert sweep.plan_action(grid_lib.CHECKPOINTED, supports_resume=False) == sweep.START
    assert sweep.plan_action(grid_lib.NEW, supports_resume=True) == sweep.START


def test_clear_run_dir_keeps_only_the_log(tmp_path):
    run_dir = str(tmp_path / "run")
    for name in ("launch.log", "progress.csv", "tb/events", "checkpoints/ckpt_000000000001.msgpack"):
        _write(os.path.join(run_dir, name), "x")
    sweep.clear_run_dir(run_dir)
    assert os.listdir(run_dir) == ["launch.log"]
    sweep.clear_run_dir(str(tmp_path / "missing"))


def test_check_compatible_allows_only_added_points():
    manifest = {"system": "hts", "grid": grid_lib.grid_to_json(grid_lib.build_grid(["a=1,2", "b=x"])),
                "seeds": [0, 1], "passthrough": ["--env=CartPole-v1"], "runs": []}
    same = dict(system="hts", grid=grid_lib.build_grid(["a=1,2", "b=x"]), seeds=(0, 1),
                passthrough=["--env=CartPole-v1"])
    grid_lib.check_compatible(manifest, **same)
    grid_lib.check_compatible(manifest, **dict(same, grid=grid_lib.build_grid(["a=3,1,2", "b=x,y"]), seeds=(0, 1, 2)))
    for change, message in (
        (dict(system="sync"), "sweep of launch.hts, not launch.sync"),
        (dict(passthrough=["--env=Acrobot-v1"]), "passes --env=CartPole-v1"),
        (dict(grid=grid_lib.build_grid(["b=x", "a=1,2"])), "sweeps a, b"),
        (dict(grid=grid_lib.build_grid(["a=1,2"])), "sweeps a, b"),
        (dict(grid=grid_lib.build_grid(["a=1", "b=x"])), "also has --a=2"),
        (dict(seeds=(1,)), "also has seeds 0"),
    ):
        with pytest.raises(ValueError, match=message):
            grid_lib.check_compatible(manifest, **dict(same, **change))


def test_read_manifest(tmp_path):
    assert grid_lib.read_manifest(str(tmp_path)) is None
    _write(str(tmp_path / "sweep.json"), json.dumps({"system": "hts"}))
    with pytest.raises(ValueError, match="not a readable sweep manifest"):
        grid_lib.read_manifest(str(tmp_path))


# --- validation through main (one line, exit 2, nothing created) ----------------------------------------------------


def _main(*args):
    sweep.main(sweep.parse_flags(["launch.sweep", *args]))


@pytest.mark.parametrize(
    "args,message",
    [
        ((), "--system is required"),
        (("--system=hts", "--sweep=num_actors"), "expected NAME=V1"),
        (("--system=hts", "--sweep=seed=1,2"), "use --seeds"),
        (("--system=hts", "--sweep=a=1", "--sweep=a=2"), "swept twice"),
        (("--system=hts", "--logdir=x"), "set by the sweep"),
        (("--system=hts", "--seeds=1,1"), "repeated"),
        (("--system=hts", "--parallel=0"), "--parallel must be at least 1"),
        (("--system=hts", "--parallel=two"), "parallel"),
        (("--system=bogus",), "should be one of"),
    ],
)
def test_main_rejects_bad_input_with_one_line(tmp_path, capsys, args, message):
    sweep_dir = str(tmp_path / "sw")
    with pytest.raises(SystemExit) as exit_info:
        _main(*args, f"--sweep_dir={sweep_dir}", "--env=CartPole-v1")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not os.path.exists(sweep_dir)


def test_main_refuses_a_sweep_dir_of_another_sweep(tmp_path, capsys):
    manifest = {"system": "sync", "grid": [], "seeds": [0], "passthrough": ["--env=CartPole-v1"], "runs": []}
    _write(str(tmp_path / "sweep.json"), json.dumps(manifest))
    with pytest.raises(SystemExit) as exit_info:
        _main("--system=hts", f"--sweep_dir={tmp_path}", "--env=CartPole-v1")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: the sweep_dir's sweep.json is a sweep of launch.sync, not launch.hts")


def test_main_rejects_a_flag_the_launcher_does_not_have(tmp_path, capsys):
    """Real probe: a child imports launch.hts and reads its flags; nothing is launched or created."""
    sweep_dir = str(tmp_path / "sw")
    with pytest.raises(SystemExit) as exit_info:
        _main("--system=hts", "--env=CartPole-v1", "--sweep=num_actor=1,2", f"--sweep_dir={sweep_dir}")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --sweep: launch.hts has no flag --num_actor (did you mean --num_actors?)"]
    assert not os.path.exists(sweep_dir)


def test_dry_run_prints_planned_commands(tmp_path, capsys, monkeypatch):
    requests = []

    def fake_probe(system, argvs):
        requests.append((system, argvs))
        return {"flags": ["env", "num_actors", "seed", "logdir", "resume"], "resume": True, "errors": [None] * 3}

    monkeypatch.setattr(sweep, "probe_launcher", fake_probe)
    sweep_dir = str(tmp_path / "sw")
    _write(os.path.join(sweep_dir, "num_actors=1.seed=0", "summary.json"), json.dumps({"interrupted": False}))
    _write(os.path.join(sweep_dir, "num_actors=2.seed=0", "checkpoints", "ckpt_000000000001.msgpack"))
    _main("--system=hts", "--env=CartPole-v1", "--sweep=num_actors=1,2", "--seeds=0,1", "--dry_run",
          f"--sweep_dir={sweep_dir}")
    lines = capsys.readouterr().out.strip().splitlines()
    assert "4 runs (1 finished, 3 to run, 1 resumed)" in lines[0] and "[dry run]" in lines[0]
    assert lines[1] == "[1/4] skip   num_actors=1.seed=0"
    assert lines[2].startswith("[2/4] resume num_actors=2.seed=0: ") and lines[2].endswith(
        f"--num_actors=2 --seed=0 --logdir={sweep_dir}/num_actors=2.seed=0 --resume")
    assert lines[3].startswith("[3/4] start  num_actors=1.seed=1: ") and " -m launch.hts --env=CartPole-v1 " in lines[3]
    assert [len(argvs) for _, argvs in requests] == [3]  # the finished run is not validated
    assert not os.path.exists(os.path.join(sweep_dir, "sweep.json"))


# --- the runner with stand-in children -------------------------------------------------------------------------------

_OK = ("import json, os, sys; json.dump({'interrupted': False, 'final_metric': 7.5, 'sps': 123.0}, "
       "open(os.path.join(sys.argv[1], 'summary.json'), 'w'))")
_FAIL = "import sys; print('error: boom', file=sys.stderr); sys.exit(3)"
_SLOW = """
import json, os, sys, time
run_dir = sys.argv[1]
open(os.path.join(run_dir, 'ready'), 'w').close()
try:
    time.sleep(60)
except KeyboardInterrupt:
    os.makedirs(os.path.join(run_dir, 'checkpoints'))
    open(os.path.join(run_dir, 'checkpoints', 'ckpt_000000000001.msgpack'), 'w').close()
    json.dump({'interrupted': True}, open(os.path.join(run_dir, 'summary.json'), 'w'))
    sys.exit(130)
"""


def _runner(tmp_path, scripts, parallel):
    sweep_dir = str(tmp_path)
    runs = grid_lib.expand(grid_lib.build_grid([f"case={','.join(str(i) for i in range(len(scripts)))}"]), (0,))
    entries = []
    for index, (run, script) in enumerate(zip(runs, scripts, strict=True), start=1):
        run_dir = os.path.join(sweep_dir, run.name)
        record = {"name": run.name, "status": "pending", "attempts": 0}
        entries.append(sweep.RunEntry(index, run, run_dir, sweep.START, [sys.executable, "-c", script, run_dir],
                                      record))
    manifest = {"system": "test", "runs": [e.record for e in entries]}
    return sweep.Runner(sweep_dir, manifest, entries, parallel, len(entries)), entries


def test_runner_runs_all_keeps_going_after_a_failure_and_respects_parallel(tmp_path, capsys):
    runner, entries = _runner(tmp_path, [_OK, _FAIL, _OK], parallel=2)
    concurrency = []
    start = runner.start
    runner.start = lambda entry: (start(entry), concurrency.append(len(runner.running)))
    assert runner.run() is True
    assert max(concurrency) == 2 and len(concurrency) == 3
    assert runner.counts["done"] == 2 and runner.counts["failed"] == 1
    statuses = [(e.record["status"], e.record["exit_code"], e.record["attempts"]) for e in entries]
    assert statuses == [("finished", 0, 1), ("failed", 3, 1), ("finished", 0, 1)]
    assert entries[0].record["final_metric"] == 7.5 and entries[0].record["sps"] == 123.0
    with open(tmp_path / "sweep.json") as f:
        assert [r["status"] for r in json.load(f)["runs"]] == ["finished", "failed", "finished"]
    with open(os.path.join(entries[1].run_dir, "launch.log")) as f:
        log = f.read().splitlines()
    assert log[0].startswith("# ") and "launch.sweep: " in log[0] and log[1] == "error: boom"
    out = capsys.readouterr().out
    assert "done   case=0.seed=0" in out and "final metric 7.5, sps 123" in out
    assert "FAILED case=1.seed=0" in out and "exit 3: error: boom" in out


def test_runner_ctrl_c_stops_children_and_leaves_them_resumable(tmp_path, capsys):
    runner, entries = _runner(tmp_path, [_SLOW, _OK], parallel=1)
    finished = threading.Event()

    def interrupt_when_ready():
        ready = os.path.join(entries[0].run_dir, "ready")
        for _ in range(600):
            if finished.wait(0.05):
                return
            if os.path.exists(ready):
                os.kill(os.getpid(), signal.SIGINT)
                return

    # As `launch.sweep.main` does: pytest itself may run in the background, where SIGINT starts out ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    thread = threading.Thread(target=interrupt_when_ready)
    thread.start()
    try:
        completed = runner.run()
    finally:
        finished.set()
        thread.join()
        signal.signal(signal.SIGINT, previous)
    assert completed is False
    assert entries[0].record["status"] == "interrupted" and entries[0].record["exit_code"] == 130
    assert entries[1].record["status"] == "pending" and not os.path.exists(entries[1].run_dir)
    assert runner.counts["interrupted"] == 1 and runner.counts["not started"] == 1
    assert grid_lib.run_state(entries[0].run_dir) == grid_lib.CHECKPOINTED  # the rerun resumes it
    assert "stopping 1 running run(s)" in capsys.readouterr().out


# --- a real sweep ---------------------------------------------------------------------------------------------------


def _sweep_cli(sweep_dir):
    cmd = [sys.executable, "-m", "launch.sweep", "--system=hts", "--env=CartPole-v1", "--sweep=num_actors=1,2",
           "--total_steps=32", "--num_envs=4", "--sync_interval=8", "--algo=a2c", "--eval_episodes=0", "--quiet",
           "--parallel=2", f"--sweep_dir={sweep_dir}"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _manifest_runs(sweep_dir):
    with open(os.path.join(sweep_dir, "sweep.json")) as f:
        manifest = json.load(f)
    return manifest, {r["name"]: r for r in manifest["runs"]}


def _log_lines(run_dir):
    with open(os.path.join(run_dir, "launch.log")) as f:
        return [line for line in f if line.startswith("# ") and "launch.sweep: " in line]


@pytest.mark.slow
def test_sweep_end_to_end_rerun_skips_finished_runs(tmp_path):
    # Resuming a checkpointed run is decided by grid.run_state and built by the command tests above; a real resumed
    # run would add a probe and a launcher start-up (~30 s) to a suite near its time budget.
    sweep_dir = str(tmp_path / "sw")
    names = ["num_actors=1.seed=0", "num_actors=2.seed=0"]
    first = _sweep_cli(sweep_dir)
    assert first.returncode == 0, first.stdout + first.stderr
    lines = first.stdout.strip().splitlines()
    assert sum(" start  " in line for line in lines) == 2 and sum(" done   " in line for line in lines) == 2
    assert lines[-1].startswith("sweep: 2 done, 0 failed of 2 runs in ")
    manifest, runs = _manifest_runs(sweep_dir)
    assert manifest["system"] == "hts" and manifest["seeds"] == [0]
    assert manifest["grid"] == [{"flag": "num_actors", "values": ["1", "2"]}]
    assert manifest["passthrough"] == ["--env=CartPole-v1", "--total_steps=32", "--num_envs=4", "--sync_interval=8",
                                       "--algo=a2c", "--eval_episodes=0", "--quiet"]
    for name in names:
        run_dir = os.path.join(sweep_dir, name)
        assert grid_lib.run_state(run_dir) == grid_lib.FINISHED
        summary = grid_lib.read_summary(run_dir)
        assert summary["env_steps"] == 32 and summary["seed"] == 0
        with open(os.path.join(run_dir, "config.json")) as f:
            assert json.load(f)["num_actors"] == int(name[len("num_actors=")])
        assert runs[name]["status"] == "finished" and runs[name]["exit_code"] == 0 and runs[name]["attempts"] == 1
        assert runs[name]["command"][1:3] == ["-m", "launch.hts"]
        assert runs[name]["command"][-2:] == ["--seed=0", f"--logdir={run_dir}"]
        assert len(_log_lines(run_dir)) == 1

    again = _sweep_cli(sweep_dir)  # everything finished: skipped, no child started
    assert again.returncode == 0, again.stdout + again.stderr
    assert " start " not in again.stdout and again.stdout.count(" skip   ") == 2
    assert "sweep: 0 done, 2 skipped, 0 failed of 2 runs" in again.stdout
    _, runs = _manifest_runs(sweep_dir)
    assert [runs[n]["attempts"] for n in names] == [1, 1]
    assert [len(_log_lines(os.path.join(sweep_dir, n))) for n in names] == [1, 1]



@pytest.mark.slow
def test_sweep_refuses_a_run_directory_that_a_live_process_still_holds(tmp_path):
    """After kill -9 of a sweep its children may still be writing; a rerun must not restart their directories."""
    run_dir = str(tmp_path / "sw" / "num_actors=1.seed=0")
    holder = start_run_dir_holder(run_dir)
    try:
        result = _sweep_cli(str(tmp_path / "sw"))
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"is in use by a running process (pid {holder.pid})" in result.stderr
    assert "Traceback" not in result.stderr
    assert os.listdir(run_dir) == [".lock"]  # nothing cleared, nothing started
