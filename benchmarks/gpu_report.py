"""The device check's figures as one results table, from what `benchmarks/gpu_check.sh` wrote to its `$OUT`.

    PYTHONPATH=. python -m benchmarks.gpu_report --dir=<OUT> --out=benchmarks/results/gpu_check_<machine>.md

Reads `log.txt` (the date, the GPU, the versions, each stage's exit code and wall time, the main job's layout line),
`envpool_raw.json` (EnvPool's own Breakout rate with random actions: the ceiling), `runs.tar.gz` (the main job's
`progress.csv` and `evaluations.csv`, Anakin's `summary.json`), `cleanrl_jax.json` (`benchmarks/cleanrl_jax.py`) and,
when that stage ran, `host_path.json` (`benchmarks/host_path.py`), and writes one Markdown page: each Breakout program's
steady SPS (`common.steady_sps`: the first updates, with the compile, left out), its share of the raw rate (the issue's
aim: 0.8), its 10M-step projection and its last returns, beside CleanRL's published Breakout curve (430 at 10M steps);
the actors' host path without a policy; then Anakin's rows. A stage that failed or did not run says so in its row.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import sys
import tarfile

from benchmarks import common
from benchmarks import host_path as host_path_lib

CLEANRL_PUBLISHED = ("CleanRL's published `ppo_atari_envpool_xla_jax_scan` curve: Breakout 430 at 10M steps in about "
                     "40 minutes (about 4k SPS) on their GPU box")
_STAGE_END = re.compile(r"^== (\S+) rc=(-?\d+) wall=(\d+)s$", re.MULTILINE)
_LAYOUT = re.compile(r"^\[hts\] .*layout: (.*)$", re.MULTILINE)
_ANAKIN_LAYOUT = re.compile(r"^\[anakin\] .*layout: (.*)$", re.MULTILINE)


def stage_results(log: str) -> dict[str, tuple[int, int]]:
    """Each stage's (exit code, wall seconds) from the check's log."""
    return {m[1]: (int(m[2]), int(m[3])) for m in _STAGE_END.finditer(log)}


def _stage_texts(log: str) -> dict[str, str]:
    parts = re.split(r"^== (\S+) start \d+$", log, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _members(archive: str) -> dict[str, bytes]:
    if not os.path.isfile(archive):
        return {}
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()
                if m.isfile() and m.name.endswith(("progress.csv", "evaluations.csv", "summary.json"))}


def _file(members: dict[str, bytes], run: str, name: str) -> bytes | None:
    """`<run>/<name>` from the archive (its paths start with the check's runs folder)."""
    return next((data for path, data in members.items() if path.endswith(f"/{run}/{name}")), None)


def _rows(data: bytes | None) -> list[dict]:
    return list(csv.DictReader(io.StringIO(data.decode()))) if data else []


def hts_row(run: str, members: dict[str, bytes], log_text: str, raw_sps: float | None) -> dict | None:
    progress = _rows(_file(members, run, "progress.csv"))
    if not progress:
        return None
    sps = common.steady_sps([(float(r["wall_time"]), int(r["env_steps"])) for r in progress])
    evaluations = _rows(_file(members, run, "evaluations.csv"))
    layout = _LAYOUT.search(log_text)
    returns = ", ".join(f"{float(r['mean_return']):.1f} at {int(r['env_steps']):,}" for r in evaluations[-3:])
    return dict(program=f"main job (`{run}`)", layout=layout[1] if layout else "", sps=sps, raw_sps=raw_sps,
                steps=int(progress[-1]["env_steps"]), wall=float(progress[-1]["wall_time"]),
                returns=f"eval {returns}" if returns else "no evaluation yet")


def cleanrl_row(result: dict, raw_sps: float | None) -> dict:
    points = result.get("points") or []
    last = points[-1] if points else None
    returns = f"avg_episodic_return {last['avg_return']:.1f} at {last['step']:,}" if last else "no update"
    return dict(program="CleanRL `ppo_atari_envpool_xla_jax_scan.py`", layout="its defaults: 8 envs x 128 steps",
                sps=result.get("steady_sps"), raw_sps=raw_sps, steps=last["step"] if last else 0,
                wall=last["wall_s"] if last else 0.0, returns=returns)


def _ratio(sps: float | None, raw: float | None) -> str:
    return f"{sps / raw:.2f}" if sps and raw else "n/a"


def _minutes(sps: float | None) -> str:
    return f"{1e7 / sps / 60:.0f} min" if sps else "n/a"


def report(directory: str) -> str:
    with open(os.path.join(directory, "log.txt"), errors="replace") as f:
        log = f.read()
    stages, texts = stage_results(log), _stage_texts(log)
    gpu = re.search(r"NVIDIA [A-Z0-9][^|\n]*?(?=\s{2,}|\|)", log)
    versions = re.search(r"^jax .*$", log, re.MULTILINE)
    raw_rows = []
    if os.path.isfile(os.path.join(directory, "envpool_raw.json")):
        with open(os.path.join(directory, "envpool_raw.json")) as f:
            raw_rows = json.load(f)
    best_raw = max(raw_rows, key=lambda r: r["sps"]) if raw_rows else None
    raw_sps = best_raw["sps"] if best_raw else None
    members = _members(os.path.join(directory, "runs.tar.gz"))
    lines = [f"Machine: {gpu[0].strip() if gpu else 'no GPU named in the log'}, "
             f"{best_raw['cores'] if best_raw else '?'} CPU cores. Date: {log.splitlines()[0] if log else '?'}.",
             f"Versions: {versions[0] if versions else 'not in the log'}.",
             "Command: `bash benchmarks/gpu_check.sh` (the archive from `benchmarks/gpu_site.sh` carried), then "
             "`python -m benchmarks.gpu_report --dir=<its OUT>`.", "",
             "| program | layout | steady SPS | of EnvPool's raw rate | 10M steps in | env steps run (wall s) | "
             "returns |", "|---|---|---|---|---|---|---|"]
    if best_raw:
        lines.append(f"| EnvPool raw, random actions | {best_raw['envs']} envs, {best_raw['threads']} threads, batch "
                     f"{best_raw['batch']} | {best_raw['sps']:,} | 1.00 | {_minutes(best_raw['sps'])} | | |")
    else:
        lines.append(f"| EnvPool raw | | {_missing('envpool_raw', stages)} | | | | |")
    runs = [name for name in texts if name.startswith("hts_")]
    for run in runs or ["hts_breakout"]:
        row = hts_row(run, members, texts.get(run, ""), raw_sps)
        lines.append(_program_line(row) if row else f"| main job (`{run}`) | | {_missing(run, stages)} | | | | |")
    cleanrl_path = os.path.join(directory, "cleanrl_jax.json")
    if os.path.isfile(cleanrl_path):
        with open(cleanrl_path) as f:
            lines.append(_program_line(cleanrl_row(json.load(f), raw_sps)))
    else:
        lines.append(f"| CleanRL JAX PPO | | {_missing('cleanrl_jax', stages)} | | | | |")
    lines += ["", f"Beside them: {CLEANRL_PUBLISHED}.", ""]
    host_path_rows = []
    for name in ("host_path.json", "host_path_pinned.json"):  # the host_path and host_path_pinned stages
        if os.path.isfile(os.path.join(directory, name)):
            with open(os.path.join(directory, name)) as f:
                host_path_rows += [json.loads(line) for line in f if line.strip()]
    if host_path_rows:
        lines += ["The actors' host path without a policy (`benchmarks/host_path.py`, one run of each):", "",
                  *host_path_lib.table(host_path_rows), ""]
    lines += ["| Anakin run | env | agents | layout | SPS, all agents | "
              "final return (mean over agents) |", "|---|---|---|---|---|---|"]
    for run in ("anakin_cartpole_64", "anakin_minatar_8"):
        data = _file(members, run, "summary.json")
        if data is None:
            lines.append(f"| `{run}` | | | | {_missing(run, stages)} | |")
            continue
        summary = json.loads(data)
        sps, final = common.fmt(summary.get("sps_all_agents")), common.fmt(summary.get("final_metric_mean"), 1)
        layout = _ANAKIN_LAYOUT.search(texts.get(run, ""))
        lines.append(f"| `{run}` | {summary['env_id']} | {summary.get('num_agents', '')} | "
                     f"{layout[1] if layout else ''} | {sps} | {final} |")
    lines += ["", "Stages: " + ", ".join(f"{name} rc={rc} ({wall} s)" for name, (rc, wall) in stages.items()) + "."]
    return "\n".join(lines) + "\n"


def _missing(stage: str, stages: dict[str, tuple[int, int]]) -> str:
    if stage not in stages:
        return "not run"
    rc, wall = stages[stage]
    return f"failed (rc {rc} after {wall} s)" if rc else "no figures"


def _program_line(row: dict) -> str:
    return (f"| {row['program']} | {row['layout']} | {common.fmt(row['sps'])} | {_ratio(row['sps'], row['raw_sps'])} "
            f"| {_minutes(row['sps'])} | {row['steps']:,} ({row['wall']:.0f}) | {row['returns']} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="the $OUT folder benchmarks/gpu_check.sh wrote")
    parser.add_argument("--out", default="", help="Markdown file to write (default: print)")
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.dir, "log.txt")):
        sys.exit(f"error: {args.dir} holds no log.txt from benchmarks/gpu_check.sh")
    text = report(args.dir)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
