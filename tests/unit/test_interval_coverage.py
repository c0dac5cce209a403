"""The intervals deserve their labels: simulated cells, real coverage at the repeat counts used.

A run's value (step time) is a mean or median over 30 timed steps of log-normal step-time
noise (sigma_step) times a log-normal run-to-run factor (sigma_run), as separate launches
give. The truth is the population median of that per-run value, from a large simulation.
Each check asserts observed coverage >= stated level − 3 binomial standard errors; the
figures the report quotes (analysis.TESTED_COVERAGE) must match what is measured here.
The intervals are computed by the analysis module's own vectorised cores (t_halfwidth,
welch_halfwidth, order_stat_rank), the ones log_t_interval / welch_log_ratio /
order_stat_interval call, so the code under test is the code the report runs.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from ddpbench import analysis as A
from ddpbench.analysis.intervals import t_halfwidth, welch_halfwidth

SEED = 20240611
CELLS = 4000  # simulated cells per repeat count
STEPS = 30  # timed steps per run
SIGMA_RUN, SIGMA_STEP = 0.03, 0.10
REPEATS = (3, 5, 10)
REDUCERS = {"mean": np.mean, "median": np.median}  # samples_per_s is a mean over steps, step_time_median_s a median


def per_run_values(rng, shape, scale=1.0, sigma_run=SIGMA_RUN, reduce="mean"):
    """Per-run values of `shape` runs: the run factor times the mean/median of its steps."""
    steps = np.exp(SIGMA_STEP * rng.standard_normal((*shape, STEPS)))
    run = np.exp(sigma_run * rng.standard_normal(shape))
    return scale * run * REDUCERS[reduce](steps, axis=-1)


@functools.cache
def true_median(scale=1.0, sigma_run=SIGMA_RUN, reduce="mean"):
    """Population median of the per-run value (100,000 runs: Monte Carlo error ~2e-4 relative, far
    below the intervals' half-widths of 2-5 %)."""
    return float(np.median(per_run_values(np.random.default_rng(SEED + 1), (100_000,), scale, sigma_run, reduce)))


def min_coverage(level, n=CELLS):
    return level - 3 * np.sqrt(level * (1 - level) / n)


def log_t_coverage(n, reduce):
    rng = np.random.default_rng(SEED + n)
    y = np.log(per_run_values(rng, (CELLS, n), reduce=reduce))
    half = t_halfwidth(y)
    truth = np.log(true_median(reduce=reduce))
    return float(np.mean(np.abs(y.mean(axis=-1) - truth) <= half))


def welch_coverage(n_a, n_b):
    # Two cells with different truths and spreads: A 1.5x the throughput of B, B noisier run to run.
    rng = np.random.default_rng(SEED + 100 * n_a + n_b)
    a = np.log(per_run_values(rng, (CELLS, n_a), scale=1.5))
    b = np.log(per_run_values(rng, (CELLS, n_b), sigma_run=2 * SIGMA_RUN))
    truth = np.log(true_median(scale=1.5) / true_median(sigma_run=2 * SIGMA_RUN))
    half = welch_halfwidth(a, b)
    return float(np.mean(np.abs(a.mean(axis=-1) - b.mean(axis=-1) - truth) <= half))


@pytest.mark.parametrize("reduce", REDUCERS)
@pytest.mark.parametrize("n", REPEATS)
def test_log_t_interval_covers_the_median_run_at_its_level(n, reduce):
    cov = log_t_coverage(n, reduce)
    assert cov >= min_coverage(A.LEVEL), f"n={n}: covered {cov:.4f}"
    # Not a vacuous pass by being far too wide either: the label is accurate, not just safe.
    assert cov <= A.LEVEL + 0.02, f"n={n}: covered {cov:.4f}"


# Unequal counts (issue 46, point 6): a 14-run side against a noisier 3-run side covered 0.93 with
# Welch-Satterthwaite's degrees of freedom; Hsu's min(n) - 1 there.
@pytest.mark.parametrize("n_a, n_b", [(3, 3), (5, 5), (10, 10), (3, 5), (5, 3), (14, 3), (20, 3), (3, 14)])
def test_welch_ratio_interval_covers_the_true_ratio(n_a, n_b):
    cov = welch_coverage(n_a, n_b)
    assert cov >= min_coverage(A.LEVEL), f"n={n_a},{n_b}: covered {cov:.4f}"


@pytest.mark.parametrize("n", REPEATS)
def test_order_statistic_interval_reaches_its_exact_level_for_any_distribution(n):
    # A skewed non-timing metric (gamma): the interval is distribution-free, its level exact.
    rng = np.random.default_rng(SEED + 7 * n)
    x = np.sort(rng.gamma(2.0, size=(CELLS, n)), axis=-1)
    truth = float(np.median(np.random.default_rng(SEED).gamma(2.0, size=400_000)))
    k, level = A.order_stat_rank(n)
    cov = float(np.mean((x[:, k - 1] <= truth) & (truth <= x[:, n - k])))
    assert level == {3: 0.75, 5: 0.9375, 10: 1 - 2 * 11 / 1024}[n]
    assert cov >= min_coverage(level), f"n={n}: covered {cov:.4f} < {level}"


def old_bootstrap_median(values, n_boot=1000, rng=None):
    """The previous method, vectorised: percentile bootstrap of the median (2.5 %, 97.5 %), odd n."""
    cells, n = values.shape
    idx = rng.integers(0, n, size=(cells, n_boot, n))
    meds = np.sort(np.take_along_axis(values[:, None, :], idx, axis=-1), axis=-1)[..., n // 2]
    return np.percentile(meds, 2.5, axis=-1, method="lower"), np.percentile(meds, 97.5, axis=-1, method="higher")


def test_old_percentile_bootstrap_at_three_repeats_is_min_max_and_covers_75_percent():
    rng = np.random.default_rng(SEED)
    cells = 2000
    x = per_run_values(rng, (cells, 3))
    lo, hi = old_bootstrap_median(x, rng=rng)
    # A resample's median is the sample minimum with probability 7/27 > 2.5 %: the interval is [min, max] ...
    assert np.array_equal(lo, x.min(axis=1)) and np.array_equal(hi, x.max(axis=1))
    # ... which covers the median with probability 1 − 2·0.5³ = 0.75, nowhere near the 95 % it was called.
    truth = true_median()
    cov = float(np.mean((lo <= truth) & (truth <= hi)))
    assert abs(cov - 0.75) <= 3 * np.sqrt(0.75 * 0.25 / cells)
    assert cov < min_coverage(A.LEVEL, cells)


def test_scalar_intervals_use_the_tested_cores():
    rng = np.random.default_rng(SEED)
    x, y = per_run_values(rng, (5,)), per_run_values(rng, (3,), scale=1.5)
    iv = A.log_t_interval(x)
    half = t_halfwidth(np.log(x))
    assert np.log(iv.high) - np.log(iv.estimate) == pytest.approx(half)
    assert iv.estimate == pytest.approx(np.exp(np.log(x).mean())) and iv.level == A.LEVEL
    r = A.welch_log_ratio(y, x)
    assert np.log(r.high / r.estimate) == pytest.approx(welch_halfwidth(np.log(y), np.log(x)))


def test_report_quotes_the_measured_coverage():
    """The methodology's figures are this simulation's, within its own error."""
    quoted = A.TESTED_COVERAGE
    tol = 3 * np.sqrt(0.95 * 0.05 / CELLS)
    for n in REPEATS:
        assert quoted["log_t"][n] == pytest.approx(log_t_coverage(n, "mean"), abs=tol)
        assert quoted["welch"][n] == pytest.approx(welch_coverage(n, n), abs=tol)
    assert quoted["cells"] == CELLS
