"""`ddpbench predict RESULTS --config GRID.yaml`: a results folder whose runs follow the step model's
synthetic laws (tests/stepmodel_synth.py) with every column a runs.csv has, a grid naming cells never
run (world size 8, a bucket size never measured, a link slower than any measured), predictions.csv
checked against the laws' truth; and the refusals, each before anything is written (exit status 2,
one message saying what to do)."""

from __future__ import annotations

import copy
import re
import shutil

import pandas as pd
import pytest
import yaml

from ddpbench import REPO_ROOT, cli, stepmodel
from ddpbench.plan.config_schema import SCHEMA_PATH
from ddpbench.plan.study import Study, validate_config
from stepmodel_synth import synthetic_runs, true_parts

pytestmark = pytest.mark.unit

STRATEGIES = ("allreduce", "ddp", "gather_scatter")
MEASURED = [("single", 1, b) for b in (128, 64, 32, 16)] + [(s, p, 128 // p) for s in STRATEGIES for p in (2, 4)]
GRID = {"grid": {"world_size": [8], "strategy": ["allreduce", "ddp"], "bucket_mb": [2.0]}}


def measured_config(results) -> dict:
    """The study that measured the runs: config.yaml with its grid at world sizes 1, 2 and 4, as the
    workflow records it in the results folder (merged, validated)."""
    from snakemake.utils import update_config

    config = yaml.safe_load((REPO_ROOT / "config.yaml").read_text())
    update_config(config, {"results": str(results), "repeats": 3,
                           "grid": {"world_size": [1, 2, 4], "strategy": ["single", *STRATEGIES]}})  # fmt: skip
    validate_config(config, SCHEMA_PATH)
    return config


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """RESULTS/config.yaml and RESULTS/aggregate/runs.csv: the synthetic runs with every cell parameter
    the plan gives the measured study's cells (backend `auto`, as runs.csv records the setting)."""
    folder = tmp_path_factory.mktemp("predict") / "results"
    config = measured_config(folder)
    (folder / "aggregate").mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    study = Study.from_config(config, checks=False)
    params = study.params(study.cells.index[0])
    runs = synthetic_runs(MEASURED)
    rows = [{**params, **run, "backend": "auto", "seed": run["repeat"]} for run in runs.to_dict(orient="records")]
    pd.DataFrame(rows).to_csv(folder / "aggregate" / "runs.csv", index=False)
    return folder


def write_grid(path, grid: dict):
    path.write_text(yaml.safe_dump(grid))
    return path


def test_cells_never_run_are_predicted_within_a_few_percent_of_the_truth(results, tmp_path, capsys):
    grid = write_grid(tmp_path / "grid.yaml", GRID)
    assert cli.main(["predict", str(results), "--config", str(grid)]) == 0
    out = results / "predictions.csv"
    said = capsys.readouterr().out
    table = pd.read_csv(out)
    assert list(table.columns[-len(stepmodel.PREDICTION_COLUMNS):]) == stepmodel.PREDICTION_COLUMNS
    assert {"strategy", "world_size", "nodes", "bucket_mb", "model", "per_rank_batch", "global_batch"} <= set(table)
    assert sorted(table["strategy"]) == ["allreduce", "ddp"] and (table["world_size"] == 8).all()
    assert (table["per_rank_batch"] == 16).all() and (table["global_batch"] == 128).all()  # strong: 128 / 8
    for _, row in table.iterrows():
        compute, comm, exposed, *_ = true_parts(row["strategy"], 8, 16, row["bucket_mb"])
        assert row["step_time_s"] == pytest.approx(compute + exposed, rel=0.03), row["strategy"]
        assert row["step_time_s_low"] < row["step_time_s"] < row["step_time_s_high"]
        assert row["exposed_comm_s"] == pytest.approx(exposed, rel=0.1), row["strategy"]
        assert row["samples_per_s"] == pytest.approx(128 / row["step_time_s"])
        assert "world size 8 > 4" in row["beyond_validated"]
    assert table.loc[table["strategy"] == "ddp", "bucket_mb"].item() == 2.0  # DDP reads it: 4 buckets, not 1
    assert table["tokens_per_s"].isna().all()  # images, not tokens
    assert f"predictions: {out}" in said and "held-out error" in said and "each cell: median" in said
    assert "world size 8 > 4 held out" in said and "ddp" in said


def test_a_runs_csv_without_its_study_is_read_over_the_checkouts_config(results, tmp_path, capsys):
    """RESULTS as a runs.csv, no config.yaml beside it: GRID.yaml is merged over config.yaml, as a preset
    is, and --out says where the predictions go."""
    table = tmp_path / "elsewhere" / "runs.csv"
    table.parent.mkdir()
    table.write_bytes((results / "aggregate" / "runs.csv").read_bytes())
    grid = write_grid(tmp_path / "grid.yaml", {"grid": {"world_size": [2, 8], "strategy": ["allreduce"]}})
    out = tmp_path / "out" / "mine.csv"
    assert cli.main(["predict", str(table), "--config", str(grid), "--out", str(out)]) == 0
    got = pd.read_csv(out).set_index("world_size")
    compute, _, exposed, *_ = true_parts("allreduce", 2, 64)
    assert got.loc[2, "step_time_s"] == pytest.approx(compute + exposed, rel=0.03)
    assert pd.isna(got.loc[2, "beyond_validated"]) and "world size 8 > 4" in got.loc[8, "beyond_validated"]
    assert not (table.parent / "predictions.csv").exists() and str(out) in capsys.readouterr().out


def test_a_slower_link_named_by_its_rate_is_predicted_from_the_measured_links(tmp_path, capsys):
    """Cells over three shaped links (two nodes); GRID.yaml names a slower one by its rate."""
    folder = tmp_path / "results"
    config = measured_config(folder)
    (folder / "aggregate").mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    study = Study.from_config(config, checks=False)
    params = study.params(study.cells.index[0])
    links = [("1gbit", 1e9), ("500mbit", 5e8), ("200mbit", 2e8)]
    runs = synthetic_runs([("single", 1, 32)] + [(s, 2, 32, 25.0, n, bps) for s in ("allreduce", "gather_scatter")
                                                  for n, bps in links])  # fmt: skip
    rows = [{**params, **run, "backend": "auto", "batch_size": 32 * run["world_size"]} for run in runs.to_dict(orient="records")]
    pd.DataFrame(rows).to_csv(folder / "aggregate" / "runs.csv", index=False)
    grid = write_grid(tmp_path / "grid.yaml", {"grid": {"world_size": [2], "nodes": [2], "strategy": ["allreduce"],
                                                        "batch_size": [64], "link": ["100mbit"]}})  # fmt: skip
    assert cli.main(["predict", str(folder), "--config", str(grid)]) == 0
    row = pd.read_csv(folder / "predictions.csv").iloc[0]
    compute, _, exposed, *_ = true_parts("allreduce", 2, 32, bw=0.9 * 1e8 / 8)  # the links reach 90 % of their rate
    assert row["step_time_s"] == pytest.approx(compute + exposed, rel=0.03)
    assert "100mbit from the measured links' efficiency" in row["note"]
    assert "link 100 Mbit/s < the slowest held out, 200" in row["beyond_validated"]
    assert "each link: median" in capsys.readouterr().out


def _failed(results, tmp_path):
    folder = tmp_path / "failed"
    (folder / "aggregate").mkdir(parents=True)
    runs = pd.read_csv(results / "aggregate" / "runs.csv").assign(status="failed")
    runs.to_csv(folder / "aggregate" / "runs.csv", index=False)
    return folder


def _copy(results, tmp_path):
    return shutil.copytree(results, tmp_path / "results")


def _unchecked(results, tmp_path):
    """One strategy at one world size beside single: holding its only cell out leaves nothing to predict it from."""
    folder = shutil.copytree(results, tmp_path / "results")
    runs = pd.read_csv(folder / "aggregate" / "runs.csv")
    keep = (runs["strategy"] == "single") | ((runs["strategy"] == "allreduce") & (runs["world_size"] == 2))
    runs[keep].to_csv(folder / "aggregate" / "runs.csv", index=False)
    return folder


REFUSALS = {
    "a model never checked on held-out cells": (_unchecked, {"grid": {"world_size": [4], "strategy": ["allreduce"]}},
                                                "never checked is not a prediction.*second world size"),
    "an unmeasured model": (_copy, {"grid": {"world_size": [2], "strategy": ["ddp"], "model": ["resnet18"]}},
                            "cannot predict strategy=ddp.*model=resnet18.*run single at per-rank batch 64"),
    "an unknown key": (_copy, {"grid": {"world_size": [8], "colour": ["red"]}}, "grid.*'colour' was unexpected"),
    "batch_size auto": (_copy, {"grid": {"world_size": [2], "strategy": ["ddp"], "batch_size": ["auto"]},
                                         "params": {"scaling": "weak"}}, "batch_size~auto.*batch_size auto is chosen at run time"),
    "a folder without runs.csv": (lambda r, t: (t / "empty").mkdir() or t / "empty", GRID, "no aggregate/runs.csv in this folder"),
    "no ok run": (_failed, GRID, "no ok run with timed steps"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_what_cannot_be_predicted_is_refused_before_anything_is_written(results, tmp_path, capsys, case):
    folder_of, grid, said = REFUSALS[case]
    folder = folder_of(results, tmp_path)
    before = sorted(p.name for p in folder.iterdir())
    path = write_grid(tmp_path / "grid.yaml", copy.deepcopy(grid))  # beside RESULTS, not in it
    assert cli.main(["predict", str(folder), "--config", str(path)]) == 2
    err = capsys.readouterr()
    assert err.out == "" and err.err.startswith("ddpbench predict: ") and len(err.err.strip().splitlines()) == 1
    assert re.search(said, err.err), err.err
    assert sorted(p.name for p in folder.iterdir()) == before  # no predictions.csv
