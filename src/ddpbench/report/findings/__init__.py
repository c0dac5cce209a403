"""Findings first: the report's tables turned into a short list of statements a reader can act on.

`findings(runs, cells, speed, comparisons, fits)` takes the DataFrames of `ddpbench.analysis`
(the runs table, `cell_stats`, `speedup_table`, `comparisons_table`, `fits_table`) and returns
`Finding`s: a kind, one plain sentence with its numbers and their intervals, and the HTML
anchor id of the table or figure behind it (`ANCHORS`). Any input may be empty or None.

Order: the kinds in the order of KINDS, except that the answer to the question the grid asked
leads: a link study's crossings come first, and a comparison the intervals could not decide (a
tie: no strategy is "fastest") comes after the scaling verdicts rather than before them.

Rules (every sentence must be true of the data given):

- **winner** (anchor "comparisons"): per setting (all axes equal but strategy, world size
  included), strategies are ranked by their throughput ratios; the fastest is named with its
  margin over the runner-up only where that comparison's interval excludes 1 (verdict "A
  faster"/"B faster"). Where the interval holds 1: "no detectable difference between X and Y";
  where a side has fewer than 2 repeats: no interval, no winner. Settings with the same outcome
  collapse into one sentence ("ddp is the fastest at every world size measured, by 1.21× [..] to
  1.52× [..] over the runner-up").
- **scaling** (anchor "speedup-table"): speedup and efficiency with intervals at the largest
  world size, best strategy first; "slower than one process" only when the speedup's interval
  lies below 1, "not detectably faster than one process" when it holds 1.
- **time** (anchor "fig-phases"): for the best strategy at the largest world size, the largest
  phase of a step (data, forward, backward, exposed communication, optimizer, other: these
  partition the step) and the exposed-communication share with its interval; imbalance when
  it exceeds 10 % of the step.
- **batch** / **dataset** (anchors "fig-throughput_vs_batch" / "fig-dataset_size"): where
  batch_size (dataset_size) varies, the best strategy's throughput at the largest value over
  that at the smallest, at the largest world size where both exist: a Welch log-t ratio over
  the runs when they are given, else the ratio of the two cells' estimates, labelled so.
- **link** (anchors "fig-link" and "links"): per link study of `analysis.links_table`, the bandwidth
  below which each strategy loses to one process (the crossing of its fitted time per sample with
  the single process's), marked extrapolated outside the measured links, or that it never loses
  or never beats it; and the latency-bandwidth fit's effective bandwidth against the probe's.
- **fit** (anchor "fits"): Amdahl's serial fraction f (Gustafson's α for weak scaling) with its
  interval per fitted group, best first; the best group's prediction at the largest p, labelled
  an extrapolation; when no group could be fitted, one sentence saying why.
- **warning** (anchor "cells" or "problems"): unstable cells, runs on a busy machine,
  oversubscribed runs, cells with failed, timed-out or skipped runs (each a sentence naming up
  to 3 cells, then "and N more"), superseded runs.

Numbers have 3 significant digits; ratios read "1.52× [1.31, 1.76]", fractions "31.2 % [28.4,
34.1]"; an interval whose level is not 95 % says its level; a number without an interval says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ddpbench import analysis

KINDS = ("winner", "scaling", "time", "batch", "dataset", "link", "fit", "warning")
ANCHORS = ("comparisons", "speedup-table", "cells", "fits", "problems", "links", "fig-phases", "fig-throughput_vs_batch",
           "fig-dataset_size", "fig-link", "fig-profile")  # fmt: skip
# At most this many findings per kind before the overall limit is applied.
PER_KIND = {"winner": 3, "scaling": 3, "time": 3, "batch": 1, "dataset": 1, "link": 2, "fit": 3, "warning": 6}
TRIM_FIRST = ("scaling", "fit", "winner", "time", "batch", "dataset", "link", "warning")  # who gives up extras first
LARGE_IMBALANCE = 0.1
NAMED = 3  # cells named in a warning before "and N more"
PHASES = ("data", "forward", "backward", "exposed_comm", "optimizer", "other")  # they partition a step
PHASE_TEXT = {"exposed_comm": "exposed communication", "other": "other (unattributed) time"}
AXIS_TEXT = {"world_size": "world size", "batch_size": "batch", "dataset_size": "dataset size", "nodes": "nodes"}
LAW_TEXT = {"amdahl": "Amdahl's law", "gustafson": "Gustafson's law", "cost_model": "the cost model"}


@dataclass(frozen=True)
class Finding:
    kind: str  # one of KINDS
    text: str  # one plain sentence, numbers with their intervals
    anchor: str  # HTML anchor id of the table or figure behind it, one of ANCHORS
    decided: bool = True  # False: a comparison its intervals could not decide (a tie answers no "which is fastest")


# -- formatting ----------------------------------------------------------------------------------


def _finite(x) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def sig3(x) -> str:
    """3 significant digits, never exponent notation: 1.52, 0.0123, 6130; '–' when absent."""
    if not _finite(x):
        return "–"
    x = float(x)
    if x == 0:
        return "0"
    digits = 2 - int(math.floor(math.log10(abs(x))))
    if digits <= 0:
        return str(int(round(x, digits)))
    text = f"{x:.{digits}f}"
    # rounding may have added a digit (9.996 -> "10.00"): one decimal less
    return f"{x:.{digits - 1}f}" if len(text.replace("-", "").replace(".", "").lstrip("0")) > 3 else text


def _level_note(level) -> str:
    if _finite(level) and abs(float(level) - analysis.LEVEL) > 1e-3:
        return f" ({100 * float(level):.3g} % interval)"
    return ""


def num(x, digits: int = 3) -> str:
    """Compact number; an absent value is an en dash, never 0 or 'nan'."""
    if x is None or x is pd.NA or (isinstance(x, float) and np.isnan(x)):
        return "–"
    if isinstance(x, float) and np.isinf(x):
        return "∞" if x > 0 else "−∞"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    x = float(x)
    if x == int(x) and abs(x) < 1e7:
        return str(int(x))
    if 100 <= abs(x) < 1e7:
        return f"{x:.0f}"  # throughput, memory: digits beyond the integer are noise
    return f"{x:.{digits}g}"


def with_ci(est, lo, hi) -> str:
    """'median [low, high]', or the median alone when there is no interval."""
    if pd.isna(lo) or pd.isna(hi):
        return num(est)
    return f"{num(est)} [{num(lo)}, {num(hi)}]"


def ratio_text(est, lo=np.nan, hi=np.nan, level=np.nan) -> str:
    """'1.52× [1.31, 1.76]', or '1.52× (no interval)'."""
    if not (_finite(lo) and _finite(hi)):
        return f"{sig3(est)}× (no interval)"
    return f"{sig3(est)}× [{sig3(lo)}, {sig3(hi)}]{_level_note(level)}"


def pct_text(est, lo=np.nan, hi=np.nan, level=np.nan) -> str:
    """A fraction as a percentage: '31.2 % [28.4, 34.1]', or '31.2 % (no interval)'."""
    est = float(est) * 100 if _finite(est) else np.nan
    if not (_finite(lo) and _finite(hi)):
        return f"{sig3(est)} % (no interval)"
    return f"{sig3(est)} % [{sig3(100 * float(lo))}, {sig3(100 * float(hi))}]{_level_note(level)}"


def _value(v) -> str:
    if isinstance(v, (float, np.floating, int, np.integer)) and _finite(v) and float(v) == int(v):
        return str(int(v))
    return str(v)


def _listing(items: list[str], limit: int = NAMED, sep: str = ", ") -> str:
    """'a, b, c and 2 more' / 'a and b'."""
    items = list(items)
    if len(items) > limit:
        return sep.join(items[:limit]) + f" and {len(items) - limit} more"
    if len(items) > 1:
        return sep.join(items[:-1]) + " and " + items[-1]
    return items[0] if items else ""


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


# -- tables --------------------------------------------------------------------------------------


def _frame(df) -> pd.DataFrame:
    return df if isinstance(df, pd.DataFrame) else pd.DataFrame()


def _num(row, name) -> float:
    v = row.get(name, np.nan) if hasattr(row, "get") else np.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return np.nan


_truthy = analysis.truthy


def _shown(*frames: pd.DataFrame) -> list[str]:
    """The grid's varying axes, from the first non-empty table that has axis columns."""
    for df in frames:
        cols = analysis.axes(df) if len(df) else []
        if cols:
            return analysis.varying(df, cols)
    return []


