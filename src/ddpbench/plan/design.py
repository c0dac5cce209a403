"""The rounds of a sequential design (`repeats: until_decided`): the questions a grid asks, the
design's settings from the config, and the typed `Decision` after each round.

The workflow runs every cell `first` times, then its decide_round checkpoint (plan.decide)
judges every question on the runs measured so far (the statistics: analysis.sequential) and
writes the decision to RESULTS/design/round~R.json: the repeat count each cell with an open
question moves to next (`targets`), why every other cell stopped, the verdicts with their
intervals (which carry the variation between rounds, `round_noise`; a run's round follows from
the earlier decisions' counts), and what was spent. The next round's runs are exactly the
missing repeats up to those counts, so a design killed mid-round resumes where it was, and
every run measured is reused. A verdict is final at the look that reached it (`decided_round`):
every later decision carries it as it was, and later runs of its cells, made for other questions,
do not judge it again (the stopping rule's guarantee is for the verdict at that look). A
decision without targets is the last: its still-open questions are `undecided`, each with the
runs estimated to close it. `Decision` is the only reader and writer of these files (the plan's
Study, its status, the report and the archive read them through it). A round file may come from
someone else (a shared or received results folder), so it is read within bounds (a regular file
of at most MAX_DECISION_BYTES, nested at most MAX_DECISION_DEPTH deep), and the rounds read are
only those of this design: round 0 on, each moving a cell on, up to its last (`done`) and never
more than its schedule allows (`Settings.most_rounds`); see `rounds_on_disk`.

Predicting first (`until_decided.predict`), the first round measures only the step model's parts
(stepmodel.anchors; plan.study.Study.first_round gives the other cells 0 runs), the checkpoint
predicts every cell from them (plan.predict.cell_throughputs), and a comparison the prediction
answers (predict_verdicts) is final: every later decision carries it as it was ("source":
"predicted") and its cells get no runs for it. The rest are measured as above.

The time budget counts the runs' own wall time (launcher start to exit, summary.json), so a
resumed design goes on with what it had left; the scheduler's and the report's time come on top.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from ddpbench.analysis import drift as drift_mod, sequential
from ddpbench.analysis.comparison import Verdict, verdict_of
from ddpbench.analysis.sequential import Question
from ddpbench.core import bounded, run_record
from ddpbench.core.layout import Layout
from ddpbench.core.safe_io import atomic_write_text
from ddpbench.core.study_config import UNTIL_DECIDED as DEFAULTS

UNITS = {"s": 1, "m": 60, "h": 3600}
# A decision holds a grid's counts and its questions' verdicts: kilobytes to a few MB, nested 4
# deep (verdicts, a verdict, its cells).
MAX_DECISION_BYTES = 64 * 2**20
MAX_DECISION_DEPTH = 16
# Rounds read where no design's settings say how many it can have (a report rebuilt from an
# archive whose config this checkout cannot plan).
MOST_ROUNDS = 1000


def parse_duration(text: Any) -> float:
    """Seconds of '90s', '10m', '1h30m' or a plain number of seconds; ValueError naming the text."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        parts = re.fullmatch(r"\s*((?:\d+(?:\.\d+)?\s*[smh]\s*)+)", str(text))
        if not parts:
            raise ValueError(f"{text!r} is not a duration (e.g. 90s, 10m, 1h30m)")
        seconds = sum(float(n) * UNITS[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)\s*([smh])", str(text)))
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{text!r} is not a duration of zero or more seconds")
    return seconds


@dataclasses.dataclass(frozen=True)
class Settings:
    """The design's config (`until_decided:`); budgets of 0 mean none."""

    first: int = DEFAULTS["first"]
    cap: int = DEFAULTS["max_per_cell"]
    budget_s: float = 0.0
    budget_runs: int = DEFAULTS["max_runs"]
    precision: float = DEFAULTS["precision"]  # 0: no precision questions
    margin: float = DEFAULTS["margin"]
    speedup: bool = DEFAULTS["speedup"]
    compare: tuple = tuple(DEFAULTS["compare"])
    # predict, then measure: the first round measures only the step model's parts (stepmodel.anchors)
    # and the comparisons its predictions answer are not measured (module doc)
    predict: bool = DEFAULTS["predict"]

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> Settings:
        """The settings of an `until_decided:` section (a key it lacks: study_config.UNTIL_DECIDED's)."""
        got = {**DEFAULTS, **section}
        s = cls(int(got["first"]), int(got["max_per_cell"]), parse_duration(got["budget"]), int(got["max_runs"]),
                float(got["precision"]), float(got["margin"]), bool(got["speedup"]), tuple(got["compare"]),
                bool(got["predict"]))  # fmt: skip
        if not 3 <= s.first <= s.cap:
            raise ValueError(f"until_decided.first {s.first} must be at least 3 and at most max_per_cell {s.cap}")
        return s

    @property
    def schedule(self) -> tuple:
        """Repeat counts a cell moves through: `first`, the standard looks between, `cap`."""
        inner = [n for n in sequential.SCHEDULE if self.first < n < self.cap]
        return tuple(dict.fromkeys([self.first, *inner, self.cap]))

    def most_rounds(self, cells: int) -> int:
        """The most decisions a design of `cells` cells can make: every round but the last moves at
        least one cell one step along the schedule (usually all of them together); predicting first,
        a cell left out of the first round has one step more (0 to `first`)."""
        return 1 + cells * (len(self.schedule) - (0 if self.predict else 1))


def grid_questions(cells: Mapping[str, Mapping[str, Any]], baseline: Mapping[str, Any],
                   settings: Settings) -> list[Question]:  # fmt: skip
    """The questions of a grid (`cells`: cell path -> its axis values): each cell's throughput to
    ±precision; each cell against its baseline cell (the speedup's reference: the cell with the
    baseline's values and every other axis equal); each pair of cells that differ only in one
    of the `compare` axes, later value over earlier, in grid order."""
    questions = [Question((c,), settings.precision) for c in cells] if settings.precision > 0 else []
    pairs: list[tuple] = []
    if settings.speedup and baseline:
        index = {_key(v): c for c, v in cells.items()}
        for c, v in cells.items():
            base = index.get(_key({**v, **baseline}))
            if base is not None and base != c:
                pairs.append((c, base))
    for axis in settings.compare:
        groups: dict = {}
        for c, v in cells.items():
            if axis in v:
                groups.setdefault(_key({k: x for k, x in v.items() if k != axis}), []).append(c)
        for group in groups.values():
            pairs += [(b, a) for a, b in itertools.combinations(group, 2)]
    seen: set = set()
    for a, b in pairs:
        if frozenset((a, b)) not in seen:
            seen.add(frozenset((a, b)))
            questions.append(Question((a, b), settings.margin))
    return questions


def _key(values: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in values.items()))


