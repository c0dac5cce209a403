"""The step model (ddpbench.stepmodel) on synthetic timelines with known answers: runs whose compute,
communication and exposure follow stated laws (and small run-to-run noise) are fitted, and cells the
fit never saw are predicted within a few percent; the schedules' closed form against an event
simulation, and the simulation over DDP's recorded bucket readiness; refusals that name what to run."""

import numpy as np
import pandas as pd
import pytest
from stepmodel_synth import SCALING, STRATEGIES, synthetic_runs, true_parts

from ddpbench import stepmodel as M
from ddpbench.core.run_record import Extra
from ddpbench.stepmodel.schedule import overlap_share, resampled, simulated_share

pytestmark = pytest.mark.unit

def test_the_largest_world_size_is_predicted_from_the_smaller_ones_within_a_few_percent():
    model = M.fit(synthetic_runs(SCALING))
    targets = pd.DataFrame([dict(strategy=s, world_size=8, per_rank_batch=16, batch_size=128, model="mlp", device="cpu",
                                 backend="gloo", nodes=1, link="none", bucket_mb=25.0) for s in STRATEGIES])  # fmt: skip
    got = model.predict(targets)
    for _, row in got.iterrows():
        compute, comm, exposed, *_ = true_parts(row["strategy"], 8, 16)
        truth = compute + exposed
        assert row["step_time_s"] == pytest.approx(truth, rel=0.03), row["strategy"]
        assert row["step_time_s_low"] <= truth <= row["step_time_s_high"], row["strategy"]
        assert row["comm_s"] == pytest.approx(comm, rel=0.05)
        assert row["samples_per_s"] == pytest.approx(128 / row["step_time_s"])
        assert "world size 8 > 4" in row["beyond_validated"]


def test_a_bucket_size_never_measured_changes_ddps_calls_and_exposure_as_the_schedule_says():
    runs = synthetic_runs(SCALING + [("ddp", 2, 64, 1.0), ("ddp", 4, 32, 1.0)])
    model = M.fit(runs)
    target = pd.DataFrame([dict(strategy="ddp", world_size=4, per_rank_batch=32, batch_size=128, model="mlp", device="cpu",
                                backend="gloo", nodes=1, link="none", bucket_mb=2.0)])  # fmt: skip
    got = model.predict(target).iloc[0]
    compute, comm, exposed, calls, _ = true_parts("ddp", 4, 32, 2.0)
    assert calls == 4
    assert got["exposed_comm_s"] == pytest.approx(exposed, rel=0.1)
    assert got["step_time_s"] == pytest.approx(compute + exposed, rel=0.03)


def test_a_slower_link_is_predicted_from_the_measured_links_efficiency():
    links = [("1gbit", 1e9), ("500mbit", 5e8), ("200mbit", 2e8)]
    cells = [("single", 1, 32)] + [(s, 2, 32, 25.0, name, bps) for s in ("allreduce", "gather_scatter") for name, bps in links]
    model = M.fit(synthetic_runs(cells))
    target = pd.DataFrame([dict(strategy="allreduce", world_size=2, per_rank_batch=32, batch_size=64, model="mlp",
                                device="cpu", backend="gloo", nodes=2, link="100mbit", bucket_mb=25.0)])  # fmt: skip
    got = model.predict(target).iloc[0]
    compute, comm, exposed, *_ = true_parts("allreduce", 2, 32, bw=0.9 * 1e8 / 8)
    assert got["step_time_s"] == pytest.approx(compute + exposed, rel=0.03)
    assert "100mbit" in got["note"]
    # through the root the link carries the gather in, then the scatter out: twice its bytes' time, which the
    # law says itself, leaving gather_scatter no efficiency of its own to fit
    assert np.exp(model.links.log_phi["gather_scatter"][0]) == pytest.approx(1.0, abs=0.03)
    v = M.validate(synthetic_runs(cells))
    held = v.table[v.table["held_out"].str.startswith("each link")]
    assert held["held_out"].str.extract(r"\((\w+),")[0].tolist() == ["200mbit"] * 2 + ["500mbit"] * 2 + ["1gbit"] * 2
    assert (held["rel_error"].abs() < 0.03).all() and held["covered"].all()


