"""Third-party JAX env suites through `--env=jax/<module>:<callable>`: their factories, and a benchmark that trains
each under `launch.anakin` and `launch.hts` beside a uniformly random policy.

The factories return `(env, env_params)` with gymnax's interface (`reset_env(key, params)`, `step_env(key, state,
action, params)`, `observation_space(params)`, `action_space(params)`), as `envs.gymnax_env` reads it. The suites
are not dependencies of the package (`pip install craftax`):

    python -m launch.anakin --env=jax/benchmarks.jax_suites:craftax_classic --num_seeds=2 --total_steps=1000000

The benchmark (resumable: a finished row is kept in `results/jax_suites_cpu.csv`, an interrupted run resumes from
its checkpoint; run directories under `--work_dir`):

    PYTHONPATH=. python -m benchmarks.jax_suites [--rows=craftax_classic/anakin,...] [--steps=300000]

writes `results/jax_suites_cpu.md` (the table: SPS, wall and CPU time, load, the final metric beside the random
policy's return) and each run's evaluations to `results/jax_suites/<row>.csv`, with their plot.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import resource
import shutil
import subprocess
import sys
import time

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ROWS_CSV = os.path.join(RESULTS, "jax_suites_cpu.csv")
CURVES = os.path.join(RESULTS, "jax_suites")
REPORT = os.path.join(RESULTS, "jax_suites_cpu.md")
FIELDS = ("row", "env", "launcher", "seed", "env_steps", "wall_s", "cpu_s", "mean_load", "sps", "final_metric",
          "random_return", "date", "commit", "machine", "command")


def craftax_classic(symbolic: bool = True):
    """Craftax-Classic (Matthews et al., ICML 2024), symbolic (1,345 features) or pixels, without its own
    auto-reset (the pool resets on its own rule); its episode limit is `params.max_timesteps` (10,000)."""
    from craftax.craftax_env import make_craftax_env_from_name

    env = make_craftax_env_from_name(f"Craftax-Classic-{'Symbolic' if symbolic else 'Pixels'}-v1", auto_reset=False)
    return env, env.default_params


def navix(name: str = "Navix-DoorKey-5x5-v0"):
    """A Navix grid world (Pignatelli et al., 2024: MiniGrid in JAX) behind gymnax's interface. Navix's own `step`
    auto-resets and its observation is a Timestep, so this adapter steps its `_step` (the pool resets on its own rule),
    calls a `TERMINATION` step type a termination, and leaves truncation at `max_steps` to the pool."""
    import navix as nx

    return _NavixAsGymnax(nx.make(name)), _navix_params(nx.make(name).max_steps)


def _navix_params(max_steps: int):
    from gymnax.environments import environment

    return environment.EnvParams(max_steps_in_episode=int(max_steps))


class _NavixAsGymnax:
    """`reset_env`, `step_env`, `observation_space`, `action_space` of gymnax around a Navix environment."""

    def __init__(self, env):
        self.env = env

    def reset_env(self, key, params):
        timestep = self.env.reset(key)
        return timestep.observation, timestep

    def step_env(self, key, timestep, action, params):
        from navix.environments.environment import StepType

        timestep = self.env._step(timestep, action)
        return timestep.observation, timestep, timestep.reward, timestep.step_type == StepType.TERMINATION, {}

    def observation_space(self, params):
        from gymnax.environments import spaces

        space = self.env.observation_space
        return spaces.Box(0, int(space.maximum), tuple(space.shape), space.dtype)

    def action_space(self, params):
        from gymnax.environments import spaces

        return spaces.Discrete(int(self.env.action_space.maximum) + 1)


# A suite's layout on two cores: Craftax's observation is 1,345 features and its episodes long, so 64 envs x 64
# steps a round and a 256 x 256 MLP (purejaxrl's Craftax baseline: 1,024 envs x 64, 512 units, a GPU's scale).
SUITES = {
    "craftax_classic": ("jax/benchmarks.jax_suites:craftax_classic",
                        ("--num_envs=64", "--sync_interval=64", "--hidden_sizes=256,256")),
    # Navix's DoorKey-5x5: a 5x5x3 symbolic grid (MinAtar's CNN), the presets' 8 envs x 128 steps.
    "navix_doorkey": ("jax/benchmarks.jax_suites:navix", ("--num_envs=8",)),
}
LAUNCHERS = {"anakin": ("--num_seeds=1",), "hts": ()}


def command(row: str, steps: int, seed: int, run_dir: str, resume: bool) -> list[str]:
    suite, launcher = row.split("/")
    env, flags = SUITES[suite]
    return [sys.executable, "-m", f"launch.{launcher}", f"--env={env}", *flags, *LAUNCHERS[launcher],
            f"--total_steps={steps}", f"--eval_every={steps // 10}", "--eval_episodes=10", f"--seed={seed}",
            f"--logdir={run_dir}", "--quiet", *(["--resume"] if resume else [])]


def _done_rows() -> dict:
    if not os.path.exists(ROWS_CSV):
        return {}
    with open(ROWS_CSV) as f:
        return {r["row"]: r for r in csv.DictReader(f)}


def _write_rows(rows: dict) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    with open(ROWS_CSV + ".tmp", "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(rows[k] for k in sorted(rows))
    os.replace(ROWS_CSV + ".tmp", ROWS_CSV)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_row(row: str, steps: int, seed: int, work_dir: str) -> dict:
    """Trains one row (resuming its run directory if a part was cut off) and returns its table row."""
    from benchmarks.learning import random_return
    from systems.common import hardware

    run_dir = os.path.join(work_dir, row.replace("/", "-") + f"-s{seed}")
    resume = os.path.isdir(os.path.join(run_dir, "checkpoints"))
    argv = command(row, steps, seed, run_dir, resume)
    shown = " ".join(["python", *command(row, steps, seed, run_dir, False)[1:]])
    print("[jax_suites]", " ".join(argv), flush=True)
    start, before = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    load_start = os.getloadavg()[0]
    subprocess.run(argv, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    os.makedirs(CURVES, exist_ok=True)
    shutil.copyfile(os.path.join(run_dir, "evaluations.csv"), os.path.join(CURVES, row.replace("/", "-") + ".csv"))
    env = SUITES[row.split("/")[0]][0]
    # A run finished in an earlier part (resumed here) keeps that part's wall time in its summary; the CPU time of
    # the parts before this one was not metered.
    wall = summary["wall_time"] if resume else time.time() - start
    return dict(row=row, env=env, launcher=row.split("/")[1], seed=seed, env_steps=summary["env_steps"],
                wall_s=f"{wall:.1f}", cpu_s="" if resume else f"{cpu:.1f}",
                mean_load=f"{(load_start + os.getloadavg()[0]) / 2:.2f}", sps=f"{summary['sps']:.0f}",
                final_metric=f"{summary['final_metric']:.3f}", random_return=f"{random_return(env):.3f}",
                date=datetime.date.today().isoformat(), commit=_commit(),
                machine=hardware.describe(hardware.card()), command=shown)


def _plot(rows: dict) -> str | None:
    """One panel per suite: each row's evaluation returns over env steps, the random policy's as a line."""
    from matplotlib.figure import Figure

    suites = sorted({r["row"].split("/")[0] for r in rows.values()})
    if not suites:
        return None
    figure = Figure(figsize=(5 * len(suites), 3.5))
    for i, suite in enumerate(suites):
        axis = figure.add_subplot(1, len(suites), i + 1)
        for row in sorted(r for r in rows if r.startswith(suite + "/")):
            with open(os.path.join(CURVES, row.replace("/", "-") + ".csv")) as f:
                points = [(int(p["env_steps"]), float(p["mean_return"])) for p in csv.DictReader(f)]
            axis.plot(*zip(*points, strict=True), marker="o", label=row.split("/")[1])
            random = float(rows[row]["random_return"])
        axis.axhline(random, color="grey", linestyle="--", label="random policy")
        axis.set(title=suite, xlabel="env steps", ylabel="evaluation return (10 episodes)")
        axis.legend()
    path = os.path.join(CURVES, "curves.png")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    return path


def _minutes(seconds: str) -> str:
    return f"{float(seconds) / 60:.1f}" if seconds else "n/a"


def write_report(rows: dict) -> None:
    note = ("One seed a row; final metric: the run's own, the mean return of its last ten evaluations (10 episodes "
            "each, sampled actions); random: a uniformly random policy's mean return over 100 episodes "
            "(`learning_random_returns.csv`). SPS and wall time over the run (the launcher's own clock: compile and "
            "evaluation included); CPU time the launcher process's (n/a: a run resumed after it finished, whose first "
            "part was not metered); load the 1-minute load average at start and end, averaged.")
    lines = ["# Third-party JAX env suites under Anakin and HTS (`--env=jax/<module>:<callable>`)", "",
             "Machine: " + "; ".join(sorted({r["machine"] for r in rows.values()})) + ". Dates: "
             + ", ".join(sorted({r["date"] for r in rows.values()})) + ". Command: `PYTHONPATH=. python -m "
             "benchmarks.jax_suites` (each row's own command below). " + note, "",
             "| env | launcher | env steps | SPS | wall (min) | CPU (min) | load | final metric | random | command |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for key in sorted(rows):
        r = rows[key]
        lines.append(f"| {r['env']} | {r['launcher']} | {int(r['env_steps']):,} | {int(r['sps']):,} | "
                     f"{float(r['wall_s']) / 60:.1f} | {_minutes(r['cpu_s'])} | {r['mean_load']} | "
                     f"{float(r['final_metric']):.2f} | {float(r['random_return']):.2f} | `{r['command']}` |")
    plot = _plot(rows)
    if plot:
        lines += ["", f"![curves.png](jax_suites/{os.path.basename(plot)})"]
    with open(REPORT, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(f"{s}/{ln}" for s in SUITES for ln in LAUNCHERS))
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work_dir", default="runs/jax_suites")
    parser.add_argument("--report_only", action="store_true")
    args = parser.parse_args(argv)
    rows = _done_rows()
    for row in [] if args.report_only else args.rows.split(","):
        if row in rows:
            continue
        rows[row] = run_row(row, args.steps, args.seed, args.work_dir)
        _write_rows(rows)
        write_report(rows)
    write_report(rows)


if __name__ == "__main__":
    main()
