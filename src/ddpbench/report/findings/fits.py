"""The scaling laws fitted to the speedups (kind "fit", anchor "fits").

Amdahl's serial fraction f (Gustafson's α for weak scaling) with its interval per fitted group,
best first; the best group's prediction at the largest p, labelled an extrapolation; when no
group could be fitted, one sentence saying why.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench.report.findings.common import Finding, largest, row_num
from ddpbench.report.text import finite, listing, pct_text, ratio_text, sig3, value_text

# The kinds this module gives (ddpbench.report.findings discovers them; fields: common.Kind).
KINDS = {"fit": dict(find=lambda t: fit_findings(t.fits, t.speed, t.runs), at_most=3, order=90, trim=20, drop=10)}

LAW_TEXT = {"amdahl": "Amdahl's law", "gustafson": "Gustafson's law", "cost_model": "the cost model"}


def _group_name(r) -> str:
    if "strategy" in r and pd.notna(r["strategy"]):
        g = str(r.get("group", ""))
        return str(r["strategy"]) + (f" ({g})" if g and g != f"strategy={r['strategy']}" and "," in g else "")
    return str(r.get("group", "the group"))


def fit_findings(fits: pd.DataFrame, speed: pd.DataFrame, runs: pd.DataFrame) -> list[Finding]:
    if fits.empty or "law" not in fits:
        if speed.empty or "speedup" not in speed:
            return ([Finding("fit", "No scaling law was fitted: there is no speedup to fit.", "fits")]
                    if not runs.empty else [])
        return []
    laws = fits[fits["law"].isin(["amdahl", "gustafson"])]
    fitted = laws[(laws["kind"] == "fit") & laws["parameter"].isin(["f", "alpha"]) & laws["estimate"].notna()]
    if fitted.empty:
        if laws.empty:
            return []
        r = laws.iloc[0]
        law = LAW_TEXT.get(str(r["law"]), str(r["law"]))
        note = str(r.get("note", "")) if pd.notna(r.get("note", np.nan)) else ""
        if note.startswith("too few"):
            # Each strategy is fitted over its own world sizes (the baseline's p = 1 is not one of them).
            above = r["law"] != "amdahl"  # Gustafson counts the world sizes above 1
            need = "2 or more world sizes above 1" if above else "3 or more world sizes"
            return [Finding("fit", f"{law} was not fitted: it needs one strategy measured at {need}, and "
                                   f"{_world_sizes_text(runs, above)}.", "fits")]
        return [Finding("fit", f"{law} was not fitted: {note or 'no group could be fitted'}.", "fits")]
    # best group first: the strategy with the highest speedup at the largest world size
    best = str(largest(speed).iloc[0]["strategy"]) if not speed.empty and "strategy" in speed and speed["speedup"].notna().any() else None
    if best is not None and "strategy" in fitted:
        fitted = fitted.assign(_b=(fitted["strategy"].astype(str) != best)).sort_values("_b", kind="stable")
    out = []
    for i, (_, r) in enumerate(fitted.iterrows()):
        who = _group_name(r)
        law = LAW_TEXT.get(str(r["law"]), str(r["law"]))
        if r["parameter"] == "f":
            value = f"serial fraction f = {pct_text(r['estimate'], r['ci_low'], r['ci_high'])}"
        else:
            value = "serial fraction α = " + f"{sig3(r['estimate'])}" + (f" [{sig3(r['ci_low'])}, {sig3(r['ci_high'])}]"
                                                    if finite(r["ci_low"]) and finite(r["ci_high"]) else " (no interval)")
        fit_q = f"R² {sig3(r['r2'])}, " if finite(r.get("r2")) else ""
        out.append(Finding("fit", f"{law} fits {who} with {value} ({fit_q}{int(row_num(r, 'n_points'))} runs).", "fits"))
        if i == 0:
            pred = fits[(fits["group"] == r["group"]) & (fits["kind"] == "prediction") & fits["estimate"].notna()]
            if len(pred):
                p_max = pd.to_numeric(pred["p"], errors="coerce").max()
                at = pred[pd.to_numeric(pred["p"], errors="coerce") == p_max]
                measure = "scaled speedup" if str(r["law"]) == "gustafson" else "speedup"
                said = [f"{LAW_TEXT.get(str(q['law']), str(q['law']))} predicts a {measure} of "
                        f"{ratio_text(q['estimate'], q['ci_low'], q['ci_high'])}" for _, q in at.iterrows()]
                out.append(Finding("fit", f"Extrapolation, not a measurement: at world size {value_text(p_max)}, for "
                                          f"{who}, {listing(said, limit=4, sep='; ')}.", "fits"))
    return out


def _world_sizes_text(runs: pd.DataFrame, above_one: bool) -> str:
    """How many world sizes each strategy ran at (ok runs), as the fits count them (`above_one`:
    Gustafson's, those above 1), and which: "no strategy here ran at more than 1 (single at p = 1;
    allreduce and ddp at p = 2)". Issue 68: "the most any strategy here was measured at is 1",
    said of a grid of world sizes 1 and 2, read as a world size."""
    if runs.empty or not {"strategy", "world_size"} <= set(runs.columns):
        return "no strategy here ran at any"
    ok = runs[runs["status"] == "ok"] if "status" in runs else runs
    sizes = pd.to_numeric(ok["world_size"], errors="coerce")
    ok, sizes = ok[sizes.notna()], sizes[sizes.notna()]
    each = {str(s): tuple(sorted({int(p) for p in g if p > 1 or not above_one})) for s, g in sizes.groupby(ok["strategy"])}
    most = max((len(ps) for ps in each.values()), default=0)
    groups: dict[tuple, list[str]] = {}
    for strategy, ps in sorted(each.items(), key=lambda kv: (-max(kv[1], default=0), kv[0])):  # largest p first
        groups.setdefault(ps, []).append(strategy)
    said = [f"{listing(names, limit=6)} at p = {', '.join(map(str, ps))}" for ps, names in groups.items() if ps]
    counted = "world size above 1" if above_one else "world size"
    head = f"no strategy here ran at more than {most} {counted}{'s' if most != 1 else ''}"
    return head + (f" ({'; '.join(said)})" if said else "")
