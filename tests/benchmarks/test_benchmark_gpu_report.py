"""The device check's report: each program's steady SPS stands beside EnvPool's raw rate on the same box, and a
stage that failed says so instead of leaving a blank."""

import io
import json
import tarfile

from benchmarks import gpu_report


def _add(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_the_report_sets_each_program_against_the_raw_rate_and_names_failures(tmp_path):
    (tmp_path / "log.txt").write_text(
        "Sun Dec  6 12:00:00 UTC 2026\n| 0  NVIDIA H100 80GB HBM3    On  |\njax 0.11.2 jaxlib 0.11.2 envpool 1.2.5\n"
        "== envpool_raw start 1\n== envpool_raw rc=0 wall=60s\n"
        "== hts_breakout start 2\n[hts] Breakout-v5  algo ppo  layout: 128 envs x 8 steps, 4 actor threads\n"
        "== hts_breakout rc=0 wall=180s\n== cleanrl_jax start 3\n== cleanrl_jax rc=1 wall=9s\n"
        "== anakin_minatar_8 start 4\n[anakin] gymnax/Breakout-MinAtar  layout: 128 envs x 64 steps (accelerator)\n"
        "== anakin_minatar_8 rc=0 wall=90s\n")
    (tmp_path / "envpool_raw.json").write_text(json.dumps([
        dict(envs=128, threads=8, batch=64, sps=30_000, cores=16), dict(envs=128, threads=16, batch=64, sps=40_000,
                                                                       cores=16)]))
    # Six updates of 1,024 steps: the first three (the compile) are left out, then 1,024 steps every 0.05 s.
    walls = (30.0, 30.05, 30.1, 30.15, 30.2, 30.25)
    progress = "env_steps,wall_time\n" + "".join(f"{1024 * i},{t}\n" for i, t in enumerate(walls, start=1))
    with tarfile.open(tmp_path / "runs.tar.gz", "w:gz") as tar:
        _add(tar, "runs/gpu/hts_breakout/progress.csv", progress)
        _add(tar, "runs/gpu/hts_breakout/evaluations.csv", "env_steps,wall_time,mean_return\n6144,30.3,2.5\n")
        _add(tar, "runs/gpu/anakin_minatar_8/summary.json",
             json.dumps(dict(env_id="gymnax/Breakout-MinAtar", num_agents=8, sps_all_agents=1e6,
                             final_metric_mean=20.0)))
    text = gpu_report.report(str(tmp_path))
    assert "NVIDIA H100 80GB HBM3" in text and "16 CPU cores" in text and "jax 0.11.2" in text
    assert "| EnvPool raw, random actions | 128 envs, 16 threads, batch 64 | 40,000 | 1.00 |" in text
    main_job = next(line for line in text.splitlines() if "`hts_breakout`" in line)
    assert "128 envs x 8 steps, 4 actor threads" in main_job and "| 20,480 | 0.51 | 8 min |" in main_job
    assert "eval 2.5 at 6,144" in main_job
    assert "| CleanRL JAX PPO | | failed (rc 1 after 9 s) |" in text
    assert "| `anakin_cartpole_64` | | | | not run | |" in text
    assert ("| `anakin_minatar_8` | gymnax/Breakout-MinAtar | 8 | 128 envs x 64 steps (accelerator) | 1,000,000 | "
            "20.0 |") in text


def test_the_report_shows_the_host_path_beside_raw_envpool_when_that_stage_ran(tmp_path):
    (tmp_path / "log.txt").write_text(
        "Sun Dec  6 12:00:00 UTC 2026\n== host_path start 1\n== host_path rc=0 wall=80s\n")
    row = dict(envs=128, sync_interval=8, actors=4, threads=16, batch=64, inference_batch=128, raw_sps=40_000,
               host_sps=30_000, ratio=0.75, python_us=25.0, receiver_us=5.0, chunks_per_take=0.9, spare_share=0.01)
    per_actor = dict(row, pools="per_actor", host_sps=32_000, ratio=0.8, python_us=20.0, receiver_us=0.0,
                     spare_share=0.0)
    (tmp_path / "host_path.json").write_text(json.dumps(row) + "\n" + json.dumps(per_actor) + "\n")
    pinned = dict(row, threads=12, affinity_offset=4, pools="shared")
    (tmp_path / "host_path_pinned.json").write_text(json.dumps(pinned) + "\n")
    text = gpu_report.report(str(tmp_path))
    shared, own, pinned_line = (line for line in text.splitlines() if line.startswith("| this tree |"))
    assert "| 12 pinned from core 4, 64 | 128 |" in pinned_line  # the host_path_pinned stage's row
    assert shared.startswith("| this tree | one, shared | 128 x 8, 4 |")  # a row from before the pools column
    assert "| 16, 64 | 128 | 40,000 | 30,000 | 0.75 | 25.0 us (5.0) | 40,000 | 0.90 | 1.0% |" in shared
    assert own.startswith("| this tree | one per actor (32 envs) | 128 x 8, 4 |")
    assert "| 16 (4 a pool), 64 (16 a pool) | 128 | 40,000 | 32,000 | 0.80 | 20.0 us (0.0) | 50,000 |" in own
    assert "host path" not in gpu_report.report(str(_without_host_path(tmp_path)))


def _without_host_path(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "log.txt").write_text((tmp_path / "log.txt").read_text())
    return other
