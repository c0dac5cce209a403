"""Statistics and fits recover known answers from synthetic timings."""

import numpy as np
import pandas as pd
import pytest
from report_synth import make_comm, make_runs

from ddpbench import analysis as A


def test_amdahl_recovers_serial_fraction_with_3pct_noise():
    rng = np.random.default_rng(1)
    p = np.arange(1, 17)
    t = A.amdahl_time(p, 10.0, 0.1) * (1 + 0.03 * rng.standard_normal(p.size))
    fit = A.fit_amdahl(p, t)
    f = fit.params["f"]
    assert abs(f.estimate - 0.1) <= 0.02
    assert f.low < 0.1 < f.high
    assert fit.n_points == 16 and fit.r2 > 0.95


def test_amdahl_interval_coverage_is_roughly_nominal():
    # Over many noise draws the 95% interval should contain the truth most of the time.
    p = np.arange(1, 17)
    hits = 0
    for seed in range(100):
        rng = np.random.default_rng(seed)
        t = A.amdahl_time(p, 10.0, 0.1) * (1 + 0.03 * rng.standard_normal(p.size))
        f = A.fit_amdahl(p, t).params["f"]
        hits += f.low <= 0.1 <= f.high
    assert hits >= 85


def test_amdahl_with_too_few_points_says_so():
    out = A.fit_amdahl([1, 2], [1.0, 0.6])
    assert isinstance(out, str) and out.startswith("too few points")


def test_gustafson_recovers_alpha():
    rng = np.random.default_rng(2)
    p = np.repeat([1, 2, 4, 8, 16], 3)
    s = A.gustafson_speedup(p, 0.2) * (1 + 0.02 * rng.standard_normal(p.size))
    fit = A.fit_gustafson(p, s)
    alpha = fit.params["alpha"]
    assert abs(alpha.estimate - 0.2) < 0.03
    assert alpha.low < 0.2 < alpha.high


def test_karp_flatt_hand_values():
    # S = 1.6 at p = 2: (1/1.6 - 1/2)/(1 - 1/2) = 0.25; perfect speedup gives 0; S = 1 gives 1.
    assert A.karp_flatt(1.6, 2) == pytest.approx(0.25)
    assert A.karp_flatt(4.0, 4) == pytest.approx(0.0)
    assert A.karp_flatt(1.0, 8) == pytest.approx(1.0)
    # Exact Amdahl data give back f at every p.
    p = np.array([2, 4, 8, 16])
    s = 1 / (0.1 + 0.9 / p)
    np.testing.assert_allclose(A.karp_flatt(s, p), 0.1)


def test_latency_bandwidth_fit_from_sweep():
    fit = A.fit_comm_sweep(make_comm(alpha=50e-6, bandwidth=2e9))
    row = fit.iloc[0]
    assert row["alpha_s"] == pytest.approx(50e-6, rel=1e-3)
    assert row["bandwidth_Bps"] == pytest.approx(2e9, rel=1e-3)


def _table(times: dict[tuple[str, int], list[float]]) -> pd.DataFrame:
    rows = []
    for (strategy, p), ts in times.items():
        for r, t in enumerate(ts):
            rows.append(dict(strategy=strategy, world_size=p, nodes=1, batch_size=64, repeat=r, status="ok",
                             epoch_time_s=t))  # fmt: skip
    return pd.DataFrame(rows)


def test_speedup_and_efficiency_match_hand_computation():
    runs = _table({("single", 1): [10.0, 12.0, 11.0], ("ddp", 2): [6.0, 5.5, 7.0], ("ddp", 4): [4.0]})
    sp = A.speedup_table(runs).set_index(["strategy", "world_size"])
    # median baseline 11; ddp p=2 median 6 -> S = 11/6, E = 11/12; p=4: 11/4, E = 11/16.
    assert sp.loc[("ddp", 2), "speedup"] == pytest.approx(11 / 6)
    assert sp.loc[("ddp", 2), "efficiency"] == pytest.approx(11 / 12)
    assert sp.loc[("ddp", 4), "speedup"] == pytest.approx(11 / 4)
    assert sp.loc[("ddp", 4), "efficiency"] == pytest.approx(11 / 16)
    assert sp.loc[("single", 1), "speedup"] == 1.0
    lo, hi = sp.loc[("ddp", 2), ["speedup_ci_low", "speedup_ci_high"]]
    assert lo <= 11 / 6 <= hi
    # p = 4 has one repeat: no interval rather than a made-up one.
    assert np.isnan(sp.loc[("ddp", 4), "speedup_ci_low"]) and np.isnan(sp.loc[("ddp", 4), "speedup_ci_high"])
    assert (sp["baseline"] == "single").all()


