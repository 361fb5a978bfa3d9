"""Aggregate scores over runs and tasks with rliable (Agarwal et al., NeurIPS 2021, "Deep RL at the Edge of the
Statistical Precipice"): the interquartile mean (IQM, the mean of the middle 50% of all runs' scores) with a
stratified-bootstrap 95% interval, and performance profiles (the fraction of runs scoring above tau).

Scores are `{name: array [runs, tasks]}`. Across tasks they must share a scale: `normalize` maps a task's returns
so that `low` is 0 and `high` is 1 (in the learning benchmark: a uniformly random policy and the peer's mean).
rliable is an optional extra: `pip install -e ".[rliable]"`; without it `require_rliable` stops with one line."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

BOOTSTRAP_REPS = 2000
MISSING_RLIABLE = 'the IQM and performance profiles need rliable: pip install -e ".[rliable]"'


def require_rliable():
    """(rliable.library, rliable.metrics, rliable.plot_utils); ImportError with one line when the extra is missing."""
    try:
        from rliable import library, metrics, plot_utils
    except ImportError as error:
        raise ImportError(MISSING_RLIABLE) from error
    return library, metrics, plot_utils


def normalize(returns: np.ndarray, low: float, high: float) -> np.ndarray:
    """(returns - low) / (high - low): 0 at `low`, 1 at `high`."""
    if high == low:
        raise ValueError(f"normalization needs high != low, got {high}")
    return (np.asarray(returns, np.float64) - low) / (high - low)


@contextlib.contextmanager
def _numpy_global_seed(seed: int):
    """NumPy's global generator seeded for the block, then put back: rliable's stratified bootstrap draws its run
    indices from `np.random.choice` whatever generator it is given, so only the global state fixes its intervals."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def iqm_intervals(scores: Mapping[str, np.ndarray], *, reps: int = BOOTSTRAP_REPS,
                  seed: int = 0) -> dict[str, tuple[float, float, float]]:
    """{name: (IQM, low, high)} over all runs and tasks of each name, 95% stratified-bootstrap interval (runs
    resampled within each task). A seed fixes the intervals."""
    library, metrics, _ = require_rliable()
    matrices = {name: _matrix(values) for name, values in scores.items()}
    with warnings.catch_warnings(), _numpy_global_seed(seed):
        # arch (under rliable) deprecates the RandomState that rliable passes it
        warnings.filterwarnings("ignore", message="random_state is deprecated", category=FutureWarning)
        point, interval = library.get_interval_estimates(
            matrices, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=reps,
            random_state=np.random.RandomState(seed),
        )
    return {name: (float(point[name][0]), float(interval[name][0, 0]), float(interval[name][1, 0]))
            for name in matrices}


def plot_iqm_and_profiles(scores: Mapping[str, np.ndarray], path: str, *, taus: Sequence[float] | None = None,
                          xlabel: str = "normalized score", reps: int = BOOTSTRAP_REPS, seed: int = 0) -> None:
    """One PNG: the IQM with its interval per name (left) and the performance profiles with their bands (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    library, _, plot_utils = require_rliable()
    matrices = {name: _matrix(values) for name, values in scores.items()}
    intervals = iqm_intervals(matrices, reps=reps, seed=seed)
    all_scores = np.concatenate([m.ravel() for m in matrices.values()])
    taus = np.linspace(min(0.0, all_scores.min()), max(1.0, all_scores.max()), 81) if taus is None else taus
    with warnings.catch_warnings(), _numpy_global_seed(seed):  # the profile bootstrap takes no generator at all
        warnings.filterwarnings("ignore", message="random_state is deprecated", category=FutureWarning)
        profiles, bands = library.create_performance_profile(matrices, taus, reps=reps)
    names = list(matrices)
    palette = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    colors = {name: palette(i % palette.N) for i, name in enumerate(names)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.45 * len(names) + 2.5),
                                      gridspec_kw={"width_ratios": [1, 1.4]})
    for row, name in enumerate(names):
        iqm, low, high = intervals[name]
        left.plot([low, high], [row, row], linewidth=6, alpha=0.6, solid_capstyle="butt", color=colors[name])
        left.plot([iqm], [row], "o", markersize=6, color=colors[name])  # its colour even where the band is a point
        left.plot([iqm], [row], "k|", markersize=14)
    left.set_yticks(range(len(names)), names)
    left.invert_yaxis()
    left.set_xlabel(f"IQM of the {xlabel} (95% stratified bootstrap)")
    plot_utils.plot_performance_profiles(profiles, taus, performance_profile_cis=bands, ax=right, colors=colors,
                                         xlabel=xlabel, ylabel="fraction of runs with score > tau")
    right.set_title("performance profile: each side in its bar's colour on the left", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _matrix(values) -> np.ndarray:
    matrix = np.asarray(values, np.float64)
    if matrix.ndim == 1:
        matrix = matrix[:, None]  # one task
    if matrix.ndim != 2 or matrix.shape[0] < 1:
        raise ValueError(f"scores must be [runs, tasks], got shape {matrix.shape}")
    return matrix
