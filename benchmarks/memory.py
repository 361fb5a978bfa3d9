"""Policies with memory under Anakin: bsuite's MemoryChain (gymnax's `MemoryChain-bsuite`) with an LSTM, a GRU
and the feed-forward control, each row five seeds trained as five vmapped agents in one program (`--num_seeds=5`).

MemoryChain shows a context bit at the first step only and pays +1 at the episode's last step (`memory_length` + 1
steps) if the action names that bit, -1 otherwise: a feed-forward policy cannot do better than chance (0), a policy
that remembers the bit earns 1. bsuite's `memory_length` is 5; the rows at 20 are a longer memory at a larger budget.
Every row runs `launch.anakin` with its preset (gymnax's classic-control PPO: 4 envs x 128 steps) and
`--rnn_size=64`, the core reading the observation (`--rnn_input`'s default on vectors) or, in the `_torso` rows,
the MLP torso's features (`--rnn_input=torso`); the final metric is the mean greedy return of each agent's last ten
evaluations.

    PYTHONPATH=. python -m benchmarks.memory [--rows=lstm5,none5,...]

Atari without a frame stack (`--breakout`): the main job, `python -m launch.hts --game=Breakout`, beside the same
with `--frame_stack=1 --recurrent=lstm` (EnvPool's `stack_num=1`, an LSTM of 128 after the CNN, CleanRL's
`ppo_atari_lstm.py` layout), alternating, `--breakout_seconds` each, `--breakout_pairs` pairs; steady SPS as
`benchmarks/cpu_e2e.py` measures it (from the 4th update to the last), CPU time and load beside it. CleanRL's LSTM
PPO runs at about 0.4x its feed-forward script.

Its first 1M steps' curve (`--breakout_curve=<run dir>`): the evaluations of a finished run of
`python -m launch.hts --game=Breakout --frame_stack=1 --recurrent=lstm --total_steps=1000000 --eval_every=100000`
(one seed), kept in `results/memory_breakout_curve_cpu.csv`, beside the feed-forward main job's evaluations at the
same env steps from its one GPU run (`results/gpu/run5_progress/`: the same command and preset on an H200, evaluated
every 500k steps; learning per env step, not speed, is compared).

Resumable: a finished row is kept in `results/memory_cpu.csv` (`results/memory_breakout_cpu.csv`) and skipped; the
tables are in `results/memory_cpu.md`.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time

from benchmarks.common import git_commit, machine

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ROWS_CSV = os.path.join(RESULTS, "memory_cpu.csv")
REPORT = os.path.join(RESULTS, "memory_cpu.md")
FIELDS = ("row", "env", "recurrent", "rnn_input", "memory_length", "seeds", "env_steps", "wall_s", "cpu_s", "mean_load",
          "final_metrics", "mean_final", "solved", "date", "commit", "machine", "command")
SEEDS = 5
# row -> (recurrent core, what it reads (--rnn_input), memory_length, env steps per agent)
ROWS = {
    "lstm5": ("lstm", "obs", 5, 200_000), "gru5": ("gru", "obs", 5, 200_000), "none5": ("none", "", 5, 200_000),
    "lstm20": ("lstm", "obs", 20, 1_000_000), "none20": ("none", "", 20, 1_000_000),
    "lstm5_torso": ("lstm", "torso", 5, 200_000), "gru5_torso": ("gru", "torso", 5, 200_000),
    "lstm20_torso": ("lstm", "torso", 20, 1_000_000),
}
SOLVED = 0.9  # an agent whose final metric reaches this remembers the bit (chance is 0)
BREAKOUT_CSV = os.path.join(RESULTS, "memory_breakout_cpu.csv")
BREAKOUT_FIELDS = ("run", "variant", "seconds", "steady_sps", "updates", "env_steps", "cpu_s", "mean_load", "date",
                   "commit", "machine", "command")
BREAKOUT_CURVE_CSV = os.path.join(RESULTS, "memory_breakout_curve_cpu.csv")
BREAKOUT_CURVE_FIELDS = ("env_steps", "wall_time", "mean_return", "std_return", "episodes", "date", "commit",
                         "machine", "command")
FEED_FORWARD_EVALUATIONS = os.path.join(RESULTS, "gpu", "run5_progress", "evaluations.csv")
BREAKOUT_VARIANTS = {"feed-forward, 4 frames (the main job)": (),
                     "LSTM 128, 1 frame": ("--frame_stack=1", "--recurrent=lstm")}


def command(row: str, logdir: str) -> list[str]:
    recurrent, rnn_input, memory_length, steps = ROWS[row]
    return [sys.executable, "-m", "launch.anakin", "--env=gymnax/MemoryChain-bsuite",
            f"--env_kwargs={json.dumps({'memory_length': memory_length})}", f"--recurrent={recurrent}",
            *(["--rnn_input=torso"] if rnn_input == "torso" else []), "--rnn_size=64", f"--num_seeds={SEEDS}",
            "--seed=0", f"--total_steps={steps}", f"--logdir={logdir}",
            "--quiet"]


def run_row(row: str, work_dir: str) -> dict:
    logdir = os.path.join(work_dir, row)
    shutil.rmtree(logdir, ignore_errors=True)  # a row is one program: an interrupted one starts again
    cmd = command(row, logdir)
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_start, started = os.getloadavg()[0], time.perf_counter()
    subprocess.run(cmd, check=True, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    wall = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(os.path.join(logdir, "summary.json")) as f:
        finals = json.load(f)["final_metrics"]
    recurrent, rnn_input, memory_length, steps = ROWS[row]
    return dict(
        row=row, env="gymnax/MemoryChain-bsuite", recurrent=recurrent, rnn_input=rnn_input,
        memory_length=memory_length, seeds=SEEDS,
        env_steps=steps, wall_s=f"{wall:.1f}",
        cpu_s=f"{cpu_after.ru_utime + cpu_after.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime:.1f}",
        mean_load=f"{(load_start + os.getloadavg()[0]) / 2:.2f}", final_metrics=" ".join(f"{v:.2f}" for v in finals),
        mean_final=f"{sum(finals) / len(finals):.2f}", solved=f"{sum(v >= SOLVED for v in finals)}/{len(finals)}",
        date=datetime.date.today().isoformat(), commit=git_commit(), machine=machine(),
        command=shlex.join(cmd[1:]).replace(logdir, "runs/memory/" + row))


def breakout_run(run: int, variant: str, seconds: float, work_dir: str) -> dict:
    from benchmarks.common import htsrl_points, steady_sps
    from benchmarks.cpu_e2e import _timed_run

    logdir = os.path.join(work_dir, f"breakout-{run}")
    shutil.rmtree(logdir, ignore_errors=True)
    cmd = [sys.executable, "-m", "launch.hts", "--game=Breakout", *BREAKOUT_VARIANTS[variant], f"--logdir={logdir}"]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_start = os.getloadavg()[0]
    _timed_run(cmd, os.getcwd(), seconds)
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    points = htsrl_points(logdir)
    sps = steady_sps(points)
    return dict(run=run, variant=variant, seconds=f"{seconds:.0f}", steady_sps=f"{sps:.1f}" if sps else "",
                updates=len(points), env_steps=points[-1][1] if points else 0,
                cpu_s=f"{cpu_after.ru_utime + cpu_after.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime:.1f}",
                mean_load=f"{(load_start + os.getloadavg()[0]) / 2:.2f}", date=datetime.date.today().isoformat(),
                commit=git_commit(), machine=machine(),
                command=shlex.join(cmd[1:]).replace(logdir, "<dir>") + f" (stopped after {seconds:.0f} s)")


def read_rows(path: str = ROWS_CSV) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def write_rows(rows: list[dict], path: str = ROWS_CSV, fields: tuple = FIELDS) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def breakout_lines(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    lines = ["", "## Breakout without a frame stack", "",
             "Alternating runs of `benchmarks/memory.py --breakout` (its docstring says how); steady SPS from the 4th "
             "update to the last.", "",
             "| run | variant | steady SPS | updates | CPU (s) | load | machine | date | commit |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['run']} | {r['variant']} | {r['steady_sps']} | {r['updates']} | {r['cpu_s']} | {r['mean_load']} | "
              f"{r['machine']} | {r['date']} | {r['commit']} |" for r in rows]
    medians = {}
    for variant in BREAKOUT_VARIANTS:
        values = [float(r["steady_sps"]) for r in rows if r["variant"] == variant and r["steady_sps"]]
        if values:
            medians[variant] = statistics.median(values)
    if len(medians) == 2:
        ff, lstm = (medians[v] for v in BREAKOUT_VARIANTS)
        lines += ["", f"Median steady SPS: feed-forward {ff:.1f}, LSTM {lstm:.1f}: ratio {lstm / ff:.2f} "
                      "(CleanRL's LSTM PPO: about 0.4x its feed-forward script). The variants differ in their input "
                      "too: one frame is a quarter of what the first convolution reads from four, so the ratio is "
                      "that of the commands a user runs, not the cost of the LSTM alone."]
    lines += ["", "Commands:", ""] + [f"- `python {c}`" for c in dict.fromkeys(r["command"] for r in rows)]
    return lines


def breakout_curve(run_dir: str, commit: str) -> list[dict]:
    """The finished Breakout LSTM run's evaluations as `BREAKOUT_CURVE_FIELDS` rows (its command from its
    config.json; `commit`: the checkout it ran from, a worktree's, default this one's)."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    if summary.get("interrupted") or config.get("recurrent") != "lstm":
        raise SystemExit(f"error: {run_dir} is not a finished --recurrent=lstm run")
    command = (f"-m launch.hts --game=Breakout --frame_stack={config['frame_stack']} --recurrent=lstm "
               f"--total_steps={config['total_steps']} --eval_every={config['eval_every']} --seed={config['seed']}")
    evaluations = read_rows(os.path.join(run_dir, "evaluations.csv"))
    stamp = dict(date=datetime.date.fromtimestamp(os.path.getmtime(os.path.join(run_dir, "summary.json"))).isoformat(),
                 commit=commit or git_commit(), machine=machine(), command=command)
    return [dict(env_steps=e["env_steps"], wall_time=e["wall_time"], mean_return=e["mean_return"],
                 std_return=e["std_return"], episodes=e["episodes"], **stamp) for e in evaluations]


