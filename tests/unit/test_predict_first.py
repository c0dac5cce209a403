"""Predict, then measure (`until_decided.predict`): the first round measures the step model's parts only
(stepmodel.anchors), the model fitted on them predicts every cell (plan.predict.cell_throughputs), the
comparisons its predictions answer are final and never measured (plan.design.predict_verdicts), and the
rest go through the design as before; the plan, the decision files and the report say which is which."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from ddpbench import REPO_ROOT
from ddpbench.analysis.sequential import Question
from ddpbench.plan import design
from ddpbench.plan.config_schema import SCHEMA_PATH
from ddpbench.plan.grid import ConfigError
from ddpbench.plan.predict import cell_throughputs, target_cells
from ddpbench.plan.study import Study, validate_config
from ddpbench.report import decisions
from stepmodel_synth import synthetic_runs, true_parts

pytestmark = pytest.mark.unit

STRATEGIES = ["single", "allreduce", "ddp", "gather_scatter", "bucketed_allreduce"]


def study_of(tmp_path, grid: dict, **until_decided) -> Study:
    from snakemake.utils import update_config

    config = yaml.safe_load((REPO_ROOT / "config.yaml").read_text())
    update_config(config, {"results": str(tmp_path / "results"), "grid": grid,
                           "until_decided": {"predict": True, "precision": 0, **until_decided}})  # fmt: skip
    validate_config(config, SCHEMA_PATH)
    return Study.from_config(config, checks=False)


def scaling_study(tmp_path, **until_decided) -> Study:
    return study_of(tmp_path, {"world_size": [1, 2, 4], "strategy": STRATEGIES, "batch_size": [128]}, **until_decided)


def key(study: Study, cell: str) -> tuple:
    return study.params(cell)["strategy"], study.world_size(cell)


def test_the_first_round_measures_the_parts_and_two_strategies_at_each_world_size(tmp_path):
    """single; each other strategy at its smallest world size; two strategies at p = 4 (the first two in
    grid order), so the model has seen how compute and communication grow with the ranks, and each of
    them held out is predicted as gather_scatter at p = 4 will be."""
    study = study_of(tmp_path, {"world_size": [1, 2, 4, 8], "strategy": STRATEGIES, "batch_size": [128]})
    first = {key(study, c): n for c, n in study.first_round.items()}
    assert first == {("single", 1): 3, ("allreduce", 2): 3, ("ddp", 2): 3, ("gather_scatter", 2): 3,
                     ("bucketed_allreduce", 2): 3, ("allreduce", 4): 3, ("ddp", 4): 3, ("gather_scatter", 4): 0,
                     ("bucketed_allreduce", 4): 0, ("allreduce", 8): 3, ("ddp", 8): 3, ("gather_scatter", 8): 0,
                     ("bucketed_allreduce", 8): 0}  # fmt: skip
    assert study.run_counts() == study.first_round  # no decision yet: the first round's
    line = study.plan_line(per_run_s=10.0)
    assert "the first round runs 27 (3 per cell x 9 cells of 13: the step model's parts, the rest predicted first, " \
           "about 4.5 min)" in line and "predicting first" in line  # fmt: skip
    # the run budget is checked against the parts' runs, not every cell's
    assert scaling_study(tmp_path, max_runs=21).first_round
    with pytest.raises(ConfigError, match=r"until_decided.max_runs.*20 runs cannot pay the design's first round: "
                                          r"21 runs \(3 per cell x 7 cells of 9"):  # fmt: skip
        scaling_study(tmp_path, max_runs=20)


def test_the_link_grid_measures_18_of_its_50_cells(tmp_path):
    """benchmarks/configs/step_model_links.yaml: both models' single; each strategy once per model, on the
    first link (DDP at its first bucket size); two strategies on each other link."""
    grid = yaml.safe_load((REPO_ROOT / "benchmarks" / "configs" / "step_model_links.yaml").read_text())
    from snakemake.utils import update_config

    config = yaml.safe_load((REPO_ROOT / "config.yaml").read_text())
    update_config(config, {**grid, "results": str(tmp_path / "r"), "repeats": "until_decided",
                           "until_decided": {"predict": True}})  # fmt: skip
    validate_config(config, SCHEMA_PATH)
    study = Study.from_config(config, checks=False)
    first = [c for c, n in study.first_round.items() if n]
    assert len(study.cells) == 50 and len(first) == 18
    picked = pd.DataFrame([study.params(c) for c in first])
    assert sorted(picked.loc[picked["strategy"] == "single", "model"]) == ["mlp", "simple_cnn"]
    on_first_link = picked[picked["link"] == "unshaped"]
    assert sorted(on_first_link["strategy"]) == sorted(["allreduce", "bucketed_allreduce", "ddp", "gather_scatter",
                                                        "fsdp_grad_op"] * 2)  # fmt: skip
    assert (on_first_link.loc[on_first_link["strategy"] == "ddp", "bucket_mb"] == 0.5).all()
    others = picked[(picked["strategy"] != "single") & (picked["link"] != "unshaped")]
    assert sorted(others["link"]) == sorted(["100mbit", "1gbit", "300mbit"] * 2)
    assert set(others["strategy"]) == {"allreduce", "bucketed_allreduce"}


def runs_of(study: Study, cells) -> pd.DataFrame:
    """Synthetic runs (the step model's laws, tests/stepmodel_synth.py) of `cells` with every parameter
    the plan gives them."""
    targets = target_cells(study).set_index(study.cells.index)
    rows = []
    for cell in cells:
        t = targets.loc[cell]
        for run in synthetic_runs([(t["strategy"], int(t["world_size"]), int(t["per_rank_batch"]))]).to_dict("records"):
            rows.append({**study.params(cell), **run, "backend": "auto", "seed": run["repeat"]})
    return pd.DataFrame(rows)


def truth(study: Study, cell: str) -> float:
    t = target_cells(study).set_index(study.cells.index).loc[cell]
    compute, _, exposed, _, _ = true_parts(t["strategy"], int(t["world_size"]), int(t["per_rank_batch"]))
    return float(t["per_rank_batch"] * t["world_size"] / (compute + exposed))


def test_the_parts_predict_the_cells_never_run_within_their_intervals(tmp_path):
    study = scaling_study(tmp_path)
    measured = [c for c, n in study.first_round.items() if n]
    predicted = cell_throughputs(study, runs_of(study, measured))
    assert set(predicted) == set(study.cells.index)
    for cell in set(study.cells.index) - set(measured):
        est, low, high = predicted[cell]
        assert low < truth(study, cell) < high, (cell, predicted[cell], truth(study, cell))
        assert abs(est / truth(study, cell) - 1) < 0.05
        assert high / low >= 1.15**2 * 0.999  # at least the least error (15 %) either way
    assert cell_throughputs(study, pd.DataFrame()) == {}  # nothing measured: nothing predicted


def verdict_cells(decision: design.Decision, study: Study, source: str) -> set:
    return {tuple(key(study, c) for c in v.cells) for v in decision.verdicts if v.source == source}


def write_runs(tmp_path, cell: str, values, start: int = 0) -> list[str]:
    paths = []
    for i, v in enumerate(values, start):
        run = tmp_path / "runs" / cell / f"repeat~{i}"
        run.mkdir(parents=True, exist_ok=True)
        (run / "summary.json").write_text(json.dumps({"status": "ok", "samples_per_s": v, "wall_time_s": 6.0}))
        paths.append(str(run / "summary.json"))
    return paths


def test_what_the_prediction_answers_is_final_and_the_rest_is_measured(tmp_path):
    """p = 4's gather_scatter and bucketed_allreduce are never run: a comparison the prediction answers is decided after
    the first round and stays as it was, its unmeasured cell stops as 'predicted'; one it cannot answer
    sends that cell its first runs in the next round, with its precision asked once it is measured."""
    study = scaling_study(tmp_path, precision=0.1)
    cells = list(study.cells.index)
    by_key = {key(study, c): c for c in cells}
    ba4, gs4 = by_key["bucketed_allreduce", 4], by_key["gather_scatter", 4]
    rng = np.random.default_rng(0)
    runs = {c: (write_runs(tmp_path, c, 1000 * (1 + i) * (1 + 0.01 * rng.standard_normal(3))) if n else [])
            for i, (c, n) in enumerate(study.first_round.items())}  # fmt: skip
    single = by_key["single", 1]
    # bucketed_allreduce at p = 4 predicted far faster than single (answered); gather_scatter at p = 4 about as
    # fast as it (the ratio's interval crosses the margin: measured)
    predicted = {c: (x, x / 1.2, x * 1.2) for c in cells for x in [2000.0]}
    predicted[single] = (500.0, 450.0, 550.0)
    first = design.decide(0, study.questions, runs, study.settings, [], predicted)
    answered = {frozenset(v.cells): v for v in first.verdicts if v.predicted}
    assert answered and all(v.runs[v.cells.index(c)] == 0 for v in answered.values() for c in v.cells if c in (ba4, gs4))
    assert answered[frozenset((ba4, single))].verdict == "faster"
    assert frozenset((ba4, gs4)) not in answered  # 2000 [1667, 2400] over itself: open, measured
    assert first.targets[ba4] == first.targets[gs4] == 3  # their first runs
    precision = {v.cells[0] for v in first.verdicts if v.kind == "precision"}
    assert ba4 in precision and gs4 in precision  # measured from now on: asked their precision too
    # the next round reads the answered verdicts from the decision before, unchanged, whatever is predicted now
    runs[ba4] = write_runs(tmp_path, ba4, [2100, 2090, 2120])
    runs[gs4] = write_runs(tmp_path, gs4, [2150, 2140, 2160])
    second = design.decide(1, study.questions, runs, study.settings, [first], {c: (1.0, 0.5, 2.0) for c in cells})
    assert {frozenset(v.cells): v for v in second.verdicts if v.predicted} == answered
    assert second.settled >= len(answered)
    # read back from its file, a predicted verdict stays one; a measured one is written as before
    second.write(tmp_path / "round~1.json")
    back = design.Decision.read(tmp_path / "round~1.json")
    assert back == second and all("source" not in v for v in back.to_json()["verdicts"] if v["runs"][0] and v["runs"][-1]
                                  and not any(frozenset(v["cells"]) == k for k in answered))  # fmt: skip


def test_a_cell_never_measured_stops_as_predicted_and_the_report_says_so(tmp_path):
    study = scaling_study(tmp_path)
    cells = list(study.cells.index)
    runs = {c: write_runs(tmp_path, c, [1000, 1010, 990]) if n else [] for c, n in study.first_round.items()}
    at_4 = {"allreduce": 3000.0, "ddp": 9000.0, "gather_scatter": 27000.0, "bucketed_allreduce": 81000.0}  # 3x apart
    predicted = {c: at_4[key(study, c)[0]] if study.world_size(c) == 4 else 1000.0 for c in cells}
    predicted = {c: (x, x * 0.9, x * 1.1) for c, x in predicted.items()}
    decision = design.decide(0, study.questions, runs, study.settings, [], predicted)
    never = [c for c, n in study.first_round.items() if not n]
    assert all(decision.stopped[c] == "predicted" for c in never) and not set(never) & set(decision.targets)
    # a cell in no question at all (precision 0) is no cell the prediction stopped
    lone = design.decide(0, [], runs, study.settings, [], predicted)
    assert lone.stopped == {} and lone.done
    section = decisions.section(decision)
    text = json.dumps(section["questions"].rows) + section["questions"].note
    assert "faster (predicted)" in text and "Predicted (" in section["questions"].note
    assert any("answered by the step model" in row[2] for row in section["cells"].rows)
    (finding, *_) = decisions.findings(decision)
    assert "of them by the step model's prediction, not measured" in finding.text
    answered = {frozenset(v.cells) for v in decision.verdicts if v.predicted}
    asked = decisions.answers(decision, pd.DataFrame({"status": []})).pairs
    assert answered and not answered & set(asked)  # the tables of what ran take none


def test_a_prediction_answers_only_what_its_interval_settles():
    q = Question(("a", "b"), 0.15)
    counts = {"a": 0, "b": 3}
    cases = {(3.0, 2.5, 3.5): "faster", (0.3, 0.25, 0.35): "slower", (1.0, 0.99, 1.01): "equivalent"}
    for a, verdict in cases.items():
        (v,) = design.predict_verdicts([q], {"a": a, "b": (1.0, 0.99, 1.01)}, counts)
        assert v.verdict == verdict and v.predicted and v.runs == (0, 3)
    assert design.predict_verdicts([q], {"a": (1.1, 0.8, 1.4), "b": (1.0, 0.9, 1.1)}, counts) == []  # open
    assert design.predict_verdicts([q], {"a": (3.0, 2.5, 3.5)}, counts) == []  # b not predicted
    assert design.predict_verdicts([q], {"a": (3.0, 2.5, 3.5), "b": (1, 1, 1)}, {"a": 3, "b": 3}) == []  # both ran
    # the ratio's interval: the two intervals divided end to end
    (v,) = design.predict_verdicts([q], {"a": (3.0, 2.2, 4.0), "b": (1.0, 0.5, 2.0)}, counts)
    assert (v.estimate, v.low, v.high) == (3.0, 1.1, 8.0) and v.verdict == "faster"
    assert design.predict_verdicts([q], {"a": (3.0, 2.0, 4.0), "b": (1.0, 0.5, 2.0)}, counts) == []  # [1, 8]: open


def test_the_report_of_a_design_that_predicted_says_which_answers_were_predicted(tmp_path):
    """allreduce never ran: the report builds from the runs there are, and the design's table says which
    verdicts the model gave and why allreduce has no runs."""
    from report_synth import make_runs

    from ddpbench.report import build as report

    cells = {"device~cpu/world_size~1/strategy~single": {"world_size": 1, "strategy": "single"},
             "device~cpu/world_size~2/strategy~ddp": {"world_size": 2, "strategy": "ddp"},
             "device~cpu/world_size~2/strategy~allreduce": {"world_size": 2, "strategy": "allreduce"}}  # fmt: skip
    settings = design.Settings(precision=0, margin=0.1, predict=True)
    questions = design.grid_questions(cells, {"strategy": "single", "world_size": 1}, settings)
    single, ddp, allreduce = cells
    runs = {single: write_runs(tmp_path, single, [100, 101, 99]), ddp: write_runs(tmp_path, ddp, [150, 152, 149]),
            allreduce: []}  # fmt: skip
    predicted = {single: (100.0, 85.0, 115.0), ddp: (150.0, 128.0, 173.0), allreduce: (40.0, 34.0, 46.0)}
    decision = design.decide(0, questions, runs, settings, [], predicted)
    assert decision.stopped[allreduce] == "predicted" and {v.verdict for v in decision.verdicts if v.predicted} == {"slower"}
    decision.write(tmp_path / "round~0.json")
    runs_csv = tmp_path / "runs.csv"
    make_runs(world_sizes=(1, 2), strategies=("single", "ddp"), failures=False).to_csv(runs_csv, index=False)
    out = tmp_path / "out"
    assert report.main(["--runs", str(runs_csv), "--out", str(out), "--no-pdf", "--bootstrap", "200",
                        "--design", str(tmp_path / "round~0.json")]) == 0  # fmt: skip
    html = (out / "report.html").read_text()
    section = html[html.index('id="decisions"'):]
    assert "slower (predicted)" in section and "answered by the step model" in section and "Predicted (2)" in section
    assert "2 of them by the step model&#39;s prediction, not measured" in html


def test_a_planted_round_or_source_in_a_decision_file_is_refused():
    v = design.VerdictRecord(("a", "b"), "comparison", 0.1, "faster", 2.0, 1.5, 2.5, (0, 3), source="predicted",
                             decided_round=0)  # fmt: skip
    assert design.VerdictRecord.from_json(v.to_json()) == v
    for bad in ({"decided_round": "lots"}, {"decided_round": True}, {"source": "oracle"}):
        with pytest.raises(TypeError):
            design.VerdictRecord.from_json({**v.to_json(), **bad})
