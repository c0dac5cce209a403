"""Statistics and fits recover known answers from synthetic timings."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats
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


def gmean(x):
    return float(np.exp(np.mean(np.log(x))))


def test_speedup_and_efficiency_match_hand_computation():
    runs = _table({("single", 1): [10.0, 12.0, 11.0], ("ddp", 2): [6.0, 5.5, 7.0], ("ddp", 4): [4.0]})
    sp = A.speedup_table(runs).set_index(["strategy", "world_size"])
    # Geometric means of the epoch times: S = gm(baseline) / gm(cell), E = S / p.
    base, p2 = gmean([10.0, 12.0, 11.0]), gmean([6.0, 5.5, 7.0])
    assert sp.loc[("ddp", 2), "speedup"] == pytest.approx(base / p2)
    assert sp.loc[("ddp", 2), "efficiency"] == pytest.approx(base / p2 / 2)
    assert sp.loc[("ddp", 4), "speedup"] == pytest.approx(base / 4)
    assert sp.loc[("ddp", 4), "efficiency"] == pytest.approx(base / 16)
    assert sp.loc[("single", 1), "speedup"] == 1.0
    assert sp.loc[("ddp", 2), "time_s"] == pytest.approx(p2) and sp.loc[("ddp", 2), "baseline_time_s"] == pytest.approx(base)
    # Welch t on the logs, by hand: se² = s_b²/3 + s_c²/3, Welch–Satterthwaite dof.
    lb, lc = np.log([10.0, 12.0, 11.0]), np.log([6.0, 5.5, 7.0])
    va, vb = lb.var(ddof=1) / 3, lc.var(ddof=1) / 3
    dof = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    half = stats.t.ppf(0.975, dof) * np.sqrt(va + vb)
    lo, hi = sp.loc[("ddp", 2), ["speedup_ci_low", "speedup_ci_high"]]
    assert (lo, hi) == pytest.approx((base / p2 * np.exp(-half), base / p2 * np.exp(half)))
    assert sp.loc[("ddp", 2), "efficiency_ci_high"] == pytest.approx(hi / 2)
    assert sp.loc[("ddp", 2), "speedup_ci_level"] == 0.95
    # p = 4 has one repeat: no interval rather than a made-up one.
    assert np.isnan(sp.loc[("ddp", 4), "speedup_ci_low"]) and np.isnan(sp.loc[("ddp", 4), "speedup_ci_high"])
    assert np.isnan(sp.loc[("ddp", 4), "speedup_ci_level"])
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


def test_one_value_gives_no_interval():
    for iv in (A.log_t_interval([3.0]), A.order_stat_interval([3.0]), A.welch_log_ratio([3.0], [1.0, 2.0])):
        assert np.isnan(iv.low) and np.isnan(iv.high) and np.isnan(iv.level)
    assert A.log_t_interval([3.0]).estimate == 3.0


def test_log_t_interval_is_geometric_mean_with_t_quantile():
    x = [1.0, 2.0, 4.0]  # logs: 0, ln2, 2 ln2 -> mean ln2, sd ln2
    iv = A.log_t_interval(x)
    half = stats.t.ppf(0.975, 2) * np.log(2) / np.sqrt(3)
    assert iv.estimate == pytest.approx(2.0)
    assert (iv.low, iv.high, iv.level) == pytest.approx((2 * np.exp(-half), 2 * np.exp(half), 0.95))


def test_order_statistic_interval_levels_and_ranks():
    # n = 3: only [min, max] exists, covering 1 − 2·0.5³ = 0.75; n = 5: 0.9375; n = 9: k = 2, 0.961.
    assert A.order_stat_rank(3) == (1, 0.75)
    assert A.order_stat_rank(5) == (1, 0.9375)
    assert A.order_stat_rank(9) == (2, pytest.approx(1 - 2 * 10 / 512))
    iv = A.order_stat_interval([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (iv.estimate, iv.low, iv.high, iv.level) == (3.0, 1.0, 5.0, 0.9375)
    iv = A.order_stat_interval(np.arange(1.0, 10.0))
    assert (iv.low, iv.high) == (2.0, 8.0)


def test_cell_stats_records_each_intervals_level():
    runs = _table({("ddp", 2): [6.0, 5.5, 7.0]}).assign(frac_comm=[0.2, 0.3, 0.25])
    c = A.cell_stats(runs).iloc[0]
    assert c["epoch_time_s"] == pytest.approx(gmean([6.0, 5.5, 7.0])) and c["epoch_time_s_ci_level"] == 0.95
    assert (c["frac_comm"], c["frac_comm_ci_low"], c["frac_comm_ci_high"]) == (0.25, 0.2, 0.3)
    assert c["frac_comm_ci_level"] == 0.75  # min..max of 3: honestly 75 %, not 95 %


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


# -- n_repeats, stability, comparisons, cost-model volume -----------------------------------


def test_ok_run_without_timed_steps_does_not_count_as_a_repeat():
    runs = _table({("single", 1): [10.0, 11.0, np.nan], ("ddp", 2): [6.0, np.nan, 6.5]})
    runs["samples_per_s"] = 4096 / runs["epoch_time_s"]
    cells = A.cell_stats(runs).set_index(["strategy", "world_size"])
    assert cells.loc[("ddp", 2), "n_repeats"] == 2 and cells.loc[("ddp", 2), "n_untimed"] == 1
    assert cells.loc[("ddp", 2), "n_runs"] == 3
    sp = A.speedup_table(runs).set_index(["strategy", "world_size"])
    assert sp.loc[("ddp", 2), "n_repeats"] == 2 and sp.loc[("ddp", 2), "baseline_n"] == 2


def _cell(values, **cols):
    """One cell's runs: the given throughputs, plus any per-run columns."""
    df = _table({("ddp", 2): [4096 / v for v in values]})
    df["samples_per_s"] = values
    return df.assign(**cols)


