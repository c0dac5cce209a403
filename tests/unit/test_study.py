"""The plan as one object (plan.study.Study): built once from the merged config, it is the grid,
the results folder's layout and the design that the workflow, the design's checkpoint
(plan.decide) and a report rebuilt from an archive share; a study recorded in a results folder
is the one the workflow planned."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from ddpbench import REPO_ROOT
from ddpbench.core.layout import Layout
from ddpbench.plan import decide, design
from ddpbench.plan.grid import ConfigError
from ddpbench.plan.study import Study, validate_config
from ddpbench.report import build

pytestmark = pytest.mark.unit

SCHEMA = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"


def config_of(results: Path, **over) -> dict:
    """configs/tiny.yaml over config.yaml, results in `results`, validated as the workflow does."""
    config = yaml.safe_load((REPO_ROOT / "config.yaml").read_text())
    for key, value in {**yaml.safe_load((REPO_ROOT / "configs" / "tiny.yaml").read_text()), **over}.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) and isinstance(config.get(key), dict) else value
    config["results"] = str(results)
    validate_config(config, SCHEMA)
    return config


def record(config: dict) -> None:
    """What the workflow's onstart saves: the merged config in the results folder."""
    Path(config["results"]).mkdir(parents=True, exist_ok=True)
    Path(Layout.of(config["results"]).config).write_text(yaml.safe_dump(config, sort_keys=False))


def test_the_tiny_grids_study(tmp_path):
    study = Study.from_config(config_of(tmp_path / "results/tiny"))
    assert len(study.cells) == 3 and not study.sequential and study.questions == ()
    assert study.run_counts() == {cell: 1 for cell in study.cells.index}
    cell = next(c for c in study.cells.index if "world_size~2" in c)
    assert study.summaries()[-1].startswith(f"{tmp_path}/results/tiny/runs/") and study.params(cell)["strategy"] == "ddp"
    assert study.layout.run_dir(cell, 0) in {str(Path(s).parent) for s in study.summaries()}
    with pytest.raises(KeyError, match="is not a cell of the configured grid"):
        study.cell("device~cpu/world_size~9")


def test_a_refused_config_names_its_key_before_any_study_exists(tmp_path):
    with pytest.raises(ConfigError, match="timing.max_rel_ci") as err:
        config_of(tmp_path, timing={"max_rel_ci": 0})
    assert err.value.key == "timing.max_rel_ci"
    with pytest.raises(ConfigError, match="until_decided.compare"):
        Study.from_config(config_of(tmp_path, repeats="until_decided", until_decided={"compare": ["colour"]}))


def test_an_unknown_study_is_refused_naming_the_key_and_the_studies_before_the_grid_is_sized(tmp_path):
    """The schema checks only that `study` holds words (a new study module changes no schema); the
    plan refuses a name with no report section first, ahead of the grid's size (max_runs 1 here)."""
    config = config_of(tmp_path / "results", study=["sync-dp", "sync-dpp"], max_runs=1)
    with pytest.raises(ConfigError, match=r"unknown study 'sync-dpp': the studies with a report section are "
                                          r"accelerators, .*sync-dp, sync-strategies") as err:  # fmt: skip
        Study.from_config(config)
    assert err.value.key == "study"
    with pytest.raises(ConfigError, match="study") as err:
        config_of(tmp_path, study="sync dp")  # not a word: the schema's
    assert err.value.key == "study"
    # A recorded study (an archive from another checkout) is read, not planned: its report leaves
    # out the sections this checkout has no module for (report.build).
    record(config_of(tmp_path / "old", study=["sync-dp", "sync-dpp"]))
    assert Study.recorded(tmp_path / "old").study_names == ["sync-dp", "sync-dpp"]


def test_the_recorded_study_is_the_workflows_and_report_from_flags_cells_alike(tmp_path):
    """Issue 56: a report rebuilt from an archive took the unstable flag's threshold from
    timing.max_rel_ci (0.05) where the workflow's took the design's precision (0.10), and so
    flagged other cells. Both now read it from the same Study."""
    config = config_of(tmp_path / "results", repeats="until_decided", until_decided={"precision": 0.10})
    planned = Study.from_config(config)
    record(config)
    recorded = Study.recorded(tmp_path / "results")
    assert list(recorded.cells.index) == list(planned.cells.index) and recorded.questions == planned.questions
    assert planned.stability_threshold == recorded.stability_threshold == 0.10 != config["timing"]["max_rel_ci"]
    study, _ = build.recorded_study(tmp_path / "results")
    assert study is not None and study.stability_threshold == 0.10


