"""Numbers into words: the formatting the report's findings and study sections share.

Numbers have 3 significant digits (`sig3`); a table's number is compact (`num`), with its
interval as 'median [low, high]' (`with_ci`); ratios read "1.52× [1.31, 1.76]" (`ratio_text`),
fractions "31.2 % [28.4, 34.1]" (`pct_text`), bandwidths "9.8 Gbit/s" (`bandwidth_text`); an
interval whose level is not 95 % says its level; a number without an interval says so; an absent
number is an en dash, never 0 or 'nan'. Lists of names read 'a, b, c and 2 more' (`listing`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ddpbench import analysis

NAMED = 3  # names in a listing before "and N more" (cells named in a warning)

# What a ratio's interval says, in the report's words (analysis.comparison.Verdict: the one vocabulary;
# FASTER is A's throughput above B's). The one place a verdict becomes a word.
VERDICT_WORDS = {
    analysis.Verdict.FASTER: "faster",
    analysis.Verdict.SLOWER: "slower",
    analysis.Verdict.NO_DIFFERENCE: "no detectable difference",
    analysis.Verdict.NO_INTERVAL: "no interval (fewer than 2 repeats on a side)",
    analysis.Verdict.EQUIVALENT: "equivalent",
    analysis.Verdict.OPEN: "open",
    analysis.Verdict.OUT_OF_REACH: "open, out of reach",
    analysis.Verdict.UNDECIDED: "undecided",
    analysis.Verdict.MET: "precision met",
}
# A setting's effect on a cell's throughput (the cell against its twin): higher or lower.
SETTING_WORDS = {**VERDICT_WORDS, analysis.Verdict.FASTER: "higher", analysis.Verdict.SLOWER: "lower"}
SOURCE_WORDS = {analysis.Source.DESIGN: "the design's", analysis.Source.DESCRIPTIVE: "descriptive",
                analysis.Source.WELCH: "Welch"}  # fmt: skip


def finite(x) -> bool:
    """Whether x is a finite number (None, NaN, inf and text are not)."""
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def sig3(x) -> str:
    """3 significant digits, never exponent notation: 1.52, 0.0123, 6130; '–' when absent."""
    if not finite(x):
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
    if finite(level) and abs(float(level) - analysis.LEVEL) > 1e-3:
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


def level_ci(est, lo=np.nan, hi=np.nan, level=np.nan, unit: str = "") -> str:
    """'412 MiB [405, 418] (75 % interval)': a value with its unit and interval, whose level is said where it is
    not 95 %; '412 MiB (no interval)' without one."""
    unit = f" {unit}" if unit else ""
    if not (finite(lo) and finite(hi)):
        return f"{sig3(est)}{unit} (no interval)"
    return f"{sig3(est)}{unit} [{sig3(lo)}, {sig3(hi)}]{_level_note(level)}"


def ratio_text(est, lo=np.nan, hi=np.nan, level=np.nan) -> str:
    """'1.52× [1.31, 1.76]', or '1.52× (no interval)'. A bound that is not 1 but would read 1.00
    gets a digit more ('[1.003, 1.19]'): whether an interval holds 1 is the point of a ratio."""
    if not (finite(lo) and finite(hi)):
        return f"{sig3(est)}× (no interval)"
    return f"{sig3(est)}× [{_bound(lo)}, {_bound(hi)}]{_level_note(level)}"


def _bound(x) -> str:
    text, digits = sig3(x), 3
    while float(text) == 1 and float(x) != 1 and digits <= 6:
        text, digits = f"{float(x):.{digits}f}", digits + 1
    return text


def pct_text(est, lo=np.nan, hi=np.nan, level=np.nan) -> str:
    """A fraction as a percentage: '31.2 % [28.4, 34.1]', or '31.2 % (no interval)'."""
    est = float(est) * 100 if finite(est) else np.nan
    if not (finite(lo) and finite(hi)):
        return f"{sig3(est)} % (no interval)"
    return f"{sig3(est)} % [{sig3(100 * float(lo))}, {sig3(100 * float(hi))}]{_level_note(level)}"


def bandwidth_text(gbps) -> str:
    """'9.8 Gbit/s', '310 Mbit/s', '500 kbit/s' (3 significant digits)."""
    if not finite(gbps):
        return "–"
    for scale, unit in ((1, "Gbit/s"), (1e-3, "Mbit/s"), (1e-6, "kbit/s")):
        if float(gbps) >= scale:
            return f"{sig3(float(gbps) / scale)} {unit}"
    return f"{sig3(float(gbps) * 1e9)} bit/s"


def value_text(v) -> str:
    """An axis value as the grid wrote it: a whole number without '.0' (16.0 -> '16'), else str()."""
    if isinstance(v, (float, np.floating, int, np.integer)) and finite(v) and float(v) == int(v):
        return str(int(v))
    return str(v)


def listing(items: list[str], limit: int = NAMED, sep: str = ", ") -> str:
    """'a, b, c and 2 more' / 'a and b'."""
    items = list(items)
    if len(items) > limit:
        return sep.join(items[:limit]) + f" and {len(items) - limit} more"
    if len(items) > 1:
        return sep.join(items[:-1]) + " and " + items[-1]
    return items[0] if items else ""


def plural(n: int, one: str, many: str) -> str:
    """'1 run' / '3 runs'."""
    return f"{n} {one if n == 1 else many}"


def inside_margin(low, high, margin) -> str:
    """', by less than the design's margin (a factor 1.15)' where a difference's interval also lies
    inside its margin [1/(1 + margin), 1 + margin] (a design's row; faster or slower is checked
    before equivalent), else ''."""
    if not (finite(low) and finite(high) and finite(margin) and float(margin) > 0):
        return ""
    factor = 1 + float(margin)
    return f", by less than the design's margin (a factor {factor:.2f})" if 1 / factor <= low and high <= factor else ""


def as_verdict(v) -> analysis.Verdict | None:
    """A table's verdict cell as a Verdict (a CSV read back holds its text), None for anything else
    (a reason a row is not compared)."""
    try:
        return analysis.Verdict(v)
    except ValueError:
        return None


def verdict_word(v, words: dict = VERDICT_WORDS) -> str:
    """A verdict in the report's words (`words`: VERDICT_WORDS, or SETTING_WORDS for a setting's
    effect); a reason a row is not compared as it is."""
    found = as_verdict(v)
    return words[found] if found is not None else str(v)


def row_verdict(r) -> analysis.Verdict:
    """What a ratio row's interval says (ratio, ratio_ci_low, ratio_ci_high), or the design's verdict
    where the row is its answer (interval_from design): never the point value alone."""
    if r.get("interval_from") == analysis.Source.DESIGN and as_verdict(r.get("verdict")) is not None:
        return as_verdict(r["verdict"])
    try:
        return analysis.verdict_of(float(r["ratio_ci_low"]), float(r["ratio_ci_high"]))
    except (TypeError, ValueError, KeyError):
        return analysis.Verdict.NO_INTERVAL


def source_text(r) -> str:
    """', the design's' or ', descriptive' after a ratio's verdict where a sequential design ran (the
    row's interval_from: analysis.comparison.Source); '' otherwise."""
    source = r.get("interval_from") if hasattr(r, "get") else None
    return f", {SOURCE_WORDS[source]}" if source in (analysis.Source.DESIGN, analysis.Source.DESCRIPTIVE) else ""

