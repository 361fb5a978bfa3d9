"""The hyperparameter-search benchmark gives both studies the same budget, trial count, sampler and pruner warm-up,
and its finals train each side's best point: ours through its flagfile, the peer through rl-zoo3's arguments."""

import json

from benchmarks import learning, tune


def _flag(cmd: list[str], name: str) -> str:
    return next(arg.split("=", 1)[1] for arg in cmd if arg.startswith(f"--{name}="))


def _arg(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_both_studies_share_the_budget_trials_and_pruner_warmup(tmp_path):
    ours = tune.our_command(str(tmp_path / "ours"), trials=7, budget=50_000)
    peer = tune.peer_command(str(tmp_path / "peer"), trials=7, budget=50_000)
    assert _flag(ours, "trials") == _arg(peer, "--max-total-trials") == "7"
    assert _flag(ours, "total_steps") == _arg(peer, "-n") == "50000"
    # Ten evaluations a run on both sides; the median pruner waits for a third of them.
    assert int(_flag(ours, "total_steps")) // int(_flag(ours, "eval_every")) == int(_arg(peer, "--n-evaluations"))
    assert int(_flag(ours, "prune_warmup")) == int(_arg(peer, "--n-evaluations")) // 3
    assert _arg(peer, "--sampler") == "tpe" and _arg(peer, "--pruner") == "median"
    assert _arg(peer, "--num-threads") == "1"  # PyTorch's threads would spin beside any other process
    assert _flag(ours, "final_seeds") == "0"  # the finals run in the learning benchmark, on seeds of their own


def test_the_finals_train_each_best_point_on_seeds_apart_from_the_tuning_seeds(tmp_path, monkeypatch):
    task = learning.TASKS["LunarLander-v2 tuned"]
    assert not set(task.seeds) & set(range(tune.TUNING_SEEDS)) and len(task.seeds) == 5
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "peer_trials.json").write_text(json.dumps(dict(best_hyperparams=["n_epochs:20", "clip_range:0.3"])))
    monkeypatch.setitem(learning.SIDE_SPECS, "sb3_tuned",
                        learning.Side("peer", zoo_algo="ppo", zoo_study=str(folder)))
    peer = learning.peer_command(task, "sb3_tuned", 10_000, str(tmp_path / "run"), resume=False)
    assert peer[-3:] == ["--hyperparams", "n_epochs:20", "clip_range:0.3"]
    ours = learning.our_command(task, "hts_tuned", 10_000, str(tmp_path / "run"), resume=False)
    flagfile = _flag(ours, "flagfile")
    assert flagfile.endswith("benchmarks/results/tune/LunarLander-v2/ours_best.flags")
    assert _flag(ours, "seed") == "10000"


def test_the_report_says_which_study_has_not_finished(tmp_path, monkeypatch):
    monkeypatch.setattr(tune, "task_dir", lambda task=tune.TASK: str(tmp_path))
    monkeypatch.setattr(tune, "REPORT_MD", str(tmp_path / "report.md"))
    trials = [dict(number=0, state="COMPLETE", value=-120.0, params=dict(learning_rate=3e-4), seconds=60.0),
              dict(number=1, state="PRUNED", value=None, params=dict(learning_rate=1e-2), seconds=20.0)]
    (tmp_path / "ours_trials.json").write_text(json.dumps(dict(
        side="ours", command="python -m launch.tune ...", wall_s=600.0, cpu_s=900.0, parts=2, trials=trials,
        date="2026-12-06", commit="abc1234", machine="a CPU")))
    tune.write_report()
    report = (tmp_path / "report.md").read_text()
    assert "| ours | 1 / 1 / 0 | -120.0 (trial 0) | learning_rate=0.0003 | 10.0 min | 15.0 min |" in report
    assert "| peer | not finished yet |" in report


def test_an_unfinished_study_carries_over_to_a_machine_without_the_work_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tune, "task_dir", lambda task=tune.TASK: str(tmp_path / "results"))
    monkeypatch.setattr(tune, "REPORT_MD", str(tmp_path / "report.md"))
    first, second = tmp_path / "session1", tmp_path / "session2"
    (first / "peer").mkdir(parents=True)
    # A copy taken while the study writes: the last record is cut mid-line.
    (first / "peer" / "journal.log").write_bytes(b'{"op_code": 0}\n{"op_code": 4}\n{"op_co')
    (first / "peer" / "parts.json").write_text('[{"wall_s": 60.0, "cpu_s": 55.0, "mean_load": 1.9}]')
    assert not tune.save_unfinished("ours", str(first))
    assert tune.save_unfinished("peer", str(first))
    tune.write_report()
    report = (tmp_path / "report.md").read_text()
    assert "| peer | not finished yet (its trials so far: `" in report and "peer_unfinished/`)" in report

    (second / "peer").mkdir(parents=True)
    assert tune.restore_unfinished("peer", str(second / "peer"))
    assert (second / "peer" / "journal.log").read_bytes() == b'{"op_code": 0}\n{"op_code": 4}\n'
    assert json.loads((second / "peer" / "parts.json").read_text())[0]["cpu_s"] == 55.0
    assert learning.read_parts(str(second / "peer" / "parts.json"))[0]["wall_s"] == 60.0
    # A study already under way on this machine is never overwritten by the committed copy.
    (second / "peer" / "journal.log").write_bytes(b'{"op_code": 0}\n{"op_code": 4}\n{"op_code": 5}\n')
    assert not tune.restore_unfinished("peer", str(second / "peer"))
    assert (second / "peer" / "journal.log").read_bytes().count(b"\n") == 3
