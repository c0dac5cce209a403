"""What a sequential design (`repeats: until_decided`) decided: the report's section and its
findings, from the design's last decision (RESULTS/design/round~R.json, ddpbench.plan.design.Decision).

Per question the verdict and its interval (the design's repeated confidence interval: valid
however the rounds ended), the runs behind it and, for a question left open, about how many more
runs per cell would close it; per cell its runs and why it stopped; and the budget spent. Open
questions come first, in the table and in the findings.

`answers` gives the rest of the report the design's voice: the tables that compare cells
(comparisons.csv, speedup.csv, cells.csv, and the pairs findings and studies compare) take the
design's answers as an input (analysis.comparison.DesignAnswers), so a pair it asked about reads
its verdict and interval everywhere.
"""

from __future__ import annotations

import pathlib

import pandas as pd

from ddpbench.analysis import design_rates, sequential
from ddpbench.analysis.comparison import DesignAnswers, Verdict
from ddpbench.plan.design import OUT_OF_REACH_WHY, Decision, VerdictRecord
from ddpbench.report.findings.common import AXIS_TEXT, Finding
from ddpbench.report.tables import Table
from ddpbench.report.text import inside_margin, verdict_word

ANCHOR = "decisions"
STOP_TEXT = {
    "decided": "its questions decided",
    "target met": "precision target met",
    "cap": "reached the most runs per cell",
    "budget": "the budget ran out",
    Verdict.OUT_OF_REACH: "its open questions out of reach of the budget left",
    "failed": "its runs failed",
    "predicted": "its questions answered by the step model's predictions",
}


def read(path: str | pathlib.Path | None) -> Decision | None:
    """The decision file, or None without one (a fixed design); SystemExit naming a bad file."""
    if not path:
        return None
    try:
        return Decision.read(path)
    except (OSError, ValueError) as err:
        raise SystemExit(f"error: {path}: not a design decision ({err})") from None


def labels(cells: list[str]) -> dict[str, str]:
    """Cell path -> its varying axes as text, the strategy first and bare
    (world_size~2/strategy~ddp/seed~1 -> 'ddp, world size 2, seed 1'). An axis at the value
    timing/params give is no folder of the path: it reads 'default' there."""
    parts = {c: dict(p.split("~", 1) for p in c.split("/") if "~" in p) for c in cells}
    keys = [k for k in dict.fromkeys(k for p in parts.values() for k in p)
            if len({p.get(k) for p in parts.values()}) > 1]  # fmt: skip
    keys.sort(key=lambda k: k != "strategy")

    def text(p: dict) -> str:
        return ", ".join(p.get(k, "default") if k == "strategy" else f"{AXIS_TEXT.get(k, k)} {p.get(k, 'default')}"
                         for k in keys)  # fmt: skip

    return {c: text(p) or c for c, p in parts.items()}


def within_text(v: VerdictRecord) -> str:
    """A question's tolerance in words: a cell's precision is ± its relative half-width; a
    comparison's margin is a factor either way (1.15: the ratio within [0.870, 1.15])."""
    if v.kind == "precision":
        return f"±{v.tolerance:.0%}"
    return f"a factor {1 + v.tolerance:.2f}"


def verdict_text(v: VerdictRecord) -> str:
    """The verdict in words: a difference whose interval also lies inside the margin is one
    "by less than the margin" (faster or slower is checked before equivalent)."""
    text = verdict_word(v.verdict)
    text = text.upper() if v.verdict == Verdict.UNDECIDED else text  # the design table's open questions stand out
    if Verdict(v.verdict).difference and inside_margin(v.low, v.high, v.tolerance):
        text += ", by less than the margin"
    return text + (" (predicted)" if v.predicted else "")


def _interval(v: VerdictRecord) -> tuple[str, str]:
    if v.estimate is None:
        return "–", "–"
    unit = " samples/s" if v.kind == "precision" else "×"
    fmt = "{:,.0f}" if v.kind == "precision" else "{:.3f}"
    low = "–" if v.low is None else fmt.format(v.low)
    high = "–" if v.high is None else fmt.format(v.high)
    return fmt.format(v.estimate) + unit, f"[{low}, {high}]"


def _to_decide(v: VerdictRecord) -> str:
    """An open question's 'runs to decide' cell: about how many more a cell, and whether the
    design judged that out of its reach."""
    if v.runs_to_decide is None:
        return v.why or "not estimable"
    return f"about {v.runs_to_decide}" + (" (out of reach)" if v.why == OUT_OF_REACH_WHY else "")


