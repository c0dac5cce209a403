"""benchmarks/run_length.py (issue 73, item 3): the noise of a run's throughput split into what its
steps put in (a longer run averages it out) and what differs between runs, and the time per
decision those give at each timed length."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pandas as pd
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("run_length", ROOT / "benchmarks" / "run_length.py")
run_length = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_length)


def results(folder: pathlib.Path, between: float, step_sd: float, seed: int = 0) -> pathlib.Path:
    """4 cells of 12 runs, 100 timed steps of about 10 ms on two ranks (the slower paces), each run 2 s
    of launching and 1 s timed; each run's level differs by a log-normal factor of sd `between`."""
    rng = np.random.default_rng(seed)
    runs, steps = [], []
    for c in range(4):
        for k in range(12):
            run_dir = f"results/runs/cell~{c}/repeat~{k}"
            level = 0.01 * np.exp(between * rng.standard_normal())
            paced = level * np.exp(step_sd * rng.standard_normal(100))
            for rank, x in enumerate((paced, paced * 0.5)):  # rank 1 is faster: rank 0 paces every step
                steps += [{"run_dir": run_dir, "step": i, "rank": rank, "timed": 1, "total_s": v} for i, v in enumerate(x)]
            runs.append({"run_dir": run_dir, "status": "ok", "samples_per_s": 128 / paced.mean(),
                         "timeline_launcher_start": 10.0 * k, "timeline_launcher_exit": 10.0 * k + 3.0,
                         "timeline_timed_steps_s": 1.0})  # fmt: skip
    (folder / "aggregate").mkdir(parents=True)
    pd.DataFrame(runs).to_csv(folder / "aggregate" / "runs.csv", index=False)
    pd.DataFrame(steps).to_csv(folder / "aggregate" / "steps.csv", index=False)
    return folder


def test_the_noise_is_split_into_steps_and_runs_and_the_best_length_follows(tmp_path, capsys):
    parts = run_length.noise_parts(*run_length.tables(str(results(tmp_path / "a", between=0.1, step_sd=0.2))))
    assert parts["fixed_s"] == pytest.approx(2.0) and parts["timed_s"] == pytest.approx(1.0)
    assert np.sqrt(parts["w_per_s"]) == pytest.approx(0.02, rel=0.25)  # 0.2 / sqrt(100 steps), at 1 s
    assert np.sqrt(parts["between_var"]) == pytest.approx(0.1, rel=0.35)
    # between-run noise dominates: a longer run costs more than it saves; steps' noise alone: longer is better
    assert run_length.per_decision(parts, 5.0) > run_length.per_decision(parts, 1.0)
    quiet = {**parts, "between_var": 0.0}
    assert run_length.per_decision(quiet, 5.0) < run_length.per_decision(quiet, 1.0)
    assert run_length.main([f"quiet={tmp_path / 'a'}", "--lengths", "1,5"]) == 0
    out = capsys.readouterr().out
    assert "| | quiet |" in out and "| time per decision at 1 s timed (ran at: 1.00) | 1.00 |" in out


def test_a_folder_without_its_tables_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no runs.csv in"):
        run_length.tables(str(tmp_path))
