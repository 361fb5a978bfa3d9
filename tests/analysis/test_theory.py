"""Tests for analysis.theory: seed 000's Claim 1 (Eq. 7, expected runtime) and Claim 2 (expected policy lag)
against hand values, exact expectations, naive reference loops and their Monte Carlo simulations over Fig. 3's
ranges."""

import math

import chex
import numpy as np
import pytest

from analysis import theory

# Fig. 3(a, b) of seed 000: n = 16 envs; K a multiple of n alpha for every alpha in 1..64 (K / n = 384).
K = 6144
N = 16
# Fig. 3(c): GFootball's actor rate and learner rate (frames per second).
LAMBDA0 = 100.0
MU = 4000.0

# Measured agreement (20 seeds, see the module under test): Eq. (7) is within 1.6% of the exact expectation for
# n = 16 over both ranges; the simulations are unbiased (|z| < 3) and the lag simulation with 1e6 samples is within
# 1.8% of Claim 2 up to n rho_0 = 0.8. The tolerances below keep a factor of about 2 of margin.
EQ7_TOLERANCE = 0.03
LAG_TOLERANCE = 0.04
MAX_Z = 4.0


# ---------------------------------------------------------------------------------------------------------------------
# Claim 1: hand values and the exact expectation.


def test_eq7_hand_value_exponential_steps():
    # alpha = 1: F^-1(1 - 1/n) = ln(n) / beta and the (alpha - 1) term vanishes, so Eq. (7) is
    # K / n * (gamma + ln n) / beta + K c / n.
    got = theory.expected_runtime(8, 4, 1, 2.0, c=0.5)
    assert got == pytest.approx(2 * (np.euler_gamma / 2 + math.log(4) / 2) + 8 * 0.5 / 4, rel=1e-12)


def test_eq7_hand_value_gamma_quantile():
    # alpha = 2, beta = 1, n = 2: F(x) = 1 - (1 + x) e^-x, so F^-1(1/2) solves (1 + q) e^-q = 1/2.
    q = 1.6783469900166608
    assert (1 + q) * math.exp(-q) == pytest.approx(0.5, abs=1e-12)
    expected = 12 / (2 * 2) * (np.euler_gamma * (1 + 1 / q) + q)
    assert theory.expected_runtime(12, 2, 2, 1.0) == pytest.approx(expected, rel=1e-9)


def test_single_env_is_exact_mean_of_one_gamma():
    # n = 1 has F^-1(0) = 0 in Eq. (7); the documented answer is K / beta + K c, the exact mean.
    assert theory.expected_runtime(40, 1, 4, 2.0, c=0.25) == pytest.approx(40 / 2.0 + 40 * 0.25)
    assert theory.exact_runtime(40, 1, 4, 2.0, c=0.25) == pytest.approx(40 / 2.0 + 40 * 0.25, rel=1e-9)
    estimate = theory.simulate_runtime(40, 1, 4, 2.0, c=0.25, trials=4000, seed=3)
    assert abs(estimate.mean - 30.0) <= MAX_Z * estimate.stderr


def test_exact_runtime_is_harmonic_number_for_exponential_steps():
    # E[max of n Exp(beta)] = H_n / beta.
    harmonic = sum(1 / k for k in range(1, N + 1))
    assert theory.exact_runtime(K, N, 1, 2.0) == pytest.approx(K / N * harmonic / 2.0, rel=1e-9)


# ---------------------------------------------------------------------------------------------------------------------
# Claim 1: the simulation against a naive loop and the exact expectation; Eq. (7) against both over Fig. 3(a, b).