def test_speedup_falls_back_to_own_p1_without_single():
    runs = _table({("ddp", 1): [8.0], ("ddp", 2): [5.0]})
    sp = A.speedup_table(runs).set_index(["strategy", "world_size"])
    assert sp.loc[("ddp", 2), "speedup"] == pytest.approx(1.6)
    assert sp.loc[("ddp", 2), "baseline"] == "own p=1"


def test_configured_baseline_strategy_is_used():
    runs = _table({("single", 1): [10.0], ("allreduce", 1): [12.0], ("ddp", 2): [6.0]})
    sp = A.speedup_table(runs, baseline_strategy="allreduce").set_index(["strategy", "world_size"])
    assert sp.loc[("ddp", 2), "speedup"] == pytest.approx(2.0)
    assert sp.loc[("ddp", 2), "baseline"] == "allreduce"
    assert A.speedup_table(runs).set_index(["strategy", "world_size"]).loc[("ddp", 2), "speedup"] == pytest.approx(10 / 6)


def test_bootstrap_one_repeat_gives_no_interval():
    iv = A.bootstrap_median([3.0])
    assert iv.estimate == 3.0 and np.isnan(iv.low) and np.isnan(iv.high)
    iv = A.bootstrap_median([1.0, 2.0, 3.0, 4.0, 5.0])
    assert iv.estimate == 3.0 and 1.0 <= iv.low < 3.0 < iv.high <= 5.0
    assert A.bootstrap_median([1.0, 2.0, 3.0]) == A.bootstrap_median([1.0, 2.0, 3.0])  # seeded


def test_cell_stats_counts_statuses_and_uses_only_ok_runs():
    runs = A.load_runs_frame(make_runs(repeats=1))
    cells = A.cell_stats(runs)
    p16 = cells[cells["world_size"] == 16].iloc[0]
    assert (p16["n_failed"], p16["n_timeout"], p16["n_repeats"]) == (1, 1, 0)
    assert np.isnan(p16["epoch_time_s"])
    assert cells["epoch_time_s_ci_low"].isna().all()  # one repeat everywhere


def test_fits_table_rows_and_predictions():
    runs = A.load_runs_frame(make_runs(repeats=2))
    fits = A.fits_table(runs, A.speedup_table(runs), make_comm())
    ddp = fits[fits["group"] == "strategy=ddp"]
    f = ddp[(ddp["law"] == "amdahl") & (ddp["parameter"] == "f")].iloc[0]
    assert abs(f["estimate"] - 0.1) < 0.03
    preds = ddp[ddp["kind"] == "prediction"]
    assert set(preds["p"]) == {16, 32} and set(preds["law"]) == {"amdahl", "cost_model"}
    assert set(ddp.loc[ddp["law"] == "karp_flatt", "p"]) == {2, 4, 8}
    assert (fits["law"] == "comm_sweep").sum() == 2
    assert "strategy=single" not in set(fits["group"])


def test_fits_with_single_world_size_say_too_few_points():
    runs = A.load_runs_frame(make_runs(world_sizes=(1,), failures=False, strategies=("single", "ddp")))
    fits = A.fits_table(runs, A.speedup_table(runs))
    amdahl = fits[fits["law"] == "amdahl"]
    assert (amdahl["kind"] == "too few points").all() and amdahl["estimate"].isna().all()


def test_weak_scaling_gets_gustafson_not_amdahl():
    runs = A.load_runs_frame(make_runs(scaling="weak", failures=False))
    fits = A.fits_table(runs, A.speedup_table(runs))
    assert "gustafson" in set(fits["law"]) and "amdahl" not in set(fits["law"])
    assert (A.speedup_table(runs)["measure"] == "scaled speedup").all()


