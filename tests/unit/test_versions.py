"""Runs of different code or packages are never pooled (issue 23): the rule that sets older
versions aside, the flag on ratios across versions, and the same-seed determinism check."""

import numpy as np
import pandas as pd
import pytest

from ddpbench import analysis as A


def _runs(times, fingerprints, started, **extra):
    n = len(times)
    return pd.DataFrame(
        {
            "device": ["cpu"] * n, "world_size": [1] * n, "strategy": ["single"] * n, "batch_size": [64] * n,
            "status": ["ok"] * n, "reason": [""] * n, "dataset_size": [1000] * n,
            "epoch_time_s": times, "samples_per_s": [1000 / t for t in times],
            "env_code_fingerprint": fingerprints, "env_off_lock": [""] * n, "env_started_utc": started,
            **extra,
        }
    )  # fmt: skip


def test_a_code_change_between_repeats_is_not_pooled():
    # Two repeats with the old code (fast), one with the new (slow), started last.
    runs = A.load_runs_frame(
        _runs([1.0, 1.02, 2.0], ["old", "old", "new"], ["2026-11-23T01:00:00Z", "2026-11-23T01:01:00Z", "2026-11-23T02:00:00Z"])
    )
    assert list(runs["status"]) == ["superseded", "superseded", "ok"]
    assert "(old)" in runs["reason"][0] and "(new)" in runs["reason"][0]
    cell = A.cell_stats(runs).iloc[0]
    assert cell["n_repeats"] == 1 and cell["n_superseded"] == 2
    assert cell["epoch_time_s"] == 2.0  # the new code's value, not a blend


def test_the_newest_version_wins_whatever_the_row_order():
    runs = A.load_runs_frame(
        _runs([2.0, 1.0, 1.02], ["new", "old", "old"], ["2026-11-23T02:00:00Z", "2026-11-23T01:00:00Z", "2026-11-23T01:01:00Z"])
    )
    assert list(runs["status"]) == ["ok", "superseded", "superseded"]


def test_an_off_lock_run_is_a_version_of_its_own_and_is_counted():
    runs = _runs([1.0, 1.0, 1.1], ["a", "a", "a"], ["2026-11-23T01:00:00Z", "2026-11-23T01:01:00Z", "2026-11-23T03:00:00Z"])
    runs.loc[2, "env_off_lock"] = "torch 2.13.0+cpu (lock 2.15.0)"
    runs = A.load_runs_frame(runs)
    assert list(runs["status"]) == ["superseded", "superseded", "ok"]
    assert A.cell_stats(runs).iloc[0]["n_off_lock"] == 1


def test_one_version_or_none_recorded_changes_nothing():
    same = _runs([1.0, 1.1], ["a", "a"], ["x", "y"])
    assert list(A.load_runs_frame(same)["status"]) == ["ok", "ok"]
    unrecorded = same.drop(columns=["env_code_fingerprint", "env_off_lock", "env_started_utc"])
    assert list(A.load_runs_frame(unrecorded)["status"]) == ["ok", "ok"]


def test_a_speedup_across_versions_is_flagged():
    base = _runs([2.0, 2.1], ["a", "a"], ["1", "2"])
    cell = _runs([1.0, 1.1], ["b", "b"], ["3", "4"])
    cell["strategy"], cell["world_size"] = "ddp", 2
    same = _runs([1.0, 1.1], ["a", "a"], ["3", "4"])
    same["strategy"], same["world_size"] = "ddp", 2
    flagged = A.speedup_table(A.load_runs_frame(pd.concat([base, cell], ignore_index=True)))
    assert flagged.set_index("strategy").loc["ddp", "versions_differ"]
    clean = A.speedup_table(A.load_runs_frame(pd.concat([base, same], ignore_index=True)))
    assert not clean.set_index("strategy").loc["ddp", "versions_differ"]


