"""Statistics and fits recover known answers from synthetic timings."""

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats
from report_synth import make_comm, make_runs

from ddpbench import analysis as A
from ddpbench.analysis.cost_model import (
    _cost_bootstrap,
    _cost_core,
    _percentiles,
    comm_volume_law,
    effective_message_bytes,
    fit_comm_sweep,
    fit_cost_model,
    fit_latency_bandwidth,
    nnls2,
    ring_factor,
    volume_factor,
)
from ddpbench.analysis.fits import _t_interval, fit_amdahl, fit_gustafson, karp_flatt, r_squared
from ddpbench.analysis.health import NO_INTERVAL
from ddpbench.analysis.intervals import metric_interval, order_stat_interval
from ddpbench.analysis.scaling import _baseline_step_time
from ddpbench.analysis.tables import _several_texts


def test_amdahl_recovers_serial_fraction_with_3pct_noise():
    rng = np.random.default_rng(1)
    p = np.arange(1, 17)
    t = A.amdahl_time(p, 10.0, 0.1) * (1 + 0.03 * rng.standard_normal(p.size))
    fit = fit_amdahl(p, t)
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
        f = fit_amdahl(p, t).params["f"]
        hits += f.low <= 0.1 <= f.high
    assert hits >= 85


def test_amdahl_with_too_few_points_says_so():
    out = fit_amdahl([1, 2], [1.0, 0.6])
    assert isinstance(out, str) and out.startswith("too few points")


def test_gustafson_recovers_alpha():
    rng = np.random.default_rng(2)
    p = np.repeat([1, 2, 4, 8, 16], 3)
    s = A.gustafson_speedup(p, 0.2) * (1 + 0.02 * rng.standard_normal(p.size))
    fit = fit_gustafson(p, s)
    alpha = fit.params["alpha"]
    assert abs(alpha.estimate - 0.2) < 0.03
    assert alpha.low < 0.2 < alpha.high


def test_karp_flatt_hand_values():
    # S = 1.6 at p = 2: (1/1.6 - 1/2)/(1 - 1/2) = 0.25; perfect speedup gives 0; S = 1 gives 1.
    assert karp_flatt(1.6, 2) == pytest.approx(0.25)
    assert karp_flatt(4.0, 4) == pytest.approx(0.0)
    assert karp_flatt(1.0, 8) == pytest.approx(1.0)
    # Exact Amdahl data give back f at every p.
    p = np.array([2, 4, 8, 16])
    s = 1 / (0.1 + 0.9 / p)
    np.testing.assert_allclose(karp_flatt(s, p), 0.1)