def _setting(row, cols: list[str]) -> str:
    """'world size 2, batch 128' for the given axes (strategy left out)."""
    parts = []
    for c in sorted(cols, key=lambda c: c != "world_size"):
        if c == "strategy" or c not in row or (not isinstance(row[c], str) and pd.isna(row[c])):
            continue
        v = _value(row[c])
        parts.append(f"{AXIS_TEXT[c]} {v}" if c in AXIS_TEXT else f"{c}={v}")
    return ", ".join(parts)


def _cell_name(row, shown: list[str]) -> str:
    """'ddp at world size 2, batch 128': the strategy, world size and the other varying axes."""
    cols = [c for c in shown if c not in ("strategy", "world_size")]
    cols = (["world_size"] if "world_size" in row else []) + cols
    where = _setting(row, cols)
    who = str(row["strategy"]) if "strategy" in row and pd.notna(row["strategy"]) else "the cell"
    return f"{who} at {where}" if where else who


def _key(v) -> str:
    """A value compared as text: NaN equal to NaN, 16.0 equal to 16."""
    if not isinstance(v, str) and pd.isna(v):
        return "nan"
    return _value(v)


def _keys(s: pd.Series) -> np.ndarray:
    """`_key` of every value of a column; numeric columns without a Python call per value (findings
    matched 1.4 million values one by one at 8,100 runs)."""
    if s.dtype.kind in "iub":
        return s.astype(str).to_numpy() if s.dtype.kind != "b" else s.map(_key).to_numpy()
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
    return s.map(_key).to_numpy()


