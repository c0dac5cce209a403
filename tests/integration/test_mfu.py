"""MFU of a real 2-rank CPU cell (issue 42): rank 0 counts the training FLOPs and measures the peak after
the timed steps, the fields reach summary.json, and the peak is kept per results folder (the second cell of
the launch reads it back, or measures it again where the machine is quiet now: core.peaks.settled)."""

import json
import math
import pathlib

import pytest
from harness_common import CELL_FLAGS, torchrun

from ddpbench.core import peaks

pytestmark = pytest.mark.integration

MNIST_MLP = 2 * (784 * 512 + 512 * 256 + 256 * 10) * 3 - 2 * 784 * 512  # tests/unit/test_flops.py's formula


@pytest.fixture(scope="module")
def summaries(tmp_path_factory):
    out = tmp_path_factory.mktemp("mfu") / "w2"
    here = pathlib.Path(__file__).resolve().parent
    with pytest.MonkeyPatch.context() as env:  # this host's copy of its peaks: a fresh one, so the first cell measures
        env.setenv(peaks.HOST_PEAKS_ENV, str(out.parent / "host"))
        proc = torchrun(2, str(here / "_cells.py"), str(out), "ddp:mlp", "allreduce:mlp", "--", *CELL_FLAGS)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return out, [json.loads((out / f"{s}-mlp" / "summary.json").read_text()) for s in ("ddp", "allreduce")]


def test_a_2_rank_cpu_cell_has_its_mfu_against_the_measured_peak(summaries):
    _, (s, _) = summaries
    extra = s["extra"]
    assert set(peaks.MFU_FIELDS) <= set(extra)
    assert extra["train_flops_per_sample"] == MNIST_MLP
    assert extra["achieved_flops_per_s"] == pytest.approx(s["samples_per_s"] * MNIST_MLP)
    assert extra["peak_flops_measured"] > 0
    assert 0 < extra["mfu_measured"] <= 1
    assert extra["mfu_measured"] == pytest.approx(extra["achieved_flops_per_s"] / (2 * extra["peak_flops_measured"]))
    assert extra["peak_flops_datasheet"] is None and extra["mfu_datasheet"] is None  # CPU: no datasheet
    peak, count = s["env"]["peak_flops"], s["env"]["flop_count"]
    assert peak["threads"] == s["env"]["threads_per_rank"] and peak["dtype"] == "float32" and peak["matrix_n"] >= 256
    assert peak["torch"] == s["env"]["torch"] and not math.isnan(peak["best_s"])
    assert count["batch"] == s["per_rank_batch"] and count["flops_per_sample"] == MNIST_MLP
    # which peak the MFU used, with the machine's load while it was measured (issue 58)
    assert extra["peak_flops_matrix_n"] == peak["matrix_n"] and extra["peak_flops_busy"] == peak["busy"]
    assert 0 <= extra["peak_flops_other_cpu_frac"] <= 1 and peak["busy"] == (peak["other_cpu_frac"] > peaks.BUSY_CPU_FRAC)
    assert [size["n"] for size in peak["sizes"]] == sorted(size["n"] for size in peak["sizes"])
    assert peak["flops_per_s"] == max(size["flops_per_s"] for size in peak["sizes"])


def test_the_peak_is_kept_per_results_folder(summaries):
    """The second cell reads the first's peak, or (a quiet machine at its start) measures it again to
    confirm a quiet one or replace a busy one; the file holds the peak it used."""
    out, (first, second) = summaries
    a, b = first["env"]["peak_flops"], second["env"]["peak_flops"]
    assert a["cached"] is False and b["flops_per_s"] == second["extra"]["peak_flops_measured"]
    assert b["cached"] is True or b["remeasured"] is True
    if not a["busy"]:  # a quiet peak is kept, or replaced by a higher quiet one
        assert b["flops_per_s"] >= a["flops_per_s"] and not b["busy"]
    kept = out / b["file"]  # below the results folder: the folder the run folders are in
    assert kept.parent == out / "peaks" and json.loads(kept.read_text())["flops_per_s"] == b["flops_per_s"]
    hosts = out.parent / "host" / "peaks" / kept.name  # and the host's copy, which other results folders read
    assert json.loads(hosts.read_text())["flops_per_s"] == b["flops_per_s"]
