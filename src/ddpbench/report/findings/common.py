"""What every kind of finding shares: `Finding` itself, `Kind` (what a topic module declares of each
kind it gives), `Tables` (what its rules read), the anchors, and the helpers that read the analysis
tables (a row's number, the grid's varying axes, a cell's name, rows matching a cell, the best cell
at the largest world size).

Every table may be empty, and may lack columns; a value compares as text (`key_text`), so 16.0
matches 16 and NaN matches NaN, as a table read back from CSV has them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from ddpbench import analysis
from ddpbench.report.text import value_text

ANCHORS = ("comparisons", "speedup-table", "cells", "fits", "problems", "links", "fig-phases", "fig-throughput_vs_batch",
           "fig-dataset_size", "fig-link", "fig-profile", "fig-memory_held", "fig-mfu", "fig-energy", "fig-checkpointing", "decisions",
           "predictions")  # fmt: skip
AXIS_TEXT = {"world_size": "world size", "batch_size": "batch", "dataset_size": "dataset size", "nodes": "nodes"}


@dataclass(frozen=True)
class Finding:
    kind: str  # a kind a topic module declares (ddpbench.report.findings.kinds())
    text: str  # one plain sentence, numbers with their intervals
    anchor: str  # HTML anchor id of the table or figure behind it, one of ANCHORS
    decided: bool = True  # False: a comparison its intervals could not decide (a tie answers no "which is fastest")


@dataclass(frozen=True)
class Tables:
    """What a kind's rules read: the analysis tables (each may be empty; the findings' __init__ adds
    the optional columns a rule reads as missing) and the grid's varying axes."""

    runs: pd.DataFrame
    cells: pd.DataFrame
    speed: pd.DataFrame
    comparisons: pd.DataFrame
    fits: pd.DataFrame
    links: pd.DataFrame
    profile: pd.DataFrame
    shown: list[str]
    # a sequential design's answers (analysis.comparison.DesignAnswers), for the rules that pair cells
    # themselves; None without one (the tables above already carry them)
    design: analysis.DesignAnswers | None = None
    # the step model's held-out errors per kind of hold-out (stepmodel.validate's summary); empty without them
    predictions: pd.DataFrame = field(default_factory=pd.DataFrame)


@dataclass(frozen=True)
class Kind:
    """One kind of finding, as its topic module declares it in `KINDS` (kind name -> Kind): the
    package's __init__ discovers every module's kinds, so adding a kind is adding a module.

    Three places in the report's order, each a number (lower first; the built-in kinds use multiples
    of 10, so a new kind fits between two): `order`, where the kind stands among the findings;
    `trim`, which kind gives up an extra finding first when the report has too many; `drop`, which
    kind loses its last finding first once every kind is down to one."""

    find: Callable[[Tables], list[Finding]]  # the kind's findings, most important first
    at_most: int  # findings of this kind kept before the report's overall limit
    order: int
    trim: int
    drop: int


def as_frame(df) -> pd.DataFrame:
    """df itself, or an empty DataFrame for None (or anything else)."""
    return df if isinstance(df, pd.DataFrame) else pd.DataFrame()


def row_num(row, name) -> float:
    """row[name] as a float; NaN when absent or not a number."""
    v = row.get(name, np.nan) if hasattr(row, "get") else np.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return np.nan


def shown_axes(*frames: pd.DataFrame) -> list[str]:
    """The grid's varying axes, from the first non-empty table that has axis columns."""
    for df in frames:
        cols = analysis.axes(df) if len(df) else []
        if cols:
            return analysis.varying(df, cols)
    return []


def setting_text(row, cols: list[str]) -> str:
    """'world size 2, batch 128' for the given axes (strategy left out)."""
    parts = []
    for c in sorted(cols, key=lambda c: c != "world_size"):
        if c == "strategy" or c not in row or (not isinstance(row[c], str) and pd.isna(row[c])):
            continue
        v = value_text(row[c])
        parts.append(f"{AXIS_TEXT[c]} {v}" if c in AXIS_TEXT else f"{c}={v}")
    return ", ".join(parts)


def cell_name(row, shown: list[str]) -> str:
    """'ddp at world size 2, batch 128': the strategy, world size and the other varying axes."""
    cols = [c for c in shown if c not in ("strategy", "world_size")]
    cols = (["world_size"] if "world_size" in row else []) + cols
    where = setting_text(row, cols)
    who = str(row["strategy"]) if "strategy" in row and pd.notna(row["strategy"]) else "the cell"
    return f"{who} at {where}" if where else who


def key_text(v) -> str:
    """A value compared as text: NaN equal to NaN, 16.0 equal to 16."""
    if not isinstance(v, str) and pd.isna(v):
        return "nan"
    return value_text(v)


def key_texts(s: pd.Series) -> np.ndarray:
    """`key_text` of every value of a column; numeric columns without a Python call per value (findings
    matched 1.4 million values one by one at 8,100 runs)."""
    if s.dtype.kind in "iub":
        return s.astype(str).to_numpy() if s.dtype.kind != "b" else s.map(key_text).to_numpy()
    if s.dtype.kind == "f":
        x = s.to_numpy(float)
        whole = np.isfinite(x) & (x == np.round(x))
        small = whole & (np.abs(x) < 2**53)
        out = s.astype(str).to_numpy(object)  # what str() gives, for the values that are not whole
        out[small] = x[small].astype(np.int64).astype(str)
        out[whole & ~small] = [str(int(v)) for v in x[whole & ~small]]
        out[np.isnan(x)] = "nan"
        return out
    if pd.api.types.infer_dtype(s, skipna=True) in ("string", "empty"):  # text and NaN only: itself, NaN as "nan"
        return s.astype(object).where(s.notna(), "nan").to_numpy(object)
    return s.map(key_text).to_numpy()


def matching_rows(df: pd.DataFrame, row, cols: list[str]) -> pd.DataFrame:
    """Rows of df whose values equal row's on cols (compared as `key_text`)."""
    mask = np.ones(len(df), bool)
    for c in cols:
        if c in df and c in row:
            mask &= key_texts(df[c]) == key_text(row[c])
    return df[mask]


def ok_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that finished ok (all of them when there is no status column)."""
    if runs.empty:
        return runs
    return runs[runs["status"].astype(str) == "ok"] if "status" in runs else runs


def largest(speed: pd.DataFrame) -> pd.DataFrame:
    """The speedup rows at the largest world size, best first."""
    speed = speed[pd.to_numeric(speed["speedup"], errors="coerce").notna()]
    p = pd.to_numeric(speed["world_size"], errors="coerce")
    top = speed[p == p.max()]
    return top.sort_values("speedup", ascending=False, kind="stable")


def best_cell(cells: pd.DataFrame, speed: pd.DataFrame):
    """The best strategy's cell at the largest world size: by speedup where there is one, else throughput."""
    if not speed.empty and "speedup" in speed and speed["speedup"].notna().any():
        r = largest(speed).iloc[0]
        if not cells.empty:
            m = matching_rows(cells, r, analysis.axes(cells))
            if len(m):
                return m.iloc[0]
        return r
    if cells.empty or "samples_per_s" not in cells or cells["samples_per_s"].notna().sum() == 0:
        return None
    c = cells[cells["samples_per_s"].notna()]
    if "world_size" in c:
        p = pd.to_numeric(c["world_size"], errors="coerce")
        c = c[p == p.max()]
    return c.sort_values("samples_per_s", ascending=False, kind="stable").iloc[0]