def _match(df: pd.DataFrame, row, cols: list[str]) -> pd.DataFrame:
    """Rows of df whose values equal row's on cols (compared as `_key`)."""
    mask = np.ones(len(df), bool)
    for c in cols:
        if c in df and c in row:
            mask &= _keys(df[c]) == _key(row[c])
    return df[mask]


def _ok(runs: pd.DataFrame) -> pd.DataFrame:
    if runs.empty:
        return runs
    return runs[runs["status"].astype(str) == "ok"] if "status" in runs else runs


# -- winner per setting -----------------------------------------------------------------------


def _rank(g: pd.DataFrame) -> list[str]:
    """Strategies of one setting, fastest first: by the sum of their log throughput ratios against
    the others (with every pair present, the order of their geometric-mean throughputs)."""
    score: dict[str, float] = {}
    for a, b, ratio in zip(g["strategy_a"].astype(str), g["strategy_b"].astype(str), g["ratio"]):
        score.setdefault(a, 0.0), score.setdefault(b, 0.0)
        if _finite(ratio) and float(ratio) > 0:
            d = math.log(float(ratio))
            score[a] += d
            score[b] -= d
    return sorted(score, key=lambda s: (-score[s], s))


def _oriented(r, top: str) -> tuple[float, float, float, str]:
    """(ratio, low, high, verdict) of `top` over the other strategy of comparison row r."""
    est, lo, hi = _num(r, "ratio"), _num(r, "ratio_ci_low"), _num(r, "ratio_ci_high")
    # The verdict follows the interval itself (analysis.verdict): no interval, no winner, whatever the column says.
    verdict = analysis.verdict(analysis.Interval(est, lo, hi))
    if str(r["strategy_a"]) == top:
        return est, lo, hi, verdict
    flip = {"A faster": "B faster", "B faster": "A faster"}
    return 1 / est, 1 / hi, 1 / lo, flip.get(verdict, verdict)


def _where(settings: list[str], setting_cols: list[str], total: int) -> str:
    """' at every world size measured', ' at world sizes 2, 4 and 8', ' at world size 2, batch 64; ...',
    or '' when the table has no setting columns."""
    if len(settings) == total and total > 1:
        return " at every world size measured" if setting_cols == ["world_size"] else " at every setting measured"
    if not any(settings):
        return ""
    if setting_cols == ["world_size"] and len(settings) > 1:
        return " at world sizes " + _listing([s.removeprefix("world size ") for s in settings], limit=6)
    return " at " + _listing(settings, sep="; ")