def test_latency_bandwidth_fit_from_sweep():
    fit = fit_comm_sweep(make_comm(alpha=50e-6, bandwidth=2e9))
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
    for iv in (A.log_t_interval([3.0]), order_stat_interval([3.0]), A.welch_log_ratio([3.0], [1.0, 2.0])):
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
    iv = order_stat_interval([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (iv.estimate, iv.low, iv.high, iv.level) == (3.0, 1.0, 5.0, 0.9375)
    iv = order_stat_interval(np.arange(1.0, 10.0))
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
    # S falls as f rises: the low speedup comes from the high f, so the interval stays ordered.
    assert (preds["ci_low"] < preds["estimate"]).all() and (preds["estimate"] < preds["ci_high"]).all()
    assert set(ddp.loc[ddp["law"] == "karp_flatt", "p"]) == {2, 4, 8}
    sweep = fits[fits["law"] == "comm_sweep"].set_index("parameter")["estimate"]
    assert sweep.to_dict() == pytest.approx({"alpha_s": 50e-6, "bandwidth_gbps": 2.0}, rel=1e-3)  # make_comm's inputs
    assert "strategy=single" not in set(fits["group"])


def test_fits_with_single_world_size_say_too_few_points():
    runs = A.load_runs_frame(make_runs(world_sizes=(1,), failures=False, strategies=("single", "ddp")))
    fits = A.fits_table(runs, A.speedup_table(runs))
    amdahl = fits[fits["law"] == "amdahl"]
    assert len(amdahl) == 1  # the ddp group's row: .all() over an empty table would pass
    row = amdahl.iloc[0]
    assert (row["group"], row["kind"], row["parameter"]) == ("strategy=ddp", "too few points", "-")
    assert np.isnan(row["estimate"]) and row["note"].startswith("too few points: this strategy ran at 1 worker count(s)")
    assert set(fits["law"]) == {"amdahl", "cost_model"}  # no Karp–Flatt row without p > 1


def test_weak_scaling_gets_gustafson_not_amdahl():
    runs = A.load_runs_frame(make_runs(scaling="weak", failures=False))
    fits = A.fits_table(runs, A.speedup_table(runs))
    assert "gustafson" in set(fits["law"]) and "amdahl" not in set(fits["law"])
    sp = A.speedup_table(runs)
    assert len(sp) == 9 and (sp["measure"] == "scaled speedup").all()
    ddp = fits[fits["group"] == "strategy=ddp"]
    a = ddp.loc[ddp["parameter"] == "alpha", "estimate"].iloc[0]
    preds = ddp[ddp["kind"] == "prediction"].set_index("p")["estimate"]
    assert preds.to_dict() == pytest.approx({16.0: 16 - 15 * a, 32.0: 32 - 31 * a})  # S = p − α(p − 1)


def test_cost_model_recovers_its_parameters_from_measured_communication():
    alpha, bw, m, calls, t_comp, t_sync = 1e-3, 1e9, 4e6, 4, 1.0, 0.01
    rows = []
    for p, sent in ((1, 0.0), (2, 4e6), (4, 6e6), (8, 7e6)):  # 2(p-1)/p · 4 MB, worked by hand
        comm = alpha * calls + sent / bw if p > 1 else 0.0
        step = t_comp / p + comm + t_sync
        rows.append(dict(world_size=p, device="cpu", timed_steps=10, step_time_mean_s=step, phase_comm_s=10 * comm,
                         comm_calls_per_step=calls if p > 1 else 0, comm_bytes_per_step=sent))  # fmt: skip
    fit = fit_cost_model(pd.DataFrame(rows))
    assert fit.params["alpha_s"].estimate == pytest.approx(alpha, rel=1e-6)
    assert fit.params["bandwidth_gbps"].estimate == pytest.approx(bw / 1e9, rel=1e-6)
    assert fit.params["t_comp_s"].estimate == pytest.approx(t_comp, rel=1e-6)
    assert fit.params["t_sync_s"].estimate == pytest.approx(t_sync, abs=1e-6)
    assert fit.predict(16) == pytest.approx(1 / 16 + 0.004 + 7.5e6 / 1e9 + 0.01)  # 2·15/16 · 4 MB = 7.5 MB
    assert fit.predict(16) == pytest.approx(0.084)
    assert float(fit.predict(1)) == pytest.approx(1.01)  # no communication at p = 1
    assert fit.n_points == 4 and fit.r2 == pytest.approx(1.0)
    assert fit.note == "α and B from the runs' measured communication; volume law allreduce"


def test_baseline_ignores_settings_that_cannot_affect_single():
    # `single` ran once (bucket_mb 25); ddp cells at two bucket sizes still get it as baseline.
    runs = _table({("single", 1): [10.0], ("ddp", 2): [6.0], ("ddp", 4): [4.0]})
    runs["bucket_mb"] = [25.0, 5.0, 25.0]
    sp = A.speedup_table(runs).set_index(["strategy", "world_size"])
    assert len(sp) == 3 and (sp["baseline"] == "single").all()
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
    assert not c["unstable"] and c["unstable_cause"] == NO_INTERVAL and np.isnan(c["throughput_rel_ci"])


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
    assert r["verdict"] == "faster"
    flipped = A.comparisons_table(_strategies({"a": [1000.0, 1010, 990], "b": [1500.0, 1490, 1510]})).iloc[0]
    assert flipped["verdict"] == "slower" and flipped["ratio_ci_high"] < 1


def test_comparison_with_overlapping_noise_finds_no_difference():
    runs = _strategies({"allreduce": [1000.0, 1150.0, 900.0], "ddp": [1050.0, 950.0, 1100.0]})
    r = A.comparisons_table(runs).iloc[0]
    assert r["ratio_ci_low"] < 1 < r["ratio_ci_high"] and r["verdict"] == "no difference"


def test_comparisons_pair_only_equal_settings_and_world_sizes():
    runs = pd.concat([_strategies({"a": [1.0, 1.1], "b": [1.0, 1.1], "c": [2.0, 2.1]}, p=2),
                      _strategies({"a": [1.0, 1.1], "b": [3.0]}, p=4)])  # fmt: skip
    cmp = A.comparisons_table(runs)
    assert sorted(map(tuple, cmp[["world_size", "strategy_a", "strategy_b"]].values.tolist())) == [
        (2, "a", "b"), (2, "a", "c"), (2, "b", "c"), (4, "a", "b")]  # fmt: skip
    p4 = cmp[cmp["world_size"] == 4].iloc[0]
    assert p4["verdict"] == A.Verdict.NO_INTERVAL and p4["n_b"] == 1


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
    assert comm_volume_law(df) == "gather_scatter"
    assert effective_message_bytes(df[df["world_size"] > 1], "gather_scatter") == pytest.approx(m)
    fit = fit_cost_model(df)
    assert fit.params["bandwidth_gbps"].estimate == pytest.approx(bw / 1e9, rel=1e-6)
    assert fit.predict(32) == pytest.approx(t_comp / 32 + alpha * calls + 31 * m / bw + t_sync, rel=1e-6)
    assert "gather_scatter" in fit.note


def test_cost_model_without_a_volume_column_assumes_allreduce():
    df = _cost_rows(lambda p: 2 * (p - 1) / p)
    assert comm_volume_law(df) == "allreduce"
    assert fit_cost_model(df).predict(32) == pytest.approx(1.0 / 32 + 4e-3 + 2 * 31 / 32 * 4e6 / 1e9 + 0.01)
    zero = _cost_rows(lambda p: 3 * (p - 1) / p, law="allreduce_allgather")
    assert fit_cost_model(zero).predict(32) == pytest.approx(1.0 / 32 + 4e-3 + 3 * 31 / 32 * 4e6 / 1e9 + 0.01)


# -- laws against numbers worked by hand --------------------------------------------------------


def test_amdahl_time_by_hand():
    assert A.amdahl_time(4, 10.0, 0.2) == pytest.approx(4.0)  # 10·(0.2 + 0.8/4)
    assert A.amdahl_time(1, 10.0, 0.2) == pytest.approx(10.0)
    np.testing.assert_allclose(A.amdahl_time([2, 8], 10.0, 0.5), [7.5, 5.625])  # 10·(0.5 + 0.5/2), 10·(0.5 + 0.5/8)


def test_gustafson_speedup_by_hand():
    assert A.gustafson_speedup(4, 0.25) == pytest.approx(3.25)  # 4 − 0.25·3
    assert A.gustafson_speedup(1, 0.7) == pytest.approx(1.0)
    np.testing.assert_allclose(A.gustafson_speedup([2, 16], 0.1), [1.9, 14.5])


def test_ring_factor_by_hand():
    np.testing.assert_allclose(ring_factor([2, 4, 8]), [1.0, 1.5, 1.75])  # 2(p − 1)/p


def test_karp_flatt_of_a_sublinear_speedup_by_hand():
    # S = 2.5 at p = 4: (0.4 − 0.25)/(1 − 0.25) = 0.2.
    assert karp_flatt(2.5, 4) == pytest.approx(0.2)
    np.testing.assert_allclose(karp_flatt([2.5, 3.2], [4, 8]), [0.2, (1 / 3.2 - 1 / 8) / (7 / 8)])


def test_volume_factors_used_by_the_cost_model_by_hand():
    assert volume_factor("allreduce", 4) == pytest.approx(1.5)
    assert volume_factor("gather_scatter", 4) == pytest.approx(3.0)
    assert volume_factor("allreduce_allgather", 4) == pytest.approx(2.25)
    assert volume_factor("point_to_point", 4) == pytest.approx(1.0)
    assert volume_factor("none", 4) == 0
    multi = pd.DataFrame(dict(world_size=[2, 4, 4], comm_bytes_per_step=[3e6, 9e6, 9.6e6]))
    # bytes / (p − 1): 3, 3, 3.2 MB -> median 3 MB
    assert effective_message_bytes(multi, "gather_scatter") == pytest.approx(3e6)


# -- fits: exact recovery and interval widths by hand ----------------------------------------------


def test_amdahl_fit_recovers_exact_parameters_from_noise_free_times():
    fit = fit_amdahl([1, 2, 4], [10.0, 6.0, 4.0])  # 10·(0.2 + 0.8/p): 3 distinct p is enough
    assert fit.params["f"].estimate == pytest.approx(0.2, abs=1e-8)
    assert fit.params["t1_s"].estimate == pytest.approx(10.0, rel=1e-8)
    assert fit.params["f"].high - fit.params["f"].low == pytest.approx(0, abs=1e-6)
    assert fit.n_points == 3 and fit.r2 == pytest.approx(1.0)
    assert fit.predict(16) == pytest.approx(2.5)  # 10·(0.2 + 0.8/16)
    sub_second = fit_amdahl([1, 2, 4], [0.5, 0.3, 0.2])  # T(1) below 1 s is no lower bound's business
    assert (sub_second.params["t1_s"].estimate, sub_second.params["f"].estimate) == pytest.approx((0.5, 0.2), rel=1e-6)


def _amdahl_by_hand(p, t, level):
    """Relative-error least squares and its Student-t interval, written out (not fit_amdahl)."""
    p, t = np.asarray(p, float), np.asarray(t, float)
    t1, f = optimize.least_squares(lambda th: (th[0] * (th[1] + (1 - th[1]) / p) - t) / t, [10, 0.1]).x
    r = (t1 * (f + (1 - f) / p) - t) / t
    jac = np.column_stack([f + (1 - f) / p, t1 * (1 - 1 / p)]) / t[:, None]
    cov = np.linalg.inv(jac.T @ jac) * (r @ r) / (len(p) - 2)
    half = stats.t.ppf(0.5 + level / 2, len(p) - 2) * np.sqrt(np.diag(cov))
    return (t1, f), half


NOISY_P, NOISY_T = [1, 2, 4, 8, 16], [10.3, 5.8, 4.1, 2.9, 2.55]  # 10·(0.2 + 0.8/p), a few % off


def test_amdahl_interval_is_the_t_interval_with_n_minus_2_dof():
    (t1, f), half = _amdahl_by_hand(NOISY_P, NOISY_T, 0.95)
    fit = fit_amdahl(NOISY_P, NOISY_T)
    pf, pt = fit.params["f"], fit.params["t1_s"]
    assert pf.estimate == pytest.approx(f, rel=1e-6) and pt.estimate == pytest.approx(t1, rel=1e-6)
    assert (pf.low, pf.high) == pytest.approx((f - half[1], f + half[1]), rel=1e-6)
    assert (pt.low, pt.high) == pytest.approx((t1 - half[0], t1 + half[0]), rel=1e-6)
    # A 90 % interval would be visibly narrower: the level is pinned, not just "some interval".
    _, half90 = _amdahl_by_hand(NOISY_P, NOISY_T, 0.90)
    assert pf.high - pf.low > 1.2 * 2 * half90[1]


def test_amdahl_interval_of_f_is_clipped_to_0_1():
    fit = fit_amdahl([1, 2, 4, 8], [10.0, 10.5, 9.5, 10.2])  # no speedup at all: f near 1
    (_, f), half = _amdahl_by_hand([1, 2, 4, 8], [10.0, 10.5, 9.5, 10.2], 0.95)
    assert f + half[1] > 1  # the unclipped interval leaves [0, 1] ...
    assert fit.params["f"].high == 1.0  # ... the reported one does not
    assert fit.params["f"].low == pytest.approx(f - half[1], rel=1e-5)


def test_t_interval_clips_a_rounding_negative_variance_to_zero():
    lo, hi = _t_interval(np.array([2.0, 3.0]), np.array([[-1e-20, 0.0], [0.0, 4.0]]), dof=3)
    q = stats.t.ppf(0.975, 3)
    np.testing.assert_allclose(lo, [2.0, 3.0 - 2 * q])
    np.testing.assert_allclose(hi, [2.0, 3.0 + 2 * q])


def test_gustafson_fit_by_hand_with_dof_n_above_1_minus_1():
    # p − S = α(p − 1) over p > 1: x = [1, 3, 7], y = [0.2, 1.0, 2.1]; α = Σxy/Σx² = 17.9/59.
    fit = fit_gustafson([1, 2, 4, 8], [1.0, 1.8, 3.0, 5.9])
    alpha = 17.9 / 59
    resid = np.array([0.2, 1.0, 2.1]) - alpha * np.array([1, 3, 7])
    se = np.sqrt(resid @ resid / 2 / 59)  # dof = 3 points above p = 1, minus 1 parameter
    half = stats.t.ppf(0.975, 2) * se
    iv = fit.params["alpha"]
    assert iv.estimate == pytest.approx(alpha)
    assert (iv.low, iv.high) == pytest.approx((alpha - half, alpha + half))
    assert fit.n_points == 4 and fit.predict(16) == pytest.approx(16 - 15 * alpha)


def test_gustafson_needs_two_distinct_worker_counts_above_1():
    out = fit_gustafson([1, 2, 2], [1.0, 1.9, 1.8])
    assert isinstance(out, str) and out.startswith("too few points: this strategy ran at 1 worker count(s) above 1")
    fit = fit_gustafson([1, 2, 4], [1.0, 1.9, 3.7])  # exactly two: enough
    assert fit.params["alpha"].estimate == pytest.approx((0.1 + 3 * 0.3) / 10)  # x = [1, 3], y = [0.1, 0.3]


def test_amdahl_with_two_distinct_worker_counts_is_refused_even_with_repeats():
    out = fit_amdahl([1, 1, 2, 2], [10.0, 10.1, 6.0, 6.1])
    assert out == "too few points: this strategy ran at 2 worker count(s), Amdahl needs 3"


# -- intervals by hand -----------------------------------------------------------------------------

LN2 = np.log(2)


def test_log_t_interval_of_two_values_by_hand():
    # logs ln2, 3 ln2: mean 2 ln2 (geometric mean 4), sd √2·ln2, se = sd/√2 = ln2, 1 dof.
    iv = A.log_t_interval([2.0, 8.0])
    half = stats.t.ppf(0.975, 1) * LN2
    assert (iv.estimate, iv.low, iv.high, iv.level) == pytest.approx((4.0, 4 * np.exp(-half), 4 * np.exp(half), 0.95))
    iv90 = A.log_t_interval([2.0, 8.0], level=0.90)
    q90 = stats.t.ppf(0.95, 1)  # exp(q·ln2) = 2^q
    assert (iv90.low, iv90.high, iv90.level) == pytest.approx((4 / 2**q90, 4 * 2**q90, 0.9))


def test_log_t_interval_edge_cases():
    assert np.isnan(A.log_t_interval([]).estimate)
    assert np.isnan(A.log_t_interval([np.nan, None]).estimate)
    iv = A.log_t_interval([3.0, 3.0])
    assert (iv.estimate, iv.low, iv.high) == pytest.approx((3.0, 3.0, 3.0))
    zero = A.log_t_interval([0.0, 1.0, 2.0])  # no log scale: falls back to the median's interval
    assert (zero.estimate, zero.low, zero.high, zero.level) == (1.0, 0.0, 2.0, 0.75)


def test_welch_log_ratio_of_two_and_three_values_by_hand():
    # a = [2, 8]: mean log 2 ln2, var 2 ln2²; b = [1, 2, 4]: mean log ln2, var ln2².
    # va = 2 ln2²/2 = ln2², vb = ln2²/3; Satterthwaite's dof = (4/3)² / (1/1 + (1/9)/2) = 32/19, capped
    # at Hsu's min(2, 3) - 1 = 1 because the counts differ and both sides vary.
    iv = A.welch_log_ratio([2.0, 8.0], [1.0, 2.0, 4.0])
    half = stats.t.ppf(0.975, 1) * LN2 * np.sqrt(4 / 3)
    assert (iv.estimate, iv.low, iv.high, iv.level) == pytest.approx((2.0, 2 * np.exp(-half), 2 * np.exp(half), 0.95))
    # Swapped sides: the reciprocal ratio, same dof.
    back = A.welch_log_ratio([1.0, 2.0, 4.0], [2.0, 8.0])
    assert (back.estimate, back.low, back.high) == pytest.approx((0.5, 0.5 * np.exp(-half), 0.5 * np.exp(half)))
    half90 = stats.t.ppf(0.95, 1) * LN2 * np.sqrt(4 / 3)
    assert A.welch_log_ratio([2.0, 8.0], [1.0, 2.0, 4.0], level=0.9).high == pytest.approx(2 * np.exp(half90))


def test_welch_log_ratio_when_one_or_both_sides_have_no_spread():
    # Only b varies: dof = vb²/(vb²/2) = 2, se = √(ln2²/3).
    iv = A.welch_log_ratio([2.0, 2.0], [1.0, 2.0, 4.0])
    half = stats.t.ppf(0.975, 2) * LN2 / np.sqrt(3)
    assert (iv.estimate, iv.low, iv.high) == pytest.approx((1.0, np.exp(-half), np.exp(half)))
    flat = A.welch_log_ratio([2.0, 2.0], [1.0, 1.0])
    assert (flat.estimate, flat.low, flat.high, flat.level) == pytest.approx((2.0, 2.0, 2.0, 0.95))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an empty side is answered, not averaged (no "mean of empty slice")
        assert np.isnan(A.welch_log_ratio([], [1.0, 2.0]).estimate) and np.isnan(A.welch_log_ratio([1.0], []).estimate)
    one = A.welch_log_ratio([1.0, 2.0], [4.0])
    assert one.estimate == pytest.approx(np.sqrt(2) / 4) and np.isnan(one.low) and np.isnan(one.level)


def test_order_statistic_ranks_and_exact_levels_by_hand():
    # coverage(k) = 1 − 2·P(Bin(n, ½) ≤ k − 1)
    assert A.order_stat_rank(3) == (1, 0.75)  # 1 − 2/8
    assert A.order_stat_rank(5) == (1, 0.9375)  # 1 − 2/32, below 95 %: min..max anyway
    assert A.order_stat_rank(5, level=0.6) == (2, 0.625)  # 1 − 2·6/32
    assert A.order_stat_rank(10) == (2, 1 - 2 * 11 / 1024)  # k = 3 would be 1 − 2·56/1024 = 0.89
    assert A.order_stat_rank(10, level=0.85) == (3, 1 - 2 * 56 / 1024)
    assert A.order_stat_rank(2) == (1, 0.5)


def test_order_statistic_interval_of_ten_values():
    iv = order_stat_interval([7.0, 1.0, 10.0, 3.0, 5.0, 2.0, 9.0, 4.0, 8.0, 6.0])
    assert (iv.estimate, iv.low, iv.high, iv.level) == (5.5, 2.0, 9.0, 1 - 2 * 11 / 1024)
    iv = order_stat_interval([3.0, 1.0, 2.0])
    assert (iv.estimate, iv.low, iv.high, iv.level) == (2.0, 1.0, 3.0, 0.75)
    assert np.isnan(order_stat_interval([]).estimate)


def test_metric_interval_uses_log_t_for_timing_and_order_statistics_otherwise():
    assert metric_interval("epoch_time_s", [1.0, 2.0, 4.0]).estimate == pytest.approx(2.0)  # geometric mean
    assert metric_interval("frac_comm", [1.0, 2.0, 6.0]).estimate == 2.0  # median
    assert metric_interval("samples_per_s", [1.0, 4.0]).estimate == pytest.approx(2.0)
    assert metric_interval("step_time_median_s", [1.0, 4.0]).estimate == pytest.approx(2.0)


def test_percentiles_take_order_statistics_at_the_level():
    draws = np.arange(1.0, 201.0)  # 2.5 % of 200: the 5th draw from either end, no interpolation
    assert _percentiles(draws) == (5.0, 196.0)
    assert _percentiles(draws, level=0.9) == (10.0, 191.0)


def test_rel_halfwidth_by_hand():
    assert A.rel_halfwidth(A.Interval(2.0, 1.8, 2.4)) == pytest.approx(0.15)  # (2.4 − 1.8)/2/2
    assert np.isnan(A.rel_halfwidth(A.Interval(0.0, -1.0, 1.0)))


# -- tables by value --------------------------------------------------------------------------------


def test_cell_stats_counts_every_status_and_the_relative_width_by_hand():
    runs = _cell(QUIET)
    extra = runs.iloc[:4].copy()
    extra["status"] = ["failed", "timeout", "skipped", "failed"]
    runs = pd.concat([runs, extra], ignore_index=True)
    c = A.cell_stats(runs).iloc[0]
    counts = ["n_runs", "n_repeats", "n_untimed", "n_failed", "n_timeout", "n_skipped", "n_busy", "n_oversubscribed"]
    assert c[counts].tolist() == [9, 5, 0, 2, 1, 1, 0, 0]
    y = np.log(QUIET)
    half = stats.t.ppf(0.975, 4) * y.std(ddof=1) / np.sqrt(5)
    assert c["throughput_rel_ci"] == pytest.approx(np.sinh(half))  # (e^h − e^−h)/2 around the geometric mean
    assert c["samples_per_s"] == pytest.approx(np.exp(y.mean()))
    assert c["samples_per_s_ci_low"] == pytest.approx(np.exp(y.mean() - half))


def test_stability_is_judged_on_the_first_throughput_metric_present():
    # samples_per_s is quiet, step time is noisy: samples_per_s judges.
    runs = _cell(QUIET).assign(step_time_median_s=[1.0, 1.0, 2.0, 1.0, 1.0])
    assert not A.cell_stats(runs).iloc[0]["unstable"]
    only_step = pd.DataFrame(dict(step_time_median_s=[1.0, 1.0, 2.0, 1.0, 1.0]))
    assert A.stability(only_step)[:2] == (True, "run-to-run variation")
    unstable, cause, rel = A.stability(pd.DataFrame(dict(samples_per_s=[np.nan, np.nan])))
    assert (unstable, cause) == (False, "") and np.isnan(rel)
    assert A.stability(pd.DataFrame(dict(other=[1.0])))[:2] == (False, "")


def test_likely_causes_thresholds():
    base = dict(samples_per_s=[1.0, 2.0])
    assert A.likely_causes(pd.DataFrame(base, index=[0, 1]).assign(rank_skew=0.25)) == "run-to-run variation"
    assert A.likely_causes(pd.DataFrame(base).assign(rank_skew=0.26)) == "high rank skew"
    assert A.likely_causes(pd.DataFrame(base).assign(env_other_cpu_frac=0.10)) == "run-to-run variation"
    assert A.likely_causes(pd.DataFrame(base).assign(env_other_cpu_frac=[0.0, 0.11])) == "busy machine"
    assert A.likely_causes(pd.DataFrame(base).assign(timed_steps=20, min_timed_steps=20)) == "run-to-run variation"
    assert A.likely_causes(pd.DataFrame(base).assign(timed_steps=[19, 19], min_timed_steps=20)) == "few timed steps"
    assert A.likely_causes(pd.DataFrame(base).assign(extra_oversubscribed=[0, 1])) == "oversubscribed"


def test_speedup_baseline_row_and_efficiency_interval_by_hand():
    d = np.log(1.01)
    runs = _table({("single", 1): [10 * 1.01, 10 / 1.01], ("ddp", 2): [6.0, 6.0], ("ddp", 4): [4.0, 4.0]})
    sp = A.speedup_table(runs).set_index(["strategy", "world_size"])
    base = sp.loc[("single", 1)]
    assert base[["speedup", "speedup_ci_low", "speedup_ci_high", "speedup_ci_level"]].tolist() == [1.0, 1.0, 1.0, 0.95]
    assert (base["n_repeats"], base["baseline_n"], base["efficiency"]) == (2, 2, 1.0)
    # Only the baseline varies: se = d (its var 2d², over 2), Welch dof = 1.
    half = stats.t.ppf(0.975, 1) * d
    r = sp.loc[("ddp", 4)]
    assert r["speedup"] == pytest.approx(2.5) and r["efficiency"] == pytest.approx(0.625)
    assert (r["speedup_ci_low"], r["speedup_ci_high"]) == pytest.approx((2.5 * np.exp(-half), 2.5 * np.exp(half)))
    eff = r[["efficiency_ci_low", "efficiency_ci_high"]].tolist()
    assert eff == pytest.approx([2.5 * np.exp(-half) / 4, 2.5 * np.exp(half) / 4])  # the interval of S, over p
    assert (r["time_s"], r["baseline_time_s"], r["measure"]) == (pytest.approx(4.0), pytest.approx(10.0), "speedup")
    # The baseline's ±1 % spread over 2 repeats is > 5 % relative half-width: every row inherits it.
    assert r["unstable"] and r["unstable_cause"] == "baseline: run-to-run variation"
    assert base["unstable_cause"] == "cell: run-to-run variation; baseline: run-to-run variation"


def test_speedup_table_without_epoch_times_is_empty_with_its_columns():
    runs = _table({("single", 1): [10.0]}).drop(columns="epoch_time_s")
    sp = A.speedup_table(runs)
    assert sp.empty and list(sp.columns[-len(A.SPEEDUP_COLUMNS) :]) == A.SPEEDUP_COLUMNS


def test_comparison_ratio_and_interval_by_hand():
    runs = _strategies({"b": [1.0, 2.0, 4.0], "a": [2.0, 8.0]})
    r = A.comparisons_table(runs).iloc[0]
    # Satterthwaite's 32/19 degrees of freedom capped at Hsu's min(2, 3) - 1 = 1: the counts differ
    # and both sides vary (intervals.welch_halfwidth: it under-covered there).
    half = stats.t.ppf(0.975, 1) * LN2 * np.sqrt(4 / 3)
    assert (r["strategy_a"], r["strategy_b"], r["n_a"], r["n_b"]) == ("a", "b", 2, 3)
    ratio = r[["ratio", "ratio_ci_low", "ratio_ci_high"]].tolist()
    assert ratio == pytest.approx([2.0, 2 * np.exp(-half), 2 * np.exp(half)])
    assert r["verdict"] == A.Verdict.NO_DIFFERENCE and r["unstable"] and r["unstable_cause"].startswith("a: ")


def test_verdict_by_interval():
    assert A.verdict_of(1.01, 2.0) == "faster"
    assert A.verdict_of(0.4, 0.99) == "slower"
    assert A.verdict_of(1.0, 1.2) == A.Verdict.NO_DIFFERENCE  # touching 1 is no difference
    assert A.verdict_of(0.8, 1.0) == A.Verdict.NO_DIFFERENCE
    assert A.verdict_of(np.nan, 2.0) == A.Verdict.NO_INTERVAL
    assert A.verdict_of(2.0, np.nan) == A.Verdict.NO_INTERVAL


def test_comparisons_skip_failed_and_untimed_runs():
    runs = _strategies({"a": [2.0, 8.0, 1000.0], "b": [1.0, 2.0, 4.0, np.nan]})
    runs.loc[2, "status"] = "failed"
    r = A.comparisons_table(runs).iloc[0]
    assert (r["n_a"], r["n_b"], r["ratio"]) == (2, 3, pytest.approx(2.0))
    assert A.comparisons_table(runs.drop(columns="strategy")).empty


# -- fits table and cost model by value ------------------------------------------------------------

# Hand-made strong-scaling data: epoch times 10·(0.2 + 0.8/p); per-step times of the cost model with
# T_comp 1 s, α 1 ms × 4 calls, M 4 MB, B 1 GB/s, T_sync 10 ms: T(1) = 1.01, T(2) = 0.518, T(4) = 0.27.
STEP = {1: (1.01, 0.0, 0.0), 2: (0.518, 0.008, 4e6), 4: (0.27, 0.01, 6e6)}  # step, comm, bytes per step


def _scaling_runs():
    rows = []
    for strategy, p, epoch in (("single", 1, 10 * 1.01), ("single", 1, 10 / 1.01),
                               ("ddp", 1, 10.0), ("ddp", 1, 10.0), ("ddp", 2, 6.0), ("ddp", 2, 6.0),
                               ("ddp", 4, 4.0), ("ddp", 4, 4.0)):  # fmt: skip
        step, comm, sent = STEP[p]
        rows.append(dict(strategy=strategy, world_size=p, nodes=1, batch_size=64, status="ok", epoch_time_s=epoch,
                         step_time_mean_s=step, phase_comm_s=10 * comm, timed_steps=10,
                         comm_calls_per_step=4 if p > 1 else 0, comm_bytes_per_step=sent))  # fmt: skip
    return pd.DataFrame(rows)


def test_fits_table_values_by_hand():
    runs = _scaling_runs()
    fits = A.fits_table(runs, A.speedup_table(runs), n_boot=20)
    assert set(fits["group"]) == {"strategy=ddp"}
    by = {(r.law, r.parameter, r.p if r.p == r.p else None): r for r in fits.itertuples()}
    assert by[("amdahl", "f", None)].estimate == pytest.approx(0.2, abs=1e-6)
    assert by[("amdahl", "t1_s", None)].estimate == pytest.approx(10.0, rel=1e-6)
    # Amdahl at 2× and 4× the largest p: S = 10 / (10·(0.2 + 0.8/8)) = 10/3, and 10/2.5 = 4.
    for q, s in ((8, 10 / 3), (16, 4.0)):
        row = by[("amdahl", "speedup", q)]
        assert (row.kind, row.estimate) == ("prediction", pytest.approx(s, rel=1e-6))
        assert row.ci_low == pytest.approx(s, rel=1e-6) and row.ci_high == pytest.approx(s, rel=1e-6)
        assert row.note == f"prediction at {q // 4}× the largest measured p"
    # Karp–Flatt: S(2) = 10/6, S(4) = 2.5 give e = 0.2; the interval comes from S's (only the baseline varies:
    # Welch dof 1, se = ln 1.01), the high e from the low S.
    half = stats.t.ppf(0.975, 1) * np.log(1.01)
    for q, s in ((2, 10 / 6), (4, 2.5)):
        row = by[("karp_flatt", "e", q)]
        kf = lambda x: (1 / x - 1 / q) / (1 - 1 / q)  # noqa: E731
        assert (row.kind, row.n_points) == ("measured", 2)
        assert (row.estimate, row.ci_low, row.ci_high) == pytest.approx((0.2, kf(s * np.exp(half)), kf(s / np.exp(half))))
    # Cost model: T(8) = 1/8 + 4 ms + 1.75·4 ms + 10 ms = 0.146 s, T(16) = 0.0625 + 0.004 + 0.0075 + 0.01 = 0.084 s;
    # speedup against the single baseline's step time 1.01 s.
    assert by[("cost_model", "t_comp_s", None)].estimate == pytest.approx(1.0)
    assert by[("cost_model", "t_sync_s", None)].estimate == pytest.approx(0.01, abs=1e-9)
    assert by[("cost_model", "alpha_s", None)].estimate == pytest.approx(1e-3)
    assert by[("cost_model", "bandwidth_gbps", None)].estimate == pytest.approx(1.0)
    for q, t in ((8, 0.146), (16, 0.084)):
        row = by[("cost_model", "speedup", q)]
        assert (row.estimate, row.ci_low, row.ci_high) == pytest.approx((1.01 / t, 1.01 / t, 1.01 / t))
    assert len(fits) == 2 + 2 + 2 + 4 + 2  # amdahl f, t1; 2 predictions; 2 Karp–Flatt; 4 cost parameters; 2 predictions


def test_cost_model_bootstrap_intervals_bracket_noisy_repeats():
    runs = _scaling_runs()
    runs = runs[runs["strategy"] == "ddp"].reset_index(drop=True)
    runs["step_time_mean_s"] *= np.tile([1.02, 0.98], 3)
    runs["phase_comm_s"] *= np.tile([0.95, 1.05], 3)
    fit = fit_cost_model(runs, predict_at=(8,), n_boot=50)
    for name in ("alpha_s", "t_comp_s", "t_sync_s"):
        iv = fit.params[name]
        assert iv.low < iv.high and iv.low <= iv.estimate <= iv.high, name
    pred = fit.predictions[8]
    assert pred.low < pred.estimate < pred.high
    # One repeat at one world size: no bootstrap, no intervals.
    single = fit_cost_model(runs.drop(index=0), predict_at=(8,), n_boot=50)
    assert np.isnan(single.params["t_comp_s"].low) and np.isnan(single.predictions[8].high)


def test_cost_model_takes_alpha_and_bandwidth_from_a_matching_sweep():
    runs = _scaling_runs()
    g = runs[runs["strategy"] == "ddp"].assign(device="cpu")
    sweep = pd.DataFrame(dict(device=["cpu"], alpha_s=[1e-3], bandwidth_Bps=[1e9]))
    fit = fit_cost_model(g, sweep, predict_at=(8,), n_boot=20)
    assert fit.note.startswith("α and B from collective sweep")
    assert fit.params["alpha_s"].estimate == 1e-3 and np.isnan(fit.params["alpha_s"].low)
    assert np.isnan(fit.params["bandwidth_gbps"].high) and fit.params["t_comp_s"].low == pytest.approx(1.0)
    assert fit.params["t_comp_s"].estimate == pytest.approx(1.0) and fit.predictions[8].estimate == pytest.approx(0.146)
    other = fit_cost_model(g, sweep.assign(device="cuda"), n_boot=20)
    assert other.note.startswith("α and B from the runs' measured communication")


def test_cost_model_refusals():
    runs = _scaling_runs()
    g = runs[runs["strategy"] == "ddp"]
    assert fit_cost_model(g.drop(columns="phase_comm_s")) == "no communication columns in runs.csv"
    assert fit_cost_model(g[g["world_size"] < 4]) == "too few points: this strategy ran at 2 worker count(s), the cost model needs 3"
    assert fit_cost_model(g.assign(comm_bytes_per_step=0.0)) == "no measured communication"
    no_volume = fit_cost_model(g.assign(extra_comm_volume="none"))
    assert no_volume == "communication measured but the strategy's volume law is 'none'"
    only_p2_timed = g.assign(phase_comm_s=[0.0, 0.0, 0.08, 0.0, 0.0, 0.0])  # one run with timed communication
    assert fit_cost_model(only_p2_timed) == "too few points with communication to fit latency and bandwidth"


def test_baseline_step_time_matches_the_group_and_ignores_irrelevant_settings():
    rows = [
        ("single", 1, "ok", 64, 25.0, 1.0), ("single", 1, "ok", 64, 25.0, 2.0), ("single", 1, "ok", 64, 5.0, 6.0),
        ("single", 1, "failed", 64, 25.0, 100.0),  # not ok
        ("single", 2, "ok", 64, 25.0, 50.0),  # not p = 1
        ("ddp", 1, "ok", 64, 5.0, 7.0),  # not the baseline strategy
        ("single", 1, "ok", 128, 25.0, 40.0),  # another batch size
    ]  # fmt: skip
    runs = pd.DataFrame(rows, columns=["strategy", "world_size", "status", "batch_size", "bucket_mb", "step_time_mean_s"])
    info = {"strategy": "ddp", "batch_size": 64, "bucket_mb": 5.0}
    assert _baseline_step_time(runs, info, "single") == 2.0  # median of 1, 2, 6 (mean would be 3)
    assert _baseline_step_time(runs, {"strategy": "ddp", "batch_size": 128}, "single") == 40.0
    assert _baseline_step_time(runs, info, "ddp") == 7.0
    assert _baseline_step_time(runs, {"strategy": "ddp", "batch_size": 32}, "single") is None
    median_only = runs.rename(columns={"step_time_mean_s": "step_time_median_s"})
    assert _baseline_step_time(median_only, info, "single") == 2.0


def test_cost_model_bootstrap_of_noise_free_repeats_collapses_on_the_point():
    g = _scaling_runs().query("strategy == 'ddp'")
    fit = fit_cost_model(g, predict_at=(8, 16), n_boot=20)
    for name, value in (("alpha_s", 1e-3), ("bandwidth_gbps", 1.0), ("t_comp_s", 1.0), ("t_sync_s", 0.01)):
        iv = fit.params[name]
        assert (iv.estimate, iv.low, iv.high) == pytest.approx((value,) * 3, rel=1e-6), name
    assert fit.predictions[8].low == pytest.approx(0.146) and fit.predictions[16].high == pytest.approx(0.084)


def test_cost_model_with_an_unresolved_bandwidth_says_so():
    g = _scaling_runs().query("strategy == 'ddp'").assign(device="cpu")
    sweep = pd.DataFrame(dict(device=["cpu"], alpha_s=[1e-3], bandwidth_Bps=[np.inf]))  # latency only
    fit = fit_cost_model(g, sweep, n_boot=20)
    assert np.isnan(fit.params["bandwidth_gbps"].estimate) and fit.note.endswith("; bandwidth term not resolved")
    t_comp, t_sync = fit.params["t_comp_s"].estimate, fit.params["t_sync_s"].estimate
    assert float(fit.predict(8)) == pytest.approx(t_comp / 8 + 0.004 + t_sync)  # α·calls only, no byte term


def test_latency_bandwidth_fit_by_hand_skips_zero_times():
    # t = α·calls + bytes/B with α = 1 ms, B = 1 GB/s; the p = 1 row (no communication) is left out.
    alpha, bw = fit_latency_bandwidth([0, 4, 4], [0.0, 4e6, 6e6], [0.0, 0.008, 0.010])
    assert (alpha, bw) == pytest.approx((1e-3, 1e9))
    assert fit_latency_bandwidth([0, 4], [0.0, 4e6], [0.0, 0.008]) is None  # one informative point
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no bytes: B is infinite by decision, not by a division by zero
        assert fit_latency_bandwidth([4, 4], [0.0, 0.0], [0.004, 0.004]) == (pytest.approx(1e-3), np.inf)


def test_comm_sweep_of_nothing_is_empty():
    assert fit_comm_sweep(None).empty and fit_comm_sweep(pd.DataFrame()).empty


def test_comm_sweep_skips_a_device_without_all_reduce_and_fits_the_next():
    other = make_comm().assign(device="accel0", collective="broadcast")  # sorts before "cpu"
    fit = fit_comm_sweep(pd.concat([other, make_comm(alpha=50e-6, bandwidth=2e9)], ignore_index=True))
    assert fit["device"].tolist() == ["cpu"]
    assert (fit["alpha_s"].item(), fit["bandwidth_Bps"].item()) == pytest.approx((50e-6, 2e9), rel=1e-3)


def test_fits_table_columns_and_a_group_sorted_after_the_baseline():
    runs = _scaling_runs().replace({"strategy": {"ddp": "zero"}})  # "zero" comes after "single"
    fits = A.fits_table(runs, A.speedup_table(runs), n_boot=20)
    assert set(fits["group"]) == {"strategy=zero"} and len(fits) == 12
    assert list(fits.columns) == ["group", "strategy", "batch_size", *A.FIT_COLUMNS[1:]]


def test_weak_scaling_gustafson_by_hand():
    # Scaled speedup S(p) = t(1)/t(p) = p − 0.2(p − 1): S(2) = 1.8, S(4) = 3.4.
    runs = _table({("single", 1): [10.0], ("ddp", 1): [10.0], ("ddp", 2): [10 / 1.8], ("ddp", 4): [10 / 3.4]})
    runs["scaling"] = "weak"
    sp = A.speedup_table(runs).set_index(["strategy", "world_size"])
    assert sp.loc[("ddp", 4), "speedup"] == pytest.approx(3.4) and sp.loc[("ddp", 4), "measure"] == "scaled speedup"
    fits = A.fits_table(runs, A.speedup_table(runs))
    assert set(fits["law"]) == {"gustafson"}
    assert fits.loc[fits["parameter"] == "alpha", "estimate"].item() == pytest.approx(0.2)
    preds = fits[fits["kind"] == "prediction"].set_index("p")["estimate"].to_dict()
    assert preds == pytest.approx({8: 8 - 0.2 * 7, 16: 16 - 0.2 * 15})


def test_r2_by_hand():
    assert r_squared([1.0, 2.0, 3.0], [1.0, 2.0, 4.0]) == pytest.approx(0.5)  # 1 − 1/2
    assert r_squared([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]) == pytest.approx(0.0)
    assert np.isnan(r_squared([2.0, 2.0], [2.0, 2.0]))


def test_load_runs_derives_epoch_time_and_status(tmp_path):
    path = tmp_path / "runs.csv"
    pd.DataFrame(dict(samples_per_s=[1024.0, 512.0], dataset_size=4096, status=["ok", None])).to_csv(path, index=False)
    runs = A.load_runs(path)
    assert runs["epoch_time_s"].tolist() == [4.0, 8.0] and runs["status"].tolist() == ["ok", "failed"]
    no_status = A.load_runs_frame(pd.DataFrame(dict(epoch_time_s=[3.0], samples_per_s=[1.0], dataset_size=[9.0])))
    assert no_status["status"].tolist() == ["ok"] and no_status["epoch_time_s"].tolist() == [3.0]  # kept, not derived
    assert "epoch_time_s" not in A.load_runs_frame(pd.DataFrame(dict(samples_per_s=[1.0])))


def test_a_strategy_setting_that_follows_from_the_strategy_is_no_axis():
    runs = pd.DataFrame({"strategy": ["powersgd", "ddp", "ddp", "single"], "powersgd_start_iter": [2, 10, 10, 10],
                         "bucket_mb": [25.0, 0.5, 0.5, 25.0], "world_size": [2, 2, 2, 1]})  # fmt: skip
    cols = ["strategy", "powersgd_start_iter", "bucket_mb", "world_size"]
    assert A.varying(runs, cols) == ["strategy", "world_size"]
    swept = pd.concat([runs, runs.assign(bucket_mb=1.0)[runs["strategy"] == "ddp"]])  # ddp at two bucket sizes
    assert A.varying(swept, cols) == ["strategy", "bucket_mb", "world_size"]
    assert A.varying(runs.drop(columns="strategy"), cols[1:]) == ["powersgd_start_iter", "bucket_mb", "world_size"]


def test_label_names_the_varying_axes_or_all_runs():
    assert A.label({"strategy": "ddp", "batch_size": 64}, ["strategy", "batch_size"]) == "strategy=ddp, batch_size=64"
    assert A.label({"strategy": "ddp"}, []) == "all runs"


def test_tables_keep_cells_with_an_unset_axis_and_sort_them():
    # bucket_mb unset (NaN) everywhere: the cells must not be dropped by a groupby; rows come sorted.
    runs = _table({("ddp", 4): [4.0, 4.1], ("single", 1): [10.0, 10.2], ("ddp", 2): [6.0, 6.1]})
    runs["bucket_mb"] = np.nan
    runs["samples_per_s"] = 4096 / runs["epoch_time_s"]
    runs["step_time_mean_s"] = runs["epoch_time_s"] / 64
    cells = A.cell_stats(runs)
    assert list(zip(cells["strategy"], cells["world_size"])) == [("ddp", 2), ("ddp", 4), ("single", 1)]
    sp = A.speedup_table(runs)
    assert list(zip(sp["strategy"], sp["world_size"])) == [("ddp", 2), ("ddp", 4), ("single", 1)]
    assert (sp["baseline"] == "single").all() and sp["speedup"].notna().all()
    both = pd.concat([runs, runs.assign(strategy="allreduce")], ignore_index=True)
    cmp = A.comparisons_table(both)  # allreduce vs single at p = 1, vs ddp at p = 2 and 4
    assert list(zip(cmp["world_size"], cmp["strategy_b"])) == [(1, "single"), (2, "ddp"), (4, "ddp")]
    assert len(A.fits_table(runs, sp, n_boot=20)) > 0


def test_speedup_rows_without_a_baseline_are_skipped_not_the_rest():
    # allreduce at batch 128 has neither a single run at batch 128 nor its own p = 1: no row; ddp still gets one.
    runs = _table({("single", 1): [10.0], ("ddp", 2): [5.0]})
    extra = _table({("allreduce", 2): [6.0]}).assign(batch_size=128)
    sp = A.speedup_table(pd.concat([extra, runs], ignore_index=True))
    assert list(zip(sp["strategy"], sp["world_size"])) == [("ddp", 2), ("single", 1)]
    assert sp.loc[sp["strategy"] == "ddp", "speedup"].item() == pytest.approx(2.0)
    one = sp[sp["strategy"] == "single"].iloc[0]  # the baseline with one repeat: 1, no interval
    assert one["speedup"] == 1.0 and np.isnan(one["speedup_ci_low"]) and np.isnan(one["speedup_ci_level"])


def test_speedup_with_no_axis_besides_strategy_and_launch():
    runs = _table({("single", 1): [10.0], ("ddp", 2): [5.0]}).drop(columns="batch_size")
    sp = A.speedup_table(runs)
    assert sp.loc[sp["strategy"] == "ddp", "speedup"].item() == pytest.approx(2.0)


def test_stability_threshold_is_5_percent_relative_half_width():
    # Two values e^±d/2 apart: se = d/2, half = t(0.975, 1)·d/2, relative half-width sinh(half).
    q = stats.t.ppf(0.975, 1)
    for rel, unstable in ((0.048, False), (0.052, True)):
        d = 2 * np.arcsinh(rel) / q
        verdict, _, measured = A.stability(pd.DataFrame(dict(samples_per_s=[1000.0, 1000.0 * np.exp(d)])))
        assert measured == pytest.approx(rel) and verdict is unstable


def test_fits_table_without_speedups_keeps_only_the_sweep_rows():
    runs = _scaling_runs()
    empty = A.fits_table(runs, A.speedup_table(runs).iloc[:0])
    assert empty.empty and list(empty.columns) == A.FIT_COLUMNS
    sweep_only = A.fits_table(runs, A.speedup_table(runs).iloc[:0], make_comm())
    assert sweep_only["law"].tolist() == ["comm_sweep", "comm_sweep"]


def test_cost_bootstrap_on_arrays_equals_resampling_each_world_size_and_refitting():
    """_cost_bootstrap draws every resample with one integers() call and refits them on arrays; the
    draws must be exactly those of rng.choice per world size and _cost_core on each resample."""
    rng = np.random.default_rng(7)
    df = _cost_rows(lambda p: 2 * (p - 1) / p, sizes=(1, 2, 4, 8))
    df = pd.concat([df] * 3, ignore_index=True)
    df["step_time_mean_s"] *= 1 + 0.02 * rng.standard_normal(len(df))
    df["phase_comm_s"] *= 1 + 0.05 * rng.standard_normal(len(df))
    df = df.iloc[:-1]  # unequal repeats per world size
    sizes = df["world_size"].value_counts()
    got = _cost_bootstrap(df, sizes, None, "allreduce", (16, 32), 60, 3)
    r = np.random.default_rng(3)
    groups = [np.flatnonzero(df["world_size"].to_numpy() == q) for q in sizes.index]
    want = []
    for _ in range(60):
        c = _cost_core(df.iloc[np.concatenate([r.choice(ix, size=len(ix)) for ix in groups])], None, "allreduce")
        want.append([c[0], c[1] / 1e9, c[2], c[3], c[4](16), c[4](32)])
    assert got.shape == (60, 6)
    # the same draws; the stacked solve sums in another order than one problem's: rounding apart
    np.testing.assert_allclose(got, np.asarray(want, float), rtol=1e-9, atol=0)


def test_nnls2_answers_as_scipy_nnls_on_stacked_problems():
    """Feasible optimum, one unknown clamped at zero (either one), both zero, collinear columns, a
    zero column and left-out points: the closed form gives scipy's answer for each problem."""
    rng = np.random.default_rng(11)
    n = 7
    a = np.abs(rng.normal(size=(400, n, 2))) * [1e3, 1e9]  # calls/s and bytes/s: scales 1e6 apart
    y = (a @ (rng.normal(size=(400, 2, 1)) * [[1e-4], [1e-9]]))[..., 0] + 0.1 * rng.normal(size=(400, n))
    a[0, :, 1] = 3e6 * a[0, :, 0]  # collinear
    a[1, :, 0] = 0.0  # a zero column
    y[2] = -1.0  # no positive fit: x = 0
    w = (rng.random((400, n)) > 0.2).astype(float)
    w[:, :2] = 1.0
    got = nnls2(a, y, w)
    for i in range(400):
        k = w[i] > 0
        want, _ = optimize.nnls(a[i, k], y[i, k])
        np.testing.assert_allclose(got[i], want, rtol=1e-6, atol=1e-12 * np.abs(want).max(initial=1e-300), err_msg=str(i))
    cases = {"both": ((got > 0).all(axis=1)).sum(), "one": ((got > 0).sum(axis=1) == 1).sum(), "none": (got == 0).all(axis=1).sum()}
    assert min(cases.values()) >= 1, cases  # every branch was exercised
    # collinear columns: the one with the larger gradient takes the whole fit, either way round
    line = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])
    for cols in (line, line[:, ::-1]):
        np.testing.assert_allclose(nnls2(cols, np.ones(3)), optimize.nnls(cols, np.ones(3))[0], rtol=1e-12)


