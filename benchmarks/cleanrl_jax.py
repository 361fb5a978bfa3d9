"""CleanRL's JAX PPO on this machine: the peer of the main job on a GPU box, run as its users run it.

Starts the peer's own script, `ppo_atari_envpool_xla_jax_scan.py` (EnvPool's XLA step inside one `lax.scan` rollout,
Breakout-v5, 8 envs x 128 steps, 10M steps by default), unmodified and with its own defaults, for `--seconds`, then
stops it with SIGTERM and writes one JSON file: each update's wall time since the start (the compile included),
global step and mean raw episode return (the script's `avg_episodic_return`, the unclipped score of each env's last
finished game), the steady env steps per second after the first updates, and the 10M-step projection from it.

    PYTHONPATH=. python -m benchmarks.cleanrl_jax --script=<site-cleanrl>/ppo_atari_envpool_xla_jax_scan.py \\
        --peer_path=<site-cleanrl>:<site> --seconds=120 --out=/tmp/cleanrl_jax.json

`benchmarks/gpu_site.sh` builds the script's folder (the script at a fixed commit, EnvPool 0.9.0, gym 0.23.1, tyro)
and `benchmarks/gpu_check.sh` runs this on a device machine. The script logs through PyTorch's TensorBoard writer;
where PyTorch is missing (a CPU dry run) a writer that keeps nothing stands in for it: what is measured comes from
the script's printed lines.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable

from benchmarks import common

_UPDATE = re.compile(r"global_step=(\d+), avg_episodic_return=([-+0-9.eE]+|nan)")
_SPS = re.compile(r"^SPS: (\d+)$")
_TORCH_SHIM = {  # torch.utils.tensorboard.SummaryWriter for a Python without PyTorch: it keeps nothing
    "torch/__init__.py": "class device: pass  # tyro's flag parser checks for it\n",
    "torch/utils/__init__.py": "",
    "torch/utils/tensorboard.py": (
        "class SummaryWriter:\n"
        "    def __init__(self, *args, **kwargs): pass\n"
        "    def __getattr__(self, name): return lambda *args, **kwargs: None\n"),
}


def compat_source(source: str) -> str:
    """The script with the two changes it needs on today's JAX and Flax, neither in the algorithm: `jax.tree_map`
    left JAX in 0.6 (`jax.tree_util.tree_map` is the same function), and Flax's `TrainState.create` and
    `apply_gradients` ask their params and grads `OVERWRITE_WITH_GRADIENT in ...` since Flax 0.7.5, which the
    script's `AgentParams` dataclass cannot answer: it answers False, as it holds no such entry."""
    anchor = "@flax.struct.dataclass\nclass Storage:"
    if source.count("jax.tree_map(") != 2 or anchor not in source or "class AgentParams:" not in source:
        raise ValueError("the CleanRL script differs from the one the compatibility changes were written for")
    patched = source.replace("jax.tree_map(", "jax.tree_util.tree_map(")
    contains = ("AgentParams.__contains__ = lambda self, key: False  # Flax >= 0.7.5 asks for OVERWRITE_WITH_GRADIENT"
                "\n\n\n")
    return patched.replace(anchor, contains + anchor, 1)


def write_compat(script: str) -> str:
    """Writes `compat_source` of `script` beside it as `<name>_compat.py`; returns that path."""
    with open(script) as f:
        patched = compat_source(f.read())
    path = script[: -len(".py")] + "_compat.py"
    with open(path, "w") as f:
        f.write(patched)
    return path


def parse_updates(lines: Iterable[tuple[float, str]]) -> list[dict]:
    """The script's two lines per update, `global_step=.., avg_episodic_return=..` and `SPS: ..`, as one point each:
    the wall time the first arrived at, the step, the mean return, and the script's own elapsed time since its start
    (global_step / SPS; the compile included, as in its SPS)."""
    points: list[dict] = []
    for wall, line in lines:
        if match := _UPDATE.search(line):
            points.append(dict(wall_s=round(wall, 2), step=int(match[1]), avg_return=float(match[2])))
        elif (match := _SPS.match(line)) and points and "elapsed_s" not in points[-1] and int(match[1]) > 0:
            points[-1]["elapsed_s"] = round(points[-1]["step"] / int(match[1]), 2)
    return points


def steady_sps(points: list[dict]) -> float | None:
    """Env steps per second from the fourth update to the last, on the script's own clock (`common.steady_sps`, as
    for the CPU comparison in `benchmarks.cpu_e2e`): the first updates hold the compile."""
    return common.steady_sps([(p["elapsed_s"], p["step"]) for p in points if "elapsed_s" in p])


def _peer_env(peer_path: str, shim_dir: str) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=peer_path)
    probe = subprocess.run([sys.executable, "-c", "import torch.utils.tensorboard"], env=env, capture_output=True)
    if probe.returncode != 0:
        for name, text in _TORCH_SHIM.items():
            os.makedirs(os.path.dirname(os.path.join(shim_dir, name)), exist_ok=True)
            with open(os.path.join(shim_dir, name), "w") as f:
                f.write(text)
        env["PYTHONPATH"] = os.pathsep.join([peer_path, shim_dir])
    return env


def run(script: str, peer_path: str, seconds: float, extra: list[str], workdir: str) -> dict:
    """Runs the script for `seconds` (then SIGTERM, SIGKILL 15 s later) and returns what it printed, parsed."""
    env = _peer_env(peer_path, os.path.join(workdir, "shim"))
    command = [sys.executable, script, *extra]
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1, start_new_session=True)
    lines: list[tuple[float, str]] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append((time.perf_counter() - start, line.rstrip("\n")))
            print(line, end="", flush=True)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=seconds)
        stopped = False
    except subprocess.TimeoutExpired:
        stopped = True
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(timeout=5)
    points = parse_updates(lines)
    sps = steady_sps(points)
    return dict(command=" ".join(command), wall_s=round(time.perf_counter() - start, 1), stopped_at_limit=stopped,
                returncode=proc.returncode, steady_sps=round(sps) if sps else None,
                minutes_per_10m=round(1e7 / sps / 60, 1) if sps else None, points=points,
                tail=[line for _, line in lines[-20:]] if not points else [])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", default="", help="path of ppo_atari_envpool_xla_jax_scan.py (_compat.py)")
    parser.add_argument("--write_compat", default="", help="write <script>_compat.py beside this script and stop")
    parser.add_argument("--peer_path", default="", help="PYTHONPATH for the script (its EnvPool and gym first)")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--out", default="")
    args, extra = parser.parse_known_args(argv)
    if args.write_compat:
        try:
            print(write_compat(args.write_compat))
        except (OSError, ValueError) as error:
            sys.exit(f"error: {error}")
        return
    if not os.path.isfile(args.script):
        sys.exit(f"error: --script={args.script} is not a file (benchmarks/gpu_site.sh builds it)")
    commit_file = os.path.join(os.path.dirname(args.script), "CLEANRL_COMMIT")
    with tempfile.TemporaryDirectory(prefix="cleanrl_jax_") as workdir:
        result = run(os.path.abspath(args.script), args.peer_path, args.seconds, extra, workdir)
    if os.path.isfile(commit_file):
        with open(commit_file) as f:
            result["cleanrl_commit"] = f.read().strip()
    summary = {k: result[k] for k in ("steady_sps", "minutes_per_10m", "wall_s", "returncode")}
    summary["last"] = result["points"][-1] if result["points"] else None
    print(json.dumps(summary), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    if not result["points"]:
        sys.exit("error: the script printed no update (its output's end is in the JSON's tail)")


if __name__ == "__main__":
    main()