def winner_findings(comparisons: pd.DataFrame, shown: list[str]) -> list[Finding]:
    if comparisons.empty or "verdict" not in comparisons:
        return []
    setting = [c for c in comparisons.columns if c not in analysis.COMPARISON_COLUMNS]
    shown_setting = [c for c in setting if c in shown or c == "world_size"]
    groups = comparisons.groupby(setting, dropna=False, sort=False) if setting else [((), comparisons)]
    outcomes = []  # (kind, key, setting label, detail)
    for _, g in groups:
        order = _rank(g)
        if len(order) < 2:
            continue
        top, second = order[0], order[1]
        pair = g[((g["strategy_a"] == top) & (g["strategy_b"] == second)) | ((g["strategy_a"] == second) & (g["strategy_b"] == top))]
        if pair.empty:
            continue
        r = pair.iloc[0]
        est, lo, hi, verdict = _oriented(r, top)
        where = _setting(r, shown_setting)
        flags = (" (unstable)" if _truthy(r.get("unstable", False)) else "") + (
            " (different code versions)" if _truthy(r.get("versions_differ", False)) else "")
        if verdict == "A faster":
            outcomes.append(("win", top, where, (top, second, est, lo, hi, r.get("ratio_ci_level", np.nan), flags)))
        elif verdict == "B faster":  # cannot happen with consistent estimates; stated as measured
            outcomes.append(("win", second, where, (second, top, 1 / est, 1 / hi, 1 / lo, r.get("ratio_ci_level", np.nan), flags)))
        elif verdict == analysis.NO_DIFFERENCE:
            outcomes.append(("tie", tuple(sorted((top, second))), where, (top, second, est, lo, hi, flags)))
        else:
            outcomes.append(("none", tuple(sorted((top, second))), where, (top, second, est, flags)))
    total = len(outcomes)
    grouped: dict[tuple, list] = {}
    for kind, key, where, detail in outcomes:
        grouped.setdefault((kind, key), []).append((where, detail))
    out = []
    for (kind, key), items in sorted(grouped.items(), key=lambda kv: ({"win": 0, "tie": 1, "none": 2}[kv[0][0]], -len(kv[1]))):
        wheres = [w for w, _ in items]
        place = _where(wheres, shown_setting, total)
        if kind == "win":
            if len(items) == 1:
                win, lose, est, lo, hi, level, flags = items[0][1]
                text = f"{win} is {ratio_text(est, lo, hi, level)} faster than {lose}{place}{flags}."
            else:
                margins = sorted(items, key=lambda it: it[1][2])
                lo_m, hi_m = margins[0][1], margins[-1][1]
                losers = sorted({d[1] for _, d in items})
                runner = f"the runner-up ({_listing(losers)})"
                if sig3(lo_m[2]) == sig3(hi_m[2]):
                    lows, highs = [d[3] for _, d in items], [d[4] for _, d in items]
                    by = f"by {sig3(lo_m[2])}× at each, every interval within [{sig3(min(lows))}, {sig3(max(highs))}],"
                else:
                    by = f"by {ratio_text(*lo_m[2:6])} to {ratio_text(*hi_m[2:6])}"
                n_flag = sum(bool(d[6]) for _, d in items)
                flags = f" ({n_flag} of these comparisons flagged)" if n_flag else ""
                text = f"{key} is the fastest{place}, {by} over {runner}{flags}."
            out.append(Finding("winner", text, "comparisons"))
        elif kind == "tie":
            top, second, est, lo, hi, flags = items[0][1]
            if len(items) == 1:
                text = (f"No detectable difference between {top} and {second}{place}: {top}'s throughput is "
                        f"{ratio_text(est, lo, hi)} {second}'s, an interval that holds 1{flags}.")
            else:
                ests = sorted(d[2] for _, d in items)
                text = (f"No detectable difference between {key[0]} and {key[1]}{place}: every throughput ratio's "
                        f"interval holds 1 (the faster over the slower by {sig3(ests[0])}× to {sig3(ests[-1])}×, point estimates).")
            out.append(Finding("winner", text, "comparisons", decided=False))
        else:
            text = (f"{key[0]} and {key[1]} cannot be compared{place}: fewer than 2 repeats on a side, "
                    "so no interval and no winner.")
            out.append(Finding("winner", text, "comparisons", decided=False))
    return out


# -- scaling -----------------------------------------------------------------------------------


def _largest(speed: pd.DataFrame) -> pd.DataFrame:
    """The speedup rows at the largest world size, best first."""
    speed = speed[pd.to_numeric(speed["speedup"], errors="coerce").notna()]
    p = pd.to_numeric(speed["world_size"], errors="coerce")
    top = speed[p == p.max()]
    return top.sort_values("speedup", ascending=False, kind="stable")


def scaling_findings(runs: pd.DataFrame, speed: pd.DataFrame, shown: list[str]) -> list[Finding]:
    if speed.empty or "speedup" not in speed or speed["speedup"].notna().sum() == 0:
        ok = _ok(runs)
        if runs.empty:
            return []
        if ok.empty:
            why = "no run finished ok"
        elif "world_size" in ok and not (pd.to_numeric(ok["world_size"], errors="coerce") == 1).any():
            why = "no run at world size 1 to serve as the baseline"
        else:
            why = "no cell has a baseline run at world size 1 with the same settings"
        return [Finding("scaling", f"No speedup could be computed: {why}.", "speedup-table")]
    rows = _largest(speed)
    p = _value(rows["world_size"].iloc[0])
    if float(p) <= 1:
        return [Finding("scaling", "Only world size 1 was measured: there is no scaling to report.", "speedup-table")]
    cols = [c for c in shown if c not in ("strategy", "world_size")]
    none_beats = _none_beats_one_process(rows, p, cols)
    if none_beats:
        return [none_beats]
    slower = [i for i, (_, r) in enumerate(rows.iterrows()) if _num(r, "speedup") < 1]
    order = [0] + [i for i in slower if i != 0] + [i for i in range(1, len(rows)) if i not in slower]
    out = []
    for i in order:
        r = rows.iloc[i]
        s, lo, hi = _num(r, "speedup"), _num(r, "speedup_ci_low"), _num(r, "speedup_ci_high")
        pn = float(p)
        e = pct_text(*(_num(r, f"efficiency{x}") if _finite(_num(r, f"efficiency{x}")) else _num(r, f"speedup{x}") / pn
                       for x in ("", "_ci_low", "_ci_high")))
        measure = str(r.get("measure", "speedup")) if pd.notna(r.get("measure", np.nan)) else "speedup"
        where = ", ".join(filter(None, [f"world size {p}", _setting(r, cols)]))
        who = str(r["strategy"]) if "strategy" in r else "the cell"
        sv = ratio_text(s, lo, hi, r.get("speedup_ci_level", np.nan))
        has_iv = _finite(lo) and _finite(hi)
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
        text += " (unstable)." if _truthy(r.get("unstable", False)) else "."
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
    settings = {_setting(r, cols) for _, r in rows.iterrows()}
    where = f"world size {p}" + (" in every setting measured" if len(settings) > 1 else "")
    n = rows["strategy"].astype(str).nunique()
    unstable = int(rows["unstable"].map(_truthy).sum()) if "unstable" in rows else 0
    text = (f"At {where}, none of the {n} strategies beats one process: every speedup's interval lies below 1, from "
            f"{ratio_text(*(_num(worst, f'speedup{x}') for x in ('', '_ci_low', '_ci_high')))} ({worst['strategy']}) to "
            f"{ratio_text(*(_num(best, f'speedup{x}') for x in ('', '_ci_low', '_ci_high')))} ({best['strategy']})"
            + (f" ({unstable} of them unstable)." if unstable else "."))  # fmt: skip
    return Finding("scaling", text, "speedup-table")