def test_comparisons_table_is_welch_log_ratio_and_stability_of_each_pair():
    """The table reads each cell once and the t quantiles in one call: every row must still be what
    the per-pair definitions give (welch_log_ratio, stability of each side, run versions)."""
    from report_synth import make_runs

    runs = make_runs(strategies=("single", "ddp", "allreduce", "ring_allreduce"), world_sizes=(1, 2, 4),
                     batch_sizes=(32, 64), repeats=3, failures=True)  # fmt: skip
    runs.loc[runs.index[::3], "samples_per_s"] = np.nan  # cells with fewer repeats, some with one
    runs.loc[runs.index[1::5], "samples_per_s"] = np.nan
    runs.loc[runs.index[::11], "env_code_fingerprint"] = "other"
    cmp = A.comparisons_table(runs)
    ok = runs[(runs["status"] == "ok") & runs["samples_per_s"].notna()]
    setting = [c for c in A.axes(runs) if c != "strategy"]
    assert len(cmp) > 20 and cmp["ratio_ci_low"].isna().any() and cmp["ratio_ci_low"].notna().any()
    version = A.run_version(ok)
    for _, row in cmp.iterrows():
        cell = ok[(ok[setting].astype(str) == row[setting].astype(str)).all(axis=1)]
        a, b = (cell[cell["strategy"] == row[f"strategy_{s}"]] for s in "ab")
        iv = A.welch_log_ratio(a["samples_per_s"], b["samples_per_s"])
        got = row[["ratio", "ratio_ci_low", "ratio_ci_high", "ratio_ci_level"]].to_numpy(float)
        np.testing.assert_array_equal(got, [iv.estimate, iv.low, iv.high, iv.level])
        assert row["verdict"] == A.verdict_of(iv.low, iv.high) and (row["n_a"], row["n_b"]) == (len(a), len(b))
        causes = [f"{row[f'strategy_{s}']}: {A.stability(side)[1]}" for s, side in (("a", a), ("b", b)) if A.stability(side)[0]]
        assert row["unstable"] == bool(causes) and row["unstable_cause"] == "; ".join(causes)
        assert row["versions_differ"] == (set(version[a.index]) != set(version[b.index]))