@pytest.mark.parametrize("seed", range(5))
def test_the_overlap_law_is_what_an_event_simulation_of_buckets_on_one_stream_gives(seed):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        n, window, comm = int(rng.integers(1, 12)), rng.uniform(0.001, 0.1), rng.uniform(0.001, 0.1)
        free = 0.0
        for i in range(1, n + 1):  # bucket i ready at window i / n; the stream takes one at a time
            free = max(free, window * i / n) + comm / n
        assert overlap_share(n, window, comm) * comm == pytest.approx(free - window, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_the_simulation_over_buckets_ready_evenly_is_the_closed_form(seed):
    rng = np.random.default_rng(seed)
    for n in range(1, 12):
        window, comm = rng.uniform(0.001, 0.1, 20), rng.uniform(0.001, 0.1, 20)  # a draw each
        even = simulated_share(np.arange(1, n + 1) / n, np.full(n, 1 / n), window, comm)
        assert even == pytest.approx(overlap_share(n, window, comm), rel=1e-9, abs=1e-12)


def test_buckets_ready_late_leave_more_exposed_than_even_ones():
    window, comm, n = 0.05, np.array([0.005, 0.02, 0.08]), 4
    even = simulated_share(np.arange(1, n + 1) / n, np.full(n, 1 / n), window, comm)
    at_the_end = simulated_share(np.ones(n), np.full(n, 1 / n), window, comm)
    late = simulated_share([0.7, 0.8, 0.9, 1.0], np.full(n, 1 / n), window, comm)
    assert (at_the_end > even).all() and at_the_end == pytest.approx(1.0)  # nothing left to hide behind
    # A stream that keeps up leaves the last bucket exposed either way; one that falls behind, more.
    assert (late >= even).all() and late[-1] > even[-1] and (late < at_the_end).all()
    # A large last bucket is exposed longer than a small one ready at the same times.
    assert (simulated_share([0.5, 1.0], [0.2, 0.8], window, comm) > simulated_share([0.5, 1.0], [0.8, 0.2], window, comm)).all()


def test_another_bucket_count_follows_the_measured_readiness_curve():
    ready, shares = resampled([0.5, 1.0], [1, 3], 2)
    assert ready.tolist() == [0.5, 1.0] and shares.tolist() == [0.25, 0.75]  # the measured buckets
    # Cumulative bytes ready: 0 at 0, 1/4 at 0.5, all at 1.0; two equal buckets: the first is complete at
    # half the bytes, 1/3 of the way from 0.5 to 1.0.
    ready, shares = resampled([0.5, 1.0], [1, 3], 3)
    assert ready == pytest.approx([0.5 + 0.5 * (1 / 3 - 1 / 4) / (3 / 4), 0.5 + 0.5 * (2 / 3 - 1 / 4) / (3 / 4), 1.0])
    assert shares == pytest.approx([1 / 3] * 3)
    assert resampled([0.5, 1.0], None, 1)[0].tolist() == [1.0]  # one bucket: ready with the last gradient


def test_measure_reads_the_recorded_readiness_from_runs_csv(tmp_path):
    """runs.csv's text form (space-separated, run_record.numbers_text): the median per bucket over a
    cell's repeats, over the runs with the most common bucket count; a single bucket pandas reads as a
    number; cells without a record have none."""
    runs = synthetic_runs([("single", 1, 64), ("ddp", 2, 32, 1.0), ("allreduce", 2, 32)], repeats=4)
    ddp = runs.index[runs["strategy"] == "ddp"]
    runs.loc[ddp, Extra.bucket_ready] = ["0.2 0.6 0.95", "0.3 0.7 0.97", "0.25 0.65 0.96", "0.5 0.9"]
    runs.loc[ddp, Extra.bucket_bytes] = ["400 800 1200"] * 3 + ["400 2000"]
    runs.to_csv(tmp_path / "runs.csv", index=False)
    cells = M.measure(pd.read_csv(tmp_path / "runs.csv")).cells.set_index("strategy")
    assert cells.loc["ddp", "bucket_ready"] == pytest.approx((0.25, 0.65, 0.96))
    assert cells.loc["ddp", "bucket_bytes"] == (400.0, 800.0, 1200.0)
    assert cells.loc["allreduce", "bucket_ready"] is None and cells.loc["single", "bucket_bytes"] is None
    one = synthetic_runs([("ddp", 2, 32)], repeats=2)
    one[Extra.bucket_ready] = "0.98"
    one.to_csv(tmp_path / "one.csv", index=False)
    assert pd.read_csv(tmp_path / "one.csv")[Extra.bucket_ready].dtype == float
    assert M.measure(pd.read_csv(tmp_path / "one.csv")).cells["bucket_ready"].iloc[0] == (0.98,)


LATE = tuple(np.linspace(0.7, 1.0, 8))  # gradients arriving late in backward (a large first layer, say)


def test_recorded_readiness_carries_ddps_exposure_to_other_world_sizes_and_bucket_sizes():
    cells = SCALING + [("ddp", 2, 64, 1.0), ("ddp", 4, 32, 1.0)]
    recorded = M.fit(synthetic_runs(cells, ready=LATE))
    unrecorded = M.fit(synthetic_runs(cells, ready=LATE).drop(columns=[Extra.bucket_ready]))
    for p, b, bucket in ((8, 16, 1.0), (8, 16, 2.0), (4, 32, 0.5)):
        target = pd.DataFrame([dict(strategy="ddp", world_size=p, per_rank_batch=b, batch_size=128, model="mlp",
                                    device="cpu", backend="gloo", nodes=1, link="none", bucket_mb=bucket)])  # fmt: skip
        compute, comm, exposed, calls, _ = true_parts("ddp", p, b, bucket, ready=LATE)
        got = recorded.predict(target).iloc[0]
        assert got["exposed_comm_s"] == pytest.approx(exposed, rel=0.05), (p, bucket)
        assert got["step_time_s"] == pytest.approx(compute + exposed, rel=0.03), (p, bucket)
        even = unrecorded.predict(target).iloc[0]
        assert abs(np.log(got["exposed_comm_s"] / exposed)) < abs(np.log(even["exposed_comm_s"] / exposed)), (p, bucket)


def test_what_was_never_measured_is_refused_naming_what_to_run():
    model = M.fit(synthetic_runs(SCALING))
    base = dict(world_size=2, per_rank_batch=64, batch_size=128, model="mlp", device="cpu", backend="gloo", nodes=1,
                link="none", bucket_mb=25.0)  # fmt: skip
    with pytest.raises(M.MissingPart, match="run single at per-rank batch 64"):
        model.predict(pd.DataFrame([dict(base, strategy="allreduce", model="resnet18")]))
    with pytest.raises(M.MissingPart, match="bucketed_allreduce never communicated.*world size >= 2"):
        model.predict(pd.DataFrame([dict(base, strategy="bucketed_allreduce")]))
    with pytest.raises(M.MissingPart, match="cpu/gloo/2 node\\(s\\)/unshaped"):
        model.predict(pd.DataFrame([dict(base, strategy="allreduce", nodes=2, link="unshaped")]))
    with pytest.raises(M.MissingPart, match="pipeline"):
        model.predict(pd.DataFrame([dict(base, strategy="pipeline")]))
    rows = model.predict(pd.DataFrame([dict(base, strategy="bucketed_allreduce")]), strict=False)
    assert np.isnan(rows["step_time_s"].iloc[0]) and "never communicated" in rows["note"].iloc[0]


def test_held_out_cells_are_predicted_and_their_intervals_are_judged_without_themselves():
    v = M.validate(synthetic_runs(SCALING + [(s, 8, 16) for s in STRATEGIES]))
    each = v.summary.set_index("held_out").loc["each cell"]
    assert each["predicted"] == each["cells"] == 9
    assert each["median_abs_error"] < 0.03 and each["coverage"] >= 0.9
    largest = v.table[v.table["held_out"].str.startswith("largest world size (p = 8)")]
    assert len(largest) == 3 and (largest["rel_error"].abs() < 0.05).all()
    assert 0 < v.model.widen < 0.05 and v.model.validated["world_size"] == 8


def test_noise_in_the_repeats_widens_the_interval():
    quiet = M.fit(synthetic_runs(SCALING, sigma=0.002))
    noisy = M.fit(synthetic_runs(SCALING, sigma=0.05))
    target = pd.DataFrame([dict(strategy="allreduce", world_size=8, per_rank_batch=16, batch_size=128, model="mlp",
                                device="cpu", backend="gloo", nodes=1, link="none", bucket_mb=25.0)])  # fmt: skip
    width = [(lambda r: r["step_time_s_high"] / r["step_time_s_low"])(m.predict(target).iloc[0]) for m in (quiet, noisy)]
    assert np.log(width[1]) > 5 * np.log(width[0]) > 0


def test_a_cap_on_the_one_at_a_time_hold_outs_spreads_them_over_the_cells_and_says_so():
    runs = synthetic_runs(SCALING + [(s, 8, 16) for s in STRATEGIES])
    v = M.validate(runs, max_each=3)
    each = v.table[v.table["held_out"] == "each cell"]
    assert len(each) == 3 and each["cell"].str.extract(r"strategy=(\w+)")[0].nunique() == 3  # one of each strategy
    assert v.summary.set_index("held_out").loc["each cell", "cells"] == 3
    assert any(n.startswith("each cell: 3 of the 9 cells that communicate") for n in v.notes)
    assert len(v.table[v.table["held_out"].str.startswith("largest world size")]) == 3  # the blocks as before
