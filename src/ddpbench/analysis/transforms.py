"""What today's training options cost and buy, each cell against its twin (every other axis equal):
torch.compile (`compile_payoff`) and activation checkpointing (`checkpointing_effects`), the two
settings that change the model as it is trained (run.transforms.BLOCK_STEPS; `MODE_AXES`).

Compiling happens in the first step, which is never timed; its cost is runs.csv's extra_compile_s (the
first step's wall beyond a median timed step, on the slowest rank), per cell the median over repeats
with its order-statistic interval (cells.csv). It pays off once the seconds each compiled step saves
have added up to it: compile_s / (eager step − compiled step), only where the Welch interval of the
step-time ratio eager / compiled excludes 1 on the compiled side (a difference the intervals cannot
see pays nothing back). Its span (payoff_steps_low, _high) takes the compile time's interval and the
ratio's together, the compiled step time at its estimate: a range to read the estimate by, not a 95 %
interval of its own.

Checkpointing recomputes activations in the backward instead of keeping them: it lowers the peak and
costs time. Both are the cell against its twin with activation_checkpointing none: the throughput ratio
and the peak's ratio, each with its Welch log-t interval over repeats, and both peaks as medians with
their order-statistic intervals (memory.axis_effects).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench.analysis.comparison import DesignAnswers, Verdict, verdict_of
from ddpbench.analysis.intervals import Interval, welch_log_ratio
from ddpbench.analysis.memory import axis_effects, cell_key, runs_by_cell
from ddpbench.analysis.tables import axes, numeric_column
from ddpbench.core.run_record import Extra

#: The settings that change the model as it is trained: a sentence about a cell names both.
MODE_AXES = ("compile", "activation_checkpointing")
EAGER = "none"  # compile: none
NO_CHECKPOINTING = "none"  # activation_checkpointing: none
STEP = "step_time_median_s"
COMPILE_S = Extra.compile_s
PAYOFF_COLUMNS = [
    "compile_s", "compile_s_ci_low", "compile_s_ci_high", "compile_s_ci_level", "compiled_graphs",
    "step_s", "step_s_ci_low", "step_s_ci_high", "eager_step_s", "eager_step_s_ci_low", "eager_step_s_ci_high",
    "speedup", "speedup_ci_low", "speedup_ci_high", "speedup_ci_level", "verdict", "saved_s", "payoff_steps",
    "payoff_steps_low", "payoff_steps_high", "unstable",
]  # fmt: skip


def _measured(cells: pd.DataFrame) -> pd.DataFrame:
    return cells[numeric_column(cells, "n_repeats") > 0] if "n_repeats" in cells else cells


def _payoff(compile_s: tuple[float, float, float], step_s: float, iv: Interval, verdict: Verdict) -> dict:
    """Seconds a compiled step saves and the steps until they add up to the compile time (NaN unless faster)."""
    saved = step_s * (iv.estimate - 1)  # eager − compiled = compiled × (ratio − 1)
    if verdict != Verdict.FASTER or not np.isfinite(compile_s[0]):
        return dict(saved_s=saved, payoff_steps=np.nan, payoff_steps_low=np.nan, payoff_steps_high=np.nan)
    est, lo, hi = compile_s
    lo, hi = (lo, hi) if np.isfinite(lo) and np.isfinite(hi) else (est, est)
    return dict(saved_s=saved, payoff_steps=est / saved, payoff_steps_low=lo / (step_s * (iv.high - 1)),
                payoff_steps_high=hi / (step_s * (iv.low - 1)))  # fmt: skip


def compile_payoff(runs: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """One row per compiled cell (compile not none) whose eager twin was measured: its compile time
    (median [order-statistic interval], graphs compiled), both step times (geometric means [log-t]),
    the step-time ratio eager / compiled with its Welch interval (`speedup`) and what it says
    (`verdict`, a comparison.Verdict of the compiled cell against its twin: FASTER, its steps shorter), the seconds a compiled step saves and the steps the compile takes to pay off
    (NaN where compiled steps are not faster by the interval). Empty, with the columns, without
    compiled cells or their twins."""
    cols = [c for c in axes(cells) if c in runs] if not runs.empty else axes(cells)
    if cells.empty or "compile" not in cols:
        return pd.DataFrame(columns=[*cols, *PAYOFF_COLUMNS])
    c = _measured(cells)
    others = [x for x in cols if x != "compile"]
    mode = c["compile"].astype(str)
    twins = {cell_key(r[others]): r for _, r in c[mode == EAGER].iterrows()}
    steps = runs_by_cell(runs, cols, STEP)
    rows = []
    for _, r in c[mode != EAGER].iterrows():
        twin = twins.get(cell_key(r[others]))
        if twin is None:
            continue
        xe, xc = steps.get(cell_key(twin[cols]), np.array([])), steps.get(cell_key(r[cols]), np.array([]))
        iv = welch_log_ratio(xe, xc) if len(xe) and len(xc) else Interval(np.nan)
        cs = tuple(float(pd.to_numeric(r.get(f"{COMPILE_S}{s}", np.nan), errors="coerce"))
                   for s in ("", "_ci_low", "_ci_high"))  # fmt: skip
        step_s, verdict = float(pd.to_numeric(r.get(STEP, np.nan), errors="coerce")), verdict_of(iv.low, iv.high)
        row = {k: r[k] for k in cols}
        row.update(compile_s=cs[0], compile_s_ci_low=cs[1], compile_s_ci_high=cs[2],
                   compile_s_ci_level=r.get(f"{COMPILE_S}_ci_level", np.nan),
                   compiled_graphs=r.get(Extra.compiled_graphs, np.nan), step_s=step_s,
                   step_s_ci_low=r.get(f"{STEP}_ci_low", np.nan), step_s_ci_high=r.get(f"{STEP}_ci_high", np.nan),
                   eager_step_s=twin.get(STEP, np.nan), eager_step_s_ci_low=twin.get(f"{STEP}_ci_low", np.nan),
                   eager_step_s_ci_high=twin.get(f"{STEP}_ci_high", np.nan), speedup=iv.estimate,
                   speedup_ci_low=iv.low, speedup_ci_high=iv.high, speedup_ci_level=iv.level, verdict=verdict,
                   unstable=str(r.get("unstable", "")).lower() in ("true", "1") or
                   str(twin.get("unstable", "")).lower() in ("true", "1"),
                   **_payoff(cs, step_s, iv, verdict))  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows, columns=[*cols, *PAYOFF_COLUMNS])


def checkpointing_effects(runs: pd.DataFrame, cells: pd.DataFrame, design: DesignAnswers | None = None) -> pd.DataFrame:
    """One row per checkpointed cell (activation_checkpointing full or selective) whose twin without
    checkpointing was measured: its throughput over the twin's (the design's comparison where it asked)
    and its peak over the twin's, each with its Welch interval, both peaks with their intervals
    (memory.axis_effects' columns)."""
    return axis_effects(runs, cells, "activation_checkpointing", NO_CHECKPOINTING, design)