@pytest.mark.parametrize("values", [[1, 1], [1, 2], [1.0, 1.0], [1.0, 1.5], [np.nan, np.nan], [1.0, np.nan], [0.0, -0.0],
                                    [0.0, 0.0], [True, False], [True, True], ["a", "a"], ["1", 1], [1, "x"], [None, "a"],
                                    [1.0, 1.0000000000000002]])  # fmt: skip
def test_varying_counts_values_as_their_text(values):
    s = pd.Series(values)
    assert _several_texts(s) == (s.astype(str).nunique() > 1)


# -- memory held per rank ------------------------------------------------------------------------


def test_cells_have_the_held_bytes_with_an_interval_that_holds_only_the_exact_count():
    from report_synth import held_bytes, make_sharding_runs

    runs = A.load_runs_frame(make_sharding_runs(precisions=("fp32",), grad_accums=(1,)))
    cells = A.cell_stats(runs).set_index("strategy")
    for strategy in ("ddp", "zero", "fsdp"):
        counted = held_bytes(strategy, 2, state_per_param=2.0)
        for col in ("extra_param_bytes", "extra_grad_bytes", "extra_optimizer_state_bytes", "extra_held_bytes"):
            c = cells.loc[strategy]
            assert c[col] == c[f"{col}_ci_low"] == c[f"{col}_ci_high"] == counted[col], (strategy, col)
            assert c[f"{col}_ci_level"] == pytest.approx(0.75)  # 3 repeats: min..max
    assert all("[bytes]" in A.METRICS[c] for c in ("extra_param_bytes", "extra_held_bytes"))


