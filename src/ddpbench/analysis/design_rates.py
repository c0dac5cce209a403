"""What the run-until-decided design gets wrong, and how often: its calls and intervals simulated
with the real stopping rule (`sequential.run_design`) at the shipped settings (config.yaml's
`until_decided`: each cell to ±10 %, comparisons within a factor 1.15), on the default grid's
shape (a one-process baseline and five strategies: 21 questions).

Per question: a faster/slower call where the two throughputs are equal; an "equivalent" call
where they differ by exactly the margin; each interval's coverage. Per grid: a false call
anywhere among its questions, and every interval covering at once. A job effect (a factor
shared by one cell's runs of one round, as when the machine's state changes between rounds) is
what the blocked analysis carries in every interval (sequential.round_noise): simulated with
it, and with it judged as before the analysis was blocked, to say what blocking buys.

docs/report.md's table is `table()`'s output (`python benchmarks/design_error_rates.py`);
tests/unit/test_design_rates.py re-derives each figure with fewer grids."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from ddpbench.analysis import drift, sequential
from ddpbench.analysis.comparison import Verdict

BASELINE = "single"
# docs/report.md's table at 2,000 grids a condition (benchmarks/design_error_rates.py), which the
# report's note quotes; tests/unit/test_design_rates.py checks the two agree and re-derives them.
QUOTED = {
    "equal": dict(null_call=0.004, comparison_coverage=0.997, precision_coverage=0.992, any_false_call=0.026,
                  joint_coverage=0.937, false_fastest=0.0),
    "on the margin": dict(margin_equivalent=0.005, comparison_coverage=0.996, precision_coverage=0.988,
                          any_false_call=0.019, joint_coverage=0.910, false_fastest=0.0),
    "equal, 3 % job effect": dict(null_call=0.009, comparison_coverage=0.993, precision_coverage=0.982,
                                  any_false_call=0.065, joint_coverage=0.876, false_fastest=0.001),
    "on the margin, 3 % job effect": dict(margin_equivalent=0.007, comparison_coverage=0.994,
                                          precision_coverage=0.983, any_false_call=0.029, joint_coverage=0.875,
                                          false_fastest=0.0),
    "equal, 3 % job effect, not blocked": dict(null_call=0.019, comparison_coverage=0.985, precision_coverage=0.968,
                                               any_false_call=0.122, joint_coverage=0.786, false_fastest=0.002),
}  # fmt: skip


SHARED = "6 % round effect shared by every cell"
AS_MEASURED = SHARED + ", compared as measured"
# docs/report.md's second table (the design on a shared machine, 2,000 grids), the figures the note quotes
MACHINE_QUOTED = {
    "5 % of runs 2x slow": dict(precision_coverage=0.956, decided=0.685),
    "drift 1 % a round": dict(start_coverage=0.881, drift_warned=0.406),
    "drift 2 % a round": dict(start_coverage=0.651, drift_warned=0.857),
    "quiet": dict(drift_warned=0.055),
    SHARED: dict(decided=0.967, null_call=0.003), AS_MEASURED: dict(decided=0.814),
}


def note() -> str:
    """What the rates mean for a reader of one report: per question, per grid, with a job effect
    per cell and round (which the intervals carry), and what they leave out (the report's
    decision-table note; figures from QUOTED)."""
    q, m = QUOTED, MACHINE_QUOTED
    pct = lambda *v: "–".join(dict.fromkeys(f"{100 * x:.1f}".removesuffix(".0") for x in sorted(v))) + " %"  # noqa: E731
    job, unblocked = q["equal, 3 % job effect"], q[UNBLOCKED]
    return (f"At the default settings (simulated with this rule, docs/report.md): a false faster/slower call in "
            f"{pct(q['equal']['null_call'])} of questions between equal strategies, a false equivalent in "
            f"{pct(q['on the margin']['margin_equivalent'])} on the margin; over a grid's 21 questions, one or more "
            f"false calls in {pct(q['equal']['any_false_call'], q['on the margin']['any_false_call'])} of grids, and "
            f"every interval covering at once in "
            f"{pct(q['equal']['joint_coverage'], q['on the margin']['joint_coverage'])}. With a 3 % job effect per "
            f"cell and round: {pct(job['null_call'])} of questions and {pct(job['any_false_call'])} of grids (judged "
            f"without the between-round noise: {pct(unblocked['null_call'])} and "
            f"{pct(unblocked['any_false_call'])}). With 5 % of runs 2x slow a cell's interval covers "
            f"{pct(m['5 % of runs 2x slow']['precision_coverage'])}. A cell's interval covers the mean over the rounds "
            f"it ran in: where throughput trends by 1 % or 2 % a round it covers the first round's in "
            f"{pct(m['drift 1 % a round']['start_coverage'])} and {pct(m['drift 2 % a round']['start_coverage'])} of "
            f"cells, and the drift check warns in {pct(m['drift 1 % a round']['drift_warned'])} and "
            f"{pct(m['drift 2 % a round']['drift_warned'])} of such designs ({pct(m['quiet']['drift_warned'])} "
            f"without a trend). With a 6 % effect each round has on every cell, comparisons are judged within rounds, "
            f"where it cancels: {pct(m[SHARED]['decided'])} of questions decided ({pct(m[AS_MEASURED]['decided'])} "
            f"judged as measured), false calls in {pct(m[SHARED]['null_call'])} of questions. Not covered: what changes between separate designs (another day, "
            f"another machine): the intervals describe the conditions of this design's rounds.")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Setting:
    """One simulated condition: the design's tolerances, each cell's noise (its run-to-run
    log-sd drawn uniformly in `sigma`), the job effect's log-sd, and the strategies' truths
    (`spacing`: each strategy's throughput this factor above the previous one; 1: all equal)."""

    name: str
    spacing: float = 1.0
    job_effect: float = 0.0
    precision: float = 0.10
    margin: float = 0.15
    sigma: tuple = (0.06, 0.12)
    strategies: int = 5
    blocked: bool = True  # False: judged without the between-round noise, as before it was estimated
    slow: float = 0.0  # the share of runs 2x slow (a shared machine's occasional busy neighbour)
    drift: float = 0.0  # throughput's relative change per round, shared by every cell (a steady trend)
    shared: float = 0.0  # the log-sd of an effect each round has on every cell alike (not a trend)
    within: bool = True  # False: comparisons judged on the runs as measured, as before issue 72


def settings(margin: float = 0.15) -> list[Setting]:
    """The conditions docs/report.md reports: five equal strategies (every pair a null one), five
    a margin apart (each neighbouring pair exactly on it), each without and with a 3 % job effect;
    and the equal strategies with the job effect judged without the between-round noise (what
    the blocked analysis buys)."""
    return [
        Setting("equal", 1.0, 0.0, margin=margin), Setting("on the margin", 1 + margin, 0.0, margin=margin),
        Setting("equal, 3 % job effect", 1.0, 0.03, margin=margin),
        Setting("on the margin, 3 % job effect", 1 + margin, 0.03, margin=margin),
        Setting(UNBLOCKED, 1.0, 0.03, margin=margin, blocked=False),
    ]  # fmt: skip


UNBLOCKED = "equal, 3 % job effect, not blocked"


def questions(s: Setting) -> tuple[list[sequential.Question], dict[str, float]]:
    """The default grid's questions (each cell's precision, each strategy against the baseline,
    each pair of strategies) and every cell's true throughput."""
    names = [f"s{i}" for i in range(1, s.strategies + 1)]
    truth = {BASELINE: 100.0, **{n: 55.0 * s.spacing**i for i, n in enumerate(names)}}
    asked = [sequential.Question((c,), s.precision) for c in truth]
    asked += [sequential.Question((n, BASELINE), s.margin) for n in names]
    asked += [sequential.Question((b, a), s.margin) for a, b in itertools.combinations(names, 2)]
    return asked, truth


def _false_call(v: sequential.Judgement, true_ratio: float, margin: float) -> bool:
    """A call the truth contradicts: faster or slower against the true direction (or where the
    two are equal), equivalent where the true ratio lies on the margin or beyond it."""
    d = math.log(true_ratio)
    if v.verdict == Verdict.FASTER:
        return d <= 1e-12
    if v.verdict == Verdict.SLOWER:
        return d >= -1e-12
    return v.verdict == Verdict.EQUIVALENT and abs(d) >= math.log1p(margin) - 1e-12


def simulate(s: Setting, grids: int, seed: int = 0) -> dict[str, float]:
    """Rates over `grids` simulated grids, each run by the real stopping rule to its end (the
    cap; no budget: a budget only ends the looks earlier). Keys: null_call (faster/slower among
    pairs of equal throughput), margin_equivalent (equivalent among pairs exactly a margin apart),
    comparison_coverage, precision_coverage (final intervals), any_false_call (share of grids
    with one or more false calls), joint_coverage (grids whose every interval covers),
    false_fastest (grids where a strategy called faster than every other is not the fastest), decided
    (share of questions decided), runs (per grid)."""
    rng = np.random.default_rng(seed)
    asked, truth = questions(s)
    count = dict.fromkeys(("null", "null_call", "margin", "margin_equivalent", "comparisons", "comparison_covered",
                           "cells", "precision_covered", "start_covered", "any_false", "joint", "decided", "runs",
                           "false_fastest", "drift_warned"), 0)  # fmt: skip
    names = [c for c in truth if c != BASELINE]
    typical = 2.0 ** -s.slow  # a run's geometric mean over the slow and the others: what a cell's mean estimates
    for _ in range(grids):
        sigma = {c: rng.uniform(*s.sigma) for c in truth}
        now = {"round": 0, "shared": 0.0}

        def on_round(r):
            now.update(round=r, shared=s.shared * rng.standard_normal() if s.shared else 0.0)

        def measure(cell, k):
            job = s.job_effect * rng.standard_normal()  # this cell's runs of this round share it
            x = truth[cell] * np.exp(job + sigma[cell] * rng.standard_normal(k))
            if s.slow:  # drawn only where asked, so the other conditions' draws stay as they were
                x = np.where(rng.random(k) < s.slow, x / 2, x)
            return list(x * (1 + s.drift) ** now["round"] * math.exp(now["shared"]))

        trace: dict = {}
        verdicts, runs, _ = sequential.run_design(asked, measure, blocked=s.blocked, on_round=on_round,
                                                  trace=trace, within=s.within)  # fmt: skip
        found = drift.trend(trace["values"], trace["rounds"])
        count["drift_warned"] += found is not None and found.warns
        false_here, all_cover = False, True
        beats: dict = {c: set() for c in names}  # strategy -> the strategies it was called faster than
        for v in verdicts:
            cells = v.question.cells
            true = truth[cells[0]] / (truth[cells[1]] if len(cells) == 2 else 1.0)
            count["decided"] += v.decided
            if len(cells) == 1:  # a cell's mean estimates the mean over the rounds it ran in
                ran = trace["rounds"].get(cells[0], [0])
                start = true * typical
                covers = math.isfinite(v.low) and v.low <= start * (1 + s.drift) ** float(np.mean(ran)) <= v.high
                all_cover &= covers
                count["cells"] += 1
                count["precision_covered"] += covers
                count["start_covered"] += math.isfinite(v.low) and v.low <= start <= v.high
                continue
            covers = math.isfinite(v.low) and v.low <= true <= v.high
            all_cover &= covers
            count["comparisons"] += 1
            count["comparison_covered"] += covers
            false_here |= _false_call(v, true, s.margin)
            if BASELINE not in cells and v.verdict.difference:
                winner, loser = cells if v.verdict == Verdict.FASTER else cells[::-1]
                beats[winner].add(loser)
            if math.isclose(true, 1.0):
                count["null"] += 1
                count["null_call"] += v.verdict.difference
            elif math.isclose(abs(math.log(true)), math.log1p(s.margin)):
                count["margin"] += 1
                count["margin_equivalent"] += v.verdict == Verdict.EQUIVALENT
        count["any_false"] += false_here
        # "x is the fastest" (report.findings.winner: called faster than every other strategy),
        # false unless x's throughput is strictly the highest
        count["false_fastest"] += any(len(beats[x]) == len(names) - 1
                                      and any(truth[y] >= truth[x] for y in names if y != x) for x in names)  # fmt: skip
        count["joint"] += all_cover
        count["runs"] += sum(runs.values())
    share = lambda k, n: count[k] / count[n] if count[n] else math.nan  # noqa: E731
    return {
        "null_call": share("null_call", "null"), "margin_equivalent": share("margin_equivalent", "margin"),
        "comparison_coverage": share("comparison_covered", "comparisons"),
        "precision_coverage": share("precision_covered", "cells"),
        "any_false_call": count["any_false"] / grids, "joint_coverage": count["joint"] / grids,
        "false_fastest": count["false_fastest"] / grids,
        "decided": count["decided"] / (grids * len(asked)), "runs": count["runs"] / grids,
        "start_coverage": share("start_covered", "cells"), "drift_warned": count["drift_warned"] / grids,
    }  # fmt: skip


COLUMNS = {  # key -> the table's heading
    "null_call": "false faster/slower (equal pair)",
    "margin_equivalent": "false equivalent (pair on the margin)",
    "comparison_coverage": "comparison interval covers",
    "precision_coverage": "cell interval covers",
    "any_false_call": "grids with a false call",
    "joint_coverage": "grids whose 21 intervals all cover",
    "false_fastest": "grids with a false \"fastest\"",
}


def machine_settings(margin: float = 0.15) -> list[Setting]:
    """docs/report.md's second table: five equal strategies on a shared machine (issue 72): quiet,
    occasional slow runs, a steady trend at three rates, an effect each round has on every cell
    (with comparisons judged within rounds, and as measured: what judging within rounds buys)."""
    return [
        Setting("quiet", margin=margin), Setting("5 % of runs 2x slow", slow=0.05, margin=margin),
        Setting("drift 0.5 % a round", drift=-0.005, margin=margin),
        Setting("drift 1 % a round", drift=-0.01, margin=margin),
        Setting("drift 2 % a round", drift=-0.02, margin=margin),
        Setting(SHARED, shared=0.06, margin=margin),
        Setting(AS_MEASURED, shared=0.06, margin=margin, within=False),
    ]  # fmt: skip



MACHINE_COLUMNS = {  # key -> the second table's heading
    "null_call": "false faster/slower (equal pair)",
    "any_false_call": "grids with a false call",
    "comparison_coverage": "comparison interval covers",
    "precision_coverage": "cell interval covers its rounds' mean",
    "start_coverage": "cell interval covers the first round's throughput",
    "drift_warned": "drift check fires",
    "decided": "questions decided",
}


def machine_table(grids: int = 2000, seed: int = 0) -> str:
    """The markdown table of `machine_settings()`, with each condition's runs a grid."""
    head = "| condition | " + " | ".join(MACHINE_COLUMNS.values()) + " | runs a grid |"
    lines = [head, "|" + "---|" * (len(MACHINE_COLUMNS) + 2)]
    for s in machine_settings():
        rates = simulate(s, grids, seed)
        cells = ["–" if math.isnan(rates[k]) else f"{100 * rates[k]:.1f} %" for k in MACHINE_COLUMNS]
        lines.append(f"| {s.name} | " + " | ".join(cells) + f" | {rates['runs']:.1f} |")
    return "\n".join(lines)


def table(grids: int = 2000, seed: int = 0) -> str:
    """The markdown table docs/report.md quotes: one row per `settings()` condition; then what each
    condition cost (runs per grid, share of questions decided)."""
    head = "| condition | " + " | ".join(COLUMNS.values()) + " |"
    lines, costs = [head, "|" + "---|" * (len(COLUMNS) + 1)], []
    for s in settings():
        rates = simulate(s, grids, seed)
        cells = ["–" if math.isnan(rates[k]) else f"{100 * rates[k]:.1f} %" for k in COLUMNS]
        lines.append(f"| {s.name} | " + " | ".join(cells) + " |")
        costs.append(f"{s.name}: {rates['runs']:.1f} runs a grid, {100 * rates['decided']:.1f} % of questions decided")
    return "\n".join([*lines, "", *costs])
