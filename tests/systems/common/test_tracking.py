"""`--track`: Weights & Biases logging of the config, progress rows, evaluations and summary, tested in W&B's
offline mode (no account, no network); a resumed run continues the same W&B run; without the wandb extra,
`--track` is one line saying what to install."""

import glob
import os
import subprocess
import sys

import pytest

from tests.fixtures import REPO_ROOT

ROOT = REPO_ROOT


def _launch(run_dir, *flags: str, preamble: str = "") -> subprocess.CompletedProcess:
    code = (f"{preamble}import sys, runpy; sys.argv = ['launch.hts', *{list(flags)!r}, '--logdir={run_dir}']\n"
            "runpy.run_module('launch.hts', run_name='__main__')")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_track_logs_config_progress_evaluations_and_summary_offline(tmp_path):
    run_dir = tmp_path / "run"
    flags = ("--env=CartPole-v1", "--num_envs=4", "--total_steps=2048", "--eval_episodes=1", "--eval_every=1024",
             "--track", "--wandb_project=test")
    first = _launch(run_dir, *flags)
    assert first.returncode == 0, first.stderr
    (run,) = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    records = open(run, "rb").read()
    for key in (b"sync_interval", b"train/sps", b"train/policy_loss", b"eval/mean_return", b"param_fingerprint"):
        assert key in records, key  # config, progress, evaluation, summary
    run_id = (run_dir / "wandb_run_id").read_text()
    assert run.endswith(f"run-{run_id}.wandb")
    resumed = _launch(run_dir, *flags[:2], "--total_steps=3072", *flags[3:], "--resume")
    assert resumed.returncode == 0, resumed.stderr
    runs = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(runs) == 2 and all(path.endswith(f"run-{run_id}.wandb") for path in runs)  # the same W&B run


def test_track_without_wandb_is_one_line(tmp_path):
    result = _launch(tmp_path / "run", "--env=CartPole-v1", "--track",
                     preamble="import sys; sys.modules['wandb'] = None  # as if not installed\n")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        'error: --track needs Weights & Biases, an optional extra: python -m pip install -e ".[wandb]"']
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_track_without_a_login_is_one_line_before_anything_is_written(tmp_path):
    """Without WANDB_MODE=offline and without an API key, W&B raised a 45-line traceback after the run
    directory was written, which then refused a rerun."""
    code = ("import os, sys, runpy\n"
            "for name in ('WANDB_MODE', 'WANDB_API_KEY'): os.environ.pop(name, None)\n"
            f"os.environ['HOME'] = {str(tmp_path)!r}; os.environ.pop('NETRC', None)  # no ~/.netrc\n"
            f"sys.argv = ['launch.hts', '--env=CartPole-v1', '--track', '--logdir={tmp_path / 'run'}']\n"
            "runpy.run_module('launch.hts', run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --track needs a W&B login: run `wandb login`"), lines
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_anakins_agents_each_track_their_own_run(tmp_path):
    """Several agents in one process: each its own W&B run (W&B's default would return the first agent's run to
    the second, which then wrote into a finished run and crashed)."""
    run_dir = tmp_path / "run"
    code = ("import sys, runpy; sys.argv = ['launch.anakin', '--env=gymnax/CartPole-v1', '--num_envs=4', "
            "'--sync_interval=16', '--total_steps=128', '--num_seeds=2', '--eval_every=64', '--eval_episodes=2', "
            f"'--track', '--quiet', '--logdir={run_dir}']\nrunpy.run_module('launch.anakin', run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true"))
    assert result.returncode == 0, result.stderr[-2000:]
    for seed in (1, 2):
        run_id = (run_dir / f"seed_{seed}" / "wandb_run_id").read_text()
        (run,) = glob.glob(str(run_dir / f"seed_{seed}" / "wandb" / "offline-run-*" / "run-*.wandb"))
        records = open(run, "rb").read()
        assert run.endswith(f"run-{run_id}.wandb")
        assert b"eval/mean_return" in records and b"param_fingerprint" in records