def test_simulate_runtime_matches_naive_loop():
    k, n, alpha, beta, c, trials, seed = 24, 3, 2, 1.5, 0.1, 5, 7
    steps = np.random.default_rng(seed).exponential(1 / beta, (trials, k // (n * alpha), n, alpha))
    totals = []
    for trial in steps:
        total = 0.0
        for round_steps in trial:
            total += max(sum(env_steps) for env_steps in round_steps)  # wait for the slowest env
        totals.append(total + k * c / n)
    estimate = theory.simulate_runtime(k, n, alpha, beta, c, trials=trials, seed=seed)
    assert estimate.mean == pytest.approx(np.mean(totals), rel=1e-12)
    assert estimate.stderr == pytest.approx(np.std(totals, ddof=1) / math.sqrt(trials), rel=1e-12)


@pytest.mark.parametrize("variance", [0.25, 1.0, 4.0])
def test_fig3a_eq7_matches_simulation_over_variance(variance):
    beta = variance**-0.5
    estimate = theory.simulate_runtime(K, N, 4, beta, trials=600, seed=1)
    exact = theory.exact_runtime(K, N, 4, beta)
    assert abs(estimate.mean - exact) <= MAX_Z * estimate.stderr
    assert theory.expected_runtime(K, N, 4, beta) == pytest.approx(estimate.mean, rel=EQ7_TOLERANCE)
    assert theory.expected_runtime(K, N, 4, beta) == pytest.approx(exact, rel=EQ7_TOLERANCE)


@pytest.mark.parametrize("alpha", [1, 2, 8, 32, 64])
def test_fig3b_eq7_matches_simulation_over_alpha(alpha):
    estimate = theory.simulate_runtime(K, N, alpha, 2.0, trials=600, seed=2)
    exact = theory.exact_runtime(K, N, alpha, 2.0)
    assert abs(estimate.mean - exact) <= MAX_Z * estimate.stderr
    assert theory.expected_runtime(K, N, alpha, 2.0) == pytest.approx(estimate.mean, rel=EQ7_TOLERANCE)


def test_fig3_shapes_runtime_grows_with_variance_and_falls_with_alpha():
    variances = np.linspace(0.25, 4.0, 8)
    by_variance = [theory.expected_runtime(K, N, 4, v**-0.5) for v in variances]
    assert np.all(np.diff(by_variance) > 0)
    by_alpha = [theory.expected_runtime(K, N, a, 2.0) for a in (1, 2, 4, 8, 16, 32, 64)]
    assert np.all(np.diff(by_alpha) < 0)
    # Runtime scales with the mean step time 1 / beta (the whole model is in units of it), and c adds K c / n.
    assert theory.expected_runtime(K, N, 4, 0.5) == pytest.approx(4 * theory.expected_runtime(K, N, 4, 2.0))
    assert theory.expected_runtime(K, N, 4, 2.0, c=0.5) == pytest.approx(
        theory.expected_runtime(K, N, 4, 2.0) + K * 0.5 / N
    )


def test_eq7_approaches_exact_as_n_grows():
    # "Approaches": the extreme-value approximation is poor for very few envs and tightens with n.
    errors = [abs(theory.expected_runtime(4096, n, 1, 2.0) / theory.exact_runtime(4096, n, 1, 2.0) - 1)
              for n in (2, 4, 16, 64, 256)]
    assert errors[0] > 0.1
    assert np.all(np.diff(errors) < 0)
    assert errors[-1] < 0.001


def test_alpha_at_least_steps_per_env_gives_async_time():
    steps_per_env = K // N
    async_time = theory.expected_runtime(K, N, steps_per_env, 2.0)
    for alpha in (steps_per_env + 1, 2 * steps_per_env, 10_000):
        assert theory.expected_runtime(K, N, alpha, 2.0) == async_time
        assert theory.exact_runtime(K, N, alpha, 2.0) == theory.exact_runtime(K, N, steps_per_env, 2.0)
    # One round: every env runs its K / n steps and the collection waits for the slowest, i.e. the async system.
    exact = theory.exact_runtime(K, N, steps_per_env, 2.0)
    estimate = theory.simulate_runtime(K, N, 10_000, 2.0, trials=2000, seed=4)
    assert abs(estimate.mean - exact) <= MAX_Z * estimate.stderr
    assert async_time == pytest.approx(estimate.mean, rel=EQ7_TOLERANCE)
    assert async_time < theory.expected_runtime(K, N, 64, 2.0)


def test_simulate_runtime_is_deterministic_given_seed():
    first = theory.simulate_runtime(K, N, 4, 2.0, trials=50, seed=11)
    assert theory.simulate_runtime(K, N, 4, 2.0, trials=50, seed=11) == first
    assert theory.simulate_runtime(K, N, 4, 2.0, trials=50, seed=12) != first


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(K=0, n=16, alpha=4, beta=2.0), r"K \(states"),
        (dict(K=64.5, n=16, alpha=4, beta=2.0), r"K \(states"),
        (dict(K=64, n=0, alpha=4, beta=2.0), r"n \(parallel"),
        (dict(K=64, n=True, alpha=4, beta=2.0), r"n \(parallel"),
        (dict(K=64, n=16, alpha=0, beta=2.0), r"alpha \(sync"),
        (dict(K=64, n=16, alpha=2.5, beta=2.0), r"alpha \(sync"),
        (dict(K=64, n=16, alpha=4, beta=0.0), r"beta \(step"),
        (dict(K=64, n=16, alpha=4, beta=float("inf")), r"beta \(step"),
        (dict(K=64, n=16, alpha=4, beta=2.0, c=-1.0), r"c \(actor"),
        (dict(K=64, n=16, alpha=4, beta=2.0, c=float("nan")), r"c \(actor"),
    ],
)
def test_runtime_input_validation(kwargs, message):
    for fn in (theory.expected_runtime, theory.exact_runtime, theory.simulate_runtime):
        with pytest.raises(ValueError, match=message):
            fn(**kwargs)


