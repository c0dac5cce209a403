"""Findings first: the report's tables turned into a short list of statements a reader can act on.
`findings(runs, cells, speed, comparisons, fits, links=, profile=)` takes the DataFrames of
`ddpbench.analysis` (the runs table, `cell_stats`, `speedup_table`, `comparisons_table`,
`fits_table`, `links_table`, the profile table; any may be empty or None) and returns `Finding`s:
a kind, one plain sentence with its numbers and their intervals (worded by `ddpbench.report.text`),
and the HTML anchor id of the table or figure behind it.

This __init__ is the registry of the kinds: one module per topic declares `KINDS`, a dict of kind
name -> the fields of a `common.Kind` (its rules as `find(tables)`, how many it keeps, its place in the order);
`kinds()` discovers every module of the package that declares KINDS, so adding a kind is adding a
module. The topics: `winner` (fastest strategy per setting), `memory` (what a sharded strategy
saves per rank against ddp and what it costs in time), `scaling` (speedup over one process),
`phases` (where a step's time goes), `mfu` (the best and worst cell's share of the peak FLOP/s, HFU beside it),
`transforms` (what compiling and activation checkpointing cost and buy),
`sizes` (batch and dataset size), `links`, `fits` (scaling laws), `predictions` (the step model on
held-out cells), `problems` (warnings); `common` holds `Finding`, `Kind` and the table helpers,
`order` what is kept and in what order.
Modules here import only `ddpbench.analysis`, `ddpbench.report.text` and `ddpbench.report.training`
(the words for compiling and checkpointing the study sections share), each other and (this
registry) `ddpbench.core.registry`.
"""

from __future__ import annotations

import functools
import importlib

import numpy as np
import pandas as pd

from ddpbench import analysis
from ddpbench.core import registry
from ddpbench.report.findings.common import Finding, Kind, Tables, as_frame, shown_axes
from ddpbench.report.findings.order import answers_first, trim

__all__ = ["Finding", "Kind", "findings", "kinds"]


def discover(path=None) -> dict[str, Kind]:
    """Every kind the modules of this package (on `path`, else its __path__) declare in KINDS (name -> the fields of a
    common.Kind), by their order: a kind declared twice, or with a field missing or unknown, is an
    error naming the module."""
    found: dict[str, tuple[Kind, str]] = {}
    for entry in registry.entries(__path__ if path is None else path, "KINDS"):
        module = importlib.import_module(f"{__name__}.{entry}")
        for name, fields in module.KINDS.items():
            try:
                kind = Kind(**fields)
            except TypeError as e:
                raise TypeError(f"{module.__name__}: KINDS[{name!r}]: {e}") from None
            if name in found:
                raise ValueError(f"finding kind {name!r} is declared by {found[name][1]} and {module.__name__}")
            found[name] = (kind, module.__name__)
    return {name: kind for name, (kind, _) in sorted(found.items(), key=lambda item: item[1][0].order)}


@functools.cache
def kinds() -> dict[str, Kind]:
    """The report's kinds of finding, name -> Kind, in their order (the topic modules' KINDS)."""
    return discover()


def _needs(df: pd.DataFrame, required: list[str], optional: list[str]) -> pd.DataFrame:
    if df.empty or not set(required) <= set(df.columns):
        return pd.DataFrame()
    missing = [c for c in optional if c not in df.columns]
    return df.assign(**{c: np.nan for c in missing}) if missing else df


def findings(runs, cells, speed, comparisons, fits, max_items: int = 12, links=None, profile=None,
             design=None, predictions=None) -> list[Finding]:  # fmt: skip
    """The report's findings, most actionable first: winners, memory held against ddp, scaling, where the time goes,
    MFU, batch and dataset size, links, fits, predictions, warnings (each topic module's docstring says its rules);
    `design`: a sequential design's answers (analysis.DesignAnswers), for the rules that pair cells themselves;
    `predictions`: the step model's held-out errors (stepmodel.validate's summary)."""
    runs, cells, speed, comparisons, fits, links, profile = map(as_frame, (runs, cells, speed, comparisons, fits, links, profile))
    # Tables without the columns a rule needs count as empty; optional columns are added as missing.
    speed = _needs(speed, ["world_size", "speedup"], analysis.SPEEDUP_COLUMNS)
    if not speed.empty:
        speed = speed[pd.to_numeric(speed["world_size"], errors="coerce").notna()]
    comparisons = _needs(comparisons, ["strategy_a", "strategy_b", "ratio", "verdict"], analysis.COMPARISON_COLUMNS)
    fits = _needs(fits, ["law", "kind", "estimate"], analysis.FIT_COLUMNS)
    tables = Tables(runs, cells, speed, comparisons, fits, links, profile, shown_axes(cells, runs, speed, comparisons),
                    design, as_frame(predictions))  # fmt: skip
    registered = kinds()
    groups = {name: kind.find(tables) for name, kind in registered.items()}
    return answers_first(trim(groups, max_items, registered), registered)
