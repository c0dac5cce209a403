"""Interval statistics over the repeats of a cell.

Timing metrics are positive with multiplicative noise, so they are summarised on the log
scale: the geometric mean with a Student-t interval, whose coverage is tested at 3, 5 and
10 repeats (tests/unit/test_interval_coverage.py). Other metrics (fractions, memory,
accuracy) get the median with a distribution-free order-statistic interval whose exact
level is recorded, because with few repeats 95 % does not exist for it.

Ratios (speedup, strategy vs strategy) get the Welch t-interval of the difference of mean logs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special  # the t distribution's functions: scipy.stats would add 0.55 s to every import

LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """An estimate and its interval [low, high] at coverage `level`."""

    estimate: float
    low: float = np.nan
    high: float = np.nan
    level: float = np.nan  # the interval's coverage level (NaN: no interval)


TIMING_METRICS = ("step_time_median_s", "samples_per_s", "tokens_per_s", "epoch_time_s")
# Coverage measured by tests/unit/test_interval_coverage.py (which checks these figures): the
# share of simulated cells whose nominal 95 % interval held the true median (log_t) or the true
# ratio of two cells' medians (welch), by repeat count; log-normal noise, sigma 0.03 run to run
# and 0.1 step to step over 30 steps per run.
TESTED_COVERAGE = {"cells": 4000, "log_t": {3: 0.953, 5: 0.952, 10: 0.9505}, "welch": {3: 0.956, 5: 0.9528, 10: 0.9463}}


def numeric_values(values) -> np.ndarray:
    """The numbers among `values` as a float array: text that is no number and NaN left out."""
    if isinstance(values, (pd.Series, np.ndarray)) and values.dtype.kind in "fiu":
        x = np.asarray(values, dtype=float)  # already numeric: what to_numeric and dropna would give
        return x[~np.isnan(x)]
    return np.asarray(pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").dropna(), dtype=float)


def t_halfwidth(y: np.ndarray, level: float = LEVEL) -> np.ndarray:
    """Half-width of the Student-t interval of the mean of `y` along its last axis (2+ values).
    Vectorised so the coverage test runs this very code over thousands of simulated cells."""
    n = y.shape[-1]
    return _t_ppf(0.5 + level / 2, n - 1) * y.std(axis=-1, ddof=1) / np.sqrt(n)


@functools.lru_cache(maxsize=1024)
def _t_ppf(q: float, dof: int) -> float:
    """The t quantile (scipy.stats.t.ppf), remembered: thousands of cells share a handful of repeat counts."""
    return special.stdtrit(dof, q)


def welch_halfwidth(ya: np.ndarray, yb: np.ndarray, level: float = LEVEL) -> np.ndarray:
    """Half-width of the Welch t-interval of mean(ya) − mean(yb) along the last axis, with
    Welch–Satterthwaite degrees of freedom at equal counts and Hsu's min(na, nb) − 1 at unequal
    ones where both sides vary; 0 where both sides have no spread. Satterthwaite's degrees of freedom come from the
    sample variances: with a small noisy side against a large one (3 runs against 14) a small
    variance on the small side inflates them, and the 95 % interval covered 0.93 (simulated,
    tests/unit/test_interval_coverage.py); Hsu's covers at least 0.95 there (conservatively)."""
    var, dof = welch_variance(ya, yb)
    se = np.sqrt(var)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(se > 0, special.stdtrit(np.where(se > 0, dof, 1.0), 0.5 + level / 2) * se, 0.0)


