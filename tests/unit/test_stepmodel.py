"""The step model (ddpbench.stepmodel) on synthetic timelines with known answers: runs whose compute,
communication and exposure follow stated laws (and small run-to-run noise) are fitted, and cells the
fit never saw are predicted within a few percent; the schedules' closed form against an event
simulation; refusals that name what to run."""

import numpy as np
import pandas as pd
import pytest
from stepmodel_synth import SCALING, STRATEGIES, synthetic_runs, true_parts

from ddpbench import stepmodel as M
from ddpbench.stepmodel.schedule import overlap_share

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


@pytest.mark.parametrize("seed", range(5))
def test_the_overlap_law_is_what_an_event_simulation_of_buckets_on_one_stream_gives(seed):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        n, window, comm = int(rng.integers(1, 12)), rng.uniform(0.001, 0.1), rng.uniform(0.001, 0.1)
        free = 0.0
        for i in range(1, n + 1):  # bucket i ready at window i / n; the stream takes one at a time
            free = max(free, window * i / n) + comm / n
        assert overlap_share(n, window, comm) * comm == pytest.approx(free - window, rel=1e-9, abs=1e-12)


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
