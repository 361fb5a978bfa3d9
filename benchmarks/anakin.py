"""Anakin (`launch.anakin`) beside rejax's PPO (the peer: purejaxrl-style PPO in one jitted program, from the package
registry) and beside our HTS and synchronous baseline on the same JAX task (issues 30 and 31).

    python -m venv .venv-rejax && .venv-rejax/bin/pip install rejax==0.1.3 gymnax==0.0.9 jax==0.10.2 flax==0.12.8
    .venv-rejax/bin/pip install brax==0.14.2 mujoco==4.0.0 mujoco-mjx==3.17.0   # only for --task=brax/hopper
    PYTHONPATH=. python -m benchmarks.anakin --peer_python=.venv-rejax/bin/python [--rows=...]

Each row is one process: `side` trains `seeds` agents of PPO on gymnax's CartPole-v1 for 500k env steps each, with
CleanRL's CartPole settings (4 envs x 128 steps, 4 epochs of 4 minibatches, Adam 2.5e-4, clip 0.2, entropy 0.01,
gradient norm 0.5, tanh MLP 64x64); or, with `--task=Breakout-MinAtar` or `--task=brax/hopper`, the settings in TASKS.
Departures of the peer, whose options these are: a constant learning rate (ours
anneals it), its own initializers, and gymnax 0.0.9 (rejax 0.1.3 calls the pre-1.0 step API; CartPole's dynamics are
the same). Measured: the process's wall time (start-up, compile and training), the compile, the training after it,
env steps per second over all agents after the compile, and the final return (ours: 32 evaluation episodes per
agent at the end; rejax: its own final evaluation, 128 episodes per agent), mean and range over the agents. HTS and
the synchronous baseline train one agent with the same settings through `gymnax/` (their SPS include the compile).

Resumable: each finished row is `results/anakin/<row>.json`; the table is `results/anakin_cpu.md`. Run it alone (or
read the load column): a second job on the two cores lowers every rate."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from benchmarks.common import die_with_parent, git_commit
from systems.common import hardware

_PEER = flags.DEFINE_string("peer_python", ".venv-rejax/bin/python", "Python of the venv with rejax installed.")
_TASK = flags.DEFINE_enum("task", "CartPole-v1", ["CartPole-v1", "Breakout-MinAtar", "brax/hopper"],
                          "The JAX task (TASKS).")
_ROWS = flags.DEFINE_list("rows", [], "Rows to run (default: all), e.g. anakin-8,rejax-8.")
_STEPS = flags.DEFINE_integer("steps_per_agent", None, "Env steps per agent (default: the task's).")

EVAL_EPISODES = 32
_CLASSIC_PPO = dict(num_envs=4, sync_interval=128, num_epochs=4, num_minibatches=4, learning_rate=2.5e-4, clip_eps=0.2,
                    entropy_coef=0.01, value_coef=0.5, max_grad_norm=0.5, gamma=0.99, gae_lambda=0.95)
# anakin_constant_lr: ours with the peer's constant learning rate (the gap in final return is the annealing's)
TASKS = {
    # CleanRL's CartPole settings on both sides; the peer's tanh 64x64 MLP is ours.
    "CartPole-v1": dict(ppo=_CLASSIC_PPO, steps=500_000,
                        peer_agent=dict(activation="tanh", hidden_layer_sizes=(64, 64)),
                        dir="benchmarks/results/anakin", out="benchmarks/results/anakin_cpu.md",
                        rows=("anakin-1", "anakin-8", "anakin-64", "rejax-1", "rejax-8", "rejax-64", "hts-1", "sync-1",
                              "anakin_constant_lr-8")),
    # Our MinAtar preset on both sides (64 envs x 128 steps, 4 epochs of 8 minibatches, Adam 5e-4). rejax's PPO has
    # no CNN: the peer flattens the planes into its own default MLP (swish, 64x64), ours runs MinAtar's CNN; the peer's
    # Breakout-MinAtar is gymnax 0.0.9's.
    "Breakout-MinAtar": dict(ppo=dict(_CLASSIC_PPO, num_envs=64, num_minibatches=8, learning_rate=5e-4),
                             steps=1_000_000, peer_agent=dict(activation="swish", hidden_layer_sizes=(64, 64)),
                             dir="benchmarks/results/anakin_minatar", out="benchmarks/results/anakin_minatar_cpu.md",
                             rows=("anakin-1", "anakin-8", "rejax-1", "rejax-8", "hts-1", "anakin_constant_lr-8"),
                             note="The networks differ: the peer's actor and critic 64x64 MLPs on the flattened "
                                  "planes take about 60k multiply-adds an observation, MinAtar's CNN (ours) about "
                                  "168k (convolution 37k, dense 131k): about the ratio of the training times."),
    # purejaxrl's Brax PPO on both sides (our brax preset: 2048 envs x 10 steps, 4 epochs of 32 minibatches, Adam
    # 3e-4 constant, clipped value loss, observations and rewards normalized, tanh MLP 256x256). The peer's own
    # departures: separate actor and critic optimizers (each clipped to norm 0.5), Brax's episode wrapper (1000
    # steps) through rejax's brax2gymnax adapter; Brax's default backend (generalized) on both sides.
    "brax/hopper": dict(ppo=dict(num_envs=2048, sync_interval=10, num_epochs=4, num_minibatches=32,
                                 learning_rate=3e-4, clip_eps=0.2, entropy_coef=0.0, value_coef=0.5, max_grad_norm=0.5,
                                 gamma=0.99, gae_lambda=0.95),
                        our_flags=("--noanneal_lr", "--clip_value_loss", "--normalize_obs", "--normalize_reward",
                                   "--hidden_sizes=256,256"),
                        steps=2_000_000, env="brax/hopper", title="Brax hopper",
                        peer_agent=dict(activation="tanh", hidden_layer_sizes=(256, 256)),
                        peer_options=dict(normalize_observations=True, normalize_rewards=True),
                        dir="benchmarks/results/anakin_brax", out="benchmarks/results/anakin_brax_cpu.md",
                        rows=("anakin-1", "rejax-1", "anakin-3", "rejax-3")),
}


def _task() -> dict:
    return TASKS[_TASK.value]


def _steps() -> int:
    return _STEPS.value or _task()["steps"]


def _title() -> str:
    return _task().get("title", f"gymnax {_TASK.value}")


def _env() -> str:
    """Our env id of the task (the peer's is the task's name)."""
    return _task().get("env", f"gymnax/{_TASK.value}")

PEER_SCRIPT = """
import json, sys, time
import jax
from rejax import PPO

