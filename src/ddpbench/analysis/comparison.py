"""One comparison record: cell A's throughput (or another metric) against cell B's, its interval,
its verdict in one vocabulary and where the interval came from.

Every table and sentence that compares two cells holds a `Comparison`: comparisons.csv (strategy
against strategy), speedup.csv (a cell against its baseline), the memory and training-option
tables (a cell against its twin), the studies' pairs, and the sequential design's own questions
(analysis.sequential judges with the same `Verdict`). Where a design ran, its answers are an
input to the tables that compare cells (`DesignAnswers`): a pair it asked about takes the design's
verdict and repeated interval, every other pair keeps its Welch interval, labelled descriptive.
The report's words for a verdict are report.text's; this module holds no sentence.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Iterable, Mapping

import numpy as np

from ddpbench.analysis.intervals import Interval, welch_log_ratio
from ddpbench.core.layout import cell_of_run


class Verdict(enum.StrEnum):
    """What the interval of a ratio A/B says (A's throughput over B's: FASTER is A faster)."""

    FASTER = "faster"  # the interval lies above 1
    SLOWER = "slower"  # below 1
    NO_DIFFERENCE = "no difference"  # a descriptive interval that holds 1
    NO_INTERVAL = "no interval"  # fewer than 2 repeats on a side
    # A sequential design's words (analysis.sequential): a ratio inside its margin, a question not
    # decided yet, one the budget left cannot close, one still open when the design ended, and a
    # cell's precision target met.
    EQUIVALENT = "equivalent"
    OPEN = "open"
    OUT_OF_REACH = "out of reach"
    UNDECIDED = "undecided"
    MET = "met"

    @property
    def difference(self) -> bool:
        return self in (Verdict.FASTER, Verdict.SLOWER)

    @property
    def decided(self) -> bool:
        """Whether a design's question with this verdict is closed."""
        return self not in (Verdict.OPEN, Verdict.OUT_OF_REACH, Verdict.UNDECIDED)

    def turned(self) -> Verdict:
        """The verdict on B against A."""
        return {Verdict.FASTER: Verdict.SLOWER, Verdict.SLOWER: Verdict.FASTER}.get(self, self)


class Source(enum.StrEnum):
    """Where a ratio's interval and verdict come from (the tables' interval_from column)."""

    WELCH = "welch"  # fixed repeats: the Welch t-interval on the log ratio
    DESIGN = "design"  # the sequential design asked this pair: its repeated confidence interval
    DESCRIPTIVE = "descriptive"  # a design ran and did not ask this pair: Welch's, descriptive only


