"""How the strategies fare on slower links (kind "link", anchors "fig-link" and "links").

Per link study of `analysis.links_table`, the bandwidth below which each strategy loses to one
process (the crossing of its fitted time per sample with the single process's), marked
extrapolated outside the measured links, or that it never loses or never beats it; and the
latency-bandwidth fit's effective bandwidth against the probe's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis
from ddpbench.report.findings.common import Finding, row_num, setting_text
from ddpbench.report.text import bandwidth_text, finite, listing, sig3

# The kinds this module gives (ddpbench.report.findings discovers them; fields: common.Kind).
KINDS = {"link": dict(find=lambda t: link_findings(t.links), at_most=2, order=80, trim=80, drop=50)}


# Below this R² a fit explains less than half the variation of what it fits: the report does
# not read a crossing or an effective bandwidth off it, it says the fit does not hold.
FIT_R2_MIN = 0.5


def _fits(r) -> bool:
    r2 = row_num(r, "r2")
    return not np.isfinite(r2) or r2 >= FIT_R2_MIN


def _who(r) -> str:
    setting = r.get("setting", "")
    return str(r["strategy"]) + (f" ({setting})" if isinstance(setting, str) and setting else "")


def _crossing_ci(r) -> str:
    """' [2.7, 21 Gbit/s] (95 % bootstrap over runs; 1 % of resamples: no crossing)', or ' (no interval: ...)'."""
    lo, hi, other = row_num(r, "crossing_gbps_ci_low"), row_num(r, "crossing_gbps_ci_high"), row_num(r, "crossing_other_share")
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return " (no interval: fewer than 2 runs on a link or of one process)" if not np.isfinite(other) else (
            " (no interval: the resamples disagree on whether it crosses)")  # fmt: skip
    if bandwidth_text(lo) == bandwidth_text(hi):
        share = f"; in {sig3(100 * other)} % of resamples it does not cross" if other > 0 else ""
        return f" (the same in every bootstrap resample of the runs{share})"
    if other > 0:  # the interval is of the resamples that cross: say so, and how many do not
        return (f" [{bandwidth_text(lo)}, {bandwidth_text(hi)}] (95 % bootstrap over runs, of the resamples that "
                f"cross; {sig3(100 * other)} % do not)")
    return f" [{bandwidth_text(lo)}, {bandwidth_text(hi)}] (95 % bootstrap over runs)"


def _crossings_text(cross: pd.DataFrame) -> str:
    """'a loses to one process below ~X, b below ~Y; c and d never beat it, even at unlimited bandwidth; ...':
    the strategies with a crossing, fastest crossing first, then those that never beat one process, those
    that never lose to it, and those that could not be compared."""
    parts = []
    obj = lambda: "it" if parts else "one process"  # noqa: E731 — named once, then "it"
    loose = cross[~cross.apply(_fits, axis=1)] if len(cross) else cross
    cross = cross.drop(loose.index)
    losers = cross[cross["verdict"] == analysis.LOSES_BELOW]
    losers = losers.iloc[np.argsort(-pd.to_numeric(losers["crossing_gbps"], errors="coerce").to_numpy(), kind="stable")]
    said = []
    for i, (_, r) in enumerate(losers.iterrows()):
        where = ""
        if analysis.truthy(r.get("extrapolated", False)):
            slower = row_num(r, "crossing_gbps") < row_num(r, "measured_min_gbps")
            where = f" (extrapolated: {'below the slowest' if slower else 'above the fastest'} link measured)"
        said.append(f"{_who(r)} {'loses to one process ' if i == 0 else ''}below ~{bandwidth_text(r['crossing_gbps'])}"
                    f"{_crossing_ci(r)}{where}")
    if said:
        parts.append(", ".join(said))
    for verdict, one, many, tail in ((analysis.ALWAYS_LOSES, "never beats", "never beat", ", even at unlimited bandwidth"),
                                     (analysis.NEVER_LOSES, "never loses to", "never lose to", "")):  # fmt: skip
        names = [_who(r) for _, r in cross[cross["verdict"] == verdict].iterrows()]
        if names:
            parts.append(f"{listing(names, limit=len(names))} {one if len(names) == 1 else many} {obj()}{tail}")
    if len(loose):
        names = [f"{_who(r)} (R² {sig3(row_num(r, 'r2'))})" for _, r in loose.iterrows()]
        parts.append(f"for {listing(names, limit=len(names))} the time per sample does not follow a + b/bandwidth "
                     f"(R² below {FIT_R2_MIN}): no crossing is read off {'its' if len(names) == 1 else 'their'} fit")
    for _, r in cross[~cross["verdict"].isin([analysis.LOSES_BELOW, analysis.ALWAYS_LOSES, analysis.NEVER_LOSES])].iterrows():
        note = r.get("note", "")
        parts.append(f"{_who(r)} could not be compared with {obj()} ({note if isinstance(note, str) and note else 'not fitted'})")
    return "; ".join(parts)


def link_findings(links: pd.DataFrame) -> list[Finding]:
    """Per link study: where each strategy stops beating one process; then how the latency-bandwidth
    fit's effective bandwidth compares with the probe's."""
    if links.empty or "kind" not in links:
        return []
    gcols = [c for c in links.columns if c not in analysis.LINK_TABLE_COLUMNS]
    crossings, fits = [], []  # every study's crossings first: they are what a reader acts on
    for _, g in links.groupby(gcols, dropna=False, sort=True) if gcols else [((), links)]:
        where = setting_text(g.iloc[0], gcols)
        where = f", at {where}" if where else ""
        link_rows = g[g["kind"] == "link"]
        cross = g[g["kind"] == "crossing"]
        if len(cross) and len(link_rows):
            bw = pd.to_numeric(link_rows["achieved_gbps"], errors="coerce")
            text = (f"Over links of {bandwidth_text(bw.min())} to {bandwidth_text(bw.max())} (measured){where}, "
                    f"{_crossings_text(cross.sort_values('strategy', kind='stable'))} (time per sample fitted as "
                    "a + b/bandwidth).")
            crossings.append(Finding("link", text, "fig-link"))
        fitted = link_rows[pd.to_numeric(link_rows["bandwidth_gbps"], errors="coerce") > 0]
        loose = fitted[~fitted.apply(_fits, axis=1)] if len(fitted) else fitted
        if len(loose):
            names = listing([f"{r['link']} (R² {sig3(row_num(r, 'r2'))})" for _, r in loose.iterrows()], limit=len(loose))
            fits.append(Finding("link", f"On {names}{where}, communication per step does not follow t = α·calls + bytes/B "
                                        f"(R² below {FIT_R2_MIN}): no effective bandwidth is read off the fit.", "links"))
            fitted = fitted.drop(loose.index)
        if len(fitted):
            ratio = pd.to_numeric(fitted["bandwidth_gbps"]) / pd.to_numeric(fitted["achieved_gbps"])
            alpha = pd.to_numeric(fitted["alpha_s"]) * 1e6
            if len(fitted) == 1:
                r = fitted.iloc[0]
                text = (f"On link {r['link']}{where}, communication per step fits α = {sig3(alpha.iloc[0])} µs per call "
                        f"and an effective {bandwidth_text(r['bandwidth_gbps'])}, {sig3(ratio.iloc[0])}× the "
                        f"{bandwidth_text(r['achieved_gbps'])} the probe measured.")
            else:
                lo, hi = sig3(ratio.min()), sig3(ratio.max())
                # α shows on the fastest link, where a call's latency is not buried under the bytes
                fast = pd.to_numeric(fitted["achieved_gbps"], errors="coerce").idxmax()
                r2 = f" (R² {sig3(fitted.loc[fast, 'r2'])})" if finite(fitted.loc[fast, "r2"]) else ""
                text = (f"Over {len(fitted)} links{where}, communication per step fits an effective bandwidth "
                        f"{lo if lo == hi else f'{lo}–{hi}'}× the probe's (t = α·calls + bytes/B), with "
                        f"α = {sig3(alpha[fast])} µs per call on the fastest, {fitted.loc[fast, 'link']}{r2}.")
            fits.append(Finding("link", text, "links"))
    return crossings + fits