seeds, steps, ppo = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
algo = PPO.create(
    env=sys.argv[4], num_envs=ppo["num_envs"], num_steps=ppo["sync_interval"], num_epochs=ppo["num_epochs"],
    num_minibatches=ppo["num_minibatches"], learning_rate=ppo["learning_rate"], max_grad_norm=ppo["max_grad_norm"],
    gamma=ppo["gamma"], gae_lambda=ppo["gae_lambda"], clip_eps=ppo["clip_eps"], ent_coef=ppo["entropy_coef"],
    vf_coef=ppo["value_coef"], total_timesteps=steps, eval_freq=steps, skip_initial_evaluation=True,
    agent_kwargs=json.loads(sys.argv[5]), **json.loads(sys.argv[6]))
keys = jax.random.split(jax.random.PRNGKey(0), seeds)
start = time.perf_counter()
compiled = jax.jit(jax.vmap(algo.train)).lower(keys).compile()
compile_s = time.perf_counter() - start
start = time.perf_counter()
_, (lengths, returns) = compiled(keys)
returns = jax.device_get(returns)
train_s = time.perf_counter() - start
print("RESULT " + json.dumps({"compile_s": compile_s, "train_s": train_s,
                              "finals": [float(r) for r in returns[:, -1].mean(axis=-1)]}))
"""


def _result_line(stdout: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"no result line in: {stdout[-500:]}")


def run_peer(seeds: int) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(PEER_SCRIPT)
    try:
        done = subprocess.run([_PEER.value, f.name, str(seeds), str(_steps()), json.dumps(_task()["ppo"]), _TASK.value,
                               json.dumps(_task()["peer_agent"]), json.dumps(_task().get("peer_options", {}))],
                              capture_output=True, text=True, check=True, preexec_fn=die_with_parent)
    finally:
        os.unlink(f.name)
    return _result_line(done.stdout)


def run_ours(side: str, seeds: int) -> dict:
    """One launcher run in its own process; compile and training seconds from the first agent's stage profile."""
    launcher = side.split("_")[0]
    with tempfile.TemporaryDirectory() as logdir:
        flags_ = [f"--env={_env()}", f"--total_steps={_steps()}", f"--eval_episodes={EVAL_EPISODES}",
                  f"--eval_every={_steps()}", "--preset=family", f"--logdir={logdir}/run", "--quiet",
                  *(f"--{k}={v}" for k, v in _task()["ppo"].items()), *_task().get("our_flags", ())]
        if launcher == "anakin":
            flags_.append(f"--num_seeds={seeds}")
        if side.endswith("_constant_lr"):
            flags_.append("--noanneal_lr")
        subprocess.run([sys.executable, "-m", f"launch.{launcher}", *flags_], check=True,
                       env=dict(os.environ, PYTHONPATH=os.getcwd()), preexec_fn=die_with_parent)
        runs = [f"{logdir}/run"] if seeds == 1 else [f"{logdir}/run/seed_{1 + k}" for k in range(seeds)]
        summaries = [json.load(open(os.path.join(run, "summary.json"))) for run in runs]
    main = summaries[0]["profile"]["roles"]["main"]
    result = {"finals": [s["final_metric"] for s in summaries], "sps_incl_compile": summaries[0]["sps"]}
    if launcher == "anakin":
        result.update(compile_s=main["seconds"] * main["shares"].get("compile", 0.0),
                      train_s=main["seconds"] * main["shares"].get("update", 0.0))
    return result