def verdict_of(low: float, high: float, margin: float | None = None) -> Verdict:
    """A ratio's verdict from its interval: a difference only where it excludes 1; with a design's
    `margin` (a factor 1 + margin either way) an interval inside it is EQUIVALENT and one that is
    neither OPEN, else NO_DIFFERENCE."""
    if not (math.isfinite(low) and math.isfinite(high)) or low <= 0:
        return Verdict.NO_INTERVAL
    if low > 1:
        return Verdict.FASTER
    if high < 1:
        return Verdict.SLOWER
    if margin is None:
        return Verdict.NO_DIFFERENCE
    m = math.log1p(margin)
    return Verdict.EQUIVALENT if -m <= math.log(low) and math.log(high) <= m else Verdict.OPEN


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Cell A against cell B (by their layout paths, '' where the runs do not say): the ratio A/B,
    its interval at `level`, the verdict, its source, and a design's equivalence margin (NaN
    elsewhere)."""

    a: str
    b: str
    ratio: float
    low: float = math.nan
    high: float = math.nan
    level: float = math.nan
    verdict: Verdict = Verdict.NO_INTERVAL
    source: Source = Source.WELCH
    margin: float = math.nan

    @classmethod
    def of_interval(cls, iv: Interval, a: str = "", b: str = "", source: Source = Source.WELCH) -> Comparison:
        return cls(a, b, iv.estimate, iv.low, iv.high, iv.level, verdict_of(iv.low, iv.high), source)

    @classmethod
    def measured(cls, xa, xb, a: str = "", b: str = "", source: Source = Source.WELCH) -> Comparison:
        """The ratio of the geometric means of A's values over B's with its Welch interval."""
        iv = welch_log_ratio(xa, xb) if len(xa) and len(xb) else Interval(math.nan)
        return cls.of_interval(iv, a, b, source)

    def turned(self) -> Comparison:
        """B against A: the ratio and its interval inverted, the verdict turned round."""
        return dataclasses.replace(self, a=self.b, b=self.a, ratio=1 / self.ratio, low=1 / self.high,
                                   high=1 / self.low, verdict=self.verdict.turned())  # fmt: skip

    def columns(self, prefix: str = "ratio") -> dict[str, Any]:
        """The record as a table's columns: `prefix` and its _ci_low/_ci_high/_ci_level, the verdict,
        interval_from and margin."""
        return {prefix: self.ratio, f"{prefix}_ci_low": self.low, f"{prefix}_ci_high": self.high,
                f"{prefix}_ci_level": self.level, "verdict": self.verdict, "interval_from": self.source,
                "margin": self.margin}  # fmt: skip


class DesignAnswers:
    """A sequential design's answers by cell path (its decision's verdict records: cells, kind,
    tolerance, verdict, estimate, low, high, predicted), the input of every table that compares
    cells where a design ran. Rows of a table find their cell through the runs' run_dir
    (`cell`: axis values -> the one cell the ok runs with those values are of)."""

    def __init__(self, records: Iterable, runs, level: float):
        self.level = level
        self.pairs: dict[frozenset, Any] = {}
        self.precision: dict[str, Any] = {}
        for v in records:
            if v.kind == "precision":
                self.precision[v.cells[0]] = v
            elif len(set(v.cells)) == 2 and not v.predicted:  # the tables show what ran
                self.pairs[frozenset(v.cells)] = v
        self._runs = runs[runs["status"] == "ok"] if "run_dir" in runs else runs.iloc[:0]
        self._indexes: dict[tuple, dict[tuple, str]] = {}

    def cell(self, values: Mapping[str, Any]) -> str | None:
        """The cell path of the ok runs with these axis values, None where none or several are."""
        from ddpbench.analysis.tables import text_key

        cols = tuple(values)
        if cols not in self._indexes:
            index = {}
            if not self._runs.empty:
                for key, g in self._runs.groupby(list(cols), dropna=False, sort=False):
                    found = {cell_of_run(d) for d in g["run_dir"]} - {None}
                    if len(found) == 1:
                        index[text_key(key if isinstance(key, tuple) else (key,))] = found.pop()
            self._indexes[cols] = index
        return self._indexes[cols].get(text_key(values.values()))

    def between(self, a: str | None, b: str | None) -> Comparison | None:
        """The design's comparison of cell a against cell b, None where it did not ask (or judged nothing)."""
        v = self.pairs.get(frozenset((a, b))) if a and b and a != b else None
        if v is None or v.estimate is None:
            return None
        nan = math.nan
        low, high = (nan if v.low is None else v.low), (nan if v.high is None else v.high)
        out = Comparison(v.cells[0], v.cells[1], v.estimate, low, high, self.level, Verdict(v.verdict), Source.DESIGN,
                         v.tolerance)  # fmt: skip
        return out if v.cells[0] == a else out.turned()

    def compare(self, a: Mapping[str, Any], b: Mapping[str, Any], xa, xb) -> Comparison:
        """Cells a and b (their axis values, the same axes) with their measured values `xa`, `xb`:
        the design's comparison where it asked, else the values' Welch ratio, descriptive."""
        ca, cb = self.cell(a), self.cell(b)
        return self.between(ca, cb) or Comparison.measured(xa, xb, ca or "", cb or "", Source.DESCRIPTIVE)


def compare_pair(design: DesignAnswers | None, a: Mapping[str, Any], b: Mapping[str, Any], xa, xb) -> Comparison:
    """Two cells compared as every table compares them: the design's answer where one ran and asked
    (DesignAnswers.compare), else their Welch ratio."""
    if design is None:
        return Comparison.measured(np.asarray(xa, float), np.asarray(xb, float))
    return design.compare(a, b, np.asarray(xa, float), np.asarray(xb, float))