def read_run(summary_path: str | Path) -> tuple[float | None, float]:
    """(throughput, seconds the run took) of one run: throughput None unless it ran ok."""
    try:
        s = run_record.read_summary(summary_path)
    except (OSError, ValueError):
        return None, 0.0
    t = s.get("timeline") or {}
    seconds = (t.get("launcher_exit") or 0) - (t.get("launcher_start") or 0)
    if not seconds > 0:
        seconds = float(s.get("wall_time_s") or 0.0)
    value = s.get("samples_per_s") if s.get("status") == "ok" else None
    return (float(value) if value and math.isfinite(value) and value > 0 else None), seconds


MEASURED, PREDICTED = "measured", "predicted"


@dataclasses.dataclass(frozen=True)
class VerdictRecord:
    """One question's verdict in a decision: its cells, kind ("precision" or "comparison") and
    tolerance; the verdict, the estimate and its repeated interval (None where not finite); the
    runs per cell behind it; for an open question about how many more runs per cell would close
    it; `why` a question could not be asked (its cell's runs failed)."""

    cells: tuple[str, ...]
    kind: str
    tolerance: float
    verdict: Verdict
    estimate: float | None
    low: float | None
    high: float | None
    runs: tuple[int, ...]
    runs_to_decide: int | None = None
    why: str | None = None
    source: str = MEASURED  # PREDICTED: the step model's prediction answered it (predict_verdicts)
    decided_round: int | None = None  # the round whose decision reached the verdict: final from there on

    @property
    def open(self) -> bool:
        return not Verdict(self.verdict).decided

    @property
    def predicted(self) -> bool:
        return self.source == PREDICTED

    def to_json(self) -> dict:
        record = {**dataclasses.asdict(self), "cells": list(self.cells), "runs": list(self.runs)}
        for key, unset in (("why", None), ("source", MEASURED), ("decided_round", None)):
            if record[key] == unset:
                del record[key]
        return record

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> VerdictRecord:
        record = cls(**{**obj, "cells": tuple(obj["cells"]), "runs": tuple(obj["runs"]), "verdict": Verdict(obj["verdict"])})
        at = record.decided_round  # read by the report as a number (a file may come from someone else)
        if at is not None and (isinstance(at, bool) or not isinstance(at, int)) or record.source not in (MEASURED, PREDICTED):
            raise TypeError(f"decided_round {at!r} or source {record.source!r} is not one a decision writes")
        return record