def test_cells_are_twins_across_strategies_on_the_settings_both_read():
    """bucket_mb 0.43 in params: ddp and zero read it, fsdp and fsdp_grad_op ran at the held default
    (issue 58): the analysis still pairs fsdp with ddp, while runs.csv keeps what ran."""
    from report_synth import make_sharding_runs

    raw = make_sharding_runs(precisions=("fp32",), grad_accums=(1,))
    reads = raw["strategy"].isin(["ddp", "zero"])
    raw["bucket_mb"] = raw["bucket_mb"].astype(float).where(~reads, 0.43)
    runs = A.load_runs_frame(raw)
    assert set(runs["bucket_mb"].astype(float)) == {0.43} and set(raw.loc[~reads, "bucket_mb"]) == {25.0}
    pairs = A.comparisons_table(runs)
    assert {("ddp", "fsdp"), ("ddp", "fsdp_grad_op"), ("ddp", "zero")} <= set(zip(pairs["strategy_a"], pairs["strategy_b"]))
    assert set(A.memory_savings(runs, A.cell_stats(runs))["strategy"]) == {"zero", "fsdp_grad_op", "fsdp"}
    assert "bucket_mb" not in A.varying(runs, A.axes(runs))
    # several values read (an axis): the held default pairs with the read cells at it only
    axis = pd.concat([raw, raw[reads].assign(bucket_mb=25.0, run_dir=raw.loc[reads, "run_dir"] + "-b25")], ignore_index=True)
    runs = A.load_runs_frame(axis)
    assert set(runs.loc[runs["strategy"] == "fsdp", "bucket_mb"]) == {25.0}
    pairs = A.comparisons_table(runs)
    ddp_fsdp = pairs[(pairs["strategy_a"] == "ddp") & (pairs["strategy_b"] == "fsdp")]
    assert list(ddp_fsdp["bucket_mb"]) == [25.0]
    # a strategy this checkout lacks is left as it ran
    odd = A.load_runs_frame(raw.assign(strategy=raw["strategy"].replace({"fsdp": "../old_strategy"})))
    assert set(odd.loc[odd["strategy"] == "../old_strategy", "bucket_mb"]) == {25.0}