def test_simulate_runtime_needs_whole_rounds():
    with pytest.raises(ValueError, match="multiple of n"):
        theory.simulate_runtime(100, 16, 1, 2.0)
    with pytest.raises(ValueError, match="whole rounds"):
        theory.simulate_runtime(6400, 16, 64, 2.0)  # 400 steps per env, not a multiple of 64
    with pytest.raises(ValueError, match="trials"):
        theory.simulate_runtime(K, N, 4, 2.0, trials=0)


# ---------------------------------------------------------------------------------------------------------------------
# Claim 2.


def test_expected_policy_lag_hand_values():
    assert theory.expected_policy_lag(20, LAMBDA0 / MU) == pytest.approx(1.0)  # n rho0 = 1/2
    assert theory.expected_policy_lag(32, LAMBDA0 / MU) == pytest.approx(4.0)  # 0.8 / 0.2
    assert theory.expected_policy_lag(1, 0.5) == pytest.approx(1.0)


@pytest.mark.parametrize("n,rho0", [(40, LAMBDA0 / MU), (41, LAMBDA0 / MU), (1, 1.0), (0, 0.1), (4, 0.0), (4, -1.0)])
def test_expected_policy_lag_validation(n, rho0):
    with pytest.raises(ValueError, match="unstable|positive"):
        theory.expected_policy_lag(n, rho0)


def test_fifo_policy_lags_match_event_loop():
    rng = np.random.default_rng(5)
    arrival = np.cumsum(rng.exponential(1.0, 300))
    service = rng.exponential(0.8, 300)
    # Naive reference: serve in order; a sample's lag is how many updates finish between its arrival and the start
    # of its own update.
    departures = []
    free_at = 0.0
    expected = []
    for a, s in zip(arrival, service, strict=True):
        start = max(a, free_at)
        done_before_arrival = sum(d <= a for d in departures)
        done_before_start = len(departures)  # FIFO: every earlier sample is done when this one starts
        expected.append(done_before_start - done_before_arrival)
        free_at = start + s
        departures.append(free_at)
    lags = theory.fifo_policy_lags(arrival, service)
    chex.assert_shape(lags, (300,))
    np.testing.assert_array_equal(lags, expected)
    assert lags.max() > 1  # the sequence does queue up, so the check is not vacuous
    # Hand case: three samples at t = 0, 0.1, 0.2, each taking 1 s: they wait behind 0, 1 and 2 earlier samples.
    np.testing.assert_array_equal(theory.fifo_policy_lags([0.0, 0.1, 0.2], [1.0, 1.0, 1.0]), [0, 1, 2])
    with pytest.raises(ValueError, match="non-decreasing"):
        theory.fifo_policy_lags([1.0, 0.5], [0.1, 0.1])
    with pytest.raises(ValueError, match="one length"):
        theory.fifo_policy_lags([1.0, 2.0], [0.1])


@pytest.mark.parametrize("n", [4, 16, 32])
def test_fig3c_lag_simulation_matches_claim2(n):
    formula = theory.expected_policy_lag(n, LAMBDA0 / MU)
    estimate = theory.simulate_policy_lag(n, LAMBDA0, MU, num_samples=1_000_000, seed=n)
    assert estimate.mean == pytest.approx(formula, rel=LAG_TOLERANCE)
    assert abs(estimate.mean - formula) <= MAX_Z * estimate.stderr


def test_simulate_policy_lag_deterministic_and_validated():
    first = theory.simulate_policy_lag(8, LAMBDA0, MU, num_samples=20_000, seed=3)
    assert theory.simulate_policy_lag(8, LAMBDA0, MU, num_samples=20_000, seed=3) == first
    assert theory.simulate_policy_lag(8, LAMBDA0, MU, num_samples=20_000, seed=4) != first
    with pytest.raises(ValueError, match="unstable"):
        theory.simulate_policy_lag(40, LAMBDA0, MU)
    with pytest.raises(ValueError, match="warmup_fraction"):
        theory.simulate_policy_lag(8, LAMBDA0, MU, warmup_fraction=1.0)
    with pytest.raises(ValueError, match="num_batches"):
        theory.simulate_policy_lag(8, LAMBDA0, MU, num_samples=10, num_batches=20)
    with pytest.raises(ValueError, match="mu"):
        theory.simulate_policy_lag(8, LAMBDA0, 0.0)