@dataclasses.dataclass(frozen=True)
class Decision:
    """The decision after round `round` (RESULTS/design/round~R.json): each cell's runs so far
    (`counts`), the count each cell with an open question moves to next (`targets`; none: the
    design is `done`), why every other cell stopped, the verdicts, what was spent (runs, seconds
    of run time), the budget and the settings it was made under."""

    round: int
    done: bool
    counts: dict[str, int]
    targets: dict[str, int]
    stopped: dict[str, str]
    verdicts: tuple[VerdictRecord, ...]
    spent: dict[str, float]
    budget: dict[str, float]
    settings: dict[str, Any]
    # the between-round noise every interval carries (sequential.round_noise): its sd (a log
    # throughput's) and the degrees of freedom it was estimated with (0: no cell had two rounds of
    # 2+ runs, so the intervals describe the rounds' own conditions); within_sd/within_dof: what is
    # left of it once each round's effect on every cell is taken out, as comparisons are judged
    # (rounds.RoundFit). Empty in a file written before it was recorded.
    round_noise: dict[str, float] = dataclasses.field(default_factory=dict)
    # the trend across the rounds (analysis.drift.Drift's fields; empty: untested, or an older file)
    drift: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def trend(self) -> drift_mod.Drift | None:
        return drift_mod.Drift(**self.drift) if self.drift else None

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "verdicts": [v.to_json() for v in self.verdicts]}

    @classmethod
    def from_json(cls, obj: Any) -> Decision:
        """ValueError naming what is wrong: a decision file may come from someone else."""
        try:
            fields = {f.name: obj[f.name] for f in dataclasses.fields(cls)
                      if f.name in obj or f.default_factory is dataclasses.MISSING}  # fmt: skip
            decision = cls(**{**fields, "verdicts": tuple(VerdictRecord.from_json(v) for v in obj["verdicts"])})
            decision.spent["runs"], decision.spent["seconds"]  # noqa: B018 (what the lines read)
            float(decision.round_noise.get("sd", 0.0)), int(decision.round_noise.get("dof", 0)), decision.trend  # notes
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"not a design decision ({type(err).__name__}: {err})") from None
        return decision

    @classmethod
    def read(cls, path: str | Path) -> Decision:
        """The decision in `path`; OSError or ValueError naming the problem (bounded: module doc)."""
        return cls.from_json(bounded.read_json(path, MAX_DECISION_BYTES, MAX_DECISION_DEPTH))

    def write(self, path: str | Path) -> None:
        atomic_write_text(Path(path), json.dumps(self.to_json(), indent=1) + "\n")

    @property
    def settled(self) -> int:
        return sum(not v.open for v in self.verdicts)

    @property
    def runs_next(self) -> int:
        """The runs the next round adds."""
        return sum(n - self.counts[c] for c, n in self.targets.items())