# -- where the time goes ------------------------------------------------------------------------


def _best_cell(cells: pd.DataFrame, speed: pd.DataFrame):
    """The best strategy's cell at the largest world size: by speedup where there is one, else throughput."""
    if not speed.empty and "speedup" in speed and speed["speedup"].notna().any():
        r = _largest(speed).iloc[0]
        if not cells.empty:
            m = _match(cells, r, analysis.axes(cells))
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


def _phase_shares(cell, runs: pd.DataFrame) -> dict[str, float]:
    """Median share of step time per phase: from the cell's frac_* columns, else its ok runs'
    frac_* or phase_*_s / phase_total_s."""
    shares = {ph: _num(cell, f"frac_{ph}") for ph in PHASES}
    if sum(_finite(v) for v in shares.values()) >= 3:
        return {k: v for k, v in shares.items() if _finite(v)}
    ok = _match(_ok(runs), cell, analysis.axes(runs)) if not runs.empty else runs
    if ok.empty:
        return {k: v for k, v in shares.items() if _finite(v)}
    for ph in PHASES:
        if f"frac_{ph}" in ok and ok[f"frac_{ph}"].notna().any():
            shares[ph] = float(pd.to_numeric(ok[f"frac_{ph}"], errors="coerce").median())
        elif f"phase_{ph}_s" in ok and "phase_total_s" in ok:
            frac = pd.to_numeric(ok[f"phase_{ph}_s"], errors="coerce") / pd.to_numeric(ok["phase_total_s"], errors="coerce")
            shares[ph] = float(frac.median())
    return {k: v for k, v in shares.items() if _finite(v)}


def time_findings(runs: pd.DataFrame, cells: pd.DataFrame, speed: pd.DataFrame, shown: list[str]) -> list[Finding]:
    cell = _best_cell(cells, speed)
    if cell is None:
        return []
    name = _cell_name(cell, shown)
    shares = _phase_shares(cell, runs)
    parts = []
    top = max(shares, key=shares.get) if shares else None
    exp = _num(cell, "frac_exposed_comm")
    if top is not None and not (top == "exposed_comm" and _finite(exp)):
        share = pct_text(shares[top]).removesuffix(" (no interval)")
        parts.append(f"{PHASE_TEXT.get(top, top)} takes the largest share of a step ({share}, median over repeats)")
    if _finite(exp):
        ex = pct_text(exp, _num(cell, "frac_exposed_comm_ci_low"), _num(cell, "frac_exposed_comm_ci_high"),
                      _num(cell, "frac_exposed_comm_ci_level"))
        comm = _num(cell, "frac_comm")
        hidden = (f", out of {pct_text(comm).removesuffix(' (no interval)')} spent communicating (the rest hidden "
                  "behind computation)" if _finite(comm) and comm > exp * 1.01 else "")
        if top == "exposed_comm":  # the largest share, said once and with its interval
            parts.append(f"exposed communication takes the largest share of a step: {ex}{hidden}")
        else:
            parts.append(f"exposed communication takes {ex} of the step{hidden}")
    out = []
    if parts:
        out.append(Finding("time", f"For {name}, " + "; ".join(parts) + ".", "fig-phases"))
    imb = _num(cell, "frac_imbalance")
    if _finite(imb) and imb > LARGE_IMBALANCE:
        iv = pct_text(imb, _num(cell, "frac_imbalance_ci_low"), _num(cell, "frac_imbalance_ci_high"),
                      _num(cell, "frac_imbalance_ci_level"))
        out.append(Finding("time", f"Ranks wait for each other: for {name}, imbalance (spread of computation over "
                                   f"ranks) is {iv} of the step.", "fig-phases"))
    return out


# -- batch size, dataset size --------------------------------------------------------------------