QUIET = [1000.0, 1004.0, 998.0, 1001.0, 999.0]
NOISY = [1000.0, 1004.0, 650.0, 1001.0, 999.0]  # one injected slow run


def test_quiet_cell_is_stable_and_a_noisy_injected_run_makes_it_unstable():
    quiet = A.cell_stats(_cell(QUIET)).iloc[0]
    assert not quiet["unstable"] and quiet["unstable_cause"] == "" and quiet["throughput_rel_ci"] < 0.01
    noisy = A.cell_stats(_cell(NOISY)).iloc[0]
    assert noisy["unstable"] and noisy["throughput_rel_ci"] > 0.05
    assert noisy["unstable_cause"] == "run-to-run variation"  # no other cause in the data
    # The threshold is the caller's: at 50 % the same cell passes.
    assert not A.cell_stats(_cell(NOISY), max_rel_ci=0.5).iloc[0]["unstable"]


def test_unstable_cell_names_every_likely_cause():
    runs = _cell(NOISY, timed_steps=[5] * 5, min_timed_steps=20, rank_skew=0.3,
                 env_other_cpu_frac=[0.0, 0.0, 0.4, 0.0, 0.0], extra_oversubscribed=["False"] * 4 + ["True"])  # fmt: skip
    c = A.cell_stats(runs).iloc[0]
    assert c["unstable_cause"] == "few timed steps; high rank skew; busy machine; oversubscribed"
    assert (c["n_busy"], c["n_oversubscribed"]) == (1, 1)
    # The load average lags a minute behind (the previous run's ranks): not a sign of a busy machine;
    # ordinary two-rank skew (0.13) is not named either. The short-measurement flag is.
    runs = _cell(NOISY, env_loadavg_start=[0.5, 0.5, 3.5, 0.5, 0.5], env_cores=2, rank_skew=0.13,
                 extra_measurement_short=False)  # fmt: skip
    assert A.cell_stats(runs).iloc[0]["unstable_cause"] == "run-to-run variation"
    runs = _cell(NOISY, extra_measurement_short=[False, False, True, False, False])
    assert A.cell_stats(runs).iloc[0]["unstable_cause"] == "few timed steps"


