"""Which strategy is fastest, per setting (kind "winner", anchor "comparisons").

Per setting (all axes equal but strategy, world size included), strategies are ranked by their
throughput ratios; the fastest is named with its margin over the runner-up only where that
comparison's interval excludes 1 (verdict faster or slower). Where the interval holds 1:
"no detectable difference between X and Y" (where a design asked: equivalent within its margin,
or undecided; comparisons.csv's rows carry its verdict and interval); where a side
has fewer than 2 repeats: no interval, no winner. Settings with the same outcome collapse into one sentence ("ddp is the fastest at
every world size measured, by 1.21× [..] to 1.52× [..] over the runner-up").
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ddpbench import analysis
from ddpbench.report.findings.common import Finding, row_num, setting_text
from ddpbench.report.text import as_verdict, finite, inside_margin, listing, ratio_text, sig3

# The kinds this module gives (ddpbench.report.findings discovers them; fields: common.Kind).
KINDS = {"winner": dict(find=lambda t: winner_findings(t.comparisons, t.shown), at_most=3, order=10, trim=30, drop=90)}


def _rank(g: pd.DataFrame) -> list[str]:
    """Strategies of one setting, fastest first: by the sum of their log throughput ratios against
    the others (with every pair present, the order of their geometric-mean throughputs)."""
    score: dict[str, float] = {}
    for a, b, ratio in zip(g["strategy_a"].astype(str), g["strategy_b"].astype(str), g["ratio"]):
        score.setdefault(a, 0.0), score.setdefault(b, 0.0)
        if finite(ratio) and float(ratio) > 0:
            d = math.log(float(ratio))
            score[a] += d
            score[b] -= d
    return sorted(score, key=lambda s: (-score[s], s))


def _oriented(r, top: str) -> tuple[float, float, float, analysis.Verdict]:
    """(ratio, low, high, verdict) of `top` over the other strategy of comparison row r."""
    est, lo, hi = row_num(r, "ratio"), row_num(r, "ratio_ci_low"), row_num(r, "ratio_ci_high")
    # The verdict follows the interval itself: no interval, no winner, whatever the column says.
    verdict = analysis.verdict_of(lo, hi)
    if str(r["strategy_a"]) == top:
        return est, lo, hi, verdict
    return 1 / est, 1 / hi, 1 / lo, verdict.turned()


def _undecided(g: pd.DataFrame, top: str, others: list[str]) -> list[tuple[str, tuple]]:
    """The strategies `top` is not decidedly faster than (an interval holding 1, or none), each with
    `top`'s throughput ratio over it (estimate, low, high, level): a winner must beat every one."""
    out = []
    for other in others:
        pair = g[((g["strategy_a"] == top) & (g["strategy_b"] == other)) | ((g["strategy_a"] == other) & (g["strategy_b"] == top))]
        if pair.empty:
            out.append((other, (np.nan, np.nan, np.nan)))
            continue
        r = pair.iloc[0]
        est, lo, hi, verdict = _oriented(r, top)
        if verdict != analysis.Verdict.FASTER:
            out.append((other, (est, lo, hi, r.get("ratio_ci_level", np.nan))))
    return out


def _undecided_why(iv: tuple) -> str:
    return "an interval that holds 1" if finite(iv[1]) and finite(iv[2]) else "without an interval"


def _where(settings: list[str], setting_cols: list[str], total: int) -> str:
    """' at every world size measured', ' at world sizes 2, 4 and 8', ' at world size 2, batch 64; ...',
    or '' when the table has no setting columns."""
    if len(settings) == total and total > 1:
        return " at every world size measured" if setting_cols == ["world_size"] else " at every setting measured"
    if not any(settings):
        return ""
    if setting_cols == ["world_size"] and len(settings) > 1:
        return " at world sizes " + listing([s.removeprefix("world size ") for s in settings], limit=6)
    return " at " + listing(settings, sep="; ")


