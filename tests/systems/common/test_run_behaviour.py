"""Run-level behaviour: evaluation metrics of seed 000 section 5, the time limit, and errors in worker threads."""

import dataclasses

import numpy as np
import pytest

from systems.common.evaluation import EvaluationRecord, final_metric, required_time
from systems.hts import system as hts
from tests.fixtures import tiny_hts


def _record(i, returns):
    return EvaluationRecord(env_steps=100 * i, wall_time=10.0 * i, policy_version=i, returns=list(returns))


def test_final_metric_uses_the_last_ten_policies():
    records = [_record(i, [float(i)] * 10) for i in range(1, 13)]  # policies 1..12, 10 episodes each
    assert final_metric(records) == pytest.approx(np.mean(range(3, 13)))
    assert final_metric([]) is None


def test_required_time_is_when_the_running_average_reaches_the_target():
    # Running averages over the last ten evaluations: 1, 1.5, 2, 2.5, ... -> first >= 2.5 at the 4th (t = 40 s).
    records = [_record(i, [float(i)] * 10) for i in range(1, 8)]
    assert required_time(records, 2.5) == 40.0
    assert required_time(records, 100.0) is None
    assert required_time(records, None) is None


def _tiny(tmp_path, **overrides):
    """`tiny_hts` with 2 actors, 8-step rounds and no step budget, checkpoint or evaluation before the end."""
    return tiny_hts(tmp_path / "run", sync_interval=8, total_steps=10_000_000, num_actors=2, checkpoint_every=0,
                    eval_every=0, **overrides)


def test_time_limit_stops_training_and_reports_the_final_time_metric(tmp_path):
    summary = hts.run(_tiny(tmp_path, time_limit=3.0))
    assert summary["stopped_by_time_limit"] is True
    assert 0 < summary["env_steps"] < 10_000_000
    assert summary["final_time_metric"] is not None and summary["final_time_metric"] == summary["final_metric"]


@pytest.mark.slow
def test_stop_at_target_ends_an_on_policy_run_at_the_first_evaluation_reaching_it(tmp_path):
    summary = hts.run(tiny_hts(tmp_path / "run", total_steps=20 * 64, target_return=-1.0, stop_at_target=True))
    assert summary["stopped_at_target"] is True and summary["stopped_by_time_limit"] is False
    assert summary["env_steps"] == 128 and summary["evaluations"] == 1  # the first evaluation, after 2 rounds
    unstopped = hts.run(tiny_hts(tmp_path / "plain", total_steps=20 * 64, target_return=-1.0))
    assert unstopped["stopped_at_target"] is False and unstopped["env_steps"] == 20 * 64


def test_stop_at_target_without_a_target_is_refused():
    with pytest.raises(ValueError, match="--stop_at_target .* give --target_return"):
        hts.validate(tiny_hts("unused", stop_at_target=True))


class _Boom(Exception):
    pass


@pytest.mark.parametrize("where", ["learner", "actor"])
def test_an_error_in_a_worker_thread_stops_the_run_with_the_original_exception(tmp_path, monkeypatch, where):
    real_make_agent = hts.make_agent

    def failing_agent(config, spec):
        setup, state = real_make_agent(config, spec)
        if where == "learner":
            def update(*args):
                raise _Boom("learner failed")
            return dataclasses.replace(setup, update=update), state
        calls = []

        def policy(*args):
            calls.append(1)
            if len(calls) > 20:
                raise _Boom("actor failed")
            return setup.policy(*args)
        return dataclasses.replace(setup, policy=policy), state

    monkeypatch.setattr(hts, "make_agent", failing_agent)
    with pytest.raises(_Boom, match=f"{where} failed") as info:
        hts.run(_tiny(tmp_path, eval_episodes=0))
    # The original traceback is kept: its innermost frame is the raising function.
    frames = []
    tb = info.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert frames[-1] in ("update", "policy")


def test_a_run_directory_of_an_earlier_version_is_refused_with_one_line_and_left_as_it_is(tmp_path):
    """config.json records the version that wrote it; one that records none (0.2.0 or earlier, whose format this
    version no longer reads) is refused by --resume and by restore (launch.evaluate), and the directory is untouched."""
    import json

    from systems.common.config import VERSION, ConfigError
    from systems.common.restore import restore_run
    from systems.registry import ENTRIES

    run_dir = tmp_path / "run"
    hts.run(tiny_hts(run_dir, total_steps=128))
    path = run_dir / "config.json"
    recorded = json.loads(path.read_text())
    assert recorded["version"] == VERSION
    assert restore_run(str(run_dir), ENTRIES).config.total_steps == 128
    path.write_text(json.dumps({k: v for k, v in recorded.items() if k != "version"}))
    before = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match=r"written by version 0\.2\.0 or earlier .* with version 0\.2\.0$"):
        hts.run(tiny_hts(run_dir, total_steps=256, resume=True))
    with pytest.raises(ConfigError, match=r"written by version 0\.2\.0 or earlier"):
        restore_run(str(run_dir), ENTRIES)
    assert {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_the_version_recorded_in_config_json_is_the_package_version():
    import pathlib

    import tomllib

    from systems.common.config import VERSION

    pyproject = pathlib.Path(__file__).resolve().parents[3] / "pyproject.toml"
    assert tomllib.loads(pyproject.read_text())["project"]["version"] == VERSION
