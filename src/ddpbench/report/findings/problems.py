"""What qualifies the numbers (kind "warning", anchors "cells" and "problems").

Unstable cells, runs on a busy machine, oversubscribed runs, cells with failed, timed-out or
skipped runs (each a sentence naming up to 3 cells, then "and N more", with the cause where the
launcher diagnosed one), superseded runs; and a grid where no run finished ok.
"""

from __future__ import annotations

import pandas as pd

from ddpbench import analysis
from ddpbench.report.findings.common import Finding, cell_name, matching_rows, ok_runs
from ddpbench.report.text import listing, plural

# The kinds this module gives (ddpbench.report.findings discovers them; fields: common.Kind).
KINDS = {"warning": dict(find=lambda t: warning_findings(t.runs, t.cells, t.shown), at_most=6, order=100, trim=90, drop=100)}


def _cell_reason(runs: pd.DataFrame, cell, status: str) -> str:
    if runs.empty or "reason" not in runs or "status" not in runs:
        return ""
    m = matching_rows(runs[runs["status"].astype(str) == status], cell, analysis.axes(runs))
    if "failure_reason" in m:  # the launcher's diagnosis: the cause, in one line
        diagnosed = m["failure_reason"].dropna().astype(str).str.strip()
        diagnosed = diagnosed[diagnosed != ""]
        if not diagnosed.empty:
            last = diagnosed.iloc[0]
            return last if len(last) <= 90 else last[:87] + "..."
    reasons = m["reason"].dropna().astype(str).str.strip()
    reasons = reasons[reasons != ""]
    if reasons.empty:
        return ""
    # The last line of an error tail names the exception (as the report's problems table shows it).
    last = reasons.iloc[0].splitlines()[-1].strip()
    return last if len(last) <= 70 else last[:67] + "..."


def _status_counts(runs: pd.DataFrame, cells: pd.DataFrame, column: str, status: str) -> pd.DataFrame:
    """Cells with runs of `status` and their counts (column `_k`): from cells.csv, else from runs."""
    if not cells.empty and column in cells:
        k = pd.to_numeric(cells[column], errors="coerce").fillna(0)
        # (copy: a cells table read from CSV is one block per column, too many for another insert)
        return cells[k > 0].copy().assign(_k=k[k > 0].astype(int))
    if runs.empty or "status" not in runs:
        return pd.DataFrame()
    bad = runs[runs["status"].astype(str) == status]
    cols = analysis.axes(bad)
    if bad.empty or not cols:
        return pd.DataFrame()
    return bad.groupby(cols, dropna=False).size().rename("_k").reset_index()


def warning_findings(runs: pd.DataFrame, cells: pd.DataFrame, shown: list[str]) -> list[Finding]:
    out = []
    if not runs.empty and "status" in runs and ok_runs(runs).empty:
        out.append(Finding("warning", "No run finished ok: there is no measurement to report.", "problems"))
    for column, status, verb in (("n_failed", "failed", "failed"), ("n_timeout", "timeout", "timed out"),
                                 ("n_skipped", "skipped", "were skipped")):  # fmt: skip
        bad = _status_counts(runs, cells, column, status)
        if bad.empty:
            continue
        names = []
        for _, r in bad.iterrows():
            why = _cell_reason(runs, r, status)
            names.append(cell_name(r, shown) + (f" ({why})" if why else ""))
        n_runs = int(bad["_k"].sum())
        runs_text = plural(n_runs, "run", "runs")
        text = (f"{runs_text} {verb if verb != 'were skipped' else ('was skipped' if n_runs == 1 else 'were skipped')} "
                f"in {plural(len(bad), 'cell', 'cells')}: {listing(names, sep='; ')}.")
        out.append(Finding("warning", text, "problems"))
    if not cells.empty and "unstable" in cells:
        unstable = cells[cells["unstable"].map(analysis.truthy)]
        if len(unstable):
            names = [cell_name(r, shown) + (f" ({r['unstable_cause']})" if str(r.get("unstable_cause", "") or "").strip()
                                             and pd.notna(r.get("unstable_cause")) else "")
                     for _, r in unstable.iterrows()]  # fmt: skip
            n = len(unstable)
            out.append(Finding("warning", f"{plural(n, 'cell is', 'cells are')} flagged unstable (throughput "
                                          f"interval too wide to trust): {listing(names, sep='; ')}.", "cells"))
    for column, what in (("n_busy", "measured on a busy machine (other processes took over 10 % of the CPU)"),
                         ("n_oversubscribed", "oversubscribed (more threads than usable cores)"),
                         ("n_superseded", "set aside as superseded (made by other code or packages than their "
                                          "cell's newest runs)")):  # fmt: skip
        if cells.empty or column not in cells:
            continue
        k = pd.to_numeric(cells[column], errors="coerce").fillna(0)
        hit = cells[k > 0]
        if hit.empty:
            continue
        n = int(k.sum())
        names = [cell_name(r, shown) for _, r in hit.iterrows()]
        verb = "was" if n == 1 else "were"
        out.append(Finding("warning", f"{plural(n, 'run', 'runs')} {verb} {what}, in "
                                      f"{plural(len(hit), 'cell', 'cells')}: {listing(names, sep='; ')}.", "cells"))
    return out
