"""A design's rounds as its analysis sees them: a cell's log throughputs by round, the noise
between rounds that every cell mean carries, and the effect a round has on every cell alike.

Two kinds of round effect. One belongs to a cell and a round (the machine's state as that cell's
runs met it): it stays in a cell's mean and in a comparison of two, so every interval carries it
(`round_noise`). The other is shared by every cell measured in a round (a busy neighbour for the
whole round, a trend): it stays in a cell's mean, but a comparison of two cells measured in the
same rounds cancels it. `RoundFit` estimates it by a two-way fit (a level per cell, an effect per
round) on the cells' round means, and a comparison is judged within rounds: its two cells' runs
with the effects of their rounds taken out, the interval from the fit's weights (issue 72: as
measured, a 6 % shared effect had left 20 % of comparisons undecided at the cap, as noise added to
both sides).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Hashable

import numpy as np

from ddpbench.analysis.intervals import between_group_parts

Cell = Hashable


def cell_logs(values: dict, rounds: dict | None, cell: Cell) -> tuple[np.ndarray, np.ndarray | None]:
    """A cell's log throughputs and the round each was measured in (None where `rounds` does not
    say: then its runs count as one round)."""
    x = np.asarray(list(values.get(cell, ())), dtype=float)
    keep = np.isfinite(x) & (x > 0)
    labels = None if rounds is None else np.asarray(list(rounds.get(cell, ())))
    return np.log(x[keep]), (labels[keep] if labels is not None and len(labels) == len(x) else None)


class CellRuns:
    """What a look reads of one cell's runs, each part computed once however many questions ask:
    the logs and their rounds (cell_logs), the runs of each round, the variance, the round weight."""

    def __init__(self, values: dict, rounds: dict | None, cell: Cell):
        self.y, self.labels = cell_logs(values, rounds, cell)

    @functools.cached_property
    def found(self) -> np.ndarray:
        """The rounds the cell ran in, in order (none without labels)."""
        return np.unique(self.labels) if self.labels is not None else np.array([])

    @functools.cached_property
    def groups(self) -> list[np.ndarray]:
        """The logs of each round in `found`."""
        return [self.y[self.labels == r] for r in self.found]

    @functools.cached_property
    def mean(self) -> float:
        return self.y.mean() if len(self.y) else math.nan

    @functools.cached_property
    def means(self) -> list[float]:
        """The mean log of each round in `found`."""
        return [g.mean() for g in self.groups]

    @functools.cached_property
    def between(self) -> tuple[float, int]:
        """The cell's share of the pooled between-round variance (intervals.between_group_parts)."""
        return between_group_parts(self.groups)

    @functools.cached_property
    def var(self) -> float:
        return float(self.y.var(ddof=1)) if len(self.y) > 1 else math.nan

    @functools.cached_property
    def weight(self) -> float:
        return round_weight(self.labels, len(self.y))


class CellLogs(dict):
    """cell -> its CellRuns in `values` (with `rounds`), made on first use: the cache of one look."""

    def __init__(self, values: dict, rounds: dict | None):
        super().__init__()
        self.values, self.rounds = values, rounds

    def __missing__(self, cell: Cell) -> CellRuns:
        found = self[cell] = CellRuns(self.values, self.rounds, cell)
        return found


def round_weight(labels: np.ndarray | None, n: int) -> float:
    """sum(n_r^2) / n^2 over a cell's rounds: the share of a round effect's variance that stays in
    the cell's mean (1 for one round; about 1/R for R rounds of equal size)."""
    if labels is None or n == 0:
        return 1.0
    _, sizes = np.unique(labels, return_counts=True)
    return float((sizes.astype(float) ** 2).sum() / n**2)


def round_noise(values: dict, rounds: dict | None, logs: CellLogs | None = None) -> tuple[float, int]:
    """The between-round standard deviation of a cell's log throughput (σ_job: what the machine's
    state shared by one cell's runs of one round adds, beyond the spread of runs inside a
    round), pooled over the cells with 2+ rounds of 2+ runs (analysis.intervals.between_group_parts)
    and floored at 0; with the degrees of freedom it rests on. (0.0, 0) where no cell has two such
    rounds: the intervals then describe the conditions of the rounds measured."""
    logs = CellLogs(values, rounds) if logs is None else logs
    num, dof = 0.0, 0
    for cell in values:
        if logs[cell].labels is not None:
            part, weight = logs[cell].between
            num, dof = num + part, dof + weight
    return (math.sqrt(max(0.0, num / dof)) if dof else 0.0), dof