def test_one_repeat_has_no_stability_verdict():
    c = A.cell_stats(_cell([1000.0])).iloc[0]
    assert not c["unstable"] and c["unstable_cause"] == A.NO_INTERVAL and np.isnan(c["throughput_rel_ci"])


def test_speedup_is_unstable_when_its_baseline_is():
    runs = _table({("single", 1): [10.0, 10.1, 15.0, 9.9, 10.0], ("ddp", 2): [6.0, 6.01, 5.99, 6.0, 6.02]})
    runs["samples_per_s"] = 4096 / runs["epoch_time_s"]
    sp = A.speedup_table(runs).set_index(["strategy", "world_size"])
    assert sp.loc[("ddp", 2), "unstable"] and sp.loc[("ddp", 2), "unstable_cause"].startswith("baseline: ")
    cells = A.cell_stats(runs).set_index(["strategy", "world_size"])
    assert not cells.loc[("ddp", 2), "unstable"] and cells.loc[("single", 1), "unstable"]


def _strategies(values: dict[str, list[float]], p=2) -> pd.DataFrame:
    rows = [dict(strategy=s, world_size=p, nodes=1, batch_size=64, repeat=r, status="ok", samples_per_s=v,
                 epoch_time_s=4096 / v) for s, vs in values.items() for r, v in enumerate(vs)]  # fmt: skip
    return pd.DataFrame(rows)


def test_comparison_finds_a_1_5x_difference():
    rng = np.random.default_rng(3)
    runs = _strategies({"ddp": list(1500 * np.exp(0.02 * rng.standard_normal(4))),
                        "gather_scatter": list(1000 * np.exp(0.02 * rng.standard_normal(4)))})  # fmt: skip
    cmp = A.comparisons_table(runs)
    assert len(cmp) == 1
    r = cmp.iloc[0]
    assert (r["strategy_a"], r["strategy_b"], r["n_a"], r["n_b"]) == ("ddp", "gather_scatter", 4, 4)
    assert r["ratio"] == pytest.approx(1.5, rel=0.05) and r["ratio_ci_low"] > 1 and r["ratio_ci_level"] == 0.95
    assert r["verdict"] == "A faster"
    flipped = A.comparisons_table(_strategies({"a": [1000.0, 1010, 990], "b": [1500.0, 1490, 1510]})).iloc[0]
    assert flipped["verdict"] == "B faster" and flipped["ratio_ci_high"] < 1


def test_comparison_with_overlapping_noise_finds_no_difference():
    runs = _strategies({"allreduce": [1000.0, 1150.0, 900.0], "ddp": [1050.0, 950.0, 1100.0]})
    r = A.comparisons_table(runs).iloc[0]
    assert r["ratio_ci_low"] < 1 < r["ratio_ci_high"] and r["verdict"] == "no detectable difference"


def test_comparisons_pair_only_equal_settings_and_world_sizes():
    runs = pd.concat([_strategies({"a": [1.0, 1.1], "b": [1.0, 1.1], "c": [2.0, 2.1]}, p=2),
                      _strategies({"a": [1.0, 1.1], "b": [3.0]}, p=4)])  # fmt: skip
    cmp = A.comparisons_table(runs)
    assert sorted(map(tuple, cmp[["world_size", "strategy_a", "strategy_b"]].values.tolist())) == [
        (2, "a", "b"), (2, "a", "c"), (2, "b", "c"), (4, "a", "b")]  # fmt: skip
    p4 = cmp[cmp["world_size"] == 4].iloc[0]
    assert p4["verdict"] == A.NO_COMPARISON and p4["n_b"] == 1


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