def test_the_checkpoints_entry_point_decides_the_round_from_the_recorded_study(tmp_path, monkeypatch, capsys):
    config = config_of(tmp_path / "results", repeats="until_decided", until_decided={"precision": 0.05})
    record(config)
    study = Study.recorded(tmp_path / "results")
    throughput = {cell: 100.0 * (i + 1) for i, cell in enumerate(study.cells.index)}
    summaries = study.summaries()  # the first round's: 3 runs a cell
    for i, path in enumerate(summaries):
        Path(path).parent.mkdir(parents=True)
        value = throughput[study.layout.cell_of_summary(path)] * (1 + 0.001 * (i % 3))
        Path(path).write_text(json.dumps({"status": "ok", "samples_per_s": value, "wall_time_s": 2.0}))
    out, log = tmp_path / "round~0.json", tmp_path / "decide.log"
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(summaries) + "\n"))
    assert decide.main(["--results", str(tmp_path / "results"), "--round", "0", "--out", str(out), "--log", str(log)]) == 0
    decision = design.Decision.read(out)
    assert decision.round == 0 and decision.counts == {cell: 3 for cell in study.cells.index}
    assert decision.spent["runs"] == 9 and {v.kind for v in decision.verdicts} == {"precision", "comparison"}
    line = log.read_text().strip()
    assert line == design.round_line(decision) and line in capsys.readouterr().out
    assert study.counts_of_round([decision]) == design.counts_after(decision.counts, decision, study.settings)


def test_a_design_whose_budget_cannot_pay_its_first_round_is_refused_before_anything_runs(tmp_path):
    """Issue 68: `budget: 7m` with 12 cells planned 36 first runs, about 14 min. The plan refuses
    at its own estimate of a run, naming until_decided.budget; the run budget is refused alike."""
    grid = {"strategy": ["single", "ddp", "allreduce", "gather_scatter"], "world_size": [1, 2, 3]}
    config = config_of(tmp_path / "results", grid=grid, exclude=[], repeats="until_decided",
                       until_decided={"budget": "7m"}, allow_oversubscribe=True)  # fmt: skip
    study = Study.from_config(config)
    assert len(study.cells) == 12 and len(study.summaries()) == 36
    with pytest.raises(ConfigError, match=r"until_decided.budget.*36 runs \(3 per cell x 12 cells\) at about 23 s a "
                                          r"run \(the plan's estimate\) take about 13.8 min.*at least 14m") as err:  # fmt: skip
        study.check_first_round(23.0)
    assert err.value.key == "until_decided.budget"
    study.check_first_round(10.0)  # 6 min: paid
    # once the first round is decided, the rounds after it are cut to the budget left (plan_round)
    Path(study.layout.round_file(0)).parent.mkdir(parents=True)
    design.Decision(0, True, {}, {}, {}, (), {"runs": 36, "seconds": 828.0}, {}, {}).write(study.layout.round_file(0))
    study.check_first_round(23.0)
    with pytest.raises(ConfigError, match="until_decided.max_runs") as err:
        Study.from_config({**config, "until_decided": {**config["until_decided"], "max_runs": 30}})
    assert "at least 36" in str(err.value)


def test_excludes_a_preset_inherited_from_config_yaml_are_not_named_when_they_match_nothing(tmp_path):
    """Issue 68: a preset that writes no `exclude` keeps config.yaml's (Snakemake replaces a list
    whole); the plan names an unmatched exclude only where the user wrote it."""
    from ddpbench.plan.study import excludes_inherited

    assert excludes_inherited(["mine.yaml"], {"grid": {}}) and not excludes_inherited([], {})
    assert not excludes_inherited(["mine.yaml"], {"exclude": []})  # the preset's (or --config's) own
    config = config_of(tmp_path, grid={"world_size": [2], "strategy": ["ddp", "allreduce"]},
                       exclude=yaml.safe_load((REPO_ROOT / "config.yaml").read_text())["exclude"])  # fmt: skip
    said: list[str] = []
    Study.from_config(config, said.append, excludes_inherited=True)
    assert not any("matches no cell" in line for line in said), said
    Study.from_config(config, said.append)
    assert [line for line in said if "matches no cell" in line] == [
        "ddpbench: exclude[0] matches no cell of the grid", "ddpbench: exclude[1] matches no cell of the grid"]
