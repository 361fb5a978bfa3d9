"""The end of a `launch.tune` study: the best point and the default preset on fresh seeds, and the report.

`<study_dir>/report.md`: every trial (state, value, point), the best point, both on the fresh seeds (their mean final
metric per task and the study's value), the tuning and fresh seeds; `best.flags`: the best point as an absl
`--flagfile`; `history.png` and `importance.png`: Optuna's optimization history and parameter importances (where
the study has enough finished trials for them).
"""

from __future__ import annotations

import os

from analysis import search_space
from launch import tuning


def _final(objective: tuning.Objective, point: dict, folder: str, seeds) -> tuple[float, dict]:
    """(the study's value, each task's mean) of `point` over `seeds` (runs under `<study_dir>/final/<folder>`)."""
    metrics = {env: [] for env in objective.envs}
    for env, _, args, run_dir in objective.runs(point, os.path.join("final", folder), seeds):
        metrics[env].append(tuning.run_one(objective.system, args, run_dir)["final_metric"])
    means = {env: sum(v) / len(v) for env, v in metrics.items()}
    return tuning.score(list(means.values()), objective.lows, objective.highs), means


def _plots(study, study_dir: str) -> list[str]:
    """Optuna's own plots, as PNG files; a plot the study cannot draw yet is left out with its reason."""
    import optuna.visualization.matplotlib as plots

    lines = []
    for name, draw in (("history", plots.plot_optimization_history), ("importance", plots.plot_param_importances)):
        try:
            axes = draw(study)
            figure = axes.figure if hasattr(axes, "figure") else axes[0].figure
            figure.savefig(os.path.join(study_dir, f"{name}.png"), dpi=80, bbox_inches="tight")
            lines.append(f"![{name}]({name}.png)")
        except Exception as error:  # e.g. too few finished trials for the importances
            lines.append(f"({name}: not drawn: {str(error).splitlines()[0][:120]})")
    return lines


def finish(study, objective: tuning.Objective, final_seeds: int) -> None:
    from optuna.trial import TrialState

    study_dir = objective.study_dir
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        print("[tune] no trial completed (all pruned or failed): no best point", flush=True)
        return
    best = study.best_trial
    with open(os.path.join(study_dir, "best.flags"), "w") as f:
        f.write("\n".join(search_space.flags(best.params)) + "\n")
    seeds = range(tuning.FRESH_SEED, tuning.FRESH_SEED + final_seeds)
    rows = []
    if final_seeds:
        for name, point in (("best", best.params), ("default", {})):
            value, means = _final(objective, point, name, seeds)
            rows.append(f"| {name} | {value:.4g} | " + " | ".join(f"{means[env]:.4g}" for env in objective.envs) + " |")
    lines = [f"# launch.tune: launch.{objective.system} on {', '.join(objective.envs)}", "",
             f"Passed to every run: `{' '.join(objective.passthrough) or '(nothing)'}`. Tuning seeds: "
             f"{', '.join(map(str, objective.seeds))}; fresh seeds: {', '.join(map(str, seeds)) or 'none'}.", "",
             f"Best: trial {best.number}, value {best.value:.4g}: `{' '.join(search_space.flags(best.params))}` "
             "(`best.flags`).", ""]
    if rows:
        lines += ["On the fresh seeds (mean final metric):", "",
                  "| point | value | " + " | ".join(objective.envs) + " |",
                  "| --- | ---: | " + " | ".join("---:" for _ in objective.envs) + " |", *rows, ""]
    lines += ["| trial | state | value | point |", "| ---: | --- | ---: | --- |"]
    for trial in study.get_trials(deepcopy=False):
        value = "" if trial.value is None else f"{trial.value:.4g}"
        lines.append(f"| {trial.number} | {trial.state.name.lower()} | {value} | "
                     f"`{' '.join(search_space.flags(trial.params))}` |")
    lines += ["", *_plots(study, study_dir)]
    with open(os.path.join(study_dir, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"[tune] best trial {best.number}: {best.value:.4g}  {' '.join(search_space.flags(best.params))}", flush=True)
    for row in rows:
        print(f"[tune] fresh seeds {row}", flush=True)
    print(f"[tune] report: {os.path.join(study_dir, 'report.md')}", flush=True)
