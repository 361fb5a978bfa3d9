"""HTS-RL's section 4.2 theory (seed 000): Claim 1 (Eq. 7, expected runtime of batch synchronization) and Claim 2
(expected policy lag of asynchronous actor-learner systems), each with a Monte Carlo simulation of the model it is
derived from; seed 000's Fig. 3(a, b) plots Eq. (7) against such a simulation and Fig. 3(c) plots Claim 2.

Claim 1. K states are collected with n parallel envs. The time X_i^(j) of env j's i-th step is i.i.d.; a sum of
alpha of them is Gamma(shape alpha, rate beta) (exponential steps, Exp(beta), as in Fig. 3). Every alpha steps all
envs synchronize, so each of the K / (n alpha) rounds lasts as long as the slowest env's alpha steps; every step
also costs the actor a constant compute time c. Eq. (7) approximates the expected total time by

    E[T_total^{n,K}] ~ K / (n alpha) * ( gamma / beta * (1 + (alpha - 1) / (beta F^-1(1 - 1/n)))
                                          + F^-1(1 - 1/n) ) + K c / n,

with F^-1 the inverse CDF of Gamma(alpha, beta) and gamma the Euler-Mascheroni constant: an extreme-value
(Gumbel) approximation of E[max of n Gamma(alpha, beta)], the expected length of one round. It "approaches" the
truth as n grows: against the exact expectation (`exact_runtime`, a numerical integral) it is within about 1.6% for
n = 16 over Fig. 3's ranges, but 5-15% low for n = 2. When alpha >= K / n every env runs its K / n steps without
waiting: one round, the time of an asynchronous system.

Claim 2. In an asynchronous actor-learner system (GA3C, IMPALA) n actors each send samples into one FIFO data queue
as a Poisson process of rate lambda_0, and the learner consumes them one at a time with Exp(mu) service times, one
parameter update per sample: an M/M/1 queue with arrival rate n lambda_0 and utilization rho = n rho_0,
rho_0 = lambda_0 / mu. The latency L of a sample is the number of learner updates between the policy version that
generated it and the version that learns from it. A sample is generated with the version current at its arrival
(the number of updates completed so far) and learned from by the version current when its own update starts (FIFO:
once every sample that was in the system at its arrival has been consumed), so L is the number of samples in the
system seen by an arrival, itself excluded. By PASTA (Poisson arrivals see time averages) its mean is the M/M/1
time-average number in system, E[L] = rho / (1 - rho) = n rho_0 / (1 - n rho_0): the Claim 2 formula. HTS-RL's lag
is 1 whatever n (Eq. 6, one-step delay).

Pure numpy / scipy, host side.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numpy as np
from scipy import integrate, stats

# Step-time draws held in memory at once by `simulate_runtime` (float64: 8 bytes each).
_MAX_DRAWS_PER_CHUNK = 4_000_000


class Estimate(NamedTuple):
    """A Monte Carlo estimate: the sample mean and its standard error."""

    mean: float
    stderr: float


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _positive_float(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be positive and finite, got {value!r}")
    return float(value)


def _compute_time(c) -> float:
    if isinstance(c, bool) or not isinstance(c, numbers.Real) or not math.isfinite(c) or c < 0:
        raise ValueError(f"c (actor compute time per step) must be finite and >= 0, got {c!r}")
    return float(c)


def _runtime_args(K, n, alpha, beta, c) -> tuple[int, int, float, float, float]:
    """Validated (K, n, effective alpha, beta, c); alpha is capped at K / n (see `expected_runtime`)."""
    K = _positive_int("K (states to collect)", K)
    n = _positive_int("n (parallel envs)", n)
    alpha = _positive_int("alpha (sync interval)", alpha)
    beta = _positive_float("beta (step-time rate)", beta)
    c = _compute_time(c)
    return K, n, min(float(alpha), K / n), beta, c


def expected_runtime(K: int, n: int, alpha: int, beta: float, c: float = 0.0) -> float:
    """Seed 000, Claim 1, Eq. (7): approximate expected time to collect K states with n envs synchronizing every
    alpha steps, Gamma(alpha, rate beta) time per alpha steps of one env, actor compute c per step.

    alpha >= K / n means no synchronization before the end: the effective alpha is K / n (one round of K / n steps
    per env), so every such alpha gives the same, asynchronous time (the note under Claim 1; Fig. 3(b)'s right end).

    n = 1: F^-1(1 - 1/n) = F^-1(0) = 0 and the (alpha - 1) / (beta F^-1) term divides by zero; a single env never
    waits for another, and its time is exact: E[Gamma(alpha, beta)] = alpha / beta per round, K / beta + K c in all.

    Args:
      K: states to collect (positive integer).
      n: parallel envs (positive integer).
      alpha: synchronization interval in steps (positive integer).
      beta: rate of the exponential step time (1 / mean), in 1 / time unit.
      c: actor compute time per step (>= 0), in the same time unit.
    Returns:
      The expected runtime in the time unit of 1 / beta and c.
    Raises:
      ValueError: a non-integer or non-positive K, n or alpha, beta <= 0, c < 0, or a non-finite value.
    """
    K, n, alpha, beta, c = _runtime_args(K, n, alpha, beta, c)
    rounds = K / (n * alpha)
    if n == 1:
        return K / beta + K * c
    quantile = float(stats.gamma.ppf(1.0 - 1.0 / n, a=alpha, scale=1.0 / beta))  # F^-1(1 - 1/n)
    round_time = np.euler_gamma / beta * (1.0 + (alpha - 1.0) / (beta * quantile)) + quantile
    return rounds * round_time + K * c / n


def exact_runtime(K: int, n: int, alpha: int, beta: float, c: float = 0.0) -> float:
    """The exact expectation of Claim 1's model, the quantity Eq. (7) approximates: K / (n alpha) rounds of
    E[max of n Gamma(alpha, beta)] = integral_0^inf (1 - F(x)^n) dx each (numerical quadrature), plus K c / n.
    Same arguments, units, alpha cap and errors as `expected_runtime`."""
    K, n, alpha, beta, c = _runtime_args(K, n, alpha, beta, c)
    rounds = K / (n * alpha)
    scale = 1.0 / beta

    def survival_of_max(x):
        return -np.expm1(n * stats.gamma.logcdf(x, a=alpha, scale=scale))  # 1 - F(x)^n, accurate near 0

    # Split at the mean and far in the tail so quad sees where the mass is.
    mean = alpha * scale
    tail = float(stats.gamma.isf(1e-12 / n, a=alpha, scale=scale))
    head, _ = integrate.quad(survival_of_max, 0.0, mean, limit=200)
    body, _ = integrate.quad(survival_of_max, mean, tail, limit=200)
    return rounds * (head + body) + K * c / n


def simulate_runtime(
    K: int, n: int, alpha: int, beta: float, c: float = 0.0, *, trials: int = 1000, seed: int = 0
) -> Estimate:
    """Monte Carlo of Claim 1's model (seed 000, Fig. 3(a, b)'s "simulation"): K / (n alpha) rounds; in each round
    each of the n envs takes alpha i.i.d. Exp(beta) steps and the round lasts the largest of the n sums; plus the
    actor compute K c / n. Each trial collects all K states; every step time is drawn, so the sum's Gamma law is
    not assumed. alpha >= K / n is capped at K / n as in `expected_runtime`.

    Args:
      K, n, alpha, beta, c: as in `expected_runtime`; K must be a multiple of n, and K / n a multiple of alpha
        when alpha < K / n (whole rounds, as Eq. (7) counts them).
      trials: independent repetitions of the whole collection.
      seed: seed of the numpy generator (the same seed gives the same estimate).
    Returns:
      Estimate(mean, stderr) of the total runtime over the trials.
    Raises:
      ValueError: as `expected_runtime`, a bad `trials`, or K, n, alpha that do not make whole rounds.
    """
    K, n, alpha, beta, c = _runtime_args(K, n, alpha, beta, c)
    trials = _positive_int("trials", trials)
    if K % n:
        raise ValueError(f"simulate_runtime needs whole steps per env: K={K} is not a multiple of n={n}")
    steps_per_env = K // n
    alpha = int(alpha)  # integer: either the given alpha or K / n
    if steps_per_env % alpha:
        raise ValueError(
            f"simulate_runtime needs whole rounds: K / n = {steps_per_env} steps per env is not a multiple of "
            f"alpha={alpha}"
        )
    rounds = steps_per_env // alpha
    rng = np.random.default_rng(seed)
    chunk = max(1, _MAX_DRAWS_PER_CHUNK // K)
    totals = []
    for start in range(0, trials, chunk):
        size = min(chunk, trials - start)
        steps = rng.exponential(1.0 / beta, (size, rounds, n, alpha))  # [trials, rounds, n, alpha]
        round_times = steps.sum(axis=3).max(axis=2)  # [trials, rounds]: the slowest env of each round
        totals.append(round_times.sum(axis=1))  # [trials]
    total = np.concatenate(totals) + K * c / n
    stderr = float(total.std(ddof=1) / math.sqrt(trials)) if trials > 1 else float("nan")
    return Estimate(float(total.mean()), stderr)


def expected_policy_lag(n: int, rho0: float) -> float:
    """Seed 000, Claim 2: E[L] = n rho_0 / (1 - n rho_0), the expected number of learner updates between the
    behaviour and the target policy with n asynchronous actors of utilization rho_0 = lambda_0 / mu each (the M/M/1
    mean number in system seen by an arriving sample; module docstring).

    Raises:
      ValueError: n not a positive integer, rho_0 not positive and finite, or n rho_0 >= 1 (the queue is unstable:
        the learner cannot keep up and the lag grows without bound).
    """
    n = _positive_int("n (actors)", n)
    rho0 = _positive_float("rho0 (lambda0 / mu)", rho0)
    load = n * rho0
    if load >= 1.0:
        raise ValueError(
            f"unstable queue: n * rho0 = {load:g} >= 1, the learner cannot keep up and the expected lag is infinite"
        )
    return load / (1.0 - load)


def fifo_policy_lags(arrival: np.ndarray, service: np.ndarray) -> np.ndarray:
    """Claim 2's lag of every sample through a FIFO single-server queue (one learner update per sample).

    Sample i arrives at `arrival[i]`, generated by the policy version current then (the number of updates completed
    by that time); its own update starts when the learner has consumed every earlier sample, and applies to the
    version after all of them. Its lag is the difference: i - #{j : D_j <= a_i}, the number of earlier samples still
    in the system at its arrival. Departure times come from the unrolled Lindley recursion
    D_i = C_i + max_{j <= i} (a_j - C_{j-1}), C the cumulative service times (C_{-1} = 0).

    Args:
      arrival: [N] non-decreasing arrival times.
      service: [N] non-negative service times, in arrival order.
    Returns:
      [N] int64 lags in learner updates.
    Raises:
      ValueError: shapes differ or are not 1-D, arrivals decrease, or a service time is negative or not finite.
    """
    arrival = np.asarray(arrival, np.float64)
    service = np.asarray(service, np.float64)
    if arrival.ndim != 1 or arrival.shape != service.shape:
        raise ValueError(f"arrival and service must be 1-D of one length, got {arrival.shape} and {service.shape}")
    if not (np.all(np.isfinite(arrival)) and np.all(np.isfinite(service)) and np.all(service >= 0)):
        raise ValueError("arrival and service times must be finite, service times >= 0")
    if np.any(np.diff(arrival) < 0):
        raise ValueError("arrival times must be non-decreasing (FIFO order)")
    cumulative = np.cumsum(service)  # C_i
    before = np.concatenate(([0.0], cumulative[:-1]))  # C_{i-1}
    departure = cumulative + np.maximum.accumulate(arrival - before)  # [N] D_i, non-decreasing
    updates_done = np.searchsorted(departure, arrival, side="right")  # version that generated sample i
    return np.arange(arrival.size, dtype=np.int64) - updates_done  # updates until sample i's own update starts


def simulate_policy_lag(
    n: int,
    lambda0: float,
    mu: float,
    num_samples: int = 200_000,
    seed: int = 0,
    *,
    warmup_fraction: float = 0.1,
    num_batches: int = 50,
) -> Estimate:
    """Event simulation of Claim 2's model (seed 000, Fig. 3(c)): n actors, each a Poisson process of rate lambda0,
    feed one FIFO queue; the learner consumes one sample per update with Exp(mu) service times. Measures, for each
    sample, the number of learner updates completed between its arrival (the version that generated it) and the
    start of its own update (the version that learns from it): the number in system seen by the arrival, whose mean
    Claim 2's n rho_0 / (1 - n rho_0) is.

    The n actors' arrival times are drawn separately and merged (not as one Poisson(n lambda0) stream). The queue
    is solved in closed form, O(N log N) with no Python loop (`fifo_policy_lags`). It starts empty; the first
    `warmup_fraction` of the samples is dropped, and the standard error comes from `num_batches` batch means (the
    lags are autocorrelated).

    Args:
      n: actors (positive integer).
      lambda0: samples per second of one actor.
      mu: samples per second the learner consumes.
      num_samples: samples measured after the warm-up.
      seed: seed of the numpy generator (the same seed gives the same estimate).
      warmup_fraction: in [0, 1): extra samples, as a fraction of the total, simulated first and dropped.
      num_batches: batches for the batch-means standard error (>= 2, at most num_samples).
    Returns:
      Estimate(mean, stderr) of the lag in learner updates.
    Raises:
      ValueError: bad arguments, or n lambda0 >= mu (an unstable queue: there is no steady state to measure).
    """
    n = _positive_int("n (actors)", n)
    lambda0 = _positive_float("lambda0", lambda0)
    mu = _positive_float("mu", mu)
    num_samples = _positive_int("num_samples", num_samples)
    num_batches = _positive_int("num_batches", num_batches)
    if not 0.0 <= warmup_fraction < 1.0:
        raise ValueError(f"warmup_fraction must be in [0, 1), got {warmup_fraction!r}")
    if not 2 <= num_batches <= num_samples:
        raise ValueError(f"num_batches must be in [2, num_samples={num_samples}], got {num_batches}")
    if n * lambda0 >= mu:
        raise ValueError(f"unstable queue: n * lambda0 = {n * lambda0:g} >= mu = {mu:g}; the lag has no steady state")
    warmup = int(math.ceil(num_samples * warmup_fraction / (1.0 - warmup_fraction)))
    total = num_samples + warmup
    rng = np.random.default_rng(seed)
    # Each actor's stream is drawn past the horizon where the merged stream certainly holds `total` samples: keep
    # only arrivals before the earliest actor's last one, so no actor's stream is cut short inside the window.
    per_actor = int(math.ceil(total / n * 1.05 + 10.0 * math.sqrt(total / n) + 20))
    while True:
        arrivals = np.cumsum(rng.exponential(1.0 / lambda0, (n, per_actor)), axis=1)  # [n, per_actor]
        horizon = arrivals[:, -1].min()
        merged = np.sort(arrivals[arrivals <= horizon])
        if merged.size >= total:
            break
        per_actor *= 2
    arrival = merged[:total]  # [N]
    service = rng.exponential(1.0 / mu, total)  # [N]
    lag = fifo_policy_lags(arrival, service)[warmup:].astype(np.float64)
    batch_means = np.array([b.mean() for b in np.array_split(lag, num_batches)])
    return Estimate(float(lag.mean()), float(batch_means.std(ddof=1) / math.sqrt(num_batches)))
