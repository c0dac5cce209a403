"""Bus-bandwidth math (nccl-tests definitions) and the alpha-B fit on synthetic sweeps."""

import csv
import json
import math

import numpy as np
import pytest

from ddpbench.comm import commfit
from ddpbench.comm.commfit import CSV_COLUMNS, algbw_gbps, busbw_factor, busbw_gbps, fit_latency_bandwidth


@pytest.mark.parametrize(
    "collective, p, factor",
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 4, 1.5),
        ("ring_all_reduce", 3, 4 / 3),
        ("all_gather", 2, 0.5),
        ("all_gather", 4, 0.75),
        ("reduce_scatter", 8, 7 / 8),
        ("broadcast", 5, 1.0),
        ("memcpy", 2, 1.0),
        ("all_reduce", 1, 0.0),
    ],
)
def test_busbw_factor_is_nccl_tests(collective, p, factor):
    assert busbw_factor(collective, p) == pytest.approx(factor)


def test_algbw_and_busbw_in_gb_per_s():
    # 64 MiB in 10 ms: 6.7108864 GB/s (1e9 B/s, not GiB/s).
    assert algbw_gbps(64 * 2**20, 0.01) == pytest.approx(6.7108864)
    assert busbw_gbps("all_reduce", 4, 64 * 2**20, 0.01) == pytest.approx(6.7108864 * 1.5)
    assert busbw_gbps("all_gather", 4, 4e9, 2.0) == pytest.approx(1.5)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="unknown collective"):
        busbw_factor("all_to_all", 2)
    with pytest.raises(ValueError, match="world_size"):
        busbw_factor("all_reduce", 0)
    with pytest.raises(ValueError, match="positive"):
        algbw_gbps(4, 0.0)


def synthetic_sweep(alpha, bandwidth, world_sizes=(2,), noise=0.0, seed=0, collective="all_reduce"):
    rng = np.random.default_rng(seed)
    rows = []
    for p in world_sizes:
        for k in range(2, 27):  # 4 B .. 64 MiB, as the default sweep
            nbytes = 2**k
            t = alpha + busbw_factor(collective, p) * nbytes / bandwidth
            t *= 1.0 + noise * rng.standard_normal()
            rows.append(
                {
                    "collective": collective,
                    "backend": "gloo",
                    "device": "cpu",
                    "world_size": p,
                    "bytes": nbytes,
                    "iters": 10,
                    "time_median_s": t,
                    "time_p95_s": t * 1.1,
                    "algbw_gbps": algbw_gbps(nbytes, t),
                    "busbw_gbps": busbw_gbps(collective, p, nbytes, t),
                }
            )
    return rows


@pytest.mark.parametrize("weighting", ["relative", "absolute"])
def test_fit_recovers_known_alpha_and_bandwidth(weighting):
    rows = synthetic_sweep(alpha=40e-6, bandwidth=3e9, world_sizes=(2, 3, 4))
    fit = fit_latency_bandwidth(rows, weighting=weighting)
    assert fit.alpha_s == pytest.approx(40e-6, rel=1e-6)
    assert fit.bandwidth_bps == pytest.approx(3e9, rel=1e-6)
    assert fit.bandwidth_gbps == pytest.approx(3.0, rel=1e-6)
    assert fit.r2 == pytest.approx(1.0, abs=1e-9)
    assert fit.n_points == 75
    assert fit.predict_s(2**20, 4) == pytest.approx(40e-6 + 1.5 * 2**20 / 3e9)


def test_fit_with_noise_relative_weighting_keeps_latency():
    rows = synthetic_sweep(alpha=100e-6, bandwidth=2e9, noise=0.05, seed=1)
    rel = fit_latency_bandwidth(rows, weighting="relative")
    assert rel.alpha_s == pytest.approx(100e-6, rel=0.1)
    assert rel.bandwidth_bps == pytest.approx(2e9, rel=0.1)
    assert 0.9 < rel.r2 <= 1.0
    # Ordinary least squares: the largest messages decide, the latency is lost in their noise.
    ols = fit_latency_bandwidth(rows, weighting="absolute")
    assert abs(ols.alpha_s - 100e-6) > abs(rel.alpha_s - 100e-6)


def test_fit_filters_and_csv_path(tmp_path):
    rows = synthetic_sweep(alpha=20e-6, bandwidth=1e9) + synthetic_sweep(
        alpha=1e-3, bandwidth=1e8, collective="broadcast"
    )
    rows.append({**rows[-1], "collective": "memcpy", "time_median_s": 1e-3})
    path = tmp_path / "comm.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    fits = commfit.fit_all(path)
    assert set(fits) == {"all_reduce", "broadcast"}
    assert fits["broadcast"].alpha_s == pytest.approx(1e-3, rel=1e-6)
    assert fits["broadcast"].bandwidth_gbps == pytest.approx(0.1, rel=1e-6)
    windowed = fit_latency_bandwidth(str(path), min_bytes=1024, backend="gloo", device="cpu")
    assert windowed.n_points == 17  # 2**10 .. 2**26 bytes
    assert windowed.bandwidth_bps == pytest.approx(1e9, rel=1e-6)


def test_fit_needs_two_sizes():
    rows = synthetic_sweep(alpha=1e-5, bandwidth=1e9)[:1]
    with pytest.raises(ValueError, match="two distinct"):
        fit_latency_bandwidth(rows)
    with pytest.raises(ValueError, match="weighting"):
        fit_latency_bandwidth(rows, weighting="log")


def test_pandas_and_cli(tmp_path, capsys):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(synthetic_sweep(alpha=5e-5, bandwidth=4e9, world_sizes=(2, 4)))
    fit = fit_latency_bandwidth(df)
    assert math.isclose(fit.alpha_s, 5e-5, rel_tol=1e-6)
    path = tmp_path / "comm.csv"
    df.to_csv(path, index=False)
    assert commfit.main([str(path), "--json"]) == 0
    fits = json.loads(capsys.readouterr().out)
    assert fits["all_reduce"]["bandwidth_gbps"] == pytest.approx(4.0, rel=1e-6)
    assert fits["all_reduce"]["alpha_s"] == pytest.approx(5e-5, rel=1e-6)
    assert commfit.main([str(path)]) == 0
    assert "all_reduce" in capsys.readouterr().out
