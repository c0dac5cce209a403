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
    assert "Undecided: ddp, world size 2 against allreduce, world size 2" in findings \
        or "Undecided: allreduce, world size 2 against ddp, world size 2" in findings  # fmt: skip
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
