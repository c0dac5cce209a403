"""The collective sweep under torchrun with gloo at world sizes 2 and 3 (small sizes)."""

import csv
import os
import subprocess
import sys

import pytest

from ddpbench.comm.commfit import COLLECTIVES, CSV_COLUMNS, busbw_factor


def torchrun_sweep(tmp_path, nproc, *flags, check=True):
    out = tmp_path / f"comm_p{nproc}.csv"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    cmd += ["-m", "ddpbench.comm.commbench", "--out", str(out), "--iters", "3", "--warmup", "1", *flags]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc


def read_rows(path):
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames) == CSV_COLUMNS
        return list(reader)


def check_rows(rows, world, collectives):
    assert {r["collective"] for r in rows} == set(collectives) | {"memcpy"}
    for r in rows:
        assert r["backend"] == "gloo" and r["device"] == "cpu" and int(r["world_size"]) == world
        med, p95, alg, bus = (float(r[k]) for k in ("time_median_s", "time_p95_s", "algbw_gbps", "busbw_gbps"))
        assert 0 < med <= p95
        assert int(r["iters"]) >= 3
        assert alg == pytest.approx(int(r["bytes"]) / med / 1e9)
        assert bus == pytest.approx(alg * busbw_factor(r["collective"], world))
    for name in collectives:
        sizes = [int(r["bytes"]) for r in rows if r["collective"] == name]
        assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes), (name, sizes)
        assert all(s % (4 * world if name in ("all_gather", "reduce_scatter") else 4) == 0 for s in sizes)


def test_sweep_world_size_2_all_collectives(tmp_path):
    out, proc = torchrun_sweep(tmp_path, 2, "--max-bytes", "65536")
    rows = read_rows(out)
    check_rows(rows, 2, COLLECTIVES)
    for name in ("all_reduce", "broadcast", "ring_all_reduce"):
        assert [int(r["bytes"]) for r in rows if r["collective"] == name] == [2**k for k in range(2, 17)]
    # nccl-tests' total-size convention: 4 B cannot be split over 2 ranks as float32.
    assert [int(r["bytes"]) for r in rows if r["collective"] == "all_gather"] == [2**k for k in range(3, 17)]
    memcpy = [r for r in rows if r["collective"] == "memcpy"]
    assert len(memcpy) == 1 and int(memcpy[0]["bytes"]) == 65536
    # The table on stdout (rank 0 only) has a line per row.
    assert proc.stdout.count("ring_all_reduce ") == 15
    # No alpha-B fit here: up to 64 KiB gloo on loopback is latency-bound, so the bandwidth
    # term is below the noise (a quiet machine fitted a negative slope). The fit is tested
    # on synthetic sweeps with known alpha and B in tests/unit/test_commfit.py.


def test_sweep_world_size_3_reductions(tmp_path):
    names = ["all_reduce", "ring_all_reduce", "all_gather", "reduce_scatter"]
    out, _ = torchrun_sweep(
        tmp_path, 3, "--max-bytes", "16384", "--collectives", ",".join(names), "--memcpy-bytes", "4096"
    )
    rows = read_rows(out)
    check_rows(rows, 3, names)
    assert [int(r["bytes"]) for r in rows if r["collective"] == "reduce_scatter"][:3] == [12, 24, 60]


def test_corrupted_collective_is_an_error(tmp_path):
    out, proc = torchrun_sweep(
        tmp_path,
        2,
        "--min-bytes", "64",
        "--max-bytes", "256",
        "--collectives", "all_reduce,ring_all_reduce",
        "--inject-error", "ring_all_reduce",
        check=False,
    )
    assert proc.returncode != 0
    assert "wrong result of ring_all_reduce at 64 bytes" in proc.stderr
    assert "on rank 1: element 15 of 16 is" in proc.stderr
    assert not out.exists()


def test_interleaved_sweep_alternates_collectives_size_by_size_and_still_checks(tmp_path):
    names = ["all_reduce", "ring_all_reduce"]
    out, proc = torchrun_sweep(tmp_path, 2, "--min-bytes", "64", "--max-bytes", "1024", "--collectives",
                               ",".join(names), "--memcpy-bytes", "0", "--interleave")  # fmt: skip
    rows = read_rows(out)
    check_rows([*rows, dict(rows[0], collective="memcpy")], 2, names)
    # size by size, both collectives at each size, with one iteration count
    assert [(r["collective"], int(r["bytes"])) for r in rows] == [(c, 2**k) for k in range(6, 11) for c in names]
    for a, b in zip(rows[::2], rows[1::2]):
        assert a["iters"] == b["iters"]
    _, bad = torchrun_sweep(tmp_path, 2, "--min-bytes", "64", "--max-bytes", "128", "--collectives", ",".join(names),
                            "--interleave", "--inject-error", "ring_all_reduce", check=False)  # fmt: skip
    assert bad.returncode != 0 and "wrong result of ring_all_reduce at 64 bytes" in bad.stderr