def breakout_curve_lines(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    feed_forward = {int(r["env_steps"]): r["mean_return"] for r in read_rows(FEED_FORWARD_EVALUATIONS)}
    lines = ["", "### Its first 1M steps", "",
             f"One seed, `python {rows[0]['command']}` ({rows[0]['machine']}, {rows[0]['date']}, commit "
             f"{rows[0]['commit']}); the feed-forward main job's evaluations at the same env steps from its one GPU "
             "run (`gpu/run5_progress/`, the same preset on an H200, evaluated every 500k steps). Mean return of 10 "
             "sampled-action episodes per evaluation, both seed 1. Wall time as the run had it (it may have shared "
             "the cores with other work: the SPS pairs above are the speed figures).", "",
             "| env steps | LSTM, 1 frame: return | wall (min, 2 cores) | feed-forward, 4 frames: return |",
             "| --- | --- | --- | --- |"]
    for r in rows:
        steps = int(r["env_steps"])
        near = next((v for s, v in feed_forward.items() if abs(s - steps) <= 2_048), "")
        lines.append(f"| {steps:,} | {float(r['mean_return']):.1f} | {float(r['wall_time']) / 60:.1f} | {near} |")
    return lines


def write_report(rows: list[dict]) -> None:
    lines = [
        "# Policies with memory: MemoryChain under Anakin", "",
        "Written by `benchmarks/memory.py` (its docstring says how). Each row: five seeds as five agents of one "
        "program, the preset, `--rnn_size=64`; reads: what the core reads (`--rnn_input`: obs, the observation, "
        "the MLP after the core; torso, the MLP's features); final metric = mean greedy return of an agent's last "
        f"ten evaluations (chance 0, remembering 1; solved: >= {SOLVED}).", "",
        "| memory length | core | reads | env steps / agent | final metric per seed | mean | solved | wall (min) "
        "| CPU (min) | load | machine | date | commit |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in sorted(rows, key=lambda r: (int(r["memory_length"]), r["recurrent"], r["rnn_input"])):
        lines.append(f"| {r['memory_length']} | {r['recurrent']} | {r['rnn_input'] or '-'} | "
                     f"{int(r['env_steps']):,} | {r['final_metrics']} | "
                     f"{r['mean_final']} | {r['solved']} | {float(r['wall_s']) / 60:.1f} | "
                     f"{float(r['cpu_s']) / 60:.1f} | {r['mean_load']} | {r['machine']} | {r['date']} | "
                     f"{r['commit']} |")
    lines += ["", "Commands as run at the row's commit (`runs/memory/<row>` is the row's run directory; a `_torso` "
              "row without `--rnn_input=torso` ran before the flag, when the core always read the torso):", ""]
    lines += [f"- `{r['row']}`: `python {r['command']}`" for r in rows]
    lines += breakout_lines(read_rows(BREAKOUT_CSV))
    lines += breakout_curve_lines(read_rows(BREAKOUT_CURVE_CSV))
    with open(REPORT, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, from {', '.join(ROWS)}")
    parser.add_argument("--work_dir", default="runs/memory", help="run directories (not committed)")
    parser.add_argument("--breakout", action="store_true", help="the Breakout SPS pairs instead of the rows")
    parser.add_argument("--breakout_seconds", type=float, default=190.0)
    parser.add_argument("--breakout_pairs", type=int, default=2)
    parser.add_argument("--breakout_curve", default="", help="a finished Breakout LSTM run directory: keep its curve")
    parser.add_argument("--breakout_commit", default="", help="the commit that run ran from (default: this one's)")
    args = parser.parse_args(argv)
    if args.breakout_curve:
        write_rows(breakout_curve(args.breakout_curve, args.breakout_commit), BREAKOUT_CURVE_CSV,
                   BREAKOUT_CURVE_FIELDS)
        write_report(read_rows())
        return
    if args.breakout:
        os.makedirs(RESULTS, exist_ok=True)
        for run in range(2 * args.breakout_pairs):
            rows = read_rows(BREAKOUT_CSV)
            variant = list(BREAKOUT_VARIANTS)[run % 2]
            if any(int(r["run"]) == run for r in rows):
                continue
            print(f"[memory] Breakout run {run}: {variant} ...", flush=True)
            result = breakout_run(run, variant, args.breakout_seconds, args.work_dir)
            write_rows(rows + [result], BREAKOUT_CSV, BREAKOUT_FIELDS)
            print(f"[memory] Breakout run {run}: {result['steady_sps']} SPS", flush=True)
        write_report(read_rows())
        return
    unknown = [r for r in args.rows.split(",") if r not in ROWS]
    if unknown:
        sys.exit(f"error: unknown row(s) {', '.join(unknown)}; known: {', '.join(ROWS)}")
    os.makedirs(RESULTS, exist_ok=True)
    for row in args.rows.split(","):
        rows = read_rows()
        if any(r["row"] == row for r in rows):
            continue
        print(f"[memory] {row} ...", flush=True)
        result = run_row(row, args.work_dir)
        write_rows([r for r in rows if r["row"] != row] + [result])
        print(f"[memory] {row}: {result['final_metrics']} ({result['solved']} solved), "
              f"{float(result['wall_s']) / 60:.1f} min", flush=True)
    write_report(read_rows())
    print(json.dumps({"report": REPORT}))


if __name__ == "__main__":
    main(sys.argv[1:])
