"""The report of a sequential design: its undecided questions open the findings, and the section
"What the design decided" lists every question (open ones first) and every cell's runs and why
it stopped; a fixed design has no such section. The decision is made by plan.design.decide
from summary files, as the workflow makes it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from report_synth import make_runs

from ddpbench.plan import design
from ddpbench.report import build as report
from ddpbench.report import decisions

pytestmark = pytest.mark.unit


def a_decision(tmp_path) -> design.Decision:
    """single at p = 1 (100), ddp and allreduce at p = 2 (52 and 51: close), after a spent budget."""
    cells = {"device~cpu/world_size~1/strategy~single": {"world_size": 1, "strategy": "single"},
             "device~cpu/world_size~2/strategy~ddp": {"world_size": 2, "strategy": "ddp"},
             "device~cpu/world_size~2/strategy~allreduce": {"world_size": 2, "strategy": "allreduce"}}  # fmt: skip
    settings = design.Settings(margin=0.01, budget_runs=9)
    questions = design.grid_questions(cells, {"strategy": "single", "world_size": 1}, settings)
    rng = np.random.default_rng(0)
    runs = {}
    for cell, center in zip(cells, (100, 52, 51)):
        paths = []
        for i, v in enumerate(center * np.exp(0.03 * rng.standard_normal(3))):
            folder = tmp_path / "runs" / cell / f"repeat~{i}"
            folder.mkdir(parents=True)
            (folder / "summary.json").write_text(json.dumps({"status": "ok", "samples_per_s": v, "wall_time_s": 5.0}))
            paths.append(str(folder / "summary.json"))
        runs[cell] = paths
    return design.decide(0, questions, runs, settings)


def test_the_report_says_what_the_design_decided_open_questions_first(tmp_path):
    decision = a_decision(tmp_path)
    assert decision.done and {"budget"} <= set(decision.stopped.values())
    path = tmp_path / "round~0.json"
    decision.write(path)
    runs_csv = tmp_path / "runs.csv"
    make_runs(world_sizes=(1, 2), strategies=("single", "ddp", "allreduce"), failures=False).to_csv(runs_csv, index=False)
    out = tmp_path / "out"
    assert report.main(["--runs", str(runs_csv), "--out", str(out), "--no-pdf", "--bootstrap", "200", "--design", str(path)]) == 0
    html = (out / "report.html").read_text()
    findings = html[html.index('id="findings"'):html.index('id="decisions"')]
    # issue 55: the answer first, then the design's spending, the open questions in one line
    undecided = findings.index("Undecided (3): ")  # 3 of 6 questions open: one line
    assert findings.count("Undecided") == 1
    assert findings.index("Run until decided:") < undecided and findings.index("<li") < findings.index("Run until decided:")
    assert "ddp, world size 2 against allreduce, world size 2 (within a factor 1.01)" in findings[undecided:] \
        or "allreduce, world size 2 against ddp, world size 2 (within a factor 1.01)" in findings[undecided:]  # fmt: skip
    section = html[html.index('id="decisions"'):]
    assert "What the design decided" in section and "9 runs" in section
    rows = section[section.index('id="decision-questions"'):section.index("</table>", section.index('id="decision-questions"'))]
    verdicts = [v for v in ("UNDECIDED", "slower") if v in rows]
    assert verdicts == ["UNDECIDED", "slower"] and rows.index("UNDECIDED") < rows.index("slower")  # open first
    assert "the budget ran out" in section
    tex = (out / "report.tex").read_text()
    assert "What the design decided" in tex


def test_a_fixed_design_has_no_decision_section_and_a_bad_file_is_named(tmp_path):
    assert decisions.section(None) is None and decisions.findings(None) == []
    bad = tmp_path / "round~0.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit, match="round~0.json: not a design decision"):
        decisions.read(bad)


def test_the_margin_is_a_factor_and_a_difference_inside_it_says_so():
    """issue 55: ±15 % was a factor 1.15 either way ([0.870, 1.15]); faster is checked before
    equivalent, so a difference whose interval lies inside the margin is one by less than it."""
    def verdict(v, low, high):
        return design.VerdictRecord(("a", "b"), "comparison", 0.15, v, (low + high) / 2, low, high, (5, 5))

    assert decisions.within_text(verdict("faster", 1.2, 1.3)) == "a factor 1.15"
    assert decisions.verdict_text(verdict("faster", 1.01, 1.04)) == "faster, by less than the margin"
    assert decisions.verdict_text(verdict("faster", 1.05, 1.30)) == "faster"
    assert decisions.verdict_text(verdict("slower", 0.87, 0.99)) == "slower, by less than the margin"
    assert decisions.verdict_text(verdict("slower", 0.80, 0.99)) == "slower"
    assert decisions.verdict_text(verdict("equivalent", 0.9, 1.1)) == "equivalent"
    precision = design.VerdictRecord(("a",), "precision", 0.10, "met", 100.0, 95.0, 105.0, (5,))
    assert decisions.within_text(precision) == "±10%"