def decide(round_: int, questions: Sequence[Question], runs: Mapping[str, Sequence[str]],
           settings: Settings, earlier: Sequence[Decision] = (),
           predicted: Mapping[str, tuple[float, float, float]] | None = None) -> Decision:  # fmt: skip
    """The decision after round `round_`, from the summary.json paths of every cell's runs so far
    (`runs`: cell -> paths, repeat 0 first) and the decisions of the rounds before (`earlier`:
    their counts say which round each run was of, for the between-round noise). A cell whose
    runs all failed stops ("failed") and its questions end undecided; a cell is never given more
    runs than its schedule's cap. Predicting first (settings.predict), `predicted` holds the step
    model's throughput and interval of every cell it could predict after the first round: the
    comparisons it answers are final (predict_verdicts), the rest are measured; a precision question
    is asked only of a cell that is measured."""
    values, seconds, counts, rounds = {}, {}, {}, {}
    for cell, paths in runs.items():
        measured = [read_run(p) for p in paths]
        counts[cell] = len(paths)
        values[cell] = [v for v, _ in measured if v is not None]
        rounds[cell] = [r for r, (v, _) in zip(rounds_of_runs(cell, len(paths), earlier), measured) if v is not None]
        seconds[cell] = [s for _, s in measured]
    spent_s = sum(sum(s) for s in seconds.values())
    spent_runs = sum(counts.values())
    failed = {c for c in runs if counts[c] and not values[c]}
    # a verdict is final at the look that reached it: later runs of its cells serve other questions
    answered = [v for v in earlier[-1].verdicts if not v.open] if earlier else []
    if settings.predict and predicted and not earlier:
        answered = predict_verdicts(questions, predicted, counts)
    done_keys = {frozenset(v.cells) for v in answered}
    questions = [q for q in questions if frozenset(q.cells) not in done_keys]
    if settings.predict:
        questions = measured_questions(questions, counts)
    asked = [q for q in questions if not failed.intersection(q.cells)]
    measured_s = [x for s in seconds.values() for x in s]
    rnd = sequential.plan_round(
        asked, values,
        runs_left=settings.budget_runs - spent_runs if settings.budget_runs else None,
        schedule=settings.schedule,
        seconds_left=settings.budget_s - spent_s if settings.budget_s else None,
        run_seconds={c: sum(s) / len(s) for c, s in seconds.items() if s}
        | {c: sum(measured_s) / len(measured_s) for c, s in seconds.items() if not s and measured_s},
        made=counts, rounds=rounds,
    )  # fmt: skip
    targets = rnd.targets
    stopped = {c: why for c, why in rnd.stopped.items() if c not in targets}
    stopped.update({c: "failed" for c in failed})
    done = not targets
    noise = rnd.noise_record()
    verdicts = [_verdict_record(v, rnd.evidence, done, settings, round_) for v in rnd.verdicts]
    verdicts += [VerdictRecord(q.cells, q.kind, q.tolerance, Verdict.UNDECIDED, None, None, None,
                               tuple(counts.get(c, 0) for c in q.cells), why="a cell's runs failed")
                 for q in questions if failed.intersection(q.cells)]  # fmt: skip
    for c, why in stopped.items():
        if why == "decided" and all(v.kind == "precision" for v in verdicts if c in v.cells):
            stopped[c] = "target met"
    verdicts += answered
    for v in answered:  # a cell whose questions were all decided before
        for c in v.cells:
            if c not in targets and c not in stopped:
                stopped[c] = PREDICTED if v.predicted else "target met" if v.kind == "precision" else "decided"
    return Decision(
        round=round_, done=done, counts=counts, targets=targets, stopped=stopped, verdicts=tuple(verdicts),
        spent={"runs": spent_runs, "seconds": round(spent_s, 3)},
        budget={"seconds": settings.budget_s, "runs": settings.budget_runs},
        settings={**dataclasses.asdict(settings), "compare": list(settings.compare)}, round_noise=noise,
        drift=found.to_json() if (found := drift_mod.trend(values, rounds)) is not None else {},
    )  # fmt: skip


def rounds_of_runs(cell: str, n: int, earlier: Sequence[Decision]) -> list[int]:
    """The round each of a cell's first `n` runs (repeat 0 on) was measured in: round r made the
    repeats from the cell's count after round r - 1 to its count after round r (`earlier`'s
    counts; a count that is no whole number, in a file from elsewhere, is passed over)."""
    ends = [d.counts.get(cell) for d in earlier]
    ends = [e for e in ends if isinstance(e, int) and not isinstance(e, bool)]
    return [sum(e <= k for e in ends) for k in range(n)]


