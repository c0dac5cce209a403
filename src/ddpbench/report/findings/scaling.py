"""Speedup over one process (kind "scaling", anchor "speedup-table").

Speedup and efficiency with intervals at the largest world size, best strategy first; "slower
than one process" only when the speedup's interval lies below 1, "not detectably faster than one
process" when it holds 1; one sentence for the whole grid when no strategy beats one process.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis
from ddpbench.report.findings.common import Finding, largest, ok_runs, row_num, setting_text
from ddpbench.report.text import finite, pct_text, ratio_text, value_text

# The kinds this module gives (ddpbench.report.findings discovers them; fields: common.Kind).
KINDS = {"scaling": dict(find=lambda t: scaling_findings(t.runs, t.speed, t.shown), at_most=3, order=30, trim=10, drop=80)}


def scaling_findings(runs: pd.DataFrame, speed: pd.DataFrame, shown: list[str]) -> list[Finding]:
    if speed.empty or "speedup" not in speed or speed["speedup"].notna().sum() == 0:
        ok = ok_runs(runs)
        if runs.empty:
            return []
        if ok.empty:
            why = "no run finished ok"
        elif "world_size" in ok and not (pd.to_numeric(ok["world_size"], errors="coerce") == 1).any():
            why = "no run at world size 1 to serve as the baseline"
        else:
            why = "no cell has a baseline run at world size 1 with the same settings"
        return [Finding("scaling", f"No speedup could be computed: {why}.", "speedup-table")]
    rows = largest(speed)
    p = value_text(rows["world_size"].iloc[0])
    if float(p) <= 1:
        return [Finding("scaling", "Only world size 1 was measured: there is no scaling to report.", "speedup-table")]
    cols = [c for c in shown if c not in ("strategy", "world_size")]
    none_beats = _none_beats_one_process(rows, p, cols)
    if none_beats:
        return [none_beats]
    slower = [i for i, (_, r) in enumerate(rows.iterrows()) if row_num(r, "speedup") < 1]
    order = [0] + [i for i in slower if i != 0] + [i for i in range(1, len(rows)) if i not in slower]
    out = []
    for i in order:
        r = rows.iloc[i]
        s, lo, hi = row_num(r, "speedup"), row_num(r, "speedup_ci_low"), row_num(r, "speedup_ci_high")
        pn = float(p)
        e = pct_text(*(row_num(r, f"efficiency{x}") if finite(row_num(r, f"efficiency{x}"))
                       else row_num(r, f"speedup{x}") / pn for x in ("", "_ci_low", "_ci_high")))
        measure = str(r.get("measure", "speedup")) if pd.notna(r.get("measure", np.nan)) else "speedup"
        where = ", ".join(filter(None, [f"world size {p}", setting_text(r, cols)]))
        who = str(r["strategy"]) if "strategy" in r else "the cell"
        sv = ratio_text(s, lo, hi, r.get("speedup_ci_level", np.nan))
        has_iv = finite(lo) and finite(hi)
        if measure == "scaled speedup":  # weak scaling: more work per step, not the same work faster
            text = f"At {where}, {who} reaches a scaled speedup (weak scaling) of {sv} over one process, efficiency {e}"
        elif has_iv and lo > 1:
            text = f"At {where}, {who} is {sv} faster than one process, efficiency {e}"
        elif has_iv and hi < 1:
            text = f"At {where}, {who} is slower than one process: {measure} {sv}, efficiency {e}"
        elif has_iv:
            text = f"At {where}, {who} is not detectably faster than one process: {measure} {sv} holds 1, efficiency {e}"
        elif s < 1:
            text = f"At {where}, {who} is slower than one process by the point estimate: {measure} {sv}, efficiency {e}"
        else:
            text = f"At {where}, {who} reaches a {measure} of {sv}, efficiency {e}"
        text += " (unstable)." if analysis.truthy(r.get("unstable", False)) else "."
        out.append(Finding("scaling", text, "speedup-table"))
    return out


def _none_beats_one_process(rows: pd.DataFrame, p, cols: list[str]) -> Finding | None:
    """One sentence when every strategy at the largest world size is slower than one process (each
    speedup's interval below 1): the grid's answer, instead of one sentence per strategy."""
    if len(rows) < 2 or "strategy" not in rows or (rows.get("measure", pd.Series(dtype=str)) == "scaled speedup").any():
        return None
    lo, hi = pd.to_numeric(rows["speedup_ci_low"], errors="coerce"), pd.to_numeric(rows["speedup_ci_high"], errors="coerce")
    if not (hi < 1).all() or lo.isna().any():
        return None
    ranked = rows.assign(_s=pd.to_numeric(rows["speedup"], errors="coerce")).sort_values("_s")
    worst, best = ranked.iloc[0], ranked.iloc[-1]
    settings = {setting_text(r, cols) for _, r in rows.iterrows()}
    where = f"world size {p}" + (" in every setting measured" if len(settings) > 1 else "")
    n = rows["strategy"].astype(str).nunique()
    unstable = int(rows["unstable"].map(analysis.truthy).sum()) if "unstable" in rows else 0
    text = (f"At {where}, none of the {n} strategies beats one process: every speedup's interval lies below 1, from "
            f"{ratio_text(*(row_num(worst, f'speedup{x}') for x in ('', '_ci_low', '_ci_high')))} ({worst['strategy']}) to "
            f"{ratio_text(*(row_num(best, f'speedup{x}') for x in ('', '_ci_low', '_ci_high')))} ({best['strategy']})"
            + (f" ({unstable} of them unstable)." if unstable else "."))  # fmt: skip
    return Finding("scaling", text, "speedup-table")
