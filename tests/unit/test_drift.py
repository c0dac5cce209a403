"""analysis.drift: the check that warns when throughput trends across a design's rounds (issue 72,
item 4), the decision that records it, and the report's and the terminal's words on it. Its rates
with the real stopping rule are docs/report.md's second table (tests/unit/test_design_rates.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ddpbench.analysis import drift


def grid(per_round: float, seed: int = 0, rounds: int = 6, cells: int = 8, sigma: float = 0.04,
         shared: float = 0.0) -> tuple[dict, dict]:  # fmt: skip
    """Cells at different levels, 2 runs a round; a third of them stop after 4 rounds (a design
    funds cells unevenly); every cell's throughput moves by `per_round` a round, and by an effect of
    log-sd `shared` each round has on every cell alike."""
    rng = np.random.default_rng(seed)
    common = shared * rng.standard_normal(rounds)
    values: dict = {}
    labels: dict = {}
    for c in range(cells):
        level = 100 * math.exp(rng.normal(0, 0.3))
        for r in range(rounds if c % 3 else min(rounds, 4)):
            x = level * (1 + per_round) ** r * np.exp(common[r] + sigma * rng.standard_normal(2))
            values.setdefault(f"c{c}", []).extend(x)
            labels.setdefault(f"c{c}", []).extend([r, r])
    return values, labels


def test_a_steady_fall_is_found_with_its_rate_inside_the_interval():
    found = drift.trend(*grid(-0.03))
    assert found is not None and found.warns and found.rounds == 6 and found.cells == 8
    assert found.low <= -0.03 <= found.high and found.high < 0
    assert "fell steadily" in found.text() and "-3" in found.text() and "mean over the rounds" in found.text()


def test_no_trend_gives_an_interval_around_zero_and_no_warning():
    found = drift.trend(*grid(0.0, seed=1))
    assert found is not None and not found.warns and found.low < 0 < found.high
    assert found.text().startswith("No trend across the design's 6 rounds")


def test_effects_a_round_has_on_every_cell_widen_the_interval_instead_of_reading_as_a_trend():
    """6 % a round shared by every cell and no trend: the rounds' scatter about the line is the
    interval's error, so false alarms stay near 5 %, where one that took the cells' rounds as
    independent would fire far more often."""
    fired = sum(drift.trend(*grid(0.0, seed=s, shared=0.06)).warns for s in range(200))
    assert fired <= 0.05 * 200 + 3 * math.sqrt(0.05 * 0.95 * 200)


def test_fewer_than_four_rounds_are_not_tested_and_runs_without_their_rounds_are_passed_over():
    values, labels = grid(-0.05, rounds=3)
    assert drift.trend(values, labels) is None
    values, labels = grid(-0.05)
    values["extra"], labels["extra"] = [1.0, 2.0, 3.0], [0, 1]  # labels that do not match the runs
    assert drift.trend(values, labels).cells == 8


def test_the_decision_records_the_trend_and_the_report_and_terminal_say_it(tmp_path):
    from ddpbench.plan import design
    from ddpbench.report import decisions

    found = drift.trend(*grid(-0.03))
    d = design.Decision(round=5, done=True, counts={"a": 12}, targets={}, stopped={}, verdicts=(),
                        spent={"runs": 12, "seconds": 60.0}, budget={}, settings={}, drift=found.to_json())  # fmt: skip
    back = design.Decision.from_json(d.to_json())
    assert back.trend == found
    assert "fell 3." in design.round_line(back) or "fell 2." in design.round_line(back)
    assert any(f.kind == "warning" and "fell steadily" in f.text for f in decisions.findings(back))
    assert decisions.drift_text(back) == found.text()
    note = decisions.section(back)["questions"].note
    assert found.text() + " At the default settings" in note  # its own sentence (a main job's read ").At")
    quiet = design.Decision.from_json({**d.to_json(), "drift": {}})
    assert quiet.trend is None and "fell" not in design.round_line(quiet)
    assert "no trend across rounds was tested" in decisions.drift_text(quiet)
    with pytest.raises(ValueError, match="not a design decision"):
        design.Decision.from_json({**d.to_json(), "drift": {"slope": 1}})
