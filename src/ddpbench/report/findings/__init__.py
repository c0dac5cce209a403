"""Findings first: the report's tables turned into a short list of statements a reader can act on.
`findings(runs, cells, speed, comparisons, fits, links=, profile=)` takes the DataFrames of
`ddpbench.analysis` (the runs table, `cell_stats`, `speedup_table`, `comparisons_table`,
`fits_table`, `links_table`, the profile table; any may be empty or None) and returns `Finding`s:
a kind, one plain sentence with its numbers and their intervals (worded by `ddpbench.report.text`),
and the HTML anchor id of the table or figure behind it. One module per topic says its rules:
`winner` (fastest strategy per setting), `memory` (what a sharded strategy saves per rank
against ddp and what it costs in time), `scaling` (speedup over one process), `phases` (where a
step's time goes), `mfu` (the best and worst cell's share of the peak FLOP/s), `sizes` (batch and
dataset size), `links`, `fits` (scaling laws), `problems` (warnings); `common` holds `Finding` and
the table helpers, `order` what is kept and in what order.
Modules here import only `ddpbench.analysis`, `ddpbench.report.text` and each other.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis
from ddpbench.report.findings.common import Finding, as_frame, shown_axes
from ddpbench.report.findings.fits import fit_findings
from ddpbench.report.findings.links import link_findings
from ddpbench.report.findings.memory import memory_findings
from ddpbench.report.findings.mfu import mfu_findings
from ddpbench.report.findings.order import answers_first, trim
from ddpbench.report.findings.phases import profile_findings, time_findings
from ddpbench.report.findings.problems import warning_findings
from ddpbench.report.findings.scaling import scaling_findings
from ddpbench.report.findings.sizes import axis_findings
from ddpbench.report.findings.winner import winner_findings

__all__ = ["Finding", "findings"]


def _needs(df: pd.DataFrame, required: list[str], optional: list[str]) -> pd.DataFrame:
    if df.empty or not set(required) <= set(df.columns):
        return pd.DataFrame()
    missing = [c for c in optional if c not in df.columns]
    return df.assign(**{c: np.nan for c in missing}) if missing else df


def findings(runs, cells, speed, comparisons, fits, max_items: int = 12, links=None, profile=None) -> list[Finding]:
    """The report's findings, most actionable first: winners, memory held against ddp, scaling, where the time goes,
    MFU, batch and dataset size, links, fits, warnings (each topic module's docstring says its rules)."""
    runs, cells, speed, comparisons, fits, links = map(as_frame, (runs, cells, speed, comparisons, fits, links))
    # Tables without the columns a rule needs count as empty; optional columns are added as missing.
    speed = _needs(speed, ["world_size", "speedup"], analysis.SPEEDUP_COLUMNS)
    if not speed.empty:
        speed = speed[pd.to_numeric(speed["world_size"], errors="coerce").notna()]
    comparisons = _needs(comparisons, ["strategy_a", "strategy_b", "ratio", "verdict"], analysis.COMPARISON_COLUMNS)
    fits = _needs(fits, ["law", "kind", "estimate"], analysis.FIT_COLUMNS)
    shown = shown_axes(cells, runs, speed, comparisons)
    groups = {
        "winner": winner_findings(comparisons, shown),
        "memory": memory_findings(runs, cells, shown),
        "scaling": scaling_findings(runs, speed, shown),
        "time": time_findings(runs, cells, speed, shown) + profile_findings(profile, runs, shown),
        "mfu": mfu_findings(cells, shown, runs),
        "batch": axis_findings("batch_size", "batch", "fig-throughput_vs_batch", runs, cells, speed, shown),
        "dataset": axis_findings("dataset_size", "dataset", "fig-dataset_size", runs, cells, speed, shown),
        "link": link_findings(links),
        "fit": fit_findings(fits, speed, runs),
        "warning": warning_findings(runs, cells, shown),
    }
    return answers_first(trim(groups, max_items))