@dataclasses.dataclass(frozen=True)
class RoundFit:
    """The two-way fit of a design's cells' round means (a level per cell, an effect per round
    shared by every cell measured in it), with what a comparison judged within rounds needs: each
    round's effect, how every fitted quantity is made of the round means (linear), each cell's
    spread of runs inside its rounds, and the noise a cell's round mean has beyond it (σ_int, the
    effect of one cell's round; its estimate counts the fit's own leverage, so it stays unbiased
    however unevenly the design funded the cells)."""

    rows: tuple  # (cell, round) of each round mean
    means: np.ndarray  # each row's mean log throughput
    runs: np.ndarray  # each row's number of runs
    weights: np.ndarray  # (rounds after the first) x rows: each round effect as a sum over the rows' means
    labels: tuple  # the rounds, the first the reference (effect 0)
    spread: dict  # cell -> (variance of its runs about their rounds' means, its degrees of freedom)
    noise: tuple  # (σ_int, its degrees of freedom)
    cell_of: np.ndarray  # each row's cell, as an index into `cells`
    round_of: np.ndarray  # each row's round, as an index into `labels`
    cells: dict  # cell -> its index

    @classmethod
    def of(cls, values: dict, rounds: dict, logs: CellLogs | None = None) -> RoundFit | None:
        """The fit of the cells measured in two or more rounds (a cell of one round says nothing of
        the rounds' effects: its level absorbs its mean), or None where no round effect can be told."""
        logs = CellLogs(values, rounds) if logs is None else logs
        rows, means, runs, spread = [], [], [], {}
        for cell in values:
            y, labels = logs[cell].y, logs[cell].labels
            if labels is None:
                continue
            found = logs[cell].found
            if len(found) < 2:
                continue
            groups, own = logs[cell].groups, logs[cell].means
            rows += [(cell, r) for r in found]
            means += own
            runs += [len(g) for g in groups]
            dof = len(y) - len(groups)
            spread[cell] = (sum(((g - m) ** 2).sum() for g, m in zip(groups, own)) / dof if dof else 0.0, dof)
        labels = tuple(sorted({r for _, r in rows}))
        if len(labels) < 2:
            return None
        ci = {c: k for k, c in enumerate(dict.fromkeys(c for c, _ in rows))}
        ri = {r: k for k, r in enumerate(labels)}
        cell_of = np.array([ci[c] for c, _ in rows])
        round_of = np.array([ri[r] for _, r in rows])
        design = np.zeros((len(rows), len(ci) + len(labels) - 1))
        design[np.arange(len(rows)), cell_of] = 1.0
        later = round_of > 0
        design[np.flatnonzero(later), len(ci) + round_of[later] - 1] = 1.0
        pinv = np.linalg.pinv(design)
        means, runs = np.asarray(means), np.asarray(runs, dtype=float)
        leverage = np.einsum("ij,ji->i", design, pinv)
        resid = means - design @ (pinv @ means)
        own = np.array([spread[c][0] for c, _ in rows]) / runs  # what the runs alone put in each row's mean
        dof = int(round(len(rows) - leverage.sum()))
        var = (float((resid**2).sum()) - float(((1 - leverage) * own).sum())) / dof if dof > 0 else 0.0
        noise = (math.sqrt(max(var, 0.0)), max(dof, 0))
        return cls(tuple(rows), means, runs, pinv[len(ci):], labels, spread, noise, cell_of, round_of, ci)

    @property
    def effects(self) -> dict:
        """Round -> its shared effect on log throughput (the first round 0)."""
        return dict(zip(self.labels, [0.0, *map(float, self.weights @ self.means)]))

    def count(self, cell: Cell) -> int:
        """The runs of a cell in the fit."""
        return int(self.runs[self.cell_of == self.cells[cell]].sum())

    def contrast(self, a: Cell, b: Cell) -> tuple[float, float, float] | None:
        """(a's mean log throughput less b's, within rounds; its variance; degrees of freedom):
        each cell's runs with its rounds' shared effects taken out, the variance from the fit's
        weights (σ_int on every round mean, each cell's spread over its runs, Welch-Satterthwaite).
        None where a cell is not in the fit."""
        if a not in self.cells or b not in self.cells:
            return None
        lam = np.zeros(len(self.rows))
        for cell, sign in ((a, 1.0), (b, -1.0)):
            mine = self.cell_of == self.cells[cell]
            lam[mine] = sign * self.runs[mine] / self.runs[mine].sum()
        by_round = np.bincount(self.round_of, weights=lam, minlength=len(self.labels))[1:]
        omega = lam - by_round @ self.weights  # the effects the two cells' rounds had, taken out
        sd, dof_int = self.noise
        per_cell = np.bincount(self.cell_of, weights=omega**2 / self.runs, minlength=len(self.cells))
        spread = [self.spread[c] for c in self.cells]
        terms = [(sd**2 * float((omega**2).sum()), dof_int)]
        terms += [(var * float(w), dof) for (var, dof), w in zip(spread, per_cell) if w > 0]
        total = sum(t for t, _ in terms)
        denom = sum(t**2 / d for t, d in terms if t > 0 and d > 0)
        return float(omega @ self.means), total, (total**2 / denom if denom > 0 else math.inf)

    def within(self, values: dict, rounds: dict) -> dict:
        """The values with each round's shared effect divided out (a cell whose rounds do not match
        its runs stays as it is)."""
        effects, out = self.effects, {}
        for cell, xs in values.items():
            labels, xs = list(rounds.get(cell, ())), list(xs)
            if len(labels) == len(xs):
                xs = list(np.asarray(xs, dtype=float) * np.exp([-effects.get(r, 0.0) for r in labels]))
            out[cell] = xs
        return out


def shared_effects(values: dict, rounds: dict) -> tuple[dict, int]:
    """Each round's effect on the log throughput of every cell measured in it (round -> effect, the
    first round 0; `RoundFit`), with the number of cells measured in two or more rounds (only they
    say anything of it)."""
    fit = RoundFit.of(values, rounds)
    if fit is None:
        return {}, 0
    return fit.effects, len({c for c, _ in fit.rows})