def test_memory_savings_against_ddp_with_the_comparisons_interval():
    from report_synth import PARAM_BYTES, make_sharding_runs

    runs = A.load_runs_frame(make_sharding_runs(precisions=("fp32",), grad_accums=(1, 4)))
    cells = A.cell_stats(runs)
    s = A.memory_savings(runs, cells)
    assert list(s["strategy"]) == ["zero", "fsdp_grad_op", "fsdp"] * 2  # per setting, least to most sharded
    fsdp = s[(s["strategy"] == "fsdp") & (s["grad_accum"] == 1)].iloc[0]
    assert fsdp["held_bytes"] == 2 * PARAM_BYTES and fsdp["reference_held_bytes"] == 4 * PARAM_BYTES
    assert fsdp["saved_bytes"] == 2 * PARAM_BYTES and fsdp["held_ratio"] == 0.5
    zero = s[(s["strategy"] == "zero") & (s["grad_accum"] == 1)].iloc[0]
    assert (zero["extra_param_bytes_ratio"], zero["extra_grad_bytes_ratio"], zero["extra_optimizer_state_bytes_ratio"]) == (1, 1, 0.5)
    # the throughput ratio is comparisons.csv's (ddp/fsdp there, by name), turned round
    cmp = A.comparisons_table(runs)
    row = cmp[(cmp["strategy_a"] == "ddp") & (cmp["strategy_b"] == "fsdp") & (cmp["grad_accum"] == 1)].iloc[0]
    assert fsdp["ratio"] == pytest.approx(1 / row["ratio"])
    assert (fsdp["ratio_ci_low"], fsdp["ratio_ci_high"]) == pytest.approx((1 / row["ratio_ci_high"], 1 / row["ratio_ci_low"]))
    assert fsdp["verdict"] == "slower" and row["verdict"] == "faster"  # fsdp 1.5x slower: ddp faster
    assert fsdp["peak_kind"] == "peak RSS" and fsdp["peak_mib"] == cells.set_index(["strategy", "grad_accum"]).loc[("fsdp", 1), "peak_rss_mb"]
    # one rank has nothing to shard; no ddp, no saving; no counts, nothing
    assert not (pd.to_numeric(s["world_size"]) == 1).any()
    assert A.memory_savings(runs[runs["strategy"] != "ddp"], cells[cells["strategy"] != "ddp"]).empty
    held = [c for c in cells if c.startswith("extra_") and "bytes" in c]
    assert A.memory_savings(runs, cells.drop(columns=held)).empty