def axis_findings(axis: str, kind: str, anchor: str, runs: pd.DataFrame, cells: pd.DataFrame, speed: pd.DataFrame,
                  shown: list[str]) -> list[Finding]:  # fmt: skip
    if cells.empty or axis not in cells or "samples_per_s" not in cells or cells[axis].astype(str).nunique() < 2:
        return []
    best = _best_cell(cells, speed)
    c = cells[cells["samples_per_s"].notna()]
    if best is not None and "strategy" in c and "strategy" in best:
        c = c[c["strategy"].astype(str) == str(best["strategy"])]
    values = pd.to_numeric(c[axis], errors="coerce")
    if values.notna().sum() < 2 or values.min() == values.max():
        return []
    lo_v, hi_v = values.min(), values.max()
    rest = [a for a in analysis.axes(c) if a != axis]
    candidates = []
    for _, g in c.groupby(rest, dropna=False, sort=False) if rest else [((), c)]:
        v = pd.to_numeric(g[axis], errors="coerce")
        if (v == lo_v).any() and (v == hi_v).any():
            candidates.append((g[v == lo_v].iloc[0], g[v == hi_v].iloc[0]))
    if not candidates:
        return []
    ws = lambda pair: _num(pair[0], "world_size") if "world_size" in pair[0] else 0  # noqa: E731
    small, large = max(candidates, key=ws)
    iv = None
    ok = _ok(runs)
    if not ok.empty and "samples_per_s" in ok:
        cols = analysis.axes(ok)
        a = _match(ok, large, cols)["samples_per_s"].dropna()
        b = _match(ok, small, cols)["samples_per_s"].dropna()
        if len(a) and len(b):
            iv = analysis.welch_log_ratio(a, b)
    if iv is None or not _finite(iv.estimate):
        iv = analysis.Interval(_num(large, "samples_per_s") / _num(small, "samples_per_s"))
    name = _cell_name(large, [s for s in shown if s != axis])
    label = AXIS_TEXT.get(axis, axis)
    if _finite(iv.low) and _finite(iv.high):
        rv = ratio_text(iv.estimate, iv.low, iv.high, iv.level)
        verdict = "higher" if iv.low > 1 else "lower" if iv.high < 1 else "no detectable change (interval holds 1)"
    else:
        rv = f"{sig3(iv.estimate)}× (ratio of the two cells' estimates, no interval)"
        verdict = "no interval to judge the change by"
    text = f"For {name}, throughput at {label} {_value(hi_v)} is {rv} that at {label} {_value(lo_v)}: {verdict}."
    return [Finding(kind, text, anchor)]


# -- links --------------------------------------------------------------------------------------


def bandwidth_text(gbps) -> str:
    """'9.8 Gbit/s', '310 Mbit/s', '500 kbit/s' (3 significant digits)."""
    if not _finite(gbps):
        return "–"
    for scale, unit in ((1, "Gbit/s"), (1e-3, "Mbit/s"), (1e-6, "kbit/s")):
        if float(gbps) >= scale:
            return f"{sig3(float(gbps) / scale)} {unit}"
    return f"{sig3(float(gbps) * 1e9)} bit/s"


def _who(r) -> str:
    setting = r.get("setting", "")
    return str(r["strategy"]) + (f" ({setting})" if isinstance(setting, str) and setting else "")


def _crossings_text(cross: pd.DataFrame) -> str:
    """'a loses to one process below ~X, b below ~Y; c and d never beat it, even at unlimited bandwidth; ...':
    the strategies with a crossing, fastest crossing first, then those that never beat one process, those
    that never lose to it, and those that could not be compared."""
    parts = []
    obj = lambda: "it" if parts else "one process"  # noqa: E731 — named once, then "it"
    losers = cross[cross["verdict"] == analysis.LOSES_BELOW]
    losers = losers.iloc[np.argsort(-pd.to_numeric(losers["crossing_gbps"], errors="coerce").to_numpy(), kind="stable")]
    said = []
    for i, (_, r) in enumerate(losers.iterrows()):
        where = ""
        if _truthy(r.get("extrapolated", False)):
            slower = _num(r, "crossing_gbps") < _num(r, "measured_min_gbps")
            where = f" (extrapolated: {'below the slowest' if slower else 'above the fastest'} link measured)"
        said.append(f"{_who(r)} {'loses to one process ' if i == 0 else ''}below ~{bandwidth_text(r['crossing_gbps'])}{where}")
    if said:
        parts.append(", ".join(said))
    for verdict, one, many, tail in ((analysis.ALWAYS_LOSES, "never beats", "never beat", ", even at unlimited bandwidth"),
                                     (analysis.NEVER_LOSES, "never loses to", "never lose to", "")):  # fmt: skip
        names = [_who(r) for _, r in cross[cross["verdict"] == verdict].iterrows()]
        if names:
            parts.append(f"{_listing(names, limit=len(names))} {one if len(names) == 1 else many} {obj()}{tail}")
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
        where = _setting(g.iloc[0], gcols)
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
                r2 = f" (R² {sig3(fitted.loc[fast, 'r2'])})" if _finite(fitted.loc[fast, "r2"]) else ""
                text = (f"Over {len(fitted)} links{where}, communication per step fits an effective bandwidth "
                        f"{lo if lo == hi else f'{lo}–{hi}'}× the probe's (t = α·calls + bytes/B), with "
                        f"α = {sig3(alpha[fast])} µs per call on the fastest, {fitted.loc[fast, 'link']}{r2}.")
            fits.append(Finding("link", text, "links"))
    return crossings + fits


