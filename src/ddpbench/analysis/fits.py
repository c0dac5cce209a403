"""The scaling laws and their least-squares fits: Amdahl (serial fraction from times), Gustafson
(serial share of scaled work), Karp–Flatt (the serial fraction each measured speedup implies), and
the Fit record every fitted law returns (parameters as Intervals, R², a predictor).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from ddpbench.analysis.intervals import LEVEL, Interval


def karp_flatt(speedup, p):
    """Experimentally determined serial fraction e = (1/S − 1/p)/(1 − 1/p), p > 1."""
    speedup, p = np.asarray(speedup, float), np.asarray(p, float)
    return (1 / speedup - 1 / p) / (1 - 1 / p)


def amdahl_time(p, t1, f):
    return t1 * (f + (1 - f) / np.asarray(p, float))


def gustafson_speedup(p, alpha):
    p = np.asarray(p, float)
    return p - alpha * (p - 1)


def _t_interval(est: np.ndarray, cov: np.ndarray, dof: int, level: float = LEVEL):
    """(low, high): the Student-t intervals of fitted parameters `est` from their covariance."""
    se = np.sqrt(np.clip(np.diag(cov), 0, None))
    q = special.stdtrit(dof, 0.5 + level / 2)
    return est - q * se, est + q * se


def r_squared(y, yhat) -> float:
    """The coefficient of determination of the predictions `yhat` of `y`; NaN when `y` does not vary."""
    y, yhat = np.asarray(y, float), np.asarray(yhat, float)
    ss_tot = np.sum((y - y.mean()) ** 2)
    return float(1 - np.sum((y - yhat) ** 2) / ss_tot) if ss_tot > 0 else np.nan


@dataclass
class Fit:
    """A fitted law: its parameters as Intervals, how many points it saw, R² and a predictor."""

    params: dict[str, Interval]
    n_points: int
    r2: float
    predict: callable = None  # p -> value (time or speedup, per law)
    note: str = ""
    predictions: dict = None  # p -> Interval of the predicted value, where the fit has intervals for them


def fit_amdahl(p, t) -> Fit | str:
    """Serial fraction f (and T(1)) from times by nonlinear least squares on relative error.

    T(1) is fitted too, so a constant per-strategy overhead does not bias f; the interval
    is the Student-t interval from the covariance (3% timing noise is multiplicative, hence
    sigma = T). Returns a reason string when there are too few distinct worker counts.
    """
    p, t = np.asarray(p, float), np.asarray(t, float)
    if len(np.unique(p)) < 3:
        return f"too few points: this strategy ran at {len(np.unique(p))} worker count(s), Amdahl needs 3"
    (t1, f), cov = optimize.curve_fit(amdahl_time, p, t, p0=(float(t.max()), 0.1), sigma=t, bounds=([0, 0], [np.inf, 1]))
    lo, hi = _t_interval(np.array([t1, f]), cov, len(p) - 2)
    return Fit(
        {"f": Interval(f, max(lo[1], 0.0), min(hi[1], 1.0)), "t1_s": Interval(t1, lo[0], hi[0])},
        len(p),
        r_squared(t, amdahl_time(p, t1, f)),
        lambda q, t1=t1, f=f: amdahl_time(q, t1, f),
    )


def fit_gustafson(p, s) -> Fit | str:
    """α in S(p) = p − α(p − 1): linear least squares through S(1) = 1, Student-t interval."""
    p, s = np.asarray(p, float), np.asarray(s, float)
    above = p > 1
    if len(np.unique(p[above])) < 2:
        return f"too few points: this strategy ran at {len(np.unique(p[above]))} worker count(s) above 1, Gustafson needs 2"
    x, y = (p - 1)[above], (p - s)[above]  # p − S = α (p − 1)
    alpha = float(x @ y / (x @ x))
    dof = len(x) - 1
    var = np.sum((y - alpha * x) ** 2) / dof / (x @ x)
    lo, hi = _t_interval(np.array([alpha]), np.array([[var]]), dof)
    return Fit(
        {"alpha": Interval(alpha, lo[0], hi[0])},
        len(p),
        r_squared(s, gustafson_speedup(p, alpha)),
        lambda q, a=alpha: gustafson_speedup(q, a),
    )