def section(decision: Decision | None) -> dict | None:
    """The templates' decision section, or None without a design."""
    if decision is None:
        return None
    name = labels(list(decision.counts))
    verdicts = sorted(decision.verdicts, key=lambda v: (not v.open, v.kind == "precision"))
    rows, classes = [], []
    for v in verdicts:
        estimate, interval = _interval(v)
        against = name[v.cells[1]] if v.kind == "comparison" else "its precision"
        rows.append([name[v.cells[0]], against, within_text(v), verdict_text(v),
                     estimate, interval,
                     " / ".join(map(str, v.runs)) + ("" if v.decided_round is None else f" (round {v.decided_round + 1})"),
                     "–" if not v.open else _to_decide(v)])  # fmt: skip
        classes.append("unstable" if v.open else "")
    cells = [[name[c], str(n), STOP_TEXT.get(decision.stopped.get(c, ""), decision.stopped.get(c, "–"))]
             for c, n in decision.counts.items()]  # fmt: skip
    settled = decision.settled
    spent, budget = decision.spent, decision.budget
    used = f"{spent['runs']} runs, {spent['seconds'] / 60:.1f} min of run time"
    if budget.get("seconds"):
        used += f" of a {budget['seconds'] / 60:g} min budget"
    if budget.get("runs"):
        used += f" (at most {budget['runs']} runs)"
    alpha = sequential.LOOK_ALPHA
    note = (f"Intervals are the design's repeated confidence intervals: a comparison's at level {1 - alpha:.2%} at "
            f"every look ({sequential.LEVEL:.0%} over all its looks together), a cell's at "
            f"{1 - sequential.PRECISION_ALPHA:.1%}, so each covers its own truth with probability ≥ 95 % however "
            f"the rounds ended; that holds per question, not for all at once, and a cell's covers the mean over the rounds "
            f"it ran in. {round_noise_text(decision)} {drift_text(decision)} "
            f"{design_rates.note()} Faster/slower: the interval excludes 1 (by less than the margin when "
            "it also lies inside it); equivalent: it lies inside the margin, a factor either way (1.15: the ratio "
            "within [0.870, 1.15]); undecided: neither when the design ended. Runs: per cell, at the look that decided the "
            "question (its round): a verdict is final there, and later runs of its cells serve other questions; "
            "'runs to decide': about how many more per cell, if spread and estimate stay as measured." + predicted_text(decision))  # fmt: skip
    return dict(
        summary=(f"{len(verdicts)} questions after {decision.round + 1} round(s): {settled} decided, "
                 f"{len(verdicts) - settled} undecided; {used}."),  # fmt: skip
        method=methodology_text(decision),  # the methodology's sentence on these intervals
        questions=Table(["cell", "against", "within", "verdict", "estimate", "interval", "runs", "runs to decide"], rows,
                        note, classes),  # fmt: skip
        cells=Table(["cell", "runs", "stopped because"], cells),
    )


def predicted_text(decision: Decision) -> str:
    """The note's words on verdicts the step model's predictions gave (until_decided.predict), if any."""
    n = sum(v.predicted for v in decision.verdicts)
    if not n:
        return ""
    return (f" Predicted ({n}): answered after the first round by the step model fitted on the cells measured "
            "then (its parts), from the two cells' predicted intervals divided end to end, each widened by the "
            "model's held-out error and at least 15 %: these answers took no runs; such an interval is the model's, not a "
            "confidence interval, and holds as far as the model's held-out error does (the Predictions section).")


WITHIN_ROUNDS = " (a comparison's judged within rounds: the effect each round had on every cell taken out)"


def methodology_text(decision: Decision) -> str:
    """The methodology's sentence on the design's intervals: which rows carry them, at which per-look
    levels, and what they cover."""
    return (f"The design ran (run until decided): the throughput questions it asked (each cell's precision, its "
            f"comparisons and speedups against the baseline) carry its repeated confidence intervals instead, "
            f"interval_from = design in the CSVs: t-intervals on the logs at the per-look level "
            f"{1 - sequential.PRECISION_ALPHA:.1%} for a cell and {1 - sequential.LOOK_ALPHA:.2%} for a comparison, "
            f"with the variation between rounds{WITHIN_ROUNDS if 'within_sd' in decision.round_noise else ''}, so that "
            f"each covers its own truth with probability ≥ "
            f"{sequential.LEVEL:.0%} however the design stopped (the level the CSVs state for them); a cell's covers "
            "the mean over the rounds it ran in. The other rows keep the intervals above, descriptive.")  # fmt: skip