def predict_verdicts(questions: Sequence[Question], predicted: Mapping[str, tuple[float, float, float]],
                     counts: Mapping[str, int]) -> list[VerdictRecord]:  # fmt: skip
    """The comparisons the step model's predictions answer (`predicted`: cell -> its throughput and
    interval): each with a cell not measured whose ratio interval, the two cells' intervals divided
    end to end (as wide as their errors can make it, whatever their correlation), lies above 1,
    below 1 or inside the margin, the rule measured verdicts follow (comparison.verdict_of)."""
    out = []
    for q in questions:
        if q.kind != "comparison" or all(counts.get(c, 0) for c in q.cells):
            continue
        a, b = (predicted.get(c) for c in q.cells)
        if a is None or b is None or not all(math.isfinite(x) and x > 0 for x in (*a, *b)):
            continue
        est, low, high = a[0] / b[0], a[1] / b[2], a[2] / b[1]
        verdict = verdict_of(low, high, q.tolerance)
        if verdict.decided and verdict != Verdict.NO_INTERVAL:
            out.append(VerdictRecord(q.cells, q.kind, q.tolerance, verdict, est, low, high,
                                     tuple(counts.get(c, 0) for c in q.cells), source=PREDICTED,
                                     decided_round=0))  # fmt: skip
    return out


def measured_questions(questions: Sequence[Question], counts: Mapping[str, int]) -> list[Question]:
    """Predicting first, of the questions not yet answered, those to measure: every comparison, and the
    precision of each cell measured (one with runs, or in such a comparison)."""
    measured = {c for c, n in counts.items() if n} | {c for q in questions if q.kind == "comparison" for c in q.cells}
    return [q for q in questions if q.kind == "comparison" or q.cells[0] in measured]


OUT_OF_REACH_WHY = "out of reach: more than the budget left could give, so no more were spent on it"


def _verdict_record(v: sequential.Judgement, evidence: sequential.Evidence, done: bool, settings: Settings,
                    round_: int) -> VerdictRecord:  # fmt: skip
    verdict = Verdict.UNDECIDED if done and not v.decided else v.verdict
    finite = [x if math.isfinite(x) else None for x in (v.estimate, v.low, v.high)]
    need = None if v.decided else evidence.runs_to_decide(v, schedule=settings.schedule)
    return VerdictRecord(
        cells=tuple(v.question.cells), kind=v.question.kind, tolerance=v.question.tolerance, verdict=verdict,
        estimate=finite[0], low=finite[1], high=finite[2], runs=tuple(v.runs),
        runs_to_decide=need,
        why=OUT_OF_REACH_WHY if v.verdict == sequential.OUT_OF_REACH else None,
        decided_round=round_ if v.decided else None,
    )  # fmt: skip


def first_counts(cells: Sequence[str] | Mapping[str, int], settings: Settings) -> dict:
    """The first round's counts: `first` for every cell, or as given (cell -> count: predicting first,
    the cells not measured first have 0; plan.study.Study.first_round)."""
    return dict(cells) if isinstance(cells, Mapping) else {c: settings.first for c in cells}


def counts_after(counts: Mapping[str, int], decision: Decision, settings: Settings) -> dict:
    """Repeat counts of the round after `decision`: each cell's target, kept between the runs it
    has and the design's cap. A decision is read back from disk, and a results folder may come
    from someone else: a planted round file asking for a million runs plans at most the cap
    (which also holds where the cap was lowered since the file was written)."""
    targets = decision.targets
    out = dict(counts)
    for cell, n in (targets.items() if isinstance(targets, dict) else ()):
        if cell in counts and isinstance(n, int) and not isinstance(n, bool):
            out[cell] = min(max(n, counts[cell]), settings.cap)
    return out