# -- fits ---------------------------------------------------------------------------------------


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
            src = speed if not speed.empty and "world_size" in speed else runs
            n = pd.to_numeric(src["world_size"], errors="coerce").nunique() if "world_size" in src else 0
            need = "3 world sizes" if r["law"] == "amdahl" else "2 world sizes above 1"
            return [Finding("fit", f"{law} was not fitted: it needs ≥ {need}; this grid has {n}.", "fits")]
        return [Finding("fit", f"{law} was not fitted: {note or 'no group could be fitted'}.", "fits")]
    # best group first: the strategy with the highest speedup at the largest world size
    best = str(_largest(speed).iloc[0]["strategy"]) if not speed.empty and "strategy" in speed and speed["speedup"].notna().any() else None
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
                                                    if _finite(r["ci_low"]) and _finite(r["ci_high"]) else " (no interval)")
        fit_q = f"R² {sig3(r['r2'])}, " if _finite(r.get("r2")) else ""
        out.append(Finding("fit", f"{law} fits {who} with {value} ({fit_q}{int(_num(r, 'n_points'))} runs).", "fits"))
        if i == 0:
            pred = fits[(fits["group"] == r["group"]) & (fits["kind"] == "prediction") & fits["estimate"].notna()]
            if len(pred):
                p_max = pd.to_numeric(pred["p"], errors="coerce").max()
                at = pred[pd.to_numeric(pred["p"], errors="coerce") == p_max]
                measure = "scaled speedup" if str(r["law"]) == "gustafson" else "speedup"
                said = [f"{LAW_TEXT.get(str(q['law']), str(q['law']))} predicts a {measure} of "
                        f"{ratio_text(q['estimate'], q['ci_low'], q['ci_high'])}" for _, q in at.iterrows()]
                out.append(Finding("fit", f"Extrapolation, not a measurement: at world size {_value(p_max)}, for "
                                          f"{who}, {_listing(said, limit=4, sep='; ')}.", "fits"))
    return out


# -- warnings -----------------------------------------------------------------------------------


def _reason(runs: pd.DataFrame, cell, status: str) -> str:
    if runs.empty or "reason" not in runs or "status" not in runs:
        return ""
    m = _match(runs[runs["status"].astype(str) == status], cell, analysis.axes(runs))
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
        return cells[k > 0].assign(_k=k[k > 0].astype(int))
    if runs.empty or "status" not in runs:
        return pd.DataFrame()
    bad = runs[runs["status"].astype(str) == status]
    cols = analysis.axes(bad)
    if bad.empty or not cols:
        return pd.DataFrame()
    return bad.groupby(cols, dropna=False).size().rename("_k").reset_index()


def warning_findings(runs: pd.DataFrame, cells: pd.DataFrame, shown: list[str]) -> list[Finding]:
    out = []
    if not runs.empty and "status" in runs and _ok(runs).empty:
        out.append(Finding("warning", "No run finished ok: there is no measurement to report.", "problems"))
    for column, status, verb in (("n_failed", "failed", "failed"), ("n_timeout", "timeout", "timed out"),
                                 ("n_skipped", "skipped", "were skipped")):  # fmt: skip
        bad = _status_counts(runs, cells, column, status)
        if bad.empty:
            continue
        names = []
        for _, r in bad.iterrows():
            why = _reason(runs, r, status)
            names.append(_cell_name(r, shown) + (f" ({why})" if why else ""))
        n_runs = int(bad["_k"].sum())
        runs_text = _plural(n_runs, "run", "runs")
        text = (f"{runs_text} {verb if verb != 'were skipped' else ('was skipped' if n_runs == 1 else 'were skipped')} "
                f"in {_plural(len(bad), 'cell', 'cells')}: {_listing(names, sep='; ')}.")
        out.append(Finding("warning", text, "problems"))
    if not cells.empty and "unstable" in cells:
        unstable = cells[cells["unstable"].map(_truthy)]
        if len(unstable):
            names = [_cell_name(r, shown) + (f" ({r['unstable_cause']})" if str(r.get("unstable_cause", "") or "").strip()
                                             and pd.notna(r.get("unstable_cause")) else "")
                     for _, r in unstable.iterrows()]  # fmt: skip
            n = len(unstable)
            out.append(Finding("warning", f"{_plural(n, 'cell is', 'cells are')} flagged unstable (throughput "
                                          f"interval too wide to trust): {_listing(names, sep='; ')}.", "cells"))
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
        names = [_cell_name(r, shown) for _, r in hit.iterrows()]
        verb = "was" if n == 1 else "were"
        out.append(Finding("warning", f"{_plural(n, 'run', 'runs')} {verb} {what}, in "
                                      f"{_plural(len(hit), 'cell', 'cells')}: {_listing(names, sep='; ')}.", "cells"))
    return out


