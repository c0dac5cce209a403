"""The runs table and its cells: loading runs.csv, run versions (runs of different code or
packages are never pooled), the axes that identify a cell, and matching and labelling rows.

A cell is one combination of the cell parameters plus world size and nodes; its repeats are the
separate launches of it. Columns are compared as text where they may mix ints and "auto" or NaN.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench.core.params import SAME_AT_BASELINE, CellParams
from ddpbench.core.run_record import Env
from ddpbench.strategies import STRATEGY_SETTINGS, names as strategy_names, strategy_settings

# seed may be varied per repeat by the workflow, so it is never part of a cell's identity.
NOT_AXES = ("seed",)
LAUNCH_AXES = ("world_size", "nodes")
# Settings that cannot change a single-worker `single` run (as each cell parameter declares:
# core.params.SAME_AT_BASELINE): ignored when no baseline matches exactly (e.g. the workflow ran
# `single` once instead of once per bucket size).
IRRELEVANT_AT_BASELINE = SAME_AT_BASELINE
BASELINE_STRATEGY = "single"
TIME = "epoch_time_s"  # the time of a fixed amount of work: speedup is its ratio


def load_runs(path) -> pd.DataFrame:
    return load_runs_frame(pd.read_csv(path))


def load_runs_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Normalise a runs table: a status on every row, the epoch time where only throughput
    exists, and runs of a cell made by other code or off-lock packages than its newest runs
    set aside as "superseded" (see `supersede_other_versions`)."""
    runs = runs.copy()
    if "status" not in runs:
        runs["status"] = "ok"
    runs["status"] = runs["status"].fillna("failed").astype(str)
    if TIME not in runs and "samples_per_s" in runs and "dataset_size" in runs:
        runs[TIME] = runs["dataset_size"] / runs["samples_per_s"]
    return supersede_other_versions(settings_as_read(runs))


def settings_as_read(runs: pd.DataFrame) -> pd.DataFrame:
    """A strategy setting that a row's strategy does not read (fsdp and bucket_mb) takes the value
    the strategies that read it ran at, where they all ran at one: the plan held it at its default
    (one measurement whatever it is), and recorded there it would split twins apart (fsdp's rows
    at bucket_mb 25 would match no ddp cell at 0.43). With several values read (an axis),
    the held default is kept: the twin of the read cell at that value. runs.csv keeps what ran."""
    if "strategy" not in runs:
        return runs
    known, original = set(strategy_names()), runs
    strategy = runs["strategy"].astype(str)
    for setting in (s for s in STRATEGY_SETTINGS if s in runs):
        # a strategy this checkout lacks (an old results folder) is taken to read everything
        reads = strategy.map(lambda name: name not in known or setting in strategy_settings(name)).to_numpy(bool)
        read = runs.loc[reads, setting].dropna()
        if reads.all() or read.empty or read.astype(str).nunique() > 1:
            continue
        runs = runs.copy() if runs is original else runs
        runs.loc[~reads, setting] = read.iloc[0]
    return runs


# -- versions: never pool runs of different code or environment ------------------------------

SUPERSEDED = "superseded"


def run_version(runs: pd.DataFrame) -> pd.Series:
    """Per run, what must be equal for two runs to be pooled: the code fingerprint (package
    source + lock), the user's model source (a module.path:function model) and the packages
    that differ from the lock. Runs from before provenance
    was recorded share one (unknown) version."""
    code = text_column(runs, Env.code_fingerprint)
    model = text_column(runs, Env.user_model_digest)  # the user's own model's source, where it is one
    code = code.where(model == "", code + ", model: " + model)
    off = text_column(runs, Env.off_lock)
    return code.where(off == "", code + ", off-lock: " + off)


def text_column(runs: pd.DataFrame, name: str) -> pd.Series:
    """A text column with "" for missing values (and for a missing column)."""
    if name not in runs:
        return pd.Series("", index=runs.index)
    return runs[name].map(lambda v: "" if pd.isna(v) else str(v))  # an all-NaN column is float: no fillna("")