class RoundError(ValueError):
    """A round file that cannot be read, or is no round of this design; the message names it."""

    def __init__(self, path: str | Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")


def rounds_on_disk(layout: Layout, settings: Settings | None = None, cells: Sequence[str] = (),
                   upto: int | None = None) -> Iterator[Decision]:  # fmt: skip
    """The decisions written so far, round 0 on, up to the first missing one, the design's last
    (`done`: a round file after it is not read) or round `upto` (not included). A round past the
    most the design's schedule allows, or one that cannot be read, raises RoundError; with the
    design's `settings` and `cells`, so does one that is not the next round of this design
    (check_round)."""
    most = settings.most_rounds(len(cells)) if settings else MOST_ROUNDS
    counts = first_counts(cells, settings) if settings else {}
    for r in itertools.count() if upto is None else range(upto):
        path = layout.round_file(r)
        if not os.path.lexists(path):
            return
        if r >= most:
            raise RoundError(path, f"past the {most} rounds " + (
                f"this design can have (1 + {len(cells)} cell(s) x {len(settings.schedule) - 1} steps of its "
                "schedule): not read" if settings else "read without the design's settings: not read"))  # fmt: skip
        try:
            decision = Decision.read(path)
        except (OSError, ValueError) as err:
            raise RoundError(path, str(err).removeprefix(f"{path}: ")) from None
        if settings:
            counts = check_round(path, decision, r, counts, settings)
        yield decision
        if decision.done:
            return


def check_round(path: str, decision: Decision, round_: int, counts: Mapping[str, int], settings: Settings) -> dict:
    """The counts after `decision`, the design's round `round_` whose runs had `counts`: RoundError
    where it says another round, or (not the last) asks for no run beyond what its cells have: a
    round of a design always moves a cell on along its schedule."""
    if decision.round != round_:
        raise RoundError(path, f"says it is round {decision.round!r}, not {round_}")
    after = counts_after(counts, decision, settings)
    if not decision.done and after == counts:
        raise RoundError(path, "is not the design's last, yet asks for no run beyond those its cells have")
    return after


def decisions_on_disk(layout: Layout, settings: Settings | None = None, cells: Sequence[str] = (),
                      upto: int | None = None, warn: Callable[[str], None] | None = None) -> list[Decision]:  # fmt: skip
    """The decisions rounds_on_disk reads, up to one it refuses, which `warn` (default: stderr) names."""
    found: list[Decision] = []
    try:
        found.extend(rounds_on_disk(layout, settings, cells, upto))
    except RoundError as err:
        (warn or _stderr)(f"ddpbench: warning: {err}; the {len(found)} round(s) before it are used")
    return found


_SAID: set[str] = set()


def _stderr(line: str) -> None:
    """A warning on stderr, once a process (the workflow's plan reads the rounds several times)."""
    if line not in _SAID:
        _SAID.add(line)
        print(line, file=sys.stderr)


def counts_of_rounds(cells: Sequence[str], decisions: Sequence[Decision], settings: Settings) -> dict:
    """Repeat counts of the round after `decisions` (the first round's, then each moving them on)."""
    counts = first_counts(cells, settings)
    for decision in decisions:
        counts = counts_after(counts, decision, settings)
    return counts


def counts_on_disk(layout: Layout, cells: Sequence[str], settings: Settings) -> dict:
    """The repeat counts the decisions on disk have asked for so far (the first round's without any)."""
    return counts_of_rounds(cells, decisions_on_disk(layout, settings, cells), settings)


def round_line(decision: Decision) -> str:
    """The terminal's line after a decision."""
    spent, budget = decision.spent, decision.budget
    used = f"{spent['runs']} runs, {_minutes(spent['seconds'])}"
    if budget.get("seconds"):
        used += f" of {_minutes(budget['seconds'])}"
    head = f"ddpbench: round {decision.round + 1}: {decision.settled}/{len(decision.verdicts)} questions decided"
    if decision.trend is not None and decision.trend.warns:
        head += f"; {decision.trend.short()}"
    if decision.done:
        return f"{head}; the design is done ({used})"
    return f"{head}; next round {decision.runs_next} run(s) on {len(decision.targets)} cell(s) ({used} so far)"


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def first_round_size(settings: Settings, cells: int | Mapping[str, int]) -> tuple[int, int, int]:
    """(runs, cells measured, cells) of the first round: `cells` a number of cells measured `first`
    times each, or the first round's counts (plan.study.Study.first_round)."""
    counts = first_counts(cells, settings) if isinstance(cells, Mapping) else dict.fromkeys(range(cells), settings.first)
    return sum(counts.values()), sum(n > 0 for n in counts.values()), len(counts)


def _first_text(settings: Settings, cells: int | Mapping[str, int]) -> str:
    """How the first round's runs are made up: '3 per cell x 12 cells' (of 40: the step model's parts)."""
    _, measured, total = first_round_size(settings, cells)
    parts = f" of {total}: the step model's parts, the rest predicted first" if measured < total else ""
    return f"{settings.first} per cell x {measured} cells{parts}"


def plan_line(questions: Sequence[Question], settings: Settings, cells: int | Mapping[str, int],
              per_run_s: float | None = None) -> str:  # fmt: skip
    """The plan's line on the design (printed before any run, dry runs included); with the plan's
    estimate of a run (`per_run_s`, plan.estimate.RunEstimate) the first round's time, which the
    plan's time line and the progress line say too. `cells`: as first_round_size takes them."""
    precision = sum(q.kind == "precision" for q in questions)
    asked = [f"{precision} cell(s) to ±{settings.precision:.0%}"] if precision else []
    if len(questions) > precision:
        asked.append(f"{len(questions) - precision} comparison(s) within a factor {1 + settings.margin:.2f}")
    first, measured, total = first_round_size(settings, cells)
    most = total * settings.cap
    if settings.budget_runs:
        most = min(most, settings.budget_runs)
    took = f", about {_minutes(first * per_run_s)}" if per_run_s else ""
    budget = f" and {_minutes(settings.budget_s)} of runs (its budget, the first round included)" if settings.budget_s else ""
    per = f"{settings.first} per cell" if measured == total else _first_text(settings, cells)
    predicting = ("; predicting first: a comparison the step model's predictions answer is not measured, and "
                  "only measured cells are asked their precision") if settings.predict else ""  # fmt: skip
    return (f"until decided: {len(questions)} question(s) ({', '.join(asked) or 'none'}); the first round "
            f"runs {first} ({per}{took}), the design at most {most} "
            f"(looks at {'/'.join(map(str, settings.schedule))} runs per cell){budget}{predicting}")  # fmt: skip


# The quiet main job spent 2.5x its first round's runs to decide all its questions (45 runs after
# 18, docs/report.md): what a refused budget is told to leave for the rounds after the first.
ROUNDS_AFTER_FIRST = 2.5


def first_round_problem(settings: Settings, cells: int | Mapping[str, int], runs_left: int, spent_s: float,
                        per_run_s: float, learned: bool = True) -> str | None:  # fmt: skip
    """Why the time budget cannot pay the design's first round, None where it can (or there is
    none): the first round's runs still to measure (`runs_left`) at the plan's estimate of a run
    (`per_run_s`, plan.estimate.RunEstimate) on top of the run time its measured runs spent
    (`spent_s`). The plan refuses such a design before anything runs rather than cutting the
    round: every question needs its cells' first runs, and a cut made from a timing estimate
    (this host's history, the load now) would plan another first round on every rerun or resume;
    the refusal names the budget that pays the round, and says where the estimate is not `learned` (the plan's default)."""
    need = spent_s + runs_left * per_run_s
    if not settings.budget_s or need <= settings.budget_s:
        return None
    runs = first_round_size(settings, cells)[0]
    done = f" ({_minutes(spent_s)} already spent on its measured runs)" if spent_s > 0 else ""
    whose = ("the plan's default estimate: no run of this host to learn from yet, and a fast host's runs take less; "
             "once this host has measured runs, the estimate is learned from them") if not learned else "the plan's estimate"
    return (f"{_minutes(settings.budget_s)} of runs cannot pay the design's first round: {runs} runs "
            f"({_first_text(settings, cells)}) at about {per_run_s:.0f} s a run ({whose}) take about "
            f"{_minutes(need)}{done}. Set until_decided.budget to at least {budget_text(need)} for the first round "
            f"alone, about {budget_text(need * ROUNDS_AFTER_FIRST)} to leave the rounds after it room to decide (the "
            "quiet main job spent 2.5x its first round), or plan fewer cells")  # fmt: skip


def first_round_runs_problem(settings: Settings, cells: int | Mapping[str, int]) -> str | None:
    """Why the run budget (`max_runs`) cannot pay the first round, None where it can (or there is none)."""
    runs = first_round_size(settings, cells)[0]
    if not settings.budget_runs or settings.budget_runs >= runs:
        return None
    return (f"{settings.budget_runs} runs cannot pay the design's first round: {runs} runs "
            f"({_first_text(settings, cells)}). Set until_decided.max_runs to at least {runs}, or plan fewer cells")


def budget_text(seconds: float) -> str:
    """A budget a config can take (parse_duration) at or above `seconds`: 10 s steps below two
    minutes, whole minutes above."""
    if seconds < 120:
        return f"{max(10, math.ceil(seconds / 10 - 1e-9) * 10)}s"  # 1e-9: 72 s x 2.5 is 3m, not 4m
    return f"{math.ceil(seconds / 60 - 1e-9)}m"


def status_line(decisions: Sequence[Decision]) -> str:
    """Where the rounds stand (the decisions on disk), for the plan's status."""
    if not decisions:
        return "until decided: round 1 (every cell's first runs) not yet decided"
    return round_line(decisions[-1]).removeprefix("ddpbench: ").replace("round", "until decided: round", 1)