def test_same_seed_cpu_repeats_that_disagree_are_flagged():
    agree = _runs([1.0, 1.1], ["a", "a"], ["1", "2"], seed=[0, 0], total_steps=[30, 30],
                  env_threads_per_rank=[1, 1], param_norm=[3.25, 3.25], train_loss_final=[1.5, 1.5])  # fmt: skip
    assert A.cell_stats(A.load_runs_frame(agree)).iloc[0]["n_nondeterministic"] == 0
    differ = agree.assign(param_norm=[3.25, 3.2500001])
    assert A.cell_stats(A.load_runs_frame(differ)).iloc[0]["n_nondeterministic"] == 2
    # a different number of steps is a different outcome, not nondeterminism
    longer = differ.assign(total_steps=[30, 31])
    assert A.cell_stats(A.load_runs_frame(longer)).iloc[0]["n_nondeterministic"] == 0
    # a GPU is allowed nondeterministic kernels
    gpu = differ.assign(device="cuda")
    assert A.cell_stats(A.load_runs_frame(gpu)).iloc[0]["n_nondeterministic"] == 0
    # counted per cell: two cells that each agree within themselves are not pooled
    other = agree.assign(strategy="ddp", world_size=2, param_norm=[3.5, 3.5])
    cells = A.cell_stats(A.load_runs_frame(pd.concat([agree, other, differ.assign(strategy="zero")], ignore_index=True)))
    assert dict(zip(cells["strategy"], cells["n_nondeterministic"])) == {"single": 0, "ddp": 0, "zero": 2}


def test_both_train_losses_are_checked_and_a_table_from_before_the_10_step_mean_still_loads(tmp_path):
    # Before train_loss_last10_mean had its own column, train_loss_final was that mean: such a runs.csv
    # loads, has cell statistics, and its repeats are still checked on it.
    old = _runs([1.0, 1.1], ["a", "a"], ["1", "2"], seed=[0, 0], total_steps=[30, 30], env_threads_per_rank=[1, 1],
                param_norm=[3.25, 3.25], train_loss_final=[1.5, 1.5000001])  # fmt: skip
    old.to_csv(tmp_path / "runs.csv", index=False)
    cell = A.cell_stats(A.load_runs(tmp_path / "runs.csv")).iloc[0]
    assert cell["n_nondeterministic"] == 2 and cell["train_loss_final"] == pytest.approx(1.5)
    # Now: equal last steps, but one of the last 10 steps' losses differs.
    new = old.assign(train_loss_final=[1.5, 1.5], train_loss_last10_mean=[1.7, 1.7000001])
    assert A.cell_stats(A.load_runs_frame(new)).iloc[0]["n_nondeterministic"] == 2
    assert A.cell_stats(A.load_runs_frame(new.assign(train_loss_last10_mean=1.7))).iloc[0]["n_nondeterministic"] == 0


def test_a_table_read_back_with_an_empty_reason_column_is_set_aside_too(tmp_path):
    # All runs ok: pandas reads `reason` as an all-NaN float column; the reason text must still fit.
    raw = _runs([1.0, 2.0], ["old", "new"], ["2026-11-23T01:00:00Z", "2026-11-23T02:00:00Z"])
    raw["reason"] = None
    raw.to_csv(tmp_path / "runs.csv", index=False)
    runs = A.load_runs(tmp_path / "runs.csv")
    assert list(runs["status"]) == ["superseded", "ok"] and "(old)" in runs["reason"][0]


@pytest.mark.filterwarnings("error")
def test_the_report_names_off_lock_packages_and_says_none_when_the_column_is_empty():
    from ddpbench.report import context

    runs = _runs([1.0, 1.0], ["a", "a"], ["1", "2"])
    runs["env_off_lock"] = np.nan  # read back from a CSV where no run was off the lock: a float column
    assert ("packages off the lock", "none") in context.environment(runs)
    runs["env_off_lock"] = pd.Series([np.nan, "numpy 2.0 (lock 2.1)"], dtype=object)
    assert ("packages off the lock", "numpy 2.0 (lock 2.1)") in context.environment(runs)
