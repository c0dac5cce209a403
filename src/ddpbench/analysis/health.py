"""Run health and cell stability: which runs were measured on a busy or oversubscribed
machine, did not learn or were not deterministic, which count as repeats, and whether a cell's
throughput interval is narrow enough (stability) or which likely causes widen it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench.analysis.intervals import log_t_interval, rel_halfwidth
from ddpbench.analysis.tables import TIME, numeric_column, run_version, text_column
from ddpbench.core import sysinfo
from ddpbench.core.run_record import Env, Extra

MAX_REL_CI = 0.05
# Two 1-thread ranks on 2 quiet cores differ by 10-20 % in computation per step (the
# main job's median 0.13): a cause worth naming is well beyond that.
HIGH_RANK_SKEW = 0.25
BUSY_CPU_FRAC = sysinfo.BUSY_CPU_FRAC
NO_INTERVAL = "not checked: fewer than 2 repeats, no interval"
THROUGHPUT = ("samples_per_s", "epoch_time_s", "step_time_median_s")  # the first one present judges stability


def truthy(value) -> bool:
    """A flag as it arrives: a bool, 0/1 or "True"/"False" depending on how the CSV was read."""
    return str(value).strip().lower() in ("true", "1", "1.0", "yes")


# Outcomes that the same seed, code, thread count and number of steps must reproduce bit for
# bit on a CPU (deterministic kernels, fixed reduction order). Both train losses: the 10-step mean
# differs when any of those steps' losses does; train_loss_final is the only one a table from before
# the 10-step mean's own column has (it held that mean then).
DETERMINISTIC_OUTCOMES = ("param_norm", "train_loss_final", "train_loss_last10_mean")


def nondeterministic_mask(used: pd.DataFrame, cols: list[str]) -> pd.Series:
    """Per run: an ok CPU run that disagrees on an outcome with another run of the same cell
    (`cols`), seed, version, threads per rank and step count (a determinism warning: something
    outside the recorded settings changed the arithmetic). One grouping over every cell at once:
    per cell it cost half of cell_stats at 1,620 cells."""
    mask = pd.Series(False, index=used.index)
    outcomes = [c for c in DETERMINISTIC_OUTCOMES if c in used]
    if len(used) < 2 or not outcomes or "device" not in used:
        return mask
    cpu = used[used["device"].astype(str) == "cpu"]
    if len(cpu) < 2:
        return mask
    same = [c for c in (*cols, "seed", "total_steps", Env.threads_per_rank) if c in cpu]
    keys = [cpu[c].astype(str) for c in same] + [run_version(cpu)]
    values = pd.DataFrame({o: cpu[o].astype(str) for o in outcomes})
    mask.loc[cpu.index] = (values.groupby(keys, dropna=False, sort=False).transform("nunique") > 1).any(axis=1)
    return mask


def _truthy(s: pd.Series) -> pd.Series:
    return s.map(truthy)


def busy_runs(runs: pd.DataFrame) -> pd.Series:
    """Runs measured on a busy machine: other processes took > 10 % of the CPU during the timed
    steps (missing column: not busy). The load average is not used: it lags by a minute, so
    right after the previous run's ranks it reads about their count on a quiet machine."""
    return numeric_column(runs, Env.other_cpu_frac) > BUSY_CPU_FRAC


def oversubscribed_runs(runs: pd.DataFrame) -> pd.Series:
    return _truthy(runs[Extra.oversubscribed]) if Extra.oversubscribed in runs else pd.Series(False, index=runs.index)


def unhealthy_runs(runs: pd.DataFrame) -> pd.Series:
    """Runs that did not learn: loss non-finite, ended far above its start, or spiked (run.cell's
    extra.training_health): a fast run that does not learn answers nothing."""
    return text_column(runs, Extra.training_health).isin(["diverged", "unstable"])


def _few_timed_steps(runs: pd.DataFrame) -> bool:
    short = Extra.measurement_short in runs and _truthy(runs[Extra.measurement_short]).any()
    timed, needed = numeric_column(runs, "timed_steps").median(), numeric_column(runs, "min_timed_steps").median()
    return bool(short or timed < needed)


def likely_causes(runs: pd.DataFrame) -> str:
    """Why a cell's repeats disagree, all that apply, most specific first."""
    causes = [
        ("few timed steps", _few_timed_steps(runs)),
        ("high rank skew", numeric_column(runs, "rank_skew").median() > HIGH_RANK_SKEW),
        ("busy machine", busy_runs(runs).any()),
        ("oversubscribed", oversubscribed_runs(runs).any()),
    ]
    return "; ".join(name for name, hit in causes if hit) or "run-to-run variation"


def stability(runs: pd.DataFrame, max_rel_ci: float = MAX_REL_CI) -> tuple[bool, str, float]:
    """(unstable, cause, relative half-width of the throughput interval) of one cell's used runs."""
    metric = next((m for m in THROUGHPUT if m in runs), None)
    values = numeric_column(runs, metric).to_numpy(float) if metric else None
    return cell_stability(runs, np.arange(len(runs)), values, max_rel_ci)


def cell_stability(runs: pd.DataFrame, used: np.ndarray, values: np.ndarray | None, max_rel_ci: float):
    """stability() of the runs at positions `used`, from the throughput values as an array (the
    causes, read from the runs themselves, only for an unstable cell)."""
    if values is None or np.isnan(values[used]).all():
        return False, "", np.nan
    rel = rel_halfwidth(log_t_interval(values[used]))
    if np.isnan(rel):
        return False, NO_INTERVAL, rel
    return (True, likely_causes(runs.iloc[used]), rel) if rel > max_rel_ci else (False, "", rel)


def timed_runs(ok: pd.DataFrame) -> pd.DataFrame:
    """The ok runs that produced a timing value: only these count as repeats (an ok run with no
    timed steps has no time to contribute)."""
    metric = next((m for m in (TIME, *THROUGHPUT) if m in ok), None)
    return ok[ok[metric].notna()] if metric else ok
