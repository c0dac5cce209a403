"""Where the time of a step goes (kind "time", anchors "fig-phases" and "fig-profile").

For the best strategy at the largest world size, the largest phase of a step (data, forward,
backward, exposed communication, optimizer, other: these partition the step) and the
exposed-communication share with its interval; imbalance when it exceeds 10 % of the step.
Where runs were profiled, the communication operators' share of a profiled step per cell.
"""

from __future__ import annotations

import pandas as pd

from ddpbench import analysis
from ddpbench.report.findings.common import Finding, best_cell, cell_name, matching_rows, ok_runs, row_num
from ddpbench.report.text import finite, pct_text, sig3

# The kinds this module gives (ddpbench.report.findings discovers them; fields: common.Kind).
KINDS = {
    "time": dict(find=lambda t: time_findings(t.runs, t.cells, t.speed, t.shown) + profile_findings(t.profile, t.runs, t.shown),
                 at_most=3, order=40, trim=40, drop=60),
}

LARGE_IMBALANCE = 0.1
PHASES = ("data", "forward", "backward", "exposed_comm", "optimizer", "other")  # they partition a step
PHASE_TEXT = {"exposed_comm": "exposed communication", "other": "other (unattributed) time"}


def _phase_shares(cell, runs: pd.DataFrame) -> dict[str, float]:
    """Median share of step time per phase: from the cell's frac_* columns, else its ok runs'
    frac_* or phase_*_s / phase_total_s."""
    shares = {ph: row_num(cell, f"frac_{ph}") for ph in PHASES}
    if sum(finite(v) for v in shares.values()) >= 3:
        return {k: v for k, v in shares.items() if finite(v)}
    ok = matching_rows(ok_runs(runs), cell, analysis.axes(runs)) if not runs.empty else runs
    if ok.empty:
        return {k: v for k, v in shares.items() if finite(v)}
    for ph in PHASES:
        if f"frac_{ph}" in ok and ok[f"frac_{ph}"].notna().any():
            shares[ph] = float(pd.to_numeric(ok[f"frac_{ph}"], errors="coerce").median())
        elif f"phase_{ph}_s" in ok and "phase_total_s" in ok:
            frac = pd.to_numeric(ok[f"phase_{ph}_s"], errors="coerce") / pd.to_numeric(ok["phase_total_s"], errors="coerce")
            shares[ph] = float(frac.median())
    return {k: v for k, v in shares.items() if finite(v)}


def time_findings(runs: pd.DataFrame, cells: pd.DataFrame, speed: pd.DataFrame, shown: list[str]) -> list[Finding]:
    cell = best_cell(cells, speed)
    if cell is None:
        return []
    name = cell_name(cell, shown)
    shares = _phase_shares(cell, runs)
    parts = []
    top = max(shares, key=shares.get) if shares else None
    exp = row_num(cell, "frac_exposed_comm")
    if top is not None and not (top == "exposed_comm" and finite(exp)):
        share = pct_text(shares[top]).removesuffix(" (no interval)")
        parts.append(f"{PHASE_TEXT.get(top, top)} takes the largest share of a step ({share}, median over repeats)")
    if finite(exp):
        ex = pct_text(exp, row_num(cell, "frac_exposed_comm_ci_low"), row_num(cell, "frac_exposed_comm_ci_high"),
                      row_num(cell, "frac_exposed_comm_ci_level"))
        comm = row_num(cell, "frac_comm")
        hidden = (f", out of {pct_text(comm).removesuffix(' (no interval)')} spent communicating (the rest hidden "
                  "behind computation)" if finite(comm) and comm > exp * 1.01 else "")
        if top == "exposed_comm":  # the largest share, said once and with its interval
            parts.append(f"exposed communication takes the largest share of a step: {ex}{hidden}")
        else:
            parts.append(f"exposed communication takes {ex} of the step{hidden}")
    out = []
    if parts:
        out.append(Finding("time", f"For {name}, " + "; ".join(parts) + ".", "fig-phases"))
    imb = row_num(cell, "frac_imbalance")
    if finite(imb) and imb > LARGE_IMBALANCE:
        iv = pct_text(imb, row_num(cell, "frac_imbalance_ci_low"), row_num(cell, "frac_imbalance_ci_high"),
                      row_num(cell, "frac_imbalance_ci_level"))
        out.append(Finding("time", f"Ranks wait for each other: for {name}, imbalance (spread of computation over "
                                   f"ranks) is {iv} of the step.", "fig-phases"))
    return out


def profile_findings(profile: pd.DataFrame, runs: pd.DataFrame, shown: list[str]) -> list[Finding]:
    """The profiler's answer (runs with profile_steps > 0): per profiled cell, the share of its
    profiled step spent in communication operators, cells from the most to the least, and the
    profiler's own overhead on a step as measured (profiled step / timed step − 1)."""
    if profile is None or profile.empty or not {"op", "comm", "self_s_per_step", "run_dir"} <= set(profile.columns):
        return []
    cols = [c for c in dict.fromkeys(("strategy", *shown)) if c in profile]
    shares = analysis.profile_comm_shares(profile, cols).dropna(subset=["comm_share"])
    parts = [(r["comm_share"], cell_name(r, shown)) for _, r in shares.iterrows()]
    if not parts:
        return []
    parts.sort(key=lambda part: (-part[0], part[1]))
    named = "; ".join(f"{sig3(100 * share)} % for {name}" for share, name in parts[:4])
    more = f" (and {len(parts) - 4} more cell{'s' if len(parts) > 5 else ''})" if len(parts) > 4 else ""
    over = pd.to_numeric(runs["profile_overhead"], errors="coerce").dropna() if "profile_overhead" in runs else pd.Series(dtype=float)
    cost = (f" The profiler's own cost on a step: median {sig3(100 * over.median())} % over {len(over)} runs "
            f"(from {sig3(100 * over.min())} to {sig3(100 * over.max())} %); its steps are not among the timed ones."
            if len(over) else "")  # fmt: skip
    return [Finding("time", f"Communication operators take {named}{more} of a profiled step (torch.profiler's "
                            f"self time, mean over ranks, median over repeats).{cost}", "fig-profile")]  # fmt: skip
