"""Seed 000's section 4.2 theory against simulation and real runs (Fig. 3), and seed 004's Proposition 1 bound
against the measured consensus distance (Fig. 2a).

* Fig. 3(a) (`fig3a.png`): expected runtime against the step-time variance 1/beta^2 at alpha = 4. Left, the unitless
  model of Claim 1: Eq. (7) (`analysis.theory.expected_runtime`), its exact value (`exact_runtime`, the
  expectation Eq. (7) approximates) and the Monte Carlo simulation (`simulate_runtime`, mean +- standard error).
  Right, real runs on CartPole-v1 with `--step_time=exp:MEAN` (beta = 1 / MEAN, variance MEAN^2): HTS-RL
  (`python -m launch.hts`, alpha = sync_interval = 4) and the synchronous baseline (`python -m launch.sync`, which
  waits for every env at every step: alpha = 1 in Claim 1's terms), in seconds per K env steps, against Eq. (7) in
  seconds with the same beta, with c = 0 (lines) and with the measured compute time (dashed; below).
* Fig. 3(b) (`fig3b.png`): runtime against alpha at beta = 2 (left, model) and real HTS runs at several
  sync intervals with a fixed step-time mean (right; the sync baseline as the alpha = 1 point of its own).
* Fig. 3(c) (`fig3c.png`): Claim 2's E[L] = n rho_0 / (1 - n rho_0) against n for lambda_0 = 100, mu = 4000, its
  event simulation (`simulate_policy_lag`), and the mean and maximum policy lag our HTS-RL runs log
  (`progress.csv` column policy_lag, `summary.json` max_policy_lag) with 1, 2, 4 and 8 actor threads: one.
* Fig. 2a of seed 004 (`fig2a.png`): GALA-A2C (`python -m launch.gala`, 4 learners on CartPole-v1): the distance of
  the learners' parameters from consensus and the Proposition 1 bound, both from `progress.csv` (consensus_distance,
  consensus_bound; `agents.gossip.ConsensusBound`), in the lock-step pmap mode (4 forced CPU devices), where the bound
  is an exact guarantee, and in the async thread mode, where it is fed per round of all learners and is an estimate.

Real runtimes: the steady-state time to collect K env steps, K (wall_time difference) / (env_steps difference)
between the first and the last row of `progress.csv` (JIT compilation and start-up excluded). Claim 1 charges every
step an actor compute time c; here c is measured, not assumed: each configuration (system, alpha) is also run with
no step time, and its time per K steps there, T_0 = K c / n, is added to Eq. (7) ("model + c"). The sync baseline's
T_0 also holds its learning time, which rollouts wait for; HTS overlaps learning with collection. Every run is its
own subprocess (the launcher, as a user runs it) with a hard timeout; the CPU time other processes used meanwhile is
recorded (`benchmarks.common.background_cores`), because on a shared 2-core machine it inflates the times.

Usage:
  PYTHONPATH=. python -m benchmarks.claims            # about 5 min on 2 idle CPU cores (21 training runs)
  PYTHONPATH=. python -m benchmarks.claims --quick    # 7 short runs (~1 min idle); writes *_quick files
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from analysis import theory
from benchmarks.common import background_cores, cpu_ticks_by_pid, die_with_parent, fmt, git_commit, machine, median

_QUICK = flags.DEFINE_bool("quick", False, "Fewer and shorter runs, fewer simulation trials; writes *_quick files.")
_OUT_DIR = flags.DEFINE_string("out_dir", "benchmarks/results", "Directory for the Markdown table and CSVs.")
_NAME = flags.DEFINE_string("name", "claims_cpu", "Base name of the output files (quick mode adds _quick).")
_SKIP_REAL = flags.DEFINE_bool("skip_real", False, "Only the model and simulation parts (no training runs).")

# Claim 1 model panels (Fig. 3(a, b)): n envs, K states; K / n = 384 is a multiple of every alpha in 1..128.
N_ENVS = 16
K_STATES = 6144
FIG3A_ALPHA = 4
FIG3B_BETA = 2.0
# Claim 2 (Fig. 3(c)): GFootball's numbers from seed 000, section 4.2.
LAMBDA0 = 100.0
MU = 4000.0
# Real runs: CartPole-v1, A2C (cheap updates, so env step times dominate), 2 HTS actor threads.
ENV_ID = "CartPole-v1"
ALGO = "a2c"
NUM_ACTORS = 2
SYNC_ROLLOUT = 4  # the sync baseline's rollout length (its sync_interval); it still waits at every step
GALA_LEARNERS = 4
GALA_ENVS = 16
GALA_HORIZON = 5
COMPUTE_GUESS_S = 1.5e-4  # per env step, only to size the runs
RUN_TIMEOUT_S = 240
BUSY_CORES = 0.5  # background CPU cores above which a run counts as measured on a busy machine


@dataclasses.dataclass(frozen=True)
class Settings:
    """Sizes of one benchmark invocation (full or quick)."""

    fig3a_means_ms: tuple  # step-time means of Fig. 3(a)'s real runs
    fig3b_mean_ms: float  # step-time mean of Fig. 3(b)'s real runs
    fig3b_alphas: tuple  # HTS sync intervals of Fig. 3(b)'s real runs
    lag_actors: tuple  # HTS actor threads of Fig. 3(c)'s real runs
    lag_mean_ms: float  # their step-time mean (alpha = FIG3A_ALPHA)
    gala_modes: tuple  # "pmap" and / or "async"
    gala_steps: int
    target_s: float  # measured (steady-state) seconds per real run
    min_rounds: int  # logged rounds per real run, at least
    trials: int  # Claim 1 simulation trials per point
    lag_samples: int  # Claim 2 simulation samples per point
    fig3a_variances: tuple = (0.25, 0.5, 1.0, 2.0, 3.0, 4.0)
    fig3b_alphas_model: tuple = (1, 2, 4, 8, 16, 32, 64)
    fig3c_ns: tuple = (1, 2, 4, 8, 16, 24, 32, 36, 38)


FULL = Settings(
    fig3a_means_ms=(1.0, 2.0, 4.0, 8.0), fig3b_mean_ms=4.0, fig3b_alphas=(1, 4, 16, 64), lag_actors=(1, 2, 4, 8),
    lag_mean_ms=1.0, gala_modes=("pmap", "async"), gala_steps=32_000, target_s=6.0, min_rounds=15, trials=1000,
    lag_samples=2_000_000,
)
QUICK = Settings(
    fig3a_means_ms=(2.0, 8.0), fig3b_mean_ms=8.0, fig3b_alphas=(4,), lag_actors=(NUM_ACTORS,), lag_mean_ms=2.0,
    gala_modes=("pmap",),
    gala_steps=8_000, target_s=2.5, min_rounds=8, trials=200, lag_samples=200_000,
    fig3a_variances=(0.25, 1.0, 4.0), fig3b_alphas_model=(1, 4, 16, 64), fig3c_ns=(1, 8, 16, 32),
)


@dataclasses.dataclass(frozen=True)
class RealRun:
    """One training run through a launcher."""

    system: str  # "hts", "sync" or "gala"
    sync_interval: int  # the launcher's --sync_interval (HTS: alpha)
    step_mean_ms: float  # exponential step-time mean; 0: no step time
    total_steps: int
    num_actors: int = NUM_ACTORS  # HTS actor threads
    gossip: str = ""  # GALA: "async" or "pmap"

    @property
    def claim1_alpha(self) -> int:
        """Steps between synchronizations in Claim 1's terms (the sync baseline waits at every step)."""
        return 1 if self.system == "sync" else self.sync_interval

    @property
    def step_time(self) -> str:
        return f"exp:{self.step_mean_ms / 1000:g}" if self.step_mean_ms else "none"

    def command(self, logdir: str) -> list[str]:
        args = [
            sys.executable, "-m", f"launch.{self.system}", f"--env={ENV_ID}", f"--sync_interval={self.sync_interval}",
            f"--total_steps={self.total_steps}", "--eval_episodes=0", "--checkpoint_every=0", "--quiet",
            f"--logdir={logdir}", f"--step_time={self.step_time}",
        ]
        if self.system == "gala":
            return args + [f"--num_learners={GALA_LEARNERS}", f"--envs_per_learner={GALA_ENVS}",
                           f"--gossip={self.gossip}"]
        args += [f"--algo={ALGO}", f"--num_envs={N_ENVS}"]
        return args + ([f"--num_actors={self.num_actors}"] if self.system == "hts" else [])

    def env(self) -> dict:
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        if self.gossip == "pmap":  # one learner per device (read once, when JAX starts)
            env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={GALA_LEARNERS}"
        return env