def drift_text(decision: Decision) -> str:
    """The drift check's sentence (analysis.drift): a trend across the rounds, or none, or why untested."""
    trend = decision.trend
    if trend is None:
        return ("Fewer than four rounds could be compared, so no trend across rounds was tested." if decision.round >= 1
                else "")  # fmt: skip
    return trend.text()


def round_noise_text(decision: Decision) -> str:
    """Whether the intervals include the variation between the design's rounds (its blocked
    analysis: the between-round noise every cell mean carries, sequential.round_noise)."""
    noise = decision.round_noise
    if not noise:
        return ("These intervals were decided before the variation between rounds was estimated: they carry the "
                "spread of the runs only.")  # fmt: skip
    if not noise.get("dof"):
        return ("No cell ran in two rounds of 2+ runs, so the variation between rounds could not be estimated: "
                "these intervals describe the conditions of the one round measured, not the machine's long run.")  # fmt: skip
    sd, dof = float(noise["sd"]), int(noise["dof"])
    moved = (f"a cell's throughput moved {100 * sd:.1f} % (log-sd) from round to round beyond its runs' own spread, "
             f"estimated from the rounds' means ({dof} degrees of freedom); a cell mean carries that variation, less the "
             "more rounds it ran in" if sd > 0 else
             f"the rounds' means varied no more than their runs explain ({dof} degrees of freedom), so the estimate is 0 "
             "and the intervals are the runs' own")  # fmt: skip
    return (f"The intervals include the variation between rounds: {moved}; a question is decided only once its "
            f"cells ran in two rounds (or the design ended).{compared_within_rounds_text(noise)}")  # fmt: skip


def compared_within_rounds_text(noise: dict) -> str:
    """How comparisons were judged: within rounds (what each round did to every cell taken out) where
    the decision records it."""
    if "within_sd" not in noise:
        return ""
    sd, dof = float(noise["within_sd"]), int(noise["within_dof"])
    left = (f"{100 * sd:.1f} % between one cell's rounds" if sd > 0 else
            "no variation between one cell's rounds beyond its runs' spread")  # fmt: skip
    return (f" Comparisons were judged within rounds: the effect each round had on every cell measured in it (a "
            f"two-way fit of the cells' round means) is taken out of both sides, which leaves {left} ({dof} degrees "
            "of freedom); a cell's own interval keeps every round's effect.")  # fmt: skip


def findings(decision: Decision | None) -> list[Finding]:
    """What the design spent and decided, then how many questions it left open and where they are
    (the report lists these after the answer's findings), or none without a design."""
    if decision is None:
        return []
    runs = list(decision.counts.values())
    predicted = sum(v.predicted for v in decision.verdicts)
    by_model = f", {predicted} of them by the step model's prediction, not measured" if predicted else ""
    out = [Finding("time", f"Run until decided: {decision.settled} of {len(decision.verdicts)} questions decided"
                           f"{by_model} in {decision.round + 1} round(s) and {decision.spent['runs']} runs "
                           f"({min(runs)} to {max(runs)} a cell, more where the answer stayed open longer). Its "
                           "questions are about throughput (and the speedups that follow from it); the intervals of "
                           "other metrics here (step time, phase shares, MFU) are descriptive, at the level each gives.",
                   ANCHOR)]  # fmt: skip
    trend = decision.trend
    if trend is not None and trend.warns:
        out.append(Finding("warning", trend.text(), ANCHOR))
    undecided = [v for v in decision.verdicts if v.open]
    if undecided:
        out.append(Finding("warning", undecided_text(undecided, len(decision.verdicts)), ANCHOR, decided=False))
    return out


def undecided_text(undecided: list[VerdictRecord], asked: int) -> str:
    """The open questions counted, by kind, and where each is: one sentence, not the design table
    again (a quiet main job's 11 were one bullet of about 250 words repeating the table below it)."""
    cells = sum(v.kind == "precision" for v in undecided)
    kinds = [f"{cells} precision question(s)"] if cells else []
    kinds += [f"{len(undecided) - cells} comparison(s)"] if len(undecided) > cells else []
    far = sum(v.why == OUT_OF_REACH_WHY for v in undecided)
    reach = f"; {far} of them out of reach of the budget left" if far else ""
    return (f"Undecided ({len(undecided)} of {asked} questions: {', '.join(kinds)}{reach}): each with its interval "
            "and the runs per cell that would close it is in the design's table, 'What the design decided', open "
            "ones first.")  # fmt: skip


def answers(decision: Decision | None, runs: pd.DataFrame) -> DesignAnswers | None:
    """The design's answers, the input of the tables that compare cells (analysis.comparison), or None
    without a design."""
    return None if decision is None else DesignAnswers(decision.verdicts, runs, sequential.LEVEL)
