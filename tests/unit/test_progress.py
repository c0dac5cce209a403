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