# --------------------------------------------------------------------------------------------------------------
# Running and reading one real run.


def _read_csv(path: str) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _float(value) -> float | None:
    return float(value) if value not in (None, "") else None


def seconds_per_k(progress: list[dict], k: int) -> float | None:
    """Steady-state seconds to collect k env steps: between the first and the last progress row."""
    if len(progress) < 2:
        return None
    first, last = progress[0], progress[-1]
    steps = int(last["env_steps"]) - int(first["env_steps"])
    span = float(last["wall_time"]) - float(first["wall_time"])
    return k * span / steps if steps > 0 and span > 0 else None


def execute(run: RealRun, timeout_s: float = RUN_TIMEOUT_S) -> dict:
    """Runs the launcher in a fresh process; returns what the tables and figures need, 'error' on failure."""
    logdir = tempfile.mkdtemp(prefix=f"claims-{run.system}-")
    started = time.strftime("%H:%M:%S")
    before = cpu_ticks_by_pid()
    t0 = time.perf_counter()
    proc = subprocess.Popen(run.command(logdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=run.env(), preexec_fn=die_with_parent)
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
        error = None if proc.returncode == 0 else f"exit {proc.returncode}: " + " | ".join(
            stderr.strip().splitlines()[-2:])
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        error = f"timeout after {timeout_s:.0f} s"
    wall = time.perf_counter() - t0
    result = {"wall_s": wall, "started": started, "error": error,
              "background_cores": background_cores(before, cpu_ticks_by_pid(), wall, {os.getpid(), proc.pid})}
    try:
        if error is None:
            progress = _read_csv(os.path.join(logdir, "progress.csv"))
            with open(os.path.join(logdir, "summary.json")) as f:
                summary = json.load(f)
            lags = [int(r["policy_lag"]) for r in progress if r.get("policy_lag") not in (None, "")]
            result.update(
                rows=len(progress), env_steps=summary["env_steps"], s_per_k=seconds_per_k(progress, K_STATES),
                summary_max_policy_lag=summary.get("max_policy_lag"),
                lag_first=lags[0] if lags else None, lag_max=max(lags) if lags else None,
                lag_mean=sum(lags) / len(lags) if lags else None,
                lag_mean_after_first=sum(lags[1:]) / len(lags[1:]) if len(lags) > 1 else None,
                consensus=[(int(r["update"]), _float(r["consensus_distance"]), _float(r["consensus_bound"]))
                           for r in progress if run.system == "gala"],
            )
    except (OSError, KeyError, ValueError) as exc:
        result["error"] = f"unreadable outputs: {exc}"
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    return result


def total_steps_for(system: str, alpha: int, mean_ms: float, settings: Settings, num_envs: int = N_ENVS) -> int:
    """Whole rounds, at least `min_rounds`, for about `target_s` of steady-state time by the Claim 1 model."""
    per_round = num_envs * alpha
    claim1_alpha = 1 if system == "sync" else alpha
    per_step = COMPUTE_GUESS_S
    if mean_ms:
        per_step += theory.expected_runtime(K_STATES, num_envs, claim1_alpha, 1000.0 / mean_ms) / K_STATES
    rounds = max(settings.min_rounds, math.ceil(settings.target_s / (per_step * per_round)))
    return rounds * per_round


# --------------------------------------------------------------------------------------------------------------
# Claim 1 and Claim 2: model and simulation.


def claim1_model_rows(settings: Settings) -> list[dict]:
    rows = []
    points = [("3a", FIG3A_ALPHA, v ** -0.5) for v in settings.fig3a_variances]
    points += [("3b", a, FIG3B_BETA) for a in settings.fig3b_alphas_model]
    points.append(("3b", K_STATES // N_ENVS, FIG3B_BETA))  # alpha = K / n: one round, the asynchronous time
    for seed, (figure, alpha, beta) in enumerate(points):
        eq7 = theory.expected_runtime(K_STATES, N_ENVS, alpha, beta)
        exact = theory.exact_runtime(K_STATES, N_ENVS, alpha, beta)
        sim = theory.simulate_runtime(K_STATES, N_ENVS, alpha, beta, trials=settings.trials, seed=seed)
        rows.append(dict(figure=figure, n=N_ENVS, K=K_STATES, alpha=alpha, beta=beta, variance=beta ** -2,
                         eq7=eq7, exact=exact, sim_mean=sim.mean, sim_stderr=sim.stderr,
                         eq7_over_sim=eq7 / sim.mean - 1, eq7_over_exact=eq7 / exact - 1,
                         sim_z=(sim.mean - exact) / sim.stderr))
    return rows


def claim2_rows(settings: Settings) -> list[dict]:
    rows = []
    for n in settings.fig3c_ns:
        formula = theory.expected_policy_lag(n, LAMBDA0 / MU)
        sim = theory.simulate_policy_lag(n, LAMBDA0, MU, num_samples=settings.lag_samples, seed=n)
        rows.append(dict(n=n, load=n * LAMBDA0 / MU, formula=formula, sim_mean=sim.mean, sim_stderr=sim.stderr,
                         sim_over_formula=sim.mean / formula - 1))
    return rows


# --------------------------------------------------------------------------------------------------------------
# Real runs.


def real_runs(settings: Settings, log) -> tuple[list[dict], dict]:
    """Runs every real configuration once (shared ones once); returns the per-run rows and results by run."""
    planned: list[tuple[str, RealRun]] = []

    def plan(figure: str, run: RealRun):
        planned.append((figure, run))

    def timed(system: str, alpha: int, mean_ms: float) -> RealRun:
        return RealRun(system, alpha, mean_ms, total_steps_for(system, alpha, mean_ms, settings))

    for mean in settings.fig3a_means_ms:
        plan("3a", timed("hts", FIG3A_ALPHA, mean))
        plan("3a", timed("sync", SYNC_ROLLOUT, mean))
    for alpha in settings.fig3b_alphas:
        plan("3b", timed("hts", alpha, settings.fig3b_mean_ms))
    plan("3b", timed("sync", SYNC_ROLLOUT, settings.fig3b_mean_ms))
    compute = {(r.system, r.sync_interval) for _, r in planned}
    for system, alpha in sorted(compute):
        plan("c", timed(system, alpha, 0.0))
    for actors in settings.lag_actors:
        plan("3c", dataclasses.replace(timed("hts", FIG3A_ALPHA, settings.lag_mean_ms), num_actors=actors))
    for mode in settings.gala_modes:
        plan("2a", RealRun("gala", GALA_HORIZON, 0.0, settings.gala_steps, gossip=mode))

    results: dict[RealRun, dict] = {}
    rows = []
    for figure, run in planned:
        if run not in results:
            results[run] = execute(run)
            r = results[run]
            log(f"{figure:>3} {run.system:<5}{run.gossip:<6} alpha {run.sync_interval:<3} actors {run.num_actors} "
                f"step {run.step_time:<10} steps {run.total_steps:>6}: s/K {fmt(r.get('s_per_k'), 3)}, lag max "
                f"{r.get('lag_max')}, {r['wall_s']:.1f} s, background {fmt(r['background_cores'], 2)} cores"
                + (f"  ERROR {r['error']}" if r["error"] else ""))
        r = results[run]
        rows.append(dict(
            figure=figure, system=run.system + (f"-{run.gossip}" if run.gossip else ""),
            sync_interval=run.sync_interval, claim1_alpha=run.claim1_alpha, num_actors=run.num_actors,
            num_envs=GALA_LEARNERS * GALA_ENVS if run.system == "gala" else N_ENVS, step_time=run.step_time,
            total_steps=run.total_steps, s_per_k=r.get("s_per_k"), lag_first=r.get("lag_first"),
            lag_mean=r.get("lag_mean"), lag_max=r.get("lag_max"),
            summary_max_policy_lag=r.get("summary_max_policy_lag"), wall_s=r["wall_s"], started=r["started"],
            background_cores=r["background_cores"], error=r["error"] or "",
        ))
    return rows, results


def claim1_real_rows(settings: Settings, results: dict) -> list[dict]:
    """Measured seconds per K steps against Eq. (7) with beta = 1 / mean, c = 0 and c measured."""
    by_config = {(r.system, r.sync_interval, r.step_mean_ms): (r, v) for r, v in results.items()
                 if r.system in ("hts", "sync") and r.num_actors == NUM_ACTORS}
    rows = []
    points = [("3a", s, FIG3A_ALPHA if s == "hts" else SYNC_ROLLOUT, m) for m in settings.fig3a_means_ms
              for s in ("hts", "sync")]
    points += [("3b", "hts", a, settings.fig3b_mean_ms) for a in settings.fig3b_alphas]
    points.append(("3b", "sync", SYNC_ROLLOUT, settings.fig3b_mean_ms))
    for figure, system, interval, mean in points:
        run, result = by_config[(system, interval, mean)]
        _, base = by_config[(system, interval, 0.0)]
        model = theory.expected_runtime(K_STATES, N_ENVS, run.claim1_alpha, 1000.0 / mean)
        t0 = base.get("s_per_k")
        with_c = model + t0 if t0 is not None else None
        measured = result.get("s_per_k")
        rows.append(dict(
            figure=figure, system=system, sync_interval=interval, claim1_alpha=run.claim1_alpha, step_mean_ms=mean,
            variance_ms2=mean ** 2, measured_s_per_k=measured, model_c0=model, compute_s_per_k=t0,
            c_us_per_step=t0 * N_ENVS / K_STATES * 1e6 if t0 is not None else None, model_with_c=with_c,
            measured_over_model_c=measured / with_c if measured and with_c else None,
            measured_over_model_c0=measured / model if measured else None,
            background_cores=result["background_cores"], compute_background_cores=base["background_cores"],
            error="; ".join(e for e in (result["error"], base["error"]) if e),
        ))
    return rows


def lag_rows(settings: Settings, results: dict) -> list[dict]:
    rows = []
    for actors in settings.lag_actors:
        run = next(r for r in results
                   if r.system == "hts" and r.num_actors == actors and r.step_mean_ms == settings.lag_mean_ms
                   and r.sync_interval == FIG3A_ALPHA)
        res = results[run]
        rows.append(dict(actors=actors, num_envs=N_ENVS, alpha=run.sync_interval, step_time=run.step_time,
                         updates=res.get("rows"), lag_first=res.get("lag_first"), lag_mean=res.get("lag_mean"),
                         lag_mean_after_first=res.get("lag_mean_after_first"), lag_max=res.get("lag_max"),
                         summary_max_policy_lag=res.get("summary_max_policy_lag"), error=res["error"] or ""))
    return rows


def gala_rows(results: dict) -> list[dict]:
    rows = []
    for run, res in results.items():
        if run.system != "gala":
            continue
        pairs = [(u, d, b) for u, d, b in res.get("consensus", []) if d is not None and b is not None]
        ratios = [d / b for _, d, b in pairs if b > 0]
        rows.append(dict(
            mode=run.gossip, learners=GALA_LEARNERS, envs_per_learner=GALA_ENVS, horizon=GALA_HORIZON,
            env_steps=res.get("env_steps"), points=len(pairs),
            max_distance=max((d for _, d, _ in pairs), default=None),
            max_bound=max((b for _, _, b in pairs), default=None),
            max_ratio=max(ratios, default=None), median_ratio=median(ratios),
            within_bound=(all(d <= b for _, d, b in pairs) if pairs else None),
            violations=sum(d > b for _, d, b in pairs), distinct_distances=len({d for _, d, _ in pairs}),
            background_cores=res["background_cores"],
            error=res["error"] or "",
        ))
    return rows


# --------------------------------------------------------------------------------------------------------------
# Figures.


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plain_log_ticks(ax) -> None:
    """Tick labels as plain numbers (not 10^x) on log axes."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() == "log" and axis.get_transform().base == 10:
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def _model_panel(ax, xs, line_x, model_rows, key, xlabel, title):
    line = [theory.expected_runtime(K_STATES, N_ENVS, a, b) for a, b in line_x]
    exact = [theory.exact_runtime(K_STATES, N_ENVS, a, b) for a, b in line_x]
    ax.plot(xs, line, "-", color="C0", label="Eq. (7)")
    ax.plot(xs, exact, ":", color="C2", label="exact E (integral)")
    ax.errorbar([r[key] for r in model_rows], [r["sim_mean"] for r in model_rows],
                yerr=[r["sim_stderr"] for r in model_rows], fmt="o", color="C1", ms=4, capsize=3,
                label="simulation (mean +- s.e.)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"expected runtime for K={K_STATES} (units of 1/beta)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def plot_fig3a(path: str, model_rows: list[dict], real_rows: list[dict], settings: Settings) -> None:
    import numpy as np

    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    rows = [r for r in model_rows if r["figure"] == "3a"]
    grid = np.linspace(0.25, 4.0, 40)
    _model_panel(axes[0], grid, [(FIG3A_ALPHA, v ** -0.5) for v in grid], rows, "variance",
                 "step-time variance 1/beta^2", f"Claim 1 model: n={N_ENVS}, alpha={FIG3A_ALPHA}, Exp(beta) steps")
    ax = axes[1]
    real = [r for r in real_rows if r["figure"] == "3a"]
    if real:
        means = np.geomspace(min(settings.fig3a_means_ms) / 1.3, max(settings.fig3a_means_ms) * 1.3, 40)
        for system, alpha, color in (("hts", FIG3A_ALPHA, "C0"), ("sync", 1, "C3")):
            points = [r for r in real if r["system"] == system]
            model = [theory.expected_runtime(K_STATES, N_ENVS, alpha, 1000.0 / m) for m in means]
            ax.plot(means ** 2, model, "-", color=color, lw=1, label=f"Eq. (7), alpha={alpha}, c=0")
            offset = median(r["compute_s_per_k"] for r in points)
            if offset is not None:
                ax.plot(means ** 2, np.add(model, offset), "--", color=color, lw=1,
                        label=f"Eq. (7) + measured c ({system})")
            ax.plot([r["variance_ms2"] for r in points], [r["measured_s_per_k"] for r in points], "o" if
                    system == "hts" else "s", color=color, label=f"measured {system.upper()} (launch.{system})")
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("step-time variance MEAN^2 (ms^2), exp:MEAN step times")
    ax.set_ylabel(f"seconds per K={K_STATES} env steps")
    ax.set_title(f"Real runs: {ENV_ID}, n={N_ENVS}, HTS alpha={FIG3A_ALPHA}, sync waits every step", fontsize=9)
    _finish_real_panel(plt, fig, ax, path, bool(real))



def _finish_real_panel(plt, fig, ax, path: str, has_runs: bool) -> None:
    """Legend and ticks of a real-runs panel (or a note that there were none), then save and close the figure."""
    if has_runs:
        ax.legend(fontsize=7)
        _plain_log_ticks(ax)
    else:
        ax.text(0.5, 0.5, "no real runs", ha="center", va="center", transform=ax.transAxes)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

def plot_fig3b(path: str, model_rows: list[dict], real_rows: list[dict], settings: Settings) -> None:
    import numpy as np

    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    rows = [r for r in model_rows if r["figure"] == "3b" and r["alpha"] <= 64]
    grid = np.arange(1, 65)
    _model_panel(axes[0], grid, [(int(a), FIG3B_BETA) for a in grid], rows, "alpha",
                 "synchronization interval alpha", f"Claim 1 model: n={N_ENVS}, beta={FIG3B_BETA:g}")
    axes[0].set_xscale("log", base=2)
    ax = axes[1]
    real = [r for r in real_rows if r["figure"] == "3b"]
    if real:
        beta = 1000.0 / settings.fig3b_mean_ms
        alphas = np.arange(1, max(settings.fig3b_alphas) + 1)
        ax.plot(alphas, [theory.expected_runtime(K_STATES, N_ENVS, int(a), beta) for a in alphas], "-", color="C0",
                lw=1, label="Eq. (7), c=0")
        hts = [r for r in real if r["system"] == "hts"]
        ax.plot([r["claim1_alpha"] for r in hts], [r["model_with_c"] for r in hts], "x", color="C0", ms=8,
                label="Eq. (7) + measured c (HTS)")
        ax.plot([r["claim1_alpha"] for r in hts], [r["measured_s_per_k"] for r in hts], "o", color="C0",
                label="measured HTS (launch.hts)")
        sync = [r for r in real if r["system"] == "sync"]
        ax.plot([1] * len(sync), [r["model_with_c"] for r in sync], "x", color="C3", ms=8,
                label="Eq. (7) + measured c (sync)")
        ax.plot([1] * len(sync), [r["measured_s_per_k"] for r in sync], "s", color="C3",
                label="measured sync (launch.sync)")
        ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0)
    ax.set_xlabel("synchronization interval alpha")
    ax.set_ylabel(f"seconds per K={K_STATES} env steps")
    ax.set_title(f"Real runs: {ENV_ID}, n={N_ENVS}, exp:{settings.fig3b_mean_ms / 1000:g} step times "
                 f"(beta={1000.0 / settings.fig3b_mean_ms:g}/s)", fontsize=9)
    _finish_real_panel(plt, fig, ax, path, bool(real))


def plot_fig3c(path: str, lag_model: list[dict], lags: list[dict]) -> None:
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ns = np.arange(1, int(MU / LAMBDA0))
    ax.plot(ns, [theory.expected_policy_lag(int(n), LAMBDA0 / MU) for n in ns], "-", color="C0",
            label="Claim 2: n rho0 / (1 - n rho0)")
    ax.errorbar([r["n"] for r in lag_model], [r["sim_mean"] for r in lag_model],
                yerr=[r["sim_stderr"] for r in lag_model], fmt="o", color="C1", ms=4, capsize=3,
                label="M/M/1 event simulation")
    ax.axhline(1.0, color="C2", lw=1, ls="--", label="HTS-RL: one-step delay (Eq. 6)")
    ok = [r for r in lags if r["lag_max"] is not None]
    ax.plot([r["actors"] for r in ok], [r["lag_max"] for r in ok], "^", color="C2", ms=8,
            label="HTS runs: max policy_lag")
    ax.plot([r["actors"] for r in ok], [r["lag_mean"] for r in ok], "v", color="C4", ms=7,
            label="HTS runs: mean policy_lag (0 at the first update)")
    ax.set_yscale("log")
    _plain_log_ticks(ax)
    ax.set_xlabel("number of actors n")
    ax.set_ylabel("expected latency E[L] (learner updates)")
    ax.set_title(f"Claim 2: lambda0={LAMBDA0:g}/s, mu={MU:g}/s; HTS on {ENV_ID} with {N_ENVS} envs", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_fig2a(path: str, results: dict) -> None:
    plt = _pyplot()
    runs = [(r, v) for r, v in results.items() if r.system == "gala"]
    fig, axes = plt.subplots(1, max(1, len(runs)), figsize=(5.5 * max(1, len(runs)), 4.2), squeeze=False)
    for ax, (run, res) in zip(axes[0], runs, strict=False):
        pairs = [(u, d, b) for u, d, b in res.get("consensus", []) if d is not None and b is not None]
        ax.plot([p[0] for p in pairs], [p[2] for p in pairs], "-", color="C3", lw=1, label="Proposition 1 bound")
        ax.plot([p[0] for p in pairs], [p[1] for p in pairs], "-", color="C0", lw=1,
                label="measured ||X - X_bar||_F")
        ax.set_yscale("log")
        ax.set_xlabel("update (progress.csv 'update')")
        ax.set_ylabel("distance from consensus")
        guarantee = ("exact bound" if run.gossip == "pmap"
                     else "bound an estimate; flat stretches: rows logged late repeat a later state")
        ax.set_title(f"GALA-A2C {run.gossip}: {GALA_LEARNERS} learners x {GALA_ENVS} envs, {ENV_ID}\n({guarantee})",
                     fontsize=8)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, which="both")
        _plain_log_ticks(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------------------------
# Outputs.


def _write_csv(path: str, rows: list[dict]) -> None:
    if not rows:
        return
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _yes_no(value) -> str:
    return "n/a" if value is None else ("yes" if value else "**no**")


def _real_reading(real: list[dict]) -> list[str]:
    """Summary lines of the real-run table: agreement where the step time dominates and where compute does."""
    lines = []
    step_bound = [r for r in real if r["measured_over_model_c"] and r["model_c0"] >= 2 * r["compute_s_per_k"]]
    compute_bound = [r for r in real if r["measured_over_model_c"] and r["model_c0"] < 2 * r["compute_s_per_k"]]
    for label, rows in (("step time dominates (Eq. (7) c=0 >= 2 T_0)", step_bound),
                        ("compute is comparable (Eq. (7) c=0 < 2 T_0)", compute_bound)):
        if rows:
            ratios = [r["measured_over_model_c"] for r in rows]
            lines.append(f"- {label}: {len(rows)} rows, measured / (model + c) median {median(ratios):.2f}, range "
                         f"{min(ratios):.2f} to {max(ratios):.2f}.")
    pairs = {(r["figure"], r["step_mean_ms"], r["system"]): r["measured_s_per_k"] for r in real if r["figure"] == "3a"}
    speedups = [(mean, pairs[("3a", mean, "sync")] / pairs[("3a", mean, "hts")])
                for (_, mean, system) in pairs if system == "hts" and pairs.get(("3a", mean, "sync"))
                and pairs[("3a", mean, "hts")]]
    if speedups:
        lines.append("- Fig. 3(a) real: HTS speed-up over sync (sync s/K over HTS s/K) by step mean: "
                     + ", ".join(f"{mean:g} ms {ratio:.2f}x" for mean, ratio in sorted(speedups)) + ".")
    return lines


def markdown(*, command, started, minutes, settings, model, lag_model, real, lags, gala, run_rows, figures) -> str:
    lines = [
        *_header_lines(command, started, minutes, run_rows, figures),
        *_claim1_model_lines(settings, model),
        *_claim1_real_lines(real),
        *_claim2_lines(settings, lag_model),
        *_hts_lag_lines(settings, lags),
        *_gala_lines(gala),
        "",
    ]
    return "\n".join(lines)


def _header_lines(command, started, minutes, run_rows, figures) -> list[str]:
    """Title, machine, command, machine load during the real runs, figures."""
    loads = [r["background_cores"] for r in run_rows if r["background_cores"] is not None]
    busy_runs = sum(load > BUSY_CORES for load in loads)
    return [
        "# Seed 000 section 4.2 (Claims 1 and 2, Fig. 3) and seed 004 Proposition 1 (Fig. 2a): theory vs "
        "simulation vs real runs (CPU)",
        "",
        f"- Machine: {machine()} (no GPU). Date: {started:%Y-%m-%d %H:%M %Z}. Commit: {git_commit()}. Wall time: "
        f"{minutes:.1f} min.",
        f"- Command: `{command}` (from the repository root).",
        f"- Machine load: CPU cores used by *other* processes during each real run (from /proc, the background "
        f"columns): median {fmt(median(loads), 2)}, max {fmt(max(loads, default=None), 2)}; "
        + (f"**{busy_runs} of {len(loads)} runs had more than {BUSY_CORES:g} cores taken by other jobs** (a shared "
           "2-core machine): their times are inflated and noisier than on an idle machine." if busy_runs
           else f"no run had more than {BUSY_CORES:g} cores taken by other jobs."),
        "- Formulas and simulations: `analysis/theory.py` (tests: `tests/analysis/test_theory.py`). Figures: "
        + ", ".join(f"`{p}`" for p in figures) + ".",
        "",
    ]


def _claim1_model_lines(settings: Settings, model: list[dict]) -> list[str]:
    """Claim 1 section: Eq. (7) against its exact value and the simulation (unitless)."""
    lines = [
        "## Claim 1 (Eq. 7): model vs exact vs simulation (Fig. 3(a, b), unitless)",
        "",
        f"n = {N_ENVS} envs, K = {K_STATES} states, Exp(beta) step times, c = 0. Eq. (7) = the paper's "
        "approximation; exact = the expectation it approximates, K/(n alpha) E[max of n Gamma(alpha, beta)] by "
        f"numerical integration; simulation = {settings.trials} trials of the whole collection with every step "
        "drawn (mean +- standard error; z = (simulation - exact) / s.e.). The last row has alpha = K / n: one round, "
        "the asynchronous system's time.",
        "",
        "| fig | alpha | 1/beta^2 | Eq. (7) | exact | simulation | Eq. (7) / simulation - 1 | Eq. (7) / exact - 1 | "
        "z |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in model:
        lines.append(
            f"| {r['figure']} | {r['alpha']} | {r['variance']:.3g} | {r['eq7']:.2f} | {r['exact']:.2f} | "
            f"{r['sim_mean']:.2f} +- {r['sim_stderr']:.2f} | {r['eq7_over_sim']:+.2%} | {r['eq7_over_exact']:+.2%} | "
            f"{r['sim_z']:+.1f} |"
        )
    worst = max(abs(r["eq7_over_sim"]) for r in model)
    lines += ["", f"Largest |Eq. (7) / simulation - 1|: {worst:.2%}. Fig. 3(a): runtime grows with the variance "
              "(linearly in 1/beta); Fig. 3(b): it falls with alpha toward the asynchronous time.", ""]
    return lines


def _claim1_real_lines(real: list[dict]) -> list[str]:
    """Claim 1 against the real runs, in seconds (nothing without real runs)."""
    if not real:
        return []
    lines = [
        "## Claim 1 against real runs (Fig. 3(a, b), seconds)",
        "",
        f"{ENV_ID}, {ALGO.upper()}, n = {N_ENVS} envs, HTS with {NUM_ACTORS} actor threads; `--step_time=exp:MEAN` "
        "(beta = 1 / MEAN). measured = steady-state seconds per K env steps from `progress.csv`. model c=0 = "
        "Eq. (7) with beta = 1/MEAN in 1/s. c = measured compute: the same configuration's time per K steps "
        "with no step time (T_0 = K c / n; listed as c per env step); model + c = Eq. (7) + T_0. The sync "
        f"baseline (`launch.sync`, rollout {SYNC_ROLLOUT}) waits for every env at every step: alpha = 1 in "
        "Claim 1; its T_0 also holds its (not overlapped) learning time.",
        "",
        "| fig | system | alpha (Claim 1) | sync_interval | step mean (ms) | variance (ms^2) | measured s/K | "
        "model c=0 | c = n T_0 / K (us) | model + c | measured / (model + c) | measured / model c=0 | background "
        "(run / no-step-time run) | errors |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in real:
        lines.append(
            f"| {r['figure']} | {r['system']} | {r['claim1_alpha']} | {r['sync_interval']} | "
            f"{r['step_mean_ms']:g} | {r['variance_ms2']:g} | {fmt(r['measured_s_per_k'], 2)} | "
            f"{fmt(r['model_c0'], 2)} | {fmt(r['c_us_per_step'], 0)} | {fmt(r['model_with_c'], 2)} | "
            f"{fmt(r['measured_over_model_c'], 2)} | {fmt(r['measured_over_model_c0'], 2)} | "
            f"{fmt(r['background_cores'], 2)} / {fmt(r['compute_background_cores'], 2)} | {r['error']} |"
        )
    return lines + ["", *_real_reading(real), ""]


def _claim2_lines(settings: Settings, lag_model: list[dict]) -> list[str]:
    """Claim 2 section: the expected policy lag formula against its event simulation."""
    lines = [
        "## Claim 2: expected policy lag of an asynchronous system (Fig. 3(c))",
        "",
        f"lambda0 = {LAMBDA0:g} samples/s per actor, mu = {MU:g} samples/s for the learner. Simulation: n Poisson "
        "actors merged into one FIFO queue, Exp(mu) service, lag = learner updates between a sample's arrival and "
        f"the start of its own update (the number in system an arrival sees); {settings.lag_samples:,} samples "
        "after a 10% warm-up, standard error from 50 batch means.",
        "",
        "| n | n rho0 | Claim 2 E[L] | simulation | simulation / Claim 2 - 1 |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in lag_model:
        lines.append(f"| {r['n']} | {r['load']:.3f} | {r['formula']:.4g} | {r['sim_mean']:.4g} +- "
                     f"{r['sim_stderr']:.2g} | {r['sim_over_formula']:+.2%} |")
    return lines


def _hts_lag_lines(settings: Settings, lags: list[dict]) -> list[str]:
    """HTS-RL's logged policy lag by actor threads, closing the Claim 2 section (nothing without real runs)."""
    if not lags:
        return []
    lines = [
        "",
        f"HTS-RL's logged policy lag (`launch.hts`, {ENV_ID}, {N_ENVS} envs, alpha {FIG3A_ALPHA}, "
        f"exp:{settings.lag_mean_ms / 1000:g} step times) against its actor threads: the learner version minus "
        "the version that collected the batch, for every update in `progress.csv`, and `summary.json` "
        "max_policy_lag.",
        "",
        "| actors | updates | first lag | mean lag | mean lag after the first | max lag (progress) | "
        "max_policy_lag (summary) | errors |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in lags:
        lines.append(f"| {r['actors']} | {r['updates']} | {r['lag_first']} | {fmt(r['lag_mean'], 3)} | "
                     f"{fmt(r['lag_mean_after_first'], 3)} | {r['lag_max']} | {r['summary_max_policy_lag']} | "
                     f"{r['error']} |")
    return lines


def _gala_lines(gala: list[dict]) -> list[str]:
    """Seed 004 Proposition 1 section: GALA's consensus distance against its bound (nothing without GALA runs)."""
    if not gala:
        return []
    lines = [
        "",
        "## Seed 004 Proposition 1: consensus distance vs bound (Fig. 2a)",
        "",
        f"`launch.gala`, {ENV_ID}, {GALA_LEARNERS} learners x {GALA_ENVS} envs, horizon {GALA_HORIZON}, 1-peer "
        "ring, A2C (RMSProp, lr 7e-4 x sqrt(4)). Every progress row with both columns: consensus_distance = "
        "||X - X_bar||_F over the learners' parameters, consensus_bound = `agents.gossip.ConsensusBound` from "
        "the learners' update norms. pmap: lock-step learners on 4 forced CPU devices, the bound's model is "
        "exact, so it must hold. async: the bound is fed once per round completed by every learner while the "
        "distance is a snapshot at learner 0's iterations, so it is an estimate there (systems/gala/system.py). "
        "distinct distances = how many different consensus_distance values the rows hold: in async mode the "
        "distance is measured once per learner-0 iteration (every learner's parameters snapshotted when learner "
        "0 finishes one) and repeated on the other learners' rows, so about a quarter of the rows with 4 "
        "learners.",
        "",
        "| mode | env steps | points | distinct distances | max distance | max bound | max distance/bound | "
        "median distance/bound | measured <= bound at every point | violations | background | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for r in gala:
        lines.append(
            f"| {r['mode']} | {fmt(r['env_steps'])} | {r['points']} | {r['distinct_distances']} | "
            f"{fmt(r['max_distance'], 3)} | "
            f"{fmt(r['max_bound'], 3)} | {fmt(r['max_ratio'], 3)} | {fmt(r['median_ratio'], 3)} | "
            f"{_yes_no(r['within_bound'])} | {r['violations']} | {fmt(r['background_cores'], 2)} | {r['error']} |"
        )
    for r in gala:
        if r["median_ratio"]:
            lines.append(f"\n{r['mode']}: the bound is {1 / r['median_ratio']:.0f}x the measured distance at the "
                         f"median point and {1 / r['max_ratio']:.1f}x at the closest one.")
    return lines


def main(argv):
    del argv
    t_start = time.perf_counter()
    started = datetime.datetime.now().astimezone()
    quick = _QUICK.value
    settings = QUICK if quick else FULL
    suffix = "_quick" if quick else ""
    name = _NAME.value + suffix
    out_dir = _OUT_DIR.value
    fig_dir = os.path.join(out_dir, "figures")
    os.makedirs(fig_dir, exist_ok=True)
    command = " ".join(["PYTHONPATH=. python -m benchmarks.claims", *(shlex.quote(a) for a in sys.argv[1:])])

    def log(message: str) -> None:
        print(f"[claims {time.perf_counter() - t_start:6.1f}s] {message}", flush=True)

    model = claim1_model_rows(settings)
    log(f"Claim 1 model: {len(model)} points, largest |Eq. 7 / simulation - 1| "
        f"{max(abs(r['eq7_over_sim']) for r in model):.2%}")
    lag_model = claim2_rows(settings)
    log(f"Claim 2 model: {len(lag_model)} points, largest |simulation / formula - 1| "
        f"{max(abs(r['sim_over_formula']) for r in lag_model):.2%}")
    run_rows, results, real, lags, gala = [], {}, [], [], []
    if not _SKIP_REAL.value:
        run_rows, results = real_runs(settings, log)
        real = claim1_real_rows(settings, results)
        lags = lag_rows(settings, results)
        gala = gala_rows(results)
    figures = [os.path.join(fig_dir, f"{f}{suffix}.png") for f in ("fig3a", "fig3b", "fig3c", "fig2a")]
    plot_fig3a(figures[0], model, real, settings)
    plot_fig3b(figures[1], model, real, settings)
    plot_fig3c(figures[2], lag_model, lags)
    if gala:
        plot_fig2a(figures[3], results)
    else:
        figures.pop()
    _write_csv(os.path.join(out_dir, f"{name}.csv"), model)
    _write_csv(os.path.join(out_dir, f"{name}_lag.csv"), lag_model)
    _write_csv(os.path.join(out_dir, f"{name}_hts_lag.csv"), lags)
    _write_csv(os.path.join(out_dir, f"{name}_real.csv"), real)
    _write_csv(os.path.join(out_dir, f"{name}_runs.csv"), run_rows)
    _write_csv(os.path.join(out_dir, f"{name}_gala.csv"), gala)
    _write_csv(os.path.join(out_dir, f"{name}_gala_series.csv"), [
        dict(mode=run.gossip, update=u, consensus_distance=d, consensus_bound=b)
        for run, res in results.items() if run.system == "gala" for u, d, b in res.get("consensus", [])
    ])
    md_path = os.path.join(out_dir, f"{name}.md")
    with open(md_path, "w") as f:
        f.write(markdown(command=command, started=started, minutes=(time.perf_counter() - t_start) / 60,
                         settings=settings, model=model, lag_model=lag_model, real=real, lags=lags, gala=gala,
                         run_rows=run_rows, figures=figures))
    log(f"wrote {md_path}, CSVs and {', '.join(figures)}")


if __name__ == "__main__":
    app.run(main)