def winner_findings(comparisons: pd.DataFrame, shown: list[str]) -> list[Finding]:
    """Per setting, the fastest strategy (or a tie, or no comparison), settings with the same
    outcome said in one sentence: wins first, then partial wins, ties, and what cannot be compared."""
    if comparisons.empty or "verdict" not in comparisons:
        return []
    setting = [c for c in comparisons.columns if c not in analysis.COMPARISON_COLUMNS]
    shown_setting = [c for c in setting if c in shown or c == "world_size"]
    groups = comparisons.groupby(setting, dropna=False, sort=False) if setting else [((), comparisons)]
    outcomes = [o for _, g in groups if (o := _outcome(g, shown_setting)) is not None]
    total = len(outcomes)
    grouped: dict[tuple, list] = {}
    for kind, key, where, detail in outcomes:
        grouped.setdefault((kind, key), []).append((where, detail))
    out = []
    order_of = {"win": 0, "partial": 1, "tie": 2, "none": 3}
    for (kind, key), items in sorted(grouped.items(), key=lambda kv: (order_of[kv[0][0]], -len(kv[1]))):
        place = _where([w for w, _ in items], shown_setting, total)
        if kind == "win":
            out.append(Finding("winner", _win_text(key, items, place), "comparisons"))
        elif kind == "partial":
            out.extend(_partial_findings(items, shown_setting, total))
        elif kind == "tie":
            out.append(Finding("winner", _tie_text(key, items, place), "comparisons", decided=False))
        else:
            text = (f"{key[0]} and {key[1]} cannot be compared{place}: fewer than 2 repeats on a side, "
                    "so no interval and no winner.")
            out.append(Finding("winner", text, "comparisons", decided=False))
    return out


def _outcome(g: pd.DataFrame, shown_setting: list[str]) -> tuple | None:
    """One setting's outcome (kind, key, setting label, detail): kind "win", "partial" (faster than
    the runner-up, not decidedly than every other), "tie" or "none" (no interval); the key groups
    settings whose sentence is the same. None for a setting with fewer than two strategies compared."""
    order = _rank(g)
    if len(order) < 2:
        return None
    top, second = order[0], order[1]
    pair = g[((g["strategy_a"] == top) & (g["strategy_b"] == second)) | ((g["strategy_a"] == second) & (g["strategy_b"] == top))]
    if pair.empty:
        return None
    r = pair.iloc[0]
    est, lo, hi, verdict = _oriented(r, top)
    where = setting_text(r, shown_setting)
    flags = (" (unstable)" if analysis.truthy(r.get("unstable", False)) else "") + (
        " (different code versions)" if analysis.truthy(r.get("versions_differ", False)) else "")
    undecided = _undecided(g, top, order[2:]) if verdict == analysis.Verdict.FASTER else []
    if undecided:  # faster than the runner-up, not (decidedly) than every other strategy: no winner
        return ("partial", (top, second, tuple(u[0] for u in undecided)), where,
                (top, second, est, lo, hi, r.get("ratio_ci_level", np.nan), flags, undecided))  # fmt: skip
    margin = r.get("margin", np.nan)
    if verdict == analysis.Verdict.FASTER:
        return "win", top, where, (top, second, est, lo, hi, r.get("ratio_ci_level", np.nan), flags, len(order), margin)
    if verdict == analysis.Verdict.SLOWER:  # cannot happen with consistent estimates; stated as measured
        return "win", second, where, (second, top, 1 / est, 1 / hi, 1 / lo, r.get("ratio_ci_level", np.nan), flags,
                                      len(order), margin)  # fmt: skip
    if verdict == analysis.Verdict.NO_DIFFERENCE:  # a design's row says which: equivalent, or undecided when it ended
        word = as_verdict(r["verdict"])
        word = word if word in (analysis.Verdict.EQUIVALENT, analysis.Verdict.UNDECIDED) else verdict
        return "tie", (*sorted((top, second)), word), where, (top, second, est, lo, hi, flags)
    return "none", tuple(sorted((top, second))), where, (top, second, est, flags)