def test_axis_effects_pair_each_cell_with_its_twin():
    from report_synth import make_sharding_runs

    runs = A.load_runs_frame(make_sharding_runs(noise=0.0, bf16_speedup=1.25))
    cells = A.cell_stats(runs)
    e = A.axis_effects(runs, cells, "precision", "fp32")
    assert len(e) == 10 and set(e["precision"]) == {"bf16"} and set(e["reference_value"]) == {"fp32"}
    assert np.allclose(e["ratio"], 1.25) and set(e["verdict"]) == {"faster"} and np.allclose(e["held_ratio"], 1.0)
    accum = A.axis_effects(runs, cells, "grad_accum", 1)
    assert len(accum) == 10 and np.allclose(accum["ratio"], 1.0) and set(accum["verdict"]) == {A.Verdict.NO_DIFFERENCE}
    assert A.axis_effects(runs, cells, "precision", "tf32").empty  # no twin measured


def test_peaks_prefer_the_cuda_allocation_where_measured():
    cells = pd.DataFrame(dict(peak_rss_mb=[900.0, 800.0], peak_rss_mb_ci_low=[890.0, 790.0],
                              peak_rss_mb_ci_high=[910.0, 810.0], cuda_max_allocated_mb=[np.nan, 120.0],
                              cuda_max_allocated_mb_ci_low=[np.nan, 118.0], cuda_max_allocated_mb_ci_high=[np.nan, 121.0]))  # fmt: skip
    p = A.peaks(cells)
    assert list(p["peak_kind"]) == ["peak RSS", "peak CUDA allocated"]
    assert list(p["peak_mib"]) == [900.0, 120.0] and list(p["peak_ci_low"]) == [890.0, 118.0]
