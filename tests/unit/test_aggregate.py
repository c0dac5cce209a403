"""aggregate flattens summaries per the contract and streams the per-rank step rows."""

import csv
import json

import numpy as np
import pytest

from ddpbench.results import aggregate
from ddpbench.core.params import CellParams


def make_run(root, strategy="ddp", world_size=2, repeat=0, status="ok", steps=3):
    run_dir = root / f"device~cpu/world_size~{world_size}/strategy~{strategy}/repeat~{repeat}"
    run_dir.mkdir(parents=True)
    params = CellParams(strategy=strategy).as_dict()
    summary = {
        "schema": 1,
        "status": status,
        "reason": "" if status == "ok" else "boom",
        "params": params,
        "world_size": world_size,
        "nodes": 1,
        "samples_per_s": 123.5 if status == "ok" else None,
        "peak_rss_mb_per_rank": [1.0, 2.0],
        "extra": {"bubble_fraction": 0.25, "per_layer": [1, 2]},
        "env": {"host": "h", "cores": 2, "env_vars": {"OMP_NUM_THREADS": "1"}},
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))
    for rank in range(world_size):
        with open(run_dir / f"steps_rank{rank}.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=aggregate.STEP_COLUMNS)
            writer.writeheader()
            for step in range(steps):
                writer.writerow({c: 0 for c in aggregate.STEP_COLUMNS} | {"step": step, "rank": rank})
    return run_dir / "summary.json"


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_runs_and_steps_tables(tmp_path):
    summaries = [
        make_run(tmp_path, "ddp", 2, 0),
        make_run(tmp_path, "allreduce", 1, 1, status="failed", steps=0),
    ]
    assert aggregate.aggregate(summaries, tmp_path / "a/runs.csv", tmp_path / "a/steps.csv") == (2, 6, 0)
    runs = read(tmp_path / "a/runs.csv")
    header = list(runs[0])
    assert header[:4] == ["run_dir", "repeat", "world_size", "nodes"]
    assert header[4 : 4 + len(CellParams.names())] == list(CellParams.names())
    assert [r["strategy"] for r in runs] == ["ddp", "allreduce"]
    assert [r["repeat"] for r in runs] == ["0", "1"]
    assert runs[0]["samples_per_s"] == "123.5" and runs[1]["samples_per_s"] == ""
    assert runs[1]["status"] == "failed" and runs[1]["reason"] == "boom"
    assert runs[0]["extra_bubble_fraction"] == "0.25" and "extra_per_layer" not in header
    assert runs[0]["env_host"] == "h" and runs[0]["env_var_OMP_NUM_THREADS"] == "1"
    assert "peak_rss_mb_per_rank" not in header and "schema" not in header
    steps = read(tmp_path / "a/steps.csv")
    assert list(steps[0])[:10] == list(aggregate.STEP_KEYS)
    assert [s["rank"] for s in steps] == ["0", "0", "0", "1", "1", "1"]
    assert {s["strategy"] for s in steps} == {"ddp"} and steps[0]["world_size"] == "2"


def test_unreadable_summary_is_a_failed_row_with_path_params(tmp_path, capsys):
    run_dir = tmp_path / "device~cpu/world_size~2/strategy~ddp/batch_size~32/repeat~2"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text("{not json")
    listing = tmp_path / "list.txt"
    listing.write_text(f"{run_dir / 'summary.json'}\n")
    args = ["--summaries-from", str(listing), "--runs", str(tmp_path / "r.csv"), "--steps", str(tmp_path / "s.csv")]
    assert aggregate.main(args) == 0
    (row,) = read(tmp_path / "r.csv")
    assert row["status"] == "failed" and "unreadable" in row["reason"]
    assert (row["strategy"], row["batch_size"], row["world_size"], row["repeat"]) == ("ddp", "32", "2", "2")
    assert read(tmp_path / "s.csv") == []
    assert "1 runs" in capsys.readouterr().out


def write_summary(root, parts, summary):
    run_dir = root.joinpath(*parts)
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir / "summary.json"


def test_nodes_come_from_the_summary_and_default_to_one(tmp_path):
    two = write_summary(tmp_path, ["world_size~4", "repeat~0"], {"status": "ok", "world_size": 4, "nodes": 2})
    none = write_summary(tmp_path, ["world_size~2", "repeat~1"], {"status": "ok"})
    rows = [aggregate.run_row(two), aggregate.run_row(none)]
    assert [(r["world_size"], r["nodes"]) for r in rows] == [(4, 2), ("2", 1)]  # path values stay strings


def test_a_failure_block_becomes_failure_columns(tmp_path):
    failure = {"rank": 1, "kind": "signal", "signal": "SIGKILL", "step": 5, "phase": "at step 5 (backward)",
               "reason": "rank 1 killed by SIGKILL at step 5 (backward)", "secondary": ["rank 0 ..."]}  # fmt: skip
    row = aggregate.run_row(write_summary(tmp_path, ["repeat~0"], {"status": "failed", "failure": failure}))
    assert {k: v for k, v in row.items() if k.startswith("failure_")} == {
        f"failure_{k}": v for k, v in failure.items() if k != "secondary"  # lists are dropped
    }


def test_only_extra_env_and_failure_dicts_are_flattened(tmp_path):
    """A dict under any other key is dropped, and inside env only env_vars is flattened."""
    summary = {
        "status": "ok",
        "timing": {"median": 1.5},  # not extra/env: dropped, not flattened
        "env": {"host": "h", "gpu": {"name": "a100"}, "env_vars": {"OMP_NUM_THREADS": "1", "LIST": [1]}},
    }
    row = aggregate.run_row(write_summary(tmp_path, ["repeat~0"], summary))
    flattened = sorted(k for k in row if k.startswith(("env", "extra", "timing", "median", "name")))
    assert flattened == ["env_host", "env_var_OMP_NUM_THREADS"]


def test_env_that_is_not_a_dict_is_a_scalar_column(tmp_path):
    row = aggregate.run_row(write_summary(tmp_path, ["repeat~0"], {"status": "ok", "env": "container"}))
    assert row["env"] == "container"


def test_tables_are_written_into_missing_nested_folders(tmp_path):
    summary = make_run(tmp_path, steps=1)
    assert aggregate.aggregate([summary], tmp_path / "x/y/runs.csv", tmp_path / "x/z/steps.csv") == (1, 2, 0)
    assert len(read(tmp_path / "x/y/runs.csv")) == 1


def test_step_files_are_read_in_numeric_rank_order_odd_names_last(tmp_path):
    run_dir = tmp_path / "repeat~0"
    run_dir.mkdir()
    for name in ("steps_rank10.csv", "steps_rankold.csv", "steps_rank2.csv", "steps_rank0.csv"):
        (run_dir / name).write_text("")
    assert [p.name for p in aggregate._step_files(run_dir)] == [
        "steps_rank0.csv", "steps_rank2.csv", "steps_rank10.csv", "steps_rankold.csv",
    ]  # fmt: skip


def test_command_line_requires_both_tables_and_describes_itself(tmp_path, capsys):
    for missing in (["--steps", str(tmp_path / "s.csv")], ["--runs", str(tmp_path / "r.csv")]):
        with pytest.raises(SystemExit):
            aggregate.main(missing)
    assert not (tmp_path / "r.csv").exists() and not (tmp_path / "s.csv").exists()
    with pytest.raises(SystemExit):
        aggregate.main(["--help"])
    assert "Merge runs into two tidy tables" in capsys.readouterr().out


def test_a_truncated_summary_is_a_named_damaged_row_that_names_the_verb_that_reruns_it(tmp_path):
    good = make_run(tmp_path, "ddp", 2, 0)
    bad = make_run(tmp_path, "allreduce", 2, 1)
    bad.write_text(bad.read_text()[:40])  # cut mid-write, as a full disk or a crash leaves it
    aggregate.aggregate([good, bad], tmp_path / "runs.csv", tmp_path / "steps.csv")
    row = read(tmp_path / "runs.csv")[1]
    assert row["status"] == "failed" and row["failure_kind"] == "damaged"
    assert str(bad.parent) in row["reason"] and "unreadable summary.json" in row["reason"]
    assert "`ddpbench status --rerun` moves it aside and measures it again" in row["reason"]
    assert row["strategy"] == "allreduce" and row["repeat"] == "1"  # from its path
    assert bad.exists(), "aggregating only reads a result folder"

    assert aggregate.damage(good) is None and "unreadable" in aggregate.damage(bad)
    assert aggregate.checked_summary(good)[1] is None and aggregate.checked_summary(good)[0]["status"] == "ok"


def test_an_ok_summary_whose_step_files_are_missing_is_damaged(tmp_path):
    summary = make_run(tmp_path, "ddp", 2, 0)
    (summary.parent / "steps_rank1.csv").unlink()
    aggregate.aggregate([summary], tmp_path / "runs.csv", tmp_path / "steps.csv")
    row = read(tmp_path / "runs.csv")[0]
    assert row["status"] == "failed" and row["failure_kind"] == "damaged"
    assert "1 of 2 ranks' step files are missing" in row["reason"] and str(summary.parent) in row["reason"]
    assert row["strategy"] == "ddp" and row["world_size"] == "2"  # the summary's own parameters kept


def test_a_failed_run_without_step_files_is_not_damaged(tmp_path):
    summary = make_run(tmp_path, "ddp", 2, 0, status="failed", steps=0)
    for path in summary.parent.glob("steps_rank*.csv"):
        path.unlink()
    assert aggregate.damage(summary) is None
    aggregate.aggregate([summary], tmp_path / "runs.csv", tmp_path / "steps.csv")
    assert read(tmp_path / "runs.csv")[0]["reason"] == "boom"


def test_the_timeline_becomes_columns_and_old_summaries_without_one_still_aggregate(tmp_path):
    from ddpbench import analysis
    from ddpbench.analysis.cells import TIMELINE_COLUMNS
    from ddpbench.core import run_output

    new = json.loads(make_run(tmp_path, "ddp", 2, 0).read_text())
    marks = {name: 100.0 + i for i, name in enumerate(run_output.TIMELINE_MARKS)}
    new = run_output.with_timeline({**new, "timed_wall_s": 0.25}, marks)
    (tmp_path / "device~cpu/world_size~2/strategy~ddp/repeat~0/summary.json").write_text(json.dumps(new))
    old = make_run(tmp_path, "ddp", 2, 1)  # from before the timeline: no timeline, timeline_s, fixed_cost_s
    summaries = [tmp_path / "device~cpu/world_size~2/strategy~ddp/repeat~0/summary.json", old]
    aggregate.aggregate(summaries, tmp_path / "runs.csv", tmp_path / "steps.csv")
    rows = read(tmp_path / "runs.csv")
    assert rows[0]["timeline_launcher_start"] == "100.0" and rows[0]["timeline_imports_s"] == "1.0"
    assert rows[0]["fixed_cost_s"] == "10.75"  # (111 - 100) - 0.25
    assert rows[1]["timeline_launcher_start"] == rows[1]["fixed_cost_s"] == rows[1]["timeline_imports_s"] == ""
    cells = analysis.cell_stats(analysis.load_runs(tmp_path / "runs.csv"))
    assert cells.iloc[0]["fixed_cost_s"] == 10.75 and cells.iloc[0]["timeline_imports_s"] == 1.0  # the one that has it
    only_old = analysis.cell_stats(analysis.load_runs_frame(analysis.load_runs(tmp_path / "runs.csv").iloc[[1]]))
    assert np.isnan(only_old.iloc[0]["fixed_cost_s"]) and np.isnan(only_old.iloc[0]["timeline_setup_s"])
    older = analysis.load_runs(tmp_path / "runs.csv").drop(columns=[c for c in rows[0] if "timeline" in c or "fixed" in c])
    assert set(TIMELINE_COLUMNS) <= set(analysis.cell_stats(older).columns)  # the columns always exist


def test_profile_table_only_when_a_run_was_profiled_and_a_stale_one_goes(tmp_path):
    from ddpbench.core.run_output import PROFILE_COLUMNS

    plain, profiled = make_run(tmp_path, "ddp", 2, 0), make_run(tmp_path, "allreduce", 2, 0)
    table = tmp_path / "t" / "profile.csv"
    assert aggregate.aggregate([plain], tmp_path / "t/runs.csv", tmp_path / "t/steps.csv") == (1, 6, 0)
    assert not table.exists()
    with open(profiled.parent / "profile.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=PROFILE_COLUMNS)
        writer.writeheader()
        for rank in range(2):
            writer.writerow(dict(rank=rank, activity="cpu", op="gloo:all_reduce", comm=1, calls=6, self_s_per_step=0.007, share=0.6))
            writer.writerow(dict(rank=rank, activity="cpu", op="other", comm=0, calls=90, self_s_per_step=0.003, share=0.4))
    assert aggregate.aggregate([plain, profiled], tmp_path / "t/runs.csv", tmp_path / "t/steps.csv") == (2, 12, 4)
    got = read(table)
    assert tuple(got[0]) == (*aggregate.STEP_KEYS, *PROFILE_COLUMNS)
    assert {r["strategy"] for r in got} == {"allreduce"} and [r["rank"] for r in got] == ["0", "0", "1", "1"]
    assert got[0]["run_dir"] == str(profiled.parent) and got[0]["op"] == "gloo:all_reduce"
    assert aggregate.aggregate([plain], tmp_path / "t/runs.csv", tmp_path / "t/steps.csv") == (1, 6, 0)
    assert not table.exists()  # no run profiled any more: the earlier table is not left to mislead


def test_status_lists_a_damaged_run_apart_and_rerun_redoes_it(tmp_path):
    """Issue 70, item 5: a damaged run is for `ddpbench status --rerun` (nothing moves while the
    workflow is read): its state is damaged, with what is wrong, whether its summary is cut short
    or its step files are missing; the report's line names the verb."""
    from ddpbench.plan import status

    cut, partial, good = (make_run(tmp_path, s, 2, 0) for s in ("allreduce", "ddp", "single"))
    cut.write_text(cut.read_text()[:40])
    (partial.parent / "steps_rank1.csv").unlink()
    now = {"code_fingerprint": "c", "lock_hash": "l", "off_lock": ""}
    env = {"code_fingerprint": "c", "lock_hash": "l", "off_lock": ""}
    good.write_text(json.dumps({**json.loads(good.read_text()), "env": env}))
    planned = {str(p.parent): {} for p in (cut, partial, good)}
    states = {s.run_dir: s for s in status.states({"runs": planned}, now)}
    assert states[str(cut.parent)].state == "damaged" and "unreadable summary.json" in states[str(cut.parent)].reasons[0]
    assert states[str(partial.parent)].state == "damaged" and "1 of 2 ranks' step files are missing" in states[str(partial.parent)].reasons[0]
    assert states[str(good.parent)].state == "current"
    said = status.report(list(states.values()), "results")
    assert "0 stale, 2 damaged, 0 not yet run" in said and f"damaged {cut.parent}" in said
    assert "rerun exactly the damaged runs: ddpbench status --rerun" in said
