"""Each finished run's line says how far the grid is and how long the rest will take."""

from ddpbench.results import progress


def test_progress_counts_finished_runs_and_estimates_the_rest(tmp_path, monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    assert progress.advance("a cell by hand") == ""
    clock = iter([1000.0, 1030.0, 1030.0, 1060.0, 1060.0, 1090.0, 1090.0])
    monkeypatch.setattr(progress.time, "time", lambda: next(clock))
    progress.start(tmp_path / "progress.json", 3)
    assert progress.advance("run 1") == "1/3 runs, 30 s elapsed, about 60 s left"
    assert progress.advance("run 2") == "2/3 runs, 60 s elapsed, about 30 s left"
    assert progress.advance("run 3") == "3/3 runs, 1 min 30 s elapsed, done"
    assert (tmp_path / "progress.log").read_text().count("\n") == 3


def test_durations_read_as_people_say_them():
    assert [progress.duration(s) for s in (5, 89, 130, 1800, 7200)] == ["5 s", "89 s", "2 min 10 s", "30 min", "2.0 h"]


def test_the_progress_line_starts_from_the_plans_estimate_and_moves_to_the_runs_measured(tmp_path, monkeypatch):
    """Issue 68: the plan said "about 14 min" for 36 runs, the progress line then "about 42 min
    left": the time before the first run finished (the workflow's start) counted as a run. Both
    now come from the plan's estimate of a run (plan.estimate.RunEstimate); the spans between
    runs finished move it, the first span (the start) never."""
    from ddpbench.plan.estimate import RunEstimate, time_estimate

    estimate = RunEstimate(23.0, "a default")
    assert "36 run(s) to measure, about 14 min (23 s a run" in time_estimate([{}] * 12, "3 first", 36, tmp_path,
                                                                             estimate=estimate)  # fmt: skip
    monkeypatch.delenv(progress.ENV, raising=False)
    clock = iter([1000.0, 1083.0, 1083.0, 1106.0, 1106.0, 1152.0, 1152.0])  # a slow start, a 23 s run, a 46 s one
    monkeypatch.setattr(progress.time, "time", lambda: next(clock))
    progress.start(tmp_path / "progress.json", 36, 1, estimate.per_run_s)
    assert progress.advance("run 1") == "round 1: 1/36 runs, 83 s elapsed, about 13 min left"  # 35 x 23 s, not 35 x 83
    assert progress.advance("run 2") == "round 1: 2/36 runs, 1 min 46 s elapsed, about 13 min left"  # 34 x 23
    assert progress.advance("run 3") == "round 1: 3/36 runs, 2 min 32 s elapsed, about 16 min left"  # 33 x (2 x 23 + 23 + 46) / 4


def test_a_progress_log_line_it_cannot_read_is_no_span():
    assert progress.run_seconds(10.0, [5.0, float("nan"), 30.0], 0.0) == 10.0
    assert progress.run_seconds(None, [30.0, 60.0], 0.0) == 30.0