def run_row(row: str) -> dict:
    side, seeds = row.rsplit("-", 1)
    seeds = int(seeds)
    load_before, start = os.getloadavg()[0], time.perf_counter()
    result = run_peer(seeds) if side == "rejax" else run_ours(side, seeds)
    return {"row": row, "side": side, "seeds": seeds, "steps_per_agent": _steps(), "process_wall_s":
            time.perf_counter() - start, "load_before": load_before, "load_after": os.getloadavg()[0],
            "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC", "commit": git_commit(),
            **result}


def _fmt(value, digits=0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table(rows: list[dict]) -> str:
    lines = [
        f"# Anakin beside rejax's PPO, HTS and the synchronous baseline: {_title()}, "
        f"{rows[0]['steps_per_agent'] if rows else _steps():,} env steps per agent",
        "",
        f"- Machine: {hardware.describe(hardware.card())}.",
        f"- Command: `PYTHONPATH=. python -m benchmarks.anakin --peer_python=.venv-rejax/bin/python "
        f"--task={_TASK.value}` (module docstring and TASKS: settings, what each column measures, the peer's "
        "departures).",
        "",
        "| side | agents | process wall s | compile s | training s | env steps/s after compile (all agents) "
        "| final return, mean [min, max] | load before / after | date, commit |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for r in rows:
        finals = [f for f in r["finals"] if f is not None]
        final = (f"{sum(finals) / len(finals):.1f} [{min(finals):.1f}, {max(finals):.1f}]" if finals else "-")
        sps = r["seeds"] * r["steps_per_agent"] / r["train_s"] if r.get("train_s") else None
        if sps is None and r.get("sps_incl_compile"):
            sps_text = f"{r['sps_incl_compile']:,.0f} (incl. compile)"
        else:
            sps_text = _fmt(sps)
        lines.append(f"| {r['side']} | {r['seeds']} | {r['process_wall_s']:.1f} | {_fmt(r.get('compile_s'), 1)} | "
                     f"{_fmt(r.get('train_s'), 1)} | {sps_text} | {final} | {r['load_before']:.1f} / "
                     f"{r['load_after']:.1f} | {r['date']}, {r['commit']} |")
    by_row = {r["row"]: r for r in rows}
    lines.append("")
    for seeds in sorted({r["seeds"] for r in rows}):
        ours, peer = by_row.get(f"anakin-{seeds}"), by_row.get(f"rejax-{seeds}")
        if ours and peer and ours.get("train_s") and peer.get("train_s"):
            ratio = ours["train_s"] / peer["train_s"]
            lines.append(f"- {seeds} agent(s): Anakin's training after the compile takes {ratio:.2f}x the peer's time,"
                         f" its whole process {ours['process_wall_s'] / peer['process_wall_s']:.2f}x "
                         "(start-up, one Monitor per agent: evaluations, checkpoints, summaries).")
    if "anakin-1" in by_row and "hts-1" in by_row:
        lines.append(f"- One agent end to end: Anakin's process takes "
                     f"{by_row['anakin-1']['process_wall_s'] / by_row['hts-1']['process_wall_s']:.2f}x HTS's.")
    if "anakin_constant_lr" in {r["side"] for r in rows}:
        lines.append("- anakin_constant_lr: ours with the peer's constant learning rate instead of CleanRL's annealed "
                     "one.")
    if _task().get("note"):
        lines.append(f"- {_task()['note']}")
    return "\n".join(lines) + "\n"


def main(argv):
    del argv
    task = _task()
    os.makedirs(task["dir"], exist_ok=True)
    for row in _ROWS.value or task["rows"]:
        path = os.path.join(task["dir"], f"{row}.json")
        if os.path.exists(path):
            continue
        print(f"[anakin benchmark] {row} ...", flush=True)
        result = run_row(row)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
        print(f"[anakin benchmark] {row}: {json.dumps(result)[:300]}", flush=True)
    rows = [json.load(open(os.path.join(task["dir"], f"{row}.json"))) for row in task["rows"]
            if os.path.exists(os.path.join(task["dir"], f"{row}.json"))]
    with open(task["out"], "w") as f:
        f.write(table(rows))
    print(table(rows))


if __name__ == "__main__":
    app.run(main)
