"""The GPU check's CleanRL stage: the peer's script runs with only its two API changes, is stopped at its time limit,
and its printed updates become the steady SPS on its own clock (the first updates, with the compile, left out)."""

import json
import sys
import textwrap

import pytest

from benchmarks import cleanrl_jax

_SCRIPT_PARTS = """\
class AgentParams:
    network_params: flax.core.FrozenDict


@flax.struct.dataclass
class Storage:
    obs: jnp.array
            flatten_storage = jax.tree_map(flatten, storage)
            shuffled_storage = jax.tree_map(convert_data, flatten_storage)
"""

# A stand-in for the peer: CleanRL's two lines per update, at 1,024 steps an update; the first update is slow (the
# compile), then 0.05 s each; it logs through PyTorch's TensorBoard writer, as the script does.
_FAKE_PEER = textwrap.dedent("""\
    import time
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter("runs/x")
    start = time.time()
    time.sleep(0.5)
    for update in range(1, 10_000):
        step = 1024 * update
        print(f"global_step={step}, avg_episodic_return={0.25 * update}", flush=True)
        writer.add_scalar("charts/SPS", 1, step)
        print("SPS:", int(step / (time.time() - start)), flush=True)
        time.sleep(0.05)
""")


def test_the_compat_source_changes_only_the_two_api_calls():
    patched = cleanrl_jax.compat_source(_SCRIPT_PARTS)
    assert "jax.tree_map(" not in patched and patched.count("jax.tree_util.tree_map(") == 2
    assert patched.count("AgentParams.__contains__ = lambda self, key: False") == 1
    removed = [line for line in _SCRIPT_PARTS.splitlines() if line not in patched.splitlines()]
    assert all("jax.tree_map(" in line for line in removed) and len(removed) == 2


def test_a_different_script_is_refused_rather_than_half_patched():
    with pytest.raises(ValueError, match="differs"):
        cleanrl_jax.compat_source(_SCRIPT_PARTS.replace("jax.tree_map(flatten", "jax.tree.map(flatten"))


def test_the_run_stops_at_its_limit_and_measures_on_the_scripts_clock(tmp_path):
    script = tmp_path / "peer.py"
    script.write_text(_FAKE_PEER)
    result = cleanrl_jax.run(str(script), peer_path="", seconds=3.0, extra=[], workdir=str(tmp_path))
    assert result["stopped_at_limit"] and result["returncode"] != 0
    points = result["points"]
    assert len(points) >= 8 and points[0]["step"] == 1024 and points[2]["avg_return"] == 0.75
    assert all("elapsed_s" in p for p in points[:-1])  # the last may have been stopped before its SPS line
    # 1,024 steps every ~0.05 s after the slow first update: the steady rate leaves the first updates out.
    first_updates_rate = points[3]["step"] / points[3]["elapsed_s"]
    assert result["steady_sps"] > first_updates_rate
    assert result["minutes_per_10m"] == pytest.approx(1e7 / result["steady_sps"] / 60, rel=0.01)


def test_a_missing_script_is_one_error_line(tmp_path, capsys):
    with pytest.raises(SystemExit, match="^error: --script=.* is not a file"):
        cleanrl_jax.main([f"--script={tmp_path / 'absent.py'}"])


def test_main_writes_the_json_and_the_compat_file(tmp_path):
    script = tmp_path / "ppo_atari_envpool_xla_jax_scan.py"
    script.write_text(_SCRIPT_PARTS)
    cleanrl_jax.main([f"--write_compat={script}"])
    assert (tmp_path / "ppo_atari_envpool_xla_jax_scan_compat.py").read_text() == cleanrl_jax.compat_source(
        _SCRIPT_PARTS)
    peer = tmp_path / "peer.py"
    peer.write_text(_FAKE_PEER)
    (tmp_path / "CLEANRL_COMMIT").write_text("abc123\n")
    out = tmp_path / "result.json"
    cleanrl_jax.main([f"--script={peer}", "--seconds=2", f"--out={out}"])
    result = json.loads(out.read_text())
    assert result["cleanrl_commit"] == "abc123" and result["points"] and sys.executable in result["command"]