def test_cost_model_recovers_its_parameters_from_measured_communication():
    alpha, bw, m, calls, t_comp, t_sync = 1e-3, 1e9, 4e6, 4, 1.0, 0.01
    rows = []
    for p in (1, 2, 4, 8):
        sent = A.ring_factor(p) * m
        comm = alpha * calls + sent / bw if p > 1 else 0.0
        step = t_comp / p + comm + t_sync
        rows.append(dict(world_size=p, device="cpu", timed_steps=10, step_time_mean_s=step, phase_comm_s=10 * comm,
                         comm_calls_per_step=calls if p > 1 else 0, comm_bytes_per_step=sent))  # fmt: skip
    fit = A.fit_cost_model(pd.DataFrame(rows))
    assert fit.params["alpha_s"].estimate == pytest.approx(alpha, rel=1e-6)
    assert fit.params["bandwidth_gbps"].estimate == pytest.approx(bw / 1e9, rel=1e-6)
    assert fit.params["t_comp_s"].estimate == pytest.approx(t_comp, rel=1e-6)
    assert fit.params["t_sync_s"].estimate == pytest.approx(t_sync, abs=1e-6)
    assert fit.predict(16) == pytest.approx(t_comp / 16 + alpha * calls + A.ring_factor(16) * m / bw + t_sync)
    assert "measured" in fit.note or "runs" in fit.note


def test_baseline_ignores_settings_that_cannot_affect_single():
    # `single` ran once (bucket_mb 25); ddp cells at two bucket sizes still get it as baseline.
    runs = _table({("single", 1): [10.0], ("ddp", 2): [6.0], ("ddp", 4): [4.0]})
    runs["bucket_mb"] = [25.0, 5.0, 25.0]
    sp = A.speedup_table(runs).set_index(["strategy", "world_size"])
    assert (sp["baseline"] == "single").all()
    assert sp.loc[("ddp", 2), "speedup"] == pytest.approx(10 / 6)


def _cost_rows(factor, m=4e6, alpha=1e-3, bw=1e9, calls=4, t_comp=1.0, t_sync=0.01, sizes=(1, 2, 4, 8), law=None):
    rows = []
    for p in sizes:
        sent = factor(p) * m if p > 1 else 0.0
        comm = alpha * calls + sent / bw if p > 1 else 0.0
        rows.append(dict(world_size=p, device="cpu", timed_steps=10, step_time_mean_s=t_comp / p + comm + t_sync,
                         phase_comm_s=10 * comm, comm_calls_per_step=calls if p > 1 else 0, comm_bytes_per_step=sent))  # fmt: skip
    df = pd.DataFrame(rows)
    return df.assign(extra_comm_volume=law) if law else df


def test_cost_model_scales_gather_scatter_bytes_as_p_minus_1():
    # The root of gather/scatter sends (p − 1)·M: measured at 2, 4, 8, the model must send 31·M at 32,
    # not the ring all-reduce's 2·31/32·M ≈ 1.9·M (about 3.9·M as the old fit scaled it).
    m, alpha, bw, calls, t_comp, t_sync = 4e6, 1e-3, 1e9, 4, 1.0, 0.01
    df = _cost_rows(lambda p: p - 1, law="gather_scatter")
    assert A.comm_volume_law(df) == "gather_scatter"
    assert A.effective_message_bytes(df[df["world_size"] > 1], "gather_scatter") == pytest.approx(m)
    fit = A.fit_cost_model(df)
    assert fit.params["bandwidth_gbps"].estimate == pytest.approx(bw / 1e9, rel=1e-6)
    assert fit.predict(32) == pytest.approx(t_comp / 32 + alpha * calls + 31 * m / bw + t_sync, rel=1e-6)
    assert "gather_scatter" in fit.note


def test_cost_model_without_a_volume_column_assumes_allreduce():
    df = _cost_rows(A.ring_factor)
    assert A.comm_volume_law(df) == "allreduce"
    assert A.fit_cost_model(df).predict(32) == pytest.approx(1.0 / 32 + 4e-3 + A.ring_factor(32) * 4e6 / 1e9 + 0.01)
    zero = _cost_rows(lambda p: 3 * (p - 1) / p, law="allreduce_allgather")
    assert A.fit_cost_model(zero).predict(32) == pytest.approx(1.0 / 32 + 4e-3 + 3 * 31 / 32 * 4e6 / 1e9 + 0.01)
