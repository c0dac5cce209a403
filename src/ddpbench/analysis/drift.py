"""Whether throughput trended across a design's rounds (issue 72): the check that warns when the
machine got steadily faster or slower while the design ran, which no interval shows.

Every interval the design reports covers the mean over the rounds its cells ran in; under a trend
that is not the throughput at the start, nor at the end, and a cell's precision interval says
nothing of it. So the rounds themselves are tested: from each cell's mean log throughput in each
round it ran, a two-way fit (a level per cell, an effect per round: cells funded in different rounds
still compare; `rounds.shared_effects`) gives each round's effect shared by all cells; a line
through those effects gives the trend per round, and its t-interval on R - 2 degrees of freedom (R rounds) is taken from the
effects' scatter about the line. Effects shared by a round that come and go (the machine busy in
one round, quiet in the next) widen that interval instead of reading as a trend; only a steady
change does not. Four rounds are the fewest it tests (two degrees of freedom).

Rates (`analysis.design_rates`, simulated with the real stopping rule): the check's false alarms
without a trend, and how often it fires at 1 % a round.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import special

from ddpbench.analysis import rounds as rounds_mod

LEVEL = 0.95
MIN_ROUNDS = 4  # a line through the round effects, with 2 degrees of freedom left for its error


@dataclasses.dataclass(frozen=True)
class Drift:
    """Throughput's trend across the rounds: the relative change per round and its interval
    (at `level`), from `rounds` rounds and `cells` cells measured in two or more of them."""

    per_round: float
    low: float
    high: float
    rounds: int
    cells: int
    level: float = LEVEL

    @property
    def warns(self) -> bool:
        """The interval excludes no change: throughput moved steadily one way across the rounds."""
        return self.low > 0 or self.high < 0

    def short(self) -> str:
        """The terminal's words: 'throughput fell 1.2 % a round'."""
        return f"throughput {'rose' if self.per_round > 0 else 'fell'} {100 * abs(self.per_round):.1f} % a round"

    def text(self) -> str:
        """One sentence for the report and the terminal."""
        way = "rose" if self.per_round > 0 else "fell"
        span = f"{100 * self.per_round:+.1f} % a round [{100 * self.low:+.1f}, {100 * self.high:+.1f}]"
        if not self.warns:
            return (f"No trend across the design's {self.rounds} rounds: {span} ({self.cells} cells measured in two or "
                    "more rounds).")  # fmt: skip
        return (f"Throughput {way} steadily across the design's {self.rounds} rounds: {span} ({self.cells} cells "
                "measured in two or more rounds, each round's effect shared by them). Each interval here covers the "
                "mean over the rounds its cell ran in, not its throughput at the start or the end; a comparison's two "
                "cells ran in the same rounds, so its ratio is affected less.")  # fmt: skip

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def trend(values: dict, rounds: dict, level: float = LEVEL) -> Drift | None:
    """The trend of throughput across rounds (module doc) from `values` (cell -> throughputs) and
    `rounds` (cell -> the round of each); None where fewer than MIN_ROUNDS rounds can be compared."""
    shared, cells = rounds_mod.shared_effects(values, rounds)
    if len(shared) < MIN_ROUNDS:
        return None
    r, effects = np.array(list(shared), dtype=float), np.array(list(shared.values()))
    rc = r - r.mean()
    slope = float((rc * (effects - effects.mean())).sum() / (rc**2).sum())
    resid = effects - effects.mean() - slope * rc
    dof = len(r) - 2
    se = math.sqrt(float((resid**2).sum()) / dof / float((rc**2).sum()))
    half = float(special.stdtrit(dof, 0.5 + level / 2)) * se
    return Drift(math.expm1(slope), math.expm1(slope - half), math.expm1(slope + half), len(r), cells, level)