# -- all together -------------------------------------------------------------------------------


def _needs(df: pd.DataFrame, required: list[str], optional: list[str]) -> pd.DataFrame:
    if df.empty or not set(required) <= set(df.columns):
        return pd.DataFrame()
    missing = [c for c in optional if c not in df.columns]
    return df.assign(**{c: np.nan for c in missing}) if missing else df


def _trim(groups: dict[str, list[Finding]], max_items: int) -> list[Finding]:
    """At most PER_KIND per kind, then at most max_items in all: the longest kind loses its last
    item first (on a tie in the order of TRIM_FIRST: warnings last), so every kind keeps one while it can."""
    kept = {k: list(groups.get(k, []))[: PER_KIND[k]] for k in KINDS}
    while sum(map(len, kept.values())) > max(max_items, 0):
        longest = max(TRIM_FIRST, key=lambda k: len(kept[k]))  # max keeps the first of equals
        if len(kept[longest]) > 1:
            kept[longest].pop()
        else:  # every kind down to one: drop whole kinds from the end, warnings last
            victim = next(k for k in ("fit", "dataset", "batch", "link", "time", "scaling", "winner", "warning") if kept[k])
            kept[victim].pop()
    return [f for k in KINDS for f in kept[k]]


def _answers_first(found: list[Finding]) -> list[Finding]:
    """The answer to the question the grid asked leads: a link study's crossings first (its grid
    asked how the strategies degrade on slower links), and a comparison the intervals could not
    decide after the scaling verdicts (a tie says no strategy is fastest; the speedups say whether
    any beats one process). Otherwise the order of KINDS."""
    lead = "link" if any(f.kind == "link" for f in found) else None
    after_scaling = KINDS.index("scaling") + 0.5

    def rank(f: Finding) -> float:
        if f.kind == lead:
            return -1
        return after_scaling if f.kind == "winner" and not f.decided else KINDS.index(f.kind)

    return sorted(found, key=rank)  # stable: each kind keeps its own order


def profile_findings(profile: pd.DataFrame, runs: pd.DataFrame, shown: list[str]) -> list[Finding]:
    """The profiler's answer (runs with profile_steps > 0): per profiled cell, the share of its
    profiled step spent in communication operators, cells from the most to the least, and the
    profiler's own overhead on a step as measured (profiled step / timed step − 1)."""
    if profile is None or profile.empty or not {"op", "comm", "self_s_per_step", "run_dir"} <= set(profile.columns):
        return []
    cols = [c for c in dict.fromkeys(("strategy", *shown)) if c in profile]
    shares = analysis.profile_comm_shares(profile, cols).dropna(subset=["comm_share"])
    parts = [(r["comm_share"], _cell_name(r, shown)) for _, r in shares.iterrows()]
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


def findings(runs, cells, speed, comparisons, fits, max_items: int = 12, links=None, profile=None) -> list[Finding]:
    """The report's findings, most actionable first: winners, scaling, where the time goes,
    batch and dataset size, links, fits, warnings (see the module docstring for the rules)."""
    runs, cells, speed, comparisons, fits, links = map(_frame, (runs, cells, speed, comparisons, fits, links))
    # Tables without the columns a rule needs count as empty; optional columns are added as missing.
    speed = _needs(speed, ["world_size", "speedup"], analysis.SPEEDUP_COLUMNS)
    if not speed.empty:
        speed = speed[pd.to_numeric(speed["world_size"], errors="coerce").notna()]
    comparisons = _needs(comparisons, ["strategy_a", "strategy_b", "ratio", "verdict"], analysis.COMPARISON_COLUMNS)
    fits = _needs(fits, ["law", "kind", "estimate"], analysis.FIT_COLUMNS)
    shown = _shown(cells, runs, speed, comparisons)
    groups = {
        "winner": winner_findings(comparisons, shown),
        "scaling": scaling_findings(runs, speed, shown),
        "time": time_findings(runs, cells, speed, shown) + profile_findings(profile, runs, shown),
        "batch": axis_findings("batch_size", "batch", "fig-throughput_vs_batch", runs, cells, speed, shown),
        "dataset": axis_findings("dataset_size", "dataset", "fig-dataset_size", runs, cells, speed, shown),
        "link": link_findings(links),
        "fit": fit_findings(fits, speed, runs),
        "warning": warning_findings(runs, cells, shown),
    }
    return _answers_first(_trim(groups, max_items))
