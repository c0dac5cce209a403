"""What every study section shares: the tables a study reads (`StudyData`), the section it returns
(`Section`), a study's registry entry (`Study`), and the per-cell table and number formats the
sections have in common.

Numbers follow the report's conventions: timing metrics are the cells' geometric means with
their 95 % intervals (cells.csv), shares the medians over repeats with their order-statistic
intervals, per-step phase times the medians over a cell's runs of (phase seconds / timed steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.report.text import num, pct_text, with_ci


@dataclass
class StudyData:
    """What a study reads: the report's runs, cells and speedup tables (and the per-step and
    profiler tables where the report has them)."""

    runs: pd.DataFrame
    cells: pd.DataFrame
    speed: pd.DataFrame
    steps: pd.DataFrame | None = None
    profile: pd.DataFrame | None = None
    # When a sequential design ran, its answers (analysis.comparison.DesignAnswers): the pairs of cells a
    # study compares itself read the design's verdict where it asked; None without a design.
    design: A.DesignAnswers | None = None


@dataclass
class Section:
    """A study's part of the report: the table as (columns, rows, note), the figure kinds it points
    to, and its findings (plain sentences)."""

    name: str
    title: str
    question: str
    columns: list[str]
    rows: list[list[str]]
    note: str
    figures: tuple[str, ...]
    findings: list[str]


@dataclass(frozen=True)
class Study:
    """A study preset's section: its name (the preset's `study:`), title, question, the figure kinds
    that answer it, and `build`, which computes its table and findings from the data."""

    name: str
    title: str
    question: str
    figures: tuple[str, ...]  # figure kinds (ddpbench.report.figures.KINDS) that answer it, in reading order
    build: Callable[[StudyData], tuple[list[str], list[list[str]], str, list[str]]]  # columns, rows, note, findings


def to_float(x) -> float:
    """x as a float; NaN when absent or not a number."""
    v = pd.to_numeric(pd.Series([x]), errors="coerce").iloc[0]
    return float(v) if pd.notna(v) else np.nan


def ms_text(x) -> str:
    """Seconds as milliseconds, in the report's compact number format."""
    return num(1e3 * to_float(x))


def cell_ci(r, col: str, scale: float = 1.0) -> str:
    """A cell's `col` with its interval, as the report's other tables write it (text.with_ci)."""
    return with_ci(*(to_float(r.get(c, np.nan)) * scale for c in (col, f"{col}_ci_low", f"{col}_ci_high")))


def _per_step(runs: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell (`cols`): medians over its ok runs of compute and communication seconds per timed
    step, communication calls per step and samples per step (the global batch)."""
    ok = runs[runs["status"] == "ok"]
    num = lambda c: pd.to_numeric(ok[c], errors="coerce") if c in ok else pd.Series(np.nan, index=ok.index)  # noqa: E731
    steps = num("timed_steps")
    compute = sum(num(f"phase_{p}_s") for p in ("data", "forward", "backward", "optimizer")) / steps
    frame = pd.DataFrame({**{c: ok[c] for c in cols}, "compute_s": compute, "comm_s": num("phase_comm_s") / steps,
                          "calls": num("comm_calls_per_step"), "global_batch": num("global_batch"),
                          "fixed_s": num("fixed_cost_s"), "steps": num("total_steps")})  # fmt: skip
    return frame.groupby(cols, dropna=False, sort=True).median().reset_index()


def comm_share(r) -> str:
    """A cell's share of a step spent communicating, with its interval (cells.csv's frac_comm)."""
    return pct_text(r["frac_comm"], r.get("frac_comm_ci_low"), r.get("frac_comm_ci_high"), r.get("frac_comm_ci_level"))


def study_cells(d: StudyData, cols: list[str]) -> pd.DataFrame:
    """cells.csv rows with the per-step medians and the speedup beside them, one per cell."""
    cells = d.cells[d.cells["n_repeats"] > 0] if "n_repeats" in d.cells else d.cells
    merged = cells.merge(_per_step(d.runs, cols), on=cols, how="left", suffixes=("", "_runs"))
    sp = [c for c in ("speedup", "speedup_ci_low", "speedup_ci_high") if c in d.speed]
    if sp and not d.speed.empty:
        merged = merged.merge(d.speed[[*cols, *sp]], on=cols, how="left")
    return merged


def axes_text(r, cols: list[str]) -> str:
    """'p=2, n=1024, batch_size=64': a cell's axes but its strategy."""
    return ", ".join(f"{'p' if c == 'world_size' else 'n' if c == 'dataset_size' else c}={r[c]}" for c in cols if c != "strategy")


def skipped_counts(runs: pd.DataFrame, device, ran: set[int]) -> tuple[list[int], int, str]:
    """The worker counts of `device` the grid asked for that never ran (recorded as skipped): the
    counts, how many runs, and the first run's reason (e.g. NCCL's one GPU per rank)."""
    gone = runs[(runs["status"] == "skipped") & (runs["device"].astype(str) == str(device))]
    p = pd.to_numeric(gone["world_size"], errors="coerce")
    keep = p.notna() & ~p.isin(ran)
    reason = gone.loc[keep, "reason"].astype(str).iloc[0] if keep.any() else ""
    return sorted(set(p[keep].astype(int))), int(keep.sum()), reason


def devices_not_run(runs: pd.DataFrame, ran: list[str]) -> list[str]:
    """One answer per device of the grid on which nothing ran, with the recorded reason."""
    found = []
    for device in sorted(set(runs["device"].astype(str)) - set(ran)):
        _, n, reason = skipped_counts(runs, device, set())
        if n:
            found.append(f"Nothing ran on {device} here: its {n} runs were recorded as skipped "
                         f"({reason}); the answers below are the other device's.")  # fmt: skip
    return found