def welch_variance(ya: np.ndarray, yb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(variance, degrees of freedom) of mean(ya) − mean(yb) along the last axis, as
    `welch_halfwidth` takes them (Hsu's at unequal counts where both sides vary)."""
    na, nb = ya.shape[-1], yb.shape[-1]
    va, vb = ya.var(axis=-1, ddof=1) / na, yb.var(axis=-1, ddof=1) / nb
    with np.errstate(invalid="ignore", divide="ignore"):
        dof = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
        if na != nb:  # where both sides vary (one alone: Satterthwaite's is already its n − 1)
            dof = np.where((va > 0) & (vb > 0), np.minimum(dof, min(na, nb) - 1), dof)
    return va + vb, dof


def add_variance(var, dof, extra, extra_dof=np.inf):
    """(variance, degrees of freedom) of an estimate whose estimated variance `var` (with `dof`
    degrees of freedom) gains a term `extra` estimated with `extra_dof` (infinite: a known term),
    as Welch-Satterthwaite combines them: dof' = (var + extra)^2 / (var^2 / dof + extra^2 / extra_dof).
    Where var is 0 and the term known: infinite degrees of freedom."""
    var, dof, extra, extra_dof = (np.asarray(x, float) for x in (var, dof, extra, extra_dof))
    total = var + extra
    if not np.any(extra):
        return total, dof
    with np.errstate(divide="ignore", invalid="ignore"):
        return total, np.where(total > 0, total**2 / (var**2 / dof + extra**2 / extra_dof), np.inf)


def between_group_parts(groups) -> tuple[float, int]:
    """One cell's share of a pooled between-group (between-job, between-round) variance of its
    log values: (its groups − 1) · (the variance of the groups' means less the part the repeats
    explain, the mean of within-group variance over runs), and the groups − 1 it weighs with.
    Groups of fewer than 2 values are left out; (0, 0) with fewer than 2 groups left. A negative
    share is kept, so the pool over cells stays unbiased (floor the pooled figure at 0)."""
    kept = [np.asarray(g, float) for g in groups if len(g) >= 2]
    if len(kept) < 2:
        return 0.0, 0
    means = np.array([g.mean() for g in kept])
    within = np.mean([g.var(ddof=1) / len(g) for g in kept])
    return (len(kept) - 1) * float(means.var(ddof=1) - within), len(kept) - 1


def log_t_interval(values, level: float = LEVEL) -> Interval:
    """Geometric mean exp(mean log x) with the Student-t interval of the mean log, exponentiated.

    For log-normal run-to-run noise the geometric mean estimates the median run; one value gives no interval.
    """
    x = numeric_values(values)
    if len(x) == 0:
        return Interval(np.nan)
    if (x <= 0).any():
        return order_stat_interval(x)  # no log scale for a zero or negative value
    if len(x) == 1:
        return Interval(float(x[0]))  # exactly the value, not exp(log(value))
    y = np.log(x)
    est = float(np.exp(y.mean()))
    half = float(t_halfwidth(y, level))
    return Interval(est, float(np.exp(y.mean() - half)), float(np.exp(y.mean() + half)), level)


def welch_log_ratio(a, b, level: float = LEVEL) -> Interval:
    """Ratio of geometric means exp(mean log a − mean log b) with the Welch t-interval of the
    difference of mean logs, exponentiated; needs 2+ values on each side for an interval."""
    la, lb = np.log(numeric_values(a)), np.log(numeric_values(b))
    if len(la) == 0 or len(lb) == 0:
        return Interval(np.nan)
    d = la.mean() - lb.mean()
    if len(la) < 2 or len(lb) < 2:
        return Interval(float(np.exp(d)))
    half = float(welch_halfwidth(la, lb, level))
    return Interval(float(np.exp(d)), float(np.exp(d - half)), float(np.exp(d + half)), level)


@functools.lru_cache(maxsize=1024)
def order_stat_rank(n: int, level: float = LEVEL) -> tuple[int, float]:
    """(k, exact level) of the median interval [x_(k), x_(n−k+1)]: the largest k whose
    distribution-free coverage 1 − 2·BinomCDF(k−1; n, 1/2) reaches `level`, else k = 1 (min..max)."""
    coverage = lambda k: 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n  # BinomCDF(k-1; n, 1/2), exact  # noqa: E731
    ks = [k for k in range(1, n // 2 + 1) if coverage(k) >= level]
    k = max(ks, default=1)
    return k, coverage(k)


def order_stat_interval(values, level: float = LEVEL) -> Interval:
    """Median with the order-statistic interval of `order_stat_rank`; its exact level is recorded."""
    x = np.sort(numeric_values(values))
    if len(x) == 0:
        return Interval(np.nan)
    if len(x) == 1:
        return Interval(float(x[0]))
    k, exact = order_stat_rank(len(x), level)
    return Interval(float(np.median(x)), float(x[k - 1]), float(x[len(x) - k]), exact)


def metric_interval(metric: str, values) -> Interval:
    return log_t_interval(values) if metric in TIMING_METRICS else order_stat_interval(values)


def rel_halfwidth(iv: Interval) -> float:
    """(high − low) / 2 / estimate: the pyperf-style stability measure; NaN without an interval."""
    return (iv.high - iv.low) / 2 / iv.estimate if iv.estimate else np.nan
