"""The report's Predictions section (issue 67, item 3): the step model checked on held-out cells in every
report, on synthetic runs whose step follows the model's laws (stepmodel_synth); a grid that cannot
hold out a world size says what to run, and a runs table the model cannot use says why, and both
reports still build."""

import html
import re

import numpy as np
import pandas as pd
import pytest
from stepmodel_synth import SCALING, STRATEGIES, synthetic_runs

from ddpbench import analysis as A
from ddpbench import stepmodel
from ddpbench.report import build as report
from ddpbench.report import predictions
from ddpbench.report.text import sig3

pytestmark = pytest.mark.unit

# single at p = 1, the strategies at 1, 2, 4 and 8: Amdahl and the cost model can be refitted without 8
FULL = SCALING + [(s, p, 128 // p) for s in STRATEGIES for p in (1, 8)]


def build(tmp, runs, **inputs):
    out = tmp / "out"
    report.build(report.Inputs(runs, **inputs), out, pdf=False)
    page = html.unescape((out / "report.html").read_text())
    section = page[page.index('<section id="predictions">') : page.index('<h2 id="figures">')]
    return out, page, section, (out / "report.tex").read_text()


def with_comm_phases(runs: pd.DataFrame, steps: int = 20) -> pd.DataFrame:
    """The columns the cost model reads beside the step model's: timed steps and their communication."""
    return runs.assign(timed_steps=steps, phase_comm_s=runs["frac_comm"] * runs["step_time_mean_s"] * steps)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    runs = with_comm_phases(synthetic_runs(FULL))
    return (runs, stepmodel.validate(runs), *build(tmp_path_factory.mktemp("full"), runs))


def summary_sentence(lead: str, r) -> str:
    n = int(r["predicted"])
    return (f"{lead} predicted {n} cells with a median absolute error of {sig3(100 * r['median_abs_error'])} % (worst "
            f"{sig3(100 * r['worst_abs_error'])} %); its intervals covered {int(round(r['coverage'] * n))} of {n}.")  # fmt: skip


def rows_of(section: str, table_id: str) -> list[list[str]]:
    body = section[section.index(f'id="{table_id}"') :]
    body = body[: body.index("</tbody>")]
    return [re.findall(r"<td>(.*?)</td>", tr) for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)[1:]]


def test_the_section_shows_every_held_out_prediction_and_validates_summary(full):
    runs, v, out, page, section, tex = full
    summary = v.summary.set_index("held_out")
    assert summary.loc["each cell", "predicted"] == 9 and summary.loc["largest world size", "predicted"] == 3
    assert summary_sentence("Held out one at a time, the model", summary.loc["each cell"]) in section
    assert summary_sentence("Fitted without the largest world size (p = 8), the model", summary.loc["largest world size"]) in section
    rows = rows_of(section, "predictions-table")
    assert len(rows) == len(v.table) == 12
    for row, (_, r) in zip(rows, v.table.iterrows()):
        assert row[1] == r["cell"] and row[4] == predictions.signed_pct(r["rel_error"])
        assert row[3] == predictions.ms_ci(r["predicted_s"], r["predicted_low"], r["predicted_high"])
        assert row[5] == ("yes" if r["covered"] else "no")
    # the synthetic runs follow the model's laws: every held-out cell within a few percent
    assert (v.table["rel_error"].abs() < 0.03).all()
    # predictions.csv is the held-out table, written beside the others
    written = pd.read_csv(out / "predictions.csv")
    assert list(written.columns) == stepmodel.HOLDOUT_COLUMNS
    assert np.allclose(written["predicted_s"], v.table["predicted_s"]) and list(written["cell"]) == list(v.table["cell"])
    # the same section in LaTeX, and a finding that links to it
    each = summary.loc["each cell"]
    assert r"\section{Predictions}" in tex and f"covered {int(round(each['coverage'] * 9))} of 9" in tex
    found = re.search(r'<li class="[^"]*">(The step model predicted [^<]*) <a href="#predictions">', page)
    assert found and f"within a median {sig3(100 * summary.loc['each cell', 'median_abs_error'])} %" in found.group(1)


def test_the_section_predicts_beyond_the_largest_world_size_and_marks_it(full):
    runs, v, out, page, section, tex = full
    rows = rows_of(section, "predictions-beyond")
    assert sorted({(r[0], r[1]) for r in rows}) == sorted((f"strategy={s}", str(p)) for s in STRATEGIES for p in (16, 32))
    for r in rows:
        assert r[5].startswith(f"beyond what was held out: world size {r[1]} > 8 held out")
    # strong scaling: the global batch of 128 split over 16 and 32 ranks
    assert {r[2] for r in rows if r[1] == "16"} == {"8"} and {r[2] for r in rows if r[1] == "32"} == {"4"}


def test_amdahl_and_the_cost_model_are_refitted_without_the_largest_world_size_and_their_error_stated(full):
    runs, v, out, page, section, tex = full
    line = next(p for p in re.findall(r"<p>([^<]*)</p>", section) if p.startswith("With world size 8 held out"))
    assert "Amdahl's law was off there by" in line and "the cost model by" in line
    largest = v.summary.set_index("held_out").loc["largest world size"]
    assert line.endswith(f"the step model by a median of {sig3(100 * largest['median_abs_error'])} % "
                         f"(worst {sig3(100 * largest['worst_abs_error'])} %).")  # fmt: skip
    # Amdahl's worst error, from fits.csv's own fit on the runs below p = 8 (each strategy's group)
    train = runs[runs["world_size"] < 8]
    fits = A.fits_table(train, A.speedup_table(train), n_boot=20)
    errors = {}
    for s in STRATEGIES:
        got = fits[(fits["strategy"] == s) & (fits["law"] == "amdahl") & (fits["kind"] == "fit")].set_index("parameter")
        t8 = A.amdahl_time(8, got.loc["t1_s", "estimate"], got.loc["f", "estimate"])
        errors[s] = t8 / runs.loc[(runs["strategy"] == s) & (runs["world_size"] == 8), A.TIME].mean() - 1
    worst = max(errors, key=lambda s: abs(errors[s]))
    assert f"(worst {predictions.signed_pct(errors[worst])}, {worst})" in line.split(" and the cost model")[0]


def test_a_grid_of_world_sizes_1_and_2_says_what_to_run_and_shows_the_hold_outs_it_could_make(tmp_path):
    # two per-rank batches at p = 2: each cell can be held out (its strategy communicates in the other)
    runs = synthetic_runs([("single", 1, b) for b in (64, 32)] + [(s, 2, b) for s in STRATEGIES for b in (64, 32)])
    out, page, section, tex = build(tmp_path, runs)
    v = stepmodel.validate(runs)
    assert "run world size 4 too (grid: world_size: [1, 2, 4])" in section
    assert "No world size could be held out" in section and "Not validated:" in tex
    assert list(v.summary["held_out"]) == ["each cell"] and v.summary["predicted"].iloc[0] == 6
    assert summary_sentence("Held out one at a time, the model", v.summary.iloc[0]) in section
    assert len(rows_of(section, "predictions-table")) == 6
    assert not any(r[1] in ("4", "8") and r[5].startswith("within") for r in rows_of(section, "predictions-beyond"))
    assert "With world size" not in section  # no law was fitted on two world sizes: none refitted


def test_each_strategys_only_communicating_cell_is_named_as_the_reason_no_cell_could_be_held_out(tmp_path):
    runs = synthetic_runs([("single", 1, 64)] + [(s, 2, 32) for s in STRATEGIES])
    got = predictions.section(runs)
    assert got.sentences == ["Held out one at a time, the model could predict none of its 3 cells: each was the only "
                             "cell of its strategy that communicates (allreduce, ddp and gather_scatter), so without it "
                             "the model had nothing to learn that strategy's message from."]  # fmt: skip
    assert "run world size 4 too" in got.todo and len(got.held) == 3 and got.held["predicted_s"].isna().all()


def test_a_runs_table_the_model_cannot_use_gives_a_sentence_why_and_the_report_builds(tmp_path):
    runs = synthetic_runs([("single", 1, b) for b in (128, 64, 32, 16)])
    out, page, section, tex = build(tmp_path, runs)
    assert "No prediction was made: no measured cell communicates" in section
    assert "predictions-table" not in section and "The step model predicted" not in page
    written = pd.read_csv(out / "predictions.csv")
    assert list(written.columns) == stepmodel.HOLDOUT_COLUMNS and written.empty
    failed = predictions.section(runs.assign(status="failed"))
    assert failed.why == ("No prediction was made: the step model could not be built (no ok run with a step time: "
                          "nothing to build the model from).")  # fmt: skip


def test_a_model_that_refuses_is_a_sentence_never_a_failed_report(tmp_path, monkeypatch):
    def refuse(runs, sweep=None, **options):
        raise stepmodel.MissingPart("no measured cell computed this model and setting on cpu: run single there")

    monkeypatch.setattr(stepmodel, "validate", refuse)
    out, page, section, tex = build(tmp_path, synthetic_runs(SCALING))
    assert "the step model could not be built (no measured cell computed this model and setting on cpu" in section
    assert pd.read_csv(out / "predictions.csv").empty


def test_a_strategy_this_checkout_does_not_have_is_left_out_of_the_model_and_said_to_be():
    runs = synthetic_runs(SCALING)
    elsewhere = runs[runs["strategy"] == "allreduce"].assign(strategy="../../from_elsewhere")
    got = predictions.section(pd.concat([runs, elsewhere], ignore_index=True))
    assert not got.why and got.notes[-1] == ("Left out of the model: ../../from_elsewhere, a strategy this checkout "
                                             "does not have.")  # fmt: skip
    assert len(got.held) == len(stepmodel.validate(runs).table)


def test_a_grid_past_what_the_report_refits_in_its_time_says_so_instead_of_holding_out(monkeypatch):
    monkeypatch.setattr(predictions, "MAX_CELLS", 10)
    got = predictions.section(synthetic_runs(SCALING))  # 10 cells: checked
    assert not got.why and len(got.held)
    got = predictions.section(synthetic_runs(SCALING + [("ddp", 8, 16)]))  # 11
    assert got.why.startswith("The step model was not checked in this report: its 11 measured cells are more than "
                              "the 10 it refits within a report's time")  # fmt: skip
    assert got.held.empty and list(got.held.columns) == stepmodel.HOLDOUT_COLUMNS
    # below it, the cells held out one at a time are fewer as the cells are more: CELL_FITS // cells
    monkeypatch.setattr(predictions, "MAX_CELLS", 250)
    monkeypatch.setattr(predictions, "CELL_FITS", 30)
    got = predictions.section(synthetic_runs(SCALING))
    assert (got.held["held_out"] == "each cell").sum() == 3 and got.notes[0].startswith("Each cell: 3 of the 6 cells")


def test_each_link_held_out_in_turn_is_one_sentence_naming_how_many_links():
    links = [("1gbit", 1e9), ("500mbit", 5e8), ("200mbit", 2e8)]
    cells = [("single", 1, 32)] + [(s, 2, 32, 25.0, name, bps) for s in ("allreduce", "gather_scatter") for name, bps in links]
    got = predictions.section(synthetic_runs(cells))
    said = [s for s in got.sentences if "links held out" in s]
    assert len(said) == 1, got.sentences
    assert said[0].startswith("With each of the 3 links held out in turn (all its cells at once), the model predicted 6 cells")
