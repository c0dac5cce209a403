"""benchmarks/run_phases.py (issue 73, item 1): where a run's time goes, read from the timelines
of a main job's runs.csv; a folder without one is named."""

from __future__ import annotations

import importlib.util
import pathlib

import pandas as pd
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("run_phases", ROOT / "benchmarks" / "run_phases.py")
run_phases = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_phases)


def runs_csv(folder: pathlib.Path) -> pathlib.Path:
    """Two runs of 5 s each, 3 s of torchrun and 1 s timed, the second starting 5 s after the first ends."""
    rows = []
    for start in (100.0, 110.0):
        row = {f"timeline_{s}_s": 0.0 for s in run_phases.SPANS}
        row.update(timeline_torchrun_s=3.0, timeline_timed_steps_s=1.0, timeline_teardown_s=1.0, status="ok",
                   timeline_launcher_start=start, timeline_launcher_exit=start + 5.0)  # fmt: skip
        rows.append(row)
    rows.append({**rows[0], "status": "failed"})  # a failed run is not counted
    (folder / "aggregate").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / "aggregate" / "runs.csv", index=False)
    return folder


def test_each_span_its_median_and_share_and_the_timed_share_of_the_designs_wall(tmp_path, capsys):
    col = run_phases.column(run_phases.runs_table(str(runs_csv(tmp_path / "r"))))
    assert col["torchrun"] == "3.00 s (60 %)" and col["timed_steps"] == "1.00 s (20 %)" and col["runs"] == "2"
    assert col["seconds timed, of the runs' walls"] == "2 s of 10 s (20.0 %)"
    assert col["share of the design's wall timed"].startswith("13.3 % (15 s")  # 2 s of 100 → 115
    assert run_phases.main([f"quiet={tmp_path / 'r'}"]) == 0
    out = capsys.readouterr().out
    assert "| span (median a run, share of the runs' summed wall) | quiet |" in out and "| torchrun | 3.00 s (60 %) |" in out


def test_a_folder_without_runs_or_timelines_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no runs.csv at"):
        run_phases.runs_table(str(tmp_path))
    pd.DataFrame([{"status": "ok"}]).to_csv(tmp_path / "old.csv", index=False)
    with pytest.raises(SystemExit, match="has no timeline_launcher_s"):
        run_phases.runs_table(str(tmp_path / "old.csv"))
