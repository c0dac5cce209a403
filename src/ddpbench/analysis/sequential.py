"""Run until decided: the statistics of a sequential design that adds repeats in rounds to
the cells whose questions are still open, and whose intervals stay valid however it stops.

Questions a grid asks:
  precision   a cell's throughput to a relative precision (±`target`, default 5 %);
  comparison  cell A's throughput against cell B's (a strategy against `single`, two
              strategies at equal settings), decided as faster, slower or equivalent within
              a factor 1 + `margin` (default 1.05).

Looks. A cell's repeat count moves along SCHEDULE (3, 5, 8, 11, 14, 20, 28, 40), so each
question is looked at a bounded number of times: a precision question at most 8 times, a
comparison at most 15 (its two cells' counts advancing one at a time).

Repeated confidence intervals (Jennison & Turnbull). At every look the interval is the t-
interval on the logs (Student for one cell, Welch with Hsu's degrees of freedom at unequal
counts for two, `analysis.intervals`) at the per-look level 1 − LOOK_ALPHA. LOOK_ALPHA is
calibrated by simulation (`calibrate_look_alpha`: a Pocock-type constant level) so that the
intervals at all of a comparison's looks cover the true ratio together with probability 0.95,
whichever way its two counts move through the schedule (`look_paths`: together, one at a time,
one to the cap first) and with either cell's noise up to 3 times the other's. Hence whatever
look the design stops at, for whatever reason (decided, cap, budget), the interval it reports
covers the truth with probability >= 0.95, and a faster or slower call where there is no
difference is made in at most 5 % of questions. Looking at ordinary 95 % intervals at the same
looks calls a difference that is not there in 8 % of questions, and more the more often one
looks (tests/unit/test_sequential.py).

Rounds (blocked analysis). A cell's runs of one round share that round's state of the machine,
so runs alone understate how much a cell moves between rounds. The between-round noise
(`round_noise`: the spread of a cell's round means beyond what its runs explain, pooled over
the cells measured in two or more rounds) enters every interval: a cell mean carries
sd^2 * sum(n_r^2) / n^2 of it, less the more rounds it ran in, its degrees of freedom combined
by Welch-Satterthwaite. No question is decided while a cell of it has run in one round only
(one round shows no such variation), and a comparison's two cells are funded in the same
round. A comparison is judged within rounds (`Evidence`, rounds.RoundFit): the effect a round
had on every cell measured in it cancels between the two cells instead of adding to both sides;
what is left is the noise of one cell's round. What that means for a whole grid, with and
without a job effect per cell and round, is `analysis.design_rates`.

Verdicts: `faster` / `slower` when the interval lies above / below 1, `equivalent` when it
lies inside [1/(1 + margin), 1 + margin], else `open`, or `out of reach` when the runs it would
need exceed what the budget left can give (`plan_round`: it gets no more runs). A
question still open at its cells' cap or when the budget is spent is `undecided` with its
interval, never "no difference".
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Callable, Hashable, Sequence

import numpy as np
from scipy import special  # the t distribution's functions: scipy.stats would add 0.55 s to every import

from ddpbench.analysis.comparison import Verdict, verdict_of
from ddpbench.analysis.intervals import add_variance
from ddpbench.analysis.rounds import CellLogs, CellRuns, RoundFit, round_noise
from ddpbench.core.study_config import UNTIL_DECIDED

SCHEDULE = (3, 5, 8, 11, 14, 20, 28, 40)
# calibrate_look_alpha(SCHEDULE, reps=400_000, seed=0) -> 0.00836, at its smallest where the
# two cells advance one at a time and the one behind is 3x as noisy (0.00969 at 1.7x, the
# setting it was first calibrated at; `python benchmarks/design_error_rates.py` prints each);
# rounded down. tests/unit/test_sequential.py re-derives it with fewer replicates and checks the
# family-wise coverage it gives on simulated grids.
LOOK_ALPHA = 0.0083
# A precision question stops on its interval's width, which the spread alone sets: at the
# 95 % level a width-stopped interval covers the truth in only 91 % of cells (stopping when the
# spread happens to be small), at the per-look level 0.02 in >= 95.5 % at every noise level
# (precision_coverage; tests/unit/test_sequential.py) with normal noise, but in 94.7 % with 5 % of
# runs 2x slow, as a shared machine makes them (analysis.design_rates' shared-machine table, 2,000
# grids). Recalibrated there (issue 72): 0.015 covers 96.1 % with the slow runs (400 grids; a
# second look confirming the target instead reached 95.3 % and decided 64 % of questions, not 71 %),
# for 4 % more runs on a quiet machine.
PRECISION_ALPHA = 0.015
LEVEL = 0.95  # the family-wise level LOOK_ALPHA delivers
TARGET = UNTIL_DECIDED["precision"]  # default relative precision of a cell's throughput
MARGIN = UNTIL_DECIDED["margin"]  # default equivalence margin of a comparison

Cell = Hashable


@dataclasses.dataclass(frozen=True)
class Question:
    """A precision question (`cells` = (cell,)) or a comparison (`cells` = (a, b): a's
    throughput over b's)."""

    cells: tuple
    tolerance: float  # precision: the relative half-width sought; comparison: the margin

    @property
    def kind(self) -> str:
        return "precision" if len(self.cells) == 1 else "comparison"


@dataclasses.dataclass(frozen=True)
class Judgement:
    """A question's verdict at a look and its repeated confidence interval."""

    question: Question
    verdict: Verdict  # precision: MET | OPEN; comparison: FASTER | SLOWER | EQUIVALENT | OPEN
    estimate: float  # geometric mean (precision) or ratio of geometric means (comparison)
    low: float
    high: float
    runs: tuple  # repeat counts of the question's cells

    @property
    def decided(self) -> bool:
        return self.verdict.decided


OUT_OF_REACH = Verdict.OUT_OF_REACH  # an open question that the budget left cannot close


def judge(question: Question, values: dict, alpha: float = LOOK_ALPHA, precision_alpha: float = PRECISION_ALPHA,
          rounds: dict | None = None, job_sd: float = 0.0, job_dof: float = math.inf,
          logs: CellLogs | None = None) -> Judgement:  # fmt: skip
    """The question's verdict and repeated confidence interval from the values measured so far
    (`values`: cell -> throughputs of its runs), at per-look level 1 - alpha (a comparison) or
    1 - precision_alpha (a precision question). With a between-round noise `job_sd` (round_noise,
    estimated with `job_dof` degrees of freedom; `rounds`: cell -> the round of each value) every
    cell mean also carries its rounds' effects: job_sd^2 * sum(n_r^2) / n^2 added to its variance
    (the blocked analysis: a cell measured in more rounds averages more of them out), the degrees
    of freedom combined by Welch-Satterthwaite. `logs`: the look's cache of the cells' runs (one is
    made where none is given)."""
    logs = CellLogs(values, rounds) if logs is None else logs
    cells = [logs[c] for c in question.cells]
    runs = tuple(len(c.y) for c in cells)
    if min(runs) < 2:
        est = float(np.exp(cells[0].mean - (cells[1].mean if len(cells) > 1 else 0))) if min(runs) else math.nan
        return Judgement(question, Verdict.OPEN, est, math.nan, math.nan, runs)
    extra = job_sd**2 * sum(c.weight for c in cells)
    if question.kind == "precision":
        center, level = cells[0].mean, 1 - precision_alpha
        var, dof = cells[0].var / runs[0], runs[0] - 1
    else:
        center, level = cells[0].mean - cells[1].mean, 1 - alpha
        var, dof = _welch(cells[0], cells[1])
    total, dof = add_variance(var, dof, extra, job_dof)
    return _verdict(question, center, float(total), float(dof), level, runs)


def _welch(a: CellRuns, b: CellRuns) -> tuple[float, float]:
    """(variance, degrees of freedom) of a's mean log less b's: intervals.welch_variance from the
    cells' cached variances."""
    na, nb = len(a.y), len(b.y)
    va, vb = np.float64(a.var) / na, np.float64(b.var) / nb  # (numpy: 0/0 is NaN, as welch_variance)
    with np.errstate(invalid="ignore", divide="ignore"):
        dof = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    if na != nb and va > 0 and vb > 0:  # Hsu's at unequal counts where both sides vary
        dof = min(dof, min(na, nb) - 1)
    return va + vb, dof


def _verdict(question: Question, center: float, total: float, dof: float, level: float, runs: tuple) -> Judgement:
    """The verdict and interval of a log estimate `center` of variance `total` on `dof` degrees of
    freedom, at `level`."""
    half = float(special.stdtrit(dof, 0.5 + level / 2) * math.sqrt(total)) if total > 0 else 0.0
    low, high = float(np.exp(center - half)), float(np.exp(center + half))
    if question.kind == "precision":
        verdict = Verdict.MET if half <= math.log1p(question.tolerance) else Verdict.OPEN
    else:
        verdict = verdict_of(low, high, question.tolerance)
        verdict = Verdict.OPEN if verdict == Verdict.NO_INTERVAL else verdict  # no interval yet: open
    return Judgement(question, verdict, float(np.exp(center)), low, high, runs)


def next_count(n: int, schedule: Sequence[int] = SCHEDULE) -> int | None:
    """The schedule's next repeat count after n (n below the first: the first), None at the cap."""
    return next((s for s in schedule if s > n), None)


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What a question is judged on: a precision question on its cell's runs as measured, with the
    between-round noise (round_noise: sd, dof); a comparison within rounds (rounds.RoundFit: the
    effect each round had on every cell taken out, the noise of one cell's round left). Without
    `rounds`, or a fit, or where a cell of it ran in one round only, a comparison is judged on the
    runs as measured too."""

    values: dict
    rounds: dict | None = None
    noise: tuple = (0.0, 0)
    fit: RoundFit | None = None
    cache: CellLogs | None = dataclasses.field(default=None, compare=False, repr=False)  # the look's, where made

    @classmethod
    def of(cls, values: dict, rounds: dict | None, within: bool = True) -> Evidence:
        """`within` False judges comparisons as measured (as before issue 72)."""
        if rounds is None:
            return cls(values)
        logs = CellLogs(values, rounds)  # filled by the noise and the fit, read again by every question
        return cls(values, rounds, round_noise(values, rounds, logs), RoundFit.of(values, rounds, logs) if within else None,
                   logs)  # fmt: skip

    @functools.cached_property
    def logs(self) -> CellLogs:
        """The cells' runs as measured, each read once a look."""
        return self.cache if self.cache is not None else CellLogs(self.values, self.rounds)

    @functools.cached_property
    def within(self) -> dict | None:
        """The values with each round's shared effect divided out (None: no fit)."""
        return None if self.fit is None else self.fit.within(self.values, self.rounds)

    @functools.cached_property
    def within_logs(self) -> CellLogs | None:
        return None if self.within is None else CellLogs(self.within, self.rounds)

    def judge(self, question: Question, alpha: float = LOOK_ALPHA, precision_alpha: float = PRECISION_ALPHA) -> Judgement:
        found = self.fit.contrast(*question.cells) if self.fit and question.kind == "comparison" else None
        if found is None:  # (a cell in the fit ran in two rounds: it has 2+ runs)
            return judge(question, self.values, alpha, precision_alpha, self.rounds, *self.noise, logs=self.logs)
        center, var, dof = found
        runs = tuple(self.fit.count(c) for c in question.cells)
        if runs[0] != runs[1]:  # Hsu's rule, as the calibration of LOOK_ALPHA assumed
            dof = min(dof, min(runs) - 1)
        return _verdict(question, center, var, dof, 1 - alpha, runs)

    def runs_to_decide(self, v: Judgement, alpha: float = LOOK_ALPHA, schedule: Sequence[int] = SCHEDULE) -> int | None:
        within = v.question.kind == "comparison" and self.fit is not None
        values, logs, sd = (self.within, self.within_logs, self.fit.noise[0]) if within else \
            (self.values, self.logs, self.noise[0])  # fmt: skip
        return runs_to_decide(v, values, alpha, rounds=self.rounds, job_sd=sd, schedule=schedule, logs=logs)


@dataclasses.dataclass
class Round:
    """What the next round runs (cell -> repeat count to reach), why each cell stopped, the
    verdicts, and what they were judged on (its between-round noise: `round_noise`)."""

    targets: dict
    stopped: dict  # cell -> "decided" | "cap" | "budget" | "out of reach"
    verdicts: list
    evidence: Evidence = dataclasses.field(default_factory=lambda: Evidence({}))

    @property
    def round_noise(self) -> tuple:
        """The between-round noise a cell's own interval carries (sd, dof)."""
        return self.evidence.noise

    def noise_record(self) -> dict:
        """The between-round noise as the decision file keeps it: a cell's (sd, dof) and, where
        comparisons were judged within rounds, the noise left of one cell's round (within_sd, within_dof)."""
        fit = self.evidence.fit
        within = {} if fit is None else dict(zip(("within_sd", "within_dof"), fit.noise))
        return dict(zip(("sd", "dof"), self.round_noise)) | within


def plan_round(questions: Sequence[Question], values: dict, runs_left: int | None = None,
               schedule: Sequence[int] = SCHEDULE, alpha: float = LOOK_ALPHA,
               seconds_left: float | None = None, run_seconds: dict | None = None,
               made: dict | None = None, precision_alpha: float = PRECISION_ALPHA,
               futility: bool = True, rounds: dict | None = None, within: bool = True) -> Round:  # fmt: skip
    """Judge every question, then give the next round to the cells with open questions: each
    moves to its schedule's next count. With `rounds` (cell -> the round of each value) the
    questions are judged with the between-round noise (round_noise) in every interval, and none
    is decided while a cell of it has been measured in one round only (unless neither can get
    another, or the design ends with this round): one round cannot show the variation between
    rounds.

    The budget goes where it decides most: cells by the decisions they are expected to bring per
    run-second (each open question counts 1 over the run-seconds that runs_to_decide says would
    close it), then by their number of open questions and widest interval against its tolerance.
    A comparison's two cells advance in the same round: a cell is funded together with the
    partner of its most promising open comparison unless one of its comparisons already advances
    with it (its partner funded, or at its cap) or it has a precision question of its own open;
    where the budget cannot pay for both, neither runs. From a question's second look on, one
    whose runs to decide exceed what the budget left can still give its cells is "out of reach"
    (futility): it stays undecided and brings its cells no runs, unless no other open question
    is left to spend the budget on (then it gets what is left). A run budget (`runs_left`) and a
    time budget (`seconds_left`, a cell's run costing `run_seconds[cell]`) cut the round in that
    order. A cell's count is its number of values, or `made[cell]` (runs made, failed ones
    included)."""
    run_seconds = run_seconds or {}
    have = {c: (made or {}).get(c, len(values.get(c, ()))) for q in questions for c in q.cells}
    evidence = Evidence.of(values, rounds, within)
    judged = [evidence.judge(q, alpha, precision_alpha) for q in questions]
    verdicts = [_held_back(v, rounds, have, schedule) for v in judged]
    gain: dict = {}  # cell -> (expected decisions per run-second, open questions, widest interval)
    partners: dict = {}  # cell -> [(per run-second, the other cell of an open comparison)]
    precision_open: set = set()
    for i, v in enumerate(verdicts):
        if v.decided:
            continue
        need = evidence.runs_to_decide(v, alpha, schedule)
        cells = v.question.cells
        cost = sum(run_seconds.get(c, 1.0) for c in cells)
        looked_twice = min(have[c] for c in cells) >= schedule[1]
        at_cap = all(next_count(have[c], schedule) is None for c in cells)  # stops there: "cap"
        if futility and need is not None and looked_twice and not at_cap \
                and need > _affordable(cells, runs_left, seconds_left, cost):  # fmt: skip
            verdicts[i] = dataclasses.replace(v, verdict=OUT_OF_REACH)
            continue
        width = (math.log(v.high) - math.log(v.low)) / 2 if math.isfinite(v.low) else math.inf
        per_second = 1 / ((need or schedule[-1]) * cost)  # not estimable: as if it needed the cap
        for c in cells:
            g, n_open, widest = gain.get(c, (0.0, 0, 0.0))
            gain[c] = (g + per_second, n_open + 1, max(widest, width / math.log1p(v.question.tolerance)))
        if len(cells) == 1:
            precision_open.add(cells[0])
        else:
            for c, other in (cells, cells[::-1]):
                partners.setdefault(c, []).append((per_second, other))
    out_of_reach = {c for v in verdicts if v.verdict == OUT_OF_REACH for c in v.question.cells}
    if out_of_reach and not gain:  # nothing else to spend the budget on: it goes to these after all
        return plan_round(questions, values, runs_left, schedule, alpha, seconds_left, run_seconds, made,
                          precision_alpha, futility=False, rounds=rounds, within=within)  # fmt: skip
    stopped = {c: OUT_OF_REACH if c in out_of_reach else "decided" for c in have if c not in gain}
    goal = {c: next_count(have[c], schedule) for c in gain}
    stopped.update({c: "cap" for c in gain if goal[c] is None})
    order = sorted(gain, key=lambda c: (-gain[c][0], -gain[c][1], -gain[c][2], str(c)))
    mates = {c: [other for _, other in sorted(found, key=lambda po: -po[0])] for c, found in partners.items()}
    targets = _fund(order, goal, have, mates, precision_open, stopped, _Budget(runs_left, seconds_left, run_seconds))
    if not targets:  # the design ends here: a call held back for another round is what there is
        verdicts = [j if v.verdict == Verdict.OPEN and j.decided else v for v, j in zip(verdicts, judged)]
    return Round(targets, stopped, verdicts, evidence)


def _fund(order: list, goal: dict, have: dict, mates: dict, precision_open: set, stopped: dict,
          budget: _Budget) -> dict:  # fmt: skip
    """The round's targets: cells in `order`, each moving to its `goal`; one whose open questions are
    all comparisons moves with the partner of its most promising one (`mates`) unless one of them
    already moves or stays at its cap; what the budget cannot pay is stopped ("budget")."""
    targets: dict = {}
    for c in order:
        if c in targets or c in stopped:
            continue
        together = [c]
        if mates.get(c) and c not in precision_open and not any(m in targets or goal.get(m) is None for m in mates[c]):
            mate = next((m for m in mates[c] if m not in stopped), None)
            if mate is None:  # every partner out of the budget: this cell's comparisons cannot advance
                stopped[c] = "budget"
                continue
            together.append(mate)
        if budget.pay({x: goal[x] - have[x] for x in together}):
            targets.update({x: goal[x] for x in together})
        else:
            stopped[c] = "budget"
    return targets


def _held_back(v: Judgement, rounds: dict | None, have: dict, schedule: Sequence[int]) -> Judgement:
    """A decided verdict on a cell measured in one round only is held open while a cell of it can
    get another round: one round shows no variation between rounds."""
    cells = v.question.cells
    if v.decided and rounds is not None and any(len(set(rounds.get(c, ()))) < 2 for c in cells) \
            and any(next_count(have[c], schedule) is not None for c in cells):  # fmt: skip
        return dataclasses.replace(v, verdict=Verdict.OPEN)
    return v


@dataclasses.dataclass
class _Budget:
    """What is left of a run budget and a time budget (None: none) as a round is funded."""

    runs: int | None
    seconds: float | None
    run_seconds: dict

    def pay(self, runs: dict) -> bool:
        """Take `runs` (cell -> runs) if both budgets can pay them; whether they could."""
        n = sum(runs.values())
        cost = sum(k * self.run_seconds.get(c, 0.0) for c, k in runs.items())
        if (self.runs is not None and n > self.runs) or (self.seconds is not None and cost > self.seconds):
            return False
        self.runs = None if self.runs is None else self.runs - n
        self.seconds = None if self.seconds is None else self.seconds - cost
        return True


def _affordable(cells: Sequence, runs_left: int | None, seconds_left: float | None, cost: float) -> float:
    """The most runs per cell a question's cells can still get within the budget left, were it all
    theirs (`cost`: the run-seconds of one run of each). The cap is not counted: a question the
    cap would stop undecided still gets its runs to the cap (judging by the cap from the second
    look gave up 0.5 % of simulated questions that would have closed)."""
    most = math.inf
    if runs_left is not None:
        most = min(most, runs_left / len(cells))
    if seconds_left is not None and cost > 0:
        most = min(most, seconds_left / cost)
    return most


def run_design(questions: Sequence[Question], measure: Callable[[Cell, int], Sequence[float]],
               budget_runs: int | None = None, schedule: Sequence[int] = SCHEDULE,
               alpha: float = LOOK_ALPHA, precision_alpha: float = PRECISION_ALPHA, blocked: bool = True,
               on_round: Callable[[int], None] | None = None, trace: dict | None = None, within: bool = True,
               ) -> tuple[list[Judgement], dict, dict]:  # fmt: skip
    """Drive rounds until nothing is open, the cap or the run budget: `measure(cell, k)` returns
    k new throughputs of the cell (one call per cell and round). Returns (final verdicts, cell ->
    runs, cell -> why it stopped). What the workflow does round by round, for simulations and
    tests; `blocked` False judges without the between-round noise (as if every run were of one round),
    `within` False judges comparisons on the runs as measured instead of within rounds.
    A run budget below the first round (every cell at the schedule's first count) is refused, as the
    workflow's plan refuses it (plan.design.first_round_runs_problem), rather than cut. `on_round(r)`
    is called before round r's runs (a simulation's machine may change with the round); `trace`, if
    given, receives the "values" and the "rounds" of each value at the end."""
    first = len({c for q in questions for c in q.cells}) * schedule[0]
    if budget_runs is not None and budget_runs < first:
        raise ValueError(f"a run budget of {budget_runs} cannot pay the first round's {first} runs")
    values: dict = {}
    rounds: dict = {}  # cell -> the round of each value
    spent = 0
    for r in itertools.count():
        left = None if budget_runs is None else budget_runs - spent
        rnd = plan_round(questions, values, left, schedule, alpha, precision_alpha=precision_alpha,
                         rounds=rounds if blocked else None, within=within)
        if not rnd.targets:
            if trace is not None:
                trace.update(values=values, rounds=rounds)
            return rnd.verdicts, {c: len(v) for c, v in values.items()}, rnd.stopped
        if on_round is not None:
            on_round(r)
        for c, goal in sorted(rnd.targets.items(), key=lambda kv: str(kv[0])):  # the draws: whatever the order
            new = list(measure(c, goal - len(values.get(c, ()))))
            values.setdefault(c, []).extend(new)
            rounds.setdefault(c, []).extend([r] * len(new))
            spent += len(new)
    raise AssertionError("unreachable")


@functools.lru_cache(maxsize=8)
def _t_quantiles(level: float, most: int) -> np.ndarray:
    """The two-sided t quantile at `level` for 0..most degrees of freedom (a table: a simulation
    looks it up for thousands of open questions)."""
    with np.errstate(invalid="ignore"):
        return special.stdtrit(np.arange(most + 1), 0.5 + level / 2)


def _future_squares(count: int, n: np.ndarray, schedule: Sequence[int]) -> np.ndarray:
    """sum(n_r^2) of the runs from `count` to each of `n` as the schedule's rounds would bring them
    (past the cap, rounds of the schedule's last step)."""
    ends, full = _round_ends(count, int(n.max()), tuple(schedule))
    k = np.clip(np.searchsorted(ends, n, side="right") - 1, 0, None)
    return full[k] + (np.maximum(n, count) - ends[k]) ** 2


@functools.lru_cache(maxsize=1024)
def _round_ends(count: int, most: int, schedule: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The counts at which the rounds from `count` on end, up to `most`, and sum(n_r^2) at each."""
    step = schedule[-1] - schedule[-2] if len(schedule) > 1 else schedule[-1]
    ends = [count]
    while ends[-1] < most:
        ends.append(next_count(ends[-1], schedule) or ends[-1] + step)
    ends = np.asarray(ends)
    return ends, np.concatenate([[0], np.cumsum(np.diff(ends) ** 2)])


def runs_to_decide(v: Judgement, values: dict, alpha: float = LOOK_ALPHA, most: int = 1000, rounds: dict | None = None,
                   job_sd: float = 0.0, schedule: Sequence[int] = SCHEDULE, logs: CellLogs | None = None) -> int | None:  # fmt: skip
    """About how many more runs per cell would decide an open question if the spread and the
    estimate stay as measured: the fewest at which the interval (t quantile, same level) would
    exclude 1 or fit inside the margin (None: not estimable, e.g. under 2 runs, or over `most`).
    With a between-round noise `job_sd` the runs to come arrive in the schedule's rounds, each
    adding its own round effect (past the cap, rounds of the schedule's last step)."""
    if v.decided:
        return 0
    logs = CellLogs(values, rounds) if logs is None else logs
    cells = [logs[c] for c in v.question.cells]
    if min(len(c.y) for c in cells) < 2:
        return None
    var = [c.var for c in cells]
    m = math.log1p(v.question.tolerance)
    if v.question.kind == "precision":
        room, level = m, 1 - PRECISION_ALPHA
    else:
        d = abs(math.log(v.estimate))
        room, level = max(d, m - d), 1 - alpha  # exclude 1 (a difference) or fit inside the margin
    counts = [len(c.y) for c in cells]
    have = min(counts)
    for lo, hi in ((have + 1, have + 41), (have + 41, most + 1)):  # most questions close within 40 more
        n = np.arange(lo, min(hi, most + 1))
        if not len(n):
            break
        extra = 0.0
        for cell, c in zip(cells, counts) if job_sd else ():
            extra = extra + (cell.weight * c**2 + _future_squares(c, n, schedule)) / np.maximum(n, c) ** 2
        dof = n - 1 if len(cells) == 1 else 2 * (n - 1)
        ok = _t_quantiles(level, 2 * most)[dof] * np.sqrt(sum(var) / n + job_sd**2 * extra) <= room
        if ok.any():
            return int(n[ok.argmax()]) - have
    return None


NOISE_RATIOS = (1.0, 1.7, 2.0, 3.0)  # one cell's noise over the other's that the calibration covers


def look_paths(schedule: Sequence[int] = SCHEDULE) -> dict[str, list[tuple[int, int]]]:
    """The orders in which a comparison's two repeat counts (A's, B's) can move through the
    schedule that bound the ones the rule takes: both together (8 looks); one step at a time,
    either cell first (15); one cell to the cap before the other moves (15: a cell shared with
    other open questions runs ahead of one whose other questions closed)."""
    first, cap = schedule[0], schedule[-1]
    staircase = comparison_looks(schedule)
    ahead = [(n, first) for n in schedule] + [(cap, n) for n in schedule[1:]]
    return {
        "together": [(n, n) for n in schedule],
        "A first": staircase, "B first": [(b, a) for a, b in staircase],
        "A ahead": ahead, "B ahead": [(b, a) for a, b in ahead],
    }  # fmt: skip


def look_miss_alpha(looks: Sequence[tuple[int, int]], noise_ratio: float, reps: int = 20_000, seed: int = 0,
                    level: float = LEVEL) -> float:  # fmt: skip
    """The per-look level at which a comparison's Welch intervals at `looks` ((A's count, B's) at
    each) all cover the true ratio with probability `level`, B's noise `noise_ratio` times A's:
    simulated normal log-throughputs (the statistic is pivotal in the common scale). A look's
    interval at level 1 - alpha misses when its p-value is below alpha, so the family misses
    when the smallest p-value over the looks does: alpha is that minimum's (1 - level) quantile."""
    rng = np.random.default_rng(seed)
    cap = max(max(look) for look in looks)
    moments = []  # per side: running sums of x and x^2, so a look's mean and variance cost O(reps)
    for scale in (1.0, noise_ratio):
        x = rng.standard_normal((reps, cap)) * scale
        moments.append((np.cumsum(x, axis=1), np.cumsum(x * x, axis=1)))
    worst_p = np.ones(reps)
    for na, nb in looks:
        (sa, qa), (sb, qb) = ((s[:, n - 1], q[:, n - 1]) for (s, q), n in zip(moments, (na, nb)))
        ma, mb = sa / na, sb / nb
        va = (qa - na * ma * ma) / (na - 1) / na  # the variance of each side's mean
        vb = (qb - nb * mb * mb) / (nb - 1) / nb
        dof = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
        if na != nb:  # Hsu's degrees of freedom, as intervals.welch_halfwidth
            dof = np.minimum(dof, min(na, nb) - 1)
        t = np.abs(ma - mb) / np.sqrt(va + vb)
        worst_p = np.minimum(worst_p, 2 * special.stdtr(dof, -t))
    return float(np.quantile(worst_p, 1 - level))


def calibrate_look_alpha(schedule: Sequence[int] = SCHEDULE, reps: int = 20_000, seed: int = 0,
                         level: float = LEVEL, noise_ratios: Sequence[float] = NOISE_RATIOS,
                         ) -> tuple[float, dict]:  # fmt: skip
    """The per-look level for every comparison: the smallest `look_miss_alpha` over the look
    paths (`look_paths`) and noise ratios (either cell the noisier: the paths come in both
    orientations). Returns it and the level of each (path, ratio)."""
    each = {(name, ratio): look_miss_alpha(looks, ratio, reps, seed, level)
            for name, looks in look_paths(schedule).items() for ratio in noise_ratios}  # fmt: skip
    return min(each.values()), each


def precision_coverage(alpha: float, sigma: float, target: float = TARGET, schedule: Sequence[int] = SCHEDULE,
                       reps: int = 20_000, seed: int = 0) -> float:  # fmt: skip
    """How often a precision question's interval, at per-look level 1 - alpha, covers the true
    throughput when the design stops at the first look whose half-width meets `target` (or at
    the cap): simulated normal log-throughputs of spread `sigma`."""
    x = np.random.default_rng(seed).standard_normal((reps, schedule[-1])) * sigma
    covered, done = np.zeros(reps, bool), np.zeros(reps, bool)
    for n in schedule:
        y = x[:, :n]
        half = special.stdtrit(n - 1, 1 - alpha / 2) * y.std(axis=1, ddof=1) / math.sqrt(n)
        stop = ~done & ((half <= math.log1p(target)) | (n == schedule[-1]))
        covered[stop] = np.abs(y.mean(axis=1)[stop]) <= half[stop]
        done |= stop
    return float(covered.mean())


def comparison_looks(schedule: Sequence[int] = SCHEDULE) -> list[tuple[int, int]]:
    """(count of A, count of B) at each look when the two cells advance one at a time."""
    looks = [(schedule[0], schedule[0])]
    for s in schedule[1:]:
        looks += [(s, looks[-1][1]), (s, s)]
    return looks