def _win_text(key: str, items: list, place: str) -> str:
    """The winner's sentence: its margin over the runner-up at one setting (named the fastest where
    three or more were ranked), or the range of its margins over the settings it wins at."""
    if len(items) == 1:
        win, lose, est, lo, hi, level, flags, ranked, margin = items[0][1]
        small = inside_margin(lo, hi, margin)
        if ranked > 2:  # the answer first: of three or more, which is fastest, then by how much
            return (f"{win} is the fastest{place}: {ratio_text(est, lo, hi, level)} faster than the runner-up, "
                    f"{lose}{small}{flags}.")  # fmt: skip
        return f"{win} is {ratio_text(est, lo, hi, level)} faster than {lose}{place}{small}{flags}."
    margins = sorted(items, key=lambda it: it[1][2])
    lo_m, hi_m = margins[0][1], margins[-1][1]
    losers = sorted({d[1] for _, d in items})
    runner = f"the runner-up ({listing(losers)})"
    if sig3(lo_m[2]) == sig3(hi_m[2]):
        lows, highs = [d[3] for _, d in items], [d[4] for _, d in items]
        by = f"by {sig3(lo_m[2])}× at each, every interval within [{sig3(min(lows))}, {sig3(max(highs))}],"
    else:
        by = f"by {ratio_text(*lo_m[2:6])} to {ratio_text(*hi_m[2:6])}"
    n_flag = sum(bool(d[6]) for _, d in items)
    flags = f" ({n_flag} of these comparisons flagged)" if n_flag else ""
    n_small = sum(bool(inside_margin(d[3], d[4], d[8])) for _, d in items)
    if n_small:
        flags += f" ({'each' if n_small == len(items) else f'{n_small} of these'} by less than the design's margin)"
    return f"{key} is the fastest{place}, {by} over {runner}{flags}."


def _partial_findings(items: list, shown_setting: list[str], total: int) -> list[Finding]:
    """One undecided finding per setting where the fastest beats the runner-up but not every other."""
    out = []
    for where, (top, second, est, lo, hi, level, flags, undecided) in items:
        against = "; ".join(f"{o}: {ratio_text(*iv)}" for o, iv in undecided)
        text = (f"{top} has the highest throughput{_where([where], shown_setting, total)}, "
                f"{ratio_text(est, lo, hi, level)} faster than {second}{flags}, but no winner: its throughput "
                f"over {listing([o for o, _ in undecided])}'s is undecided ({against}: "
                f"{'an interval that holds 1 or none' if len(undecided) > 1 else _undecided_why(undecided[0][1])}).")
        out.append(Finding("winner", text, "comparisons", decided=False))
    return out


TIE_WORDS = {  # (opening, what the interval is)
    analysis.Verdict.NO_DIFFERENCE: ("No detectable difference between {a} and {b}", "an interval that holds 1"),
    analysis.Verdict.EQUIVALENT: ("{a} and {b} are equivalent within the design's margin", "an interval inside the margin"),
    analysis.Verdict.UNDECIDED: ("The design left {a} against {b} undecided", "an interval that holds 1 and reaches past the margin"),
}


def _tie_text(key: tuple, items: list, place: str) -> str:
    """No detectable difference between two strategies (or, where a design asked, equivalent within
    its margin, or undecided): at one setting with its ratio, or over several with the range of
    their point estimates."""
    top, second, est, lo, hi, flags = items[0][1]
    opening, interval = TIE_WORDS[key[2]]
    if len(items) == 1:
        return (f"{opening.format(a=top, b=second)}{place}: {top}'s throughput is "
                f"{ratio_text(est, lo, hi)} {second}'s, {interval}{flags}.")
    ests = sorted(d[2] for _, d in items)
    return (f"{opening.format(a=key[0], b=key[1])}{place}: every throughput ratio's "
            f"interval holds 1 (the faster over the slower by {sig3(ests[0])}× to {sig3(ests[-1])}×, point estimates).")