def supersede_other_versions(runs: pd.DataFrame) -> pd.DataFrame:
    """The documented rule: within a cell, only the runs of its newest version (the version of
    the run that started last, by env_started_utc, else the last row) enter statistics; the
    others get status "superseded" and a reason naming both versions, so they stay rows and
    counts but never widen or shift an interval."""
    if runs.empty:
        return runs
    version = run_version(runs)
    if version.nunique() < 2:
        return runs
    runs = runs.copy()
    # A table whose runs all succeeded reads `reason` as an all-NaN float column: make room for text.
    runs["reason"] = runs["reason"].astype(object) if "reason" in runs else None
    order = pd.DataFrame({"started": text_column(runs, Env.started_utc), "row": range(len(runs))}, index=runs.index)
    cols = axes(runs)
    for _, g in runs.groupby(cols, dropna=False, sort=False):
        if version[g.index].nunique() < 2:
            continue
        newest = version[order.loc[g.index].sort_values(["started", "row"]).index[-1]]
        older = g.index[version[g.index] != newest]
        runs.loc[older, "reason"] = [
            f"made by other code or packages ({version[i] or 'unrecorded'}) than the cell's newest runs ({newest})"
            for i in older
        ]
        runs.loc[older, "status"] = SUPERSEDED
    return runs


def axes(runs: pd.DataFrame) -> list[str]:
    """Columns that identify a cell: every cell parameter present, plus world size and nodes."""
    names = [n for n in CellParams.names() if n not in NOT_AXES] + list(LAUNCH_AXES)
    return [n for n in names if n in runs.columns]


def varying(runs: pd.DataFrame, cols: list[str]) -> list[str]:
    """The grid's axes: the identifying columns that take more than one value. A strategy
    setting that follows from the strategy (params.powersgd_start_iter: 2 holds for powersgd,
    the strategies that do not read it keep the default) tells apart no cells the strategy does
    not: no axis, or it would split figures, panels and labels by strategy a second time."""
    out = [c for c in cols if _several_texts(runs[c])]
    settings = [c for c in out if c in STRATEGY_SETTINGS]
    if settings and "strategy" in runs:
        per_strategy = runs[["strategy", *settings]].astype(str).groupby("strategy").nunique()
        out = [c for c in out if c not in settings or per_strategy[c].max() > 1]
    return out


def _several_texts(s: pd.Series) -> bool:
    """s.astype(str).nunique() > 1 (missing values not counted, 1 and "1" one value), without making
    text of a numeric column: varying() runs dozens of times per report, each time over every axis."""
    if s.dtype.kind in "iub":
        return s.nunique() > 1
    if s.dtype.kind == "f":
        if s.nunique() > 1:
            return True
        zero = np.signbit(s.to_numpy()[s.to_numpy() == 0])
        return bool(zero.any() and not zero.all())  # 0.0 and -0.0: one number, two texts
    return s.astype(str).nunique() > 1


def group_axes(runs: pd.DataFrame) -> list[str]:
    """A scaling group is a cell without its worker count."""
    return [a for a in axes(runs) if a not in LAUNCH_AXES]


def label(row, cols: list[str]) -> str:
    return ", ".join(f"{c}={row[c]}" for c in cols) or "all runs"


def matching(df: pd.DataFrame | None, values: dict) -> pd.DataFrame | None:
    """The rows whose columns equal `values` as text (mixed int/"auto" columns compare predictably);
    a column the table lacks does not narrow it."""
    if df is None or df.empty:
        return df
    keep = np.ones(len(df), bool)
    for c, v in values.items():
        if c in df:
            keep &= (df[c].astype(str) == str(v)).to_numpy()
    return df[keep]


def text_key(values) -> tuple[str, ...]:
    """The values as text, a dictionary key: NaN and mixed int/"auto" columns compare predictably."""
    return tuple(str(v) for v in values)


def numeric_column(runs: pd.DataFrame, name: str) -> pd.Series:
    """A column as numbers (NaN where not a number, and for a missing column)."""
    return pd.to_numeric(runs[name], errors="coerce") if name in runs else pd.Series(np.nan, index=runs.index)


# A throughput as the report quotes it: (column, unit). Token data (the GPT models) record both.
SAMPLES_PER_S = ("samples_per_s", "samples/s")
TOKENS_PER_S = ("tokens_per_s", "tokens/s")


def throughput_metric(frame: pd.DataFrame | None) -> tuple[str, str]:
    """The throughput to show for these cells (or runs), as (column, unit): tokens/s where every row
    with a throughput is a token cell (tokens_per_s recorded: samples/s x seq_len), else samples/s
    (a grid that mixes token cells with others keeps one unit, samples/s, for all)."""
    if frame is None or frame.empty or "tokens_per_s" not in frame:
        return SAMPLES_PER_S
    tokens = numeric_column(frame, "tokens_per_s").notna()
    measured = tokens | numeric_column(frame, "samples_per_s").notna()
    return TOKENS_PER_S if tokens.any() and tokens[measured].all() else SAMPLES_PER_S
