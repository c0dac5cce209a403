"""MFU on a real GPU (issue 42): the matmul peak per precision against the datasheet's dense figure, and
a CUDA cell's two MFUs. Skipped where torch sees no GPU (CI)."""

import json
import os
import subprocess
import sys

import pytest
import torch

from ddpbench.core import peaks

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch"),
]


@pytest.fixture(scope="module")
def measured():
    from ddpbench.run import flops

    device = torch.device("cuda", 0)
    before = torch.backends.cuda.matmul.allow_tf32
    found = {p: flops.matmul_peak(device, p) for p in ("fp32", "tf32", "bf16")}
    assert torch.backends.cuda.matmul.allow_tf32 == before  # the benchmark leaves the cell's mode alone
    return torch.cuda.get_device_name(0), found


def test_the_measured_peak_is_below_the_datasheet_and_ranks_the_precisions(measured):
    name, found = measured
    assert found["bf16"]["flops_per_s"] > 2 * found["fp32"]["flops_per_s"]
    assert found["tf32"]["flops_per_s"] > found["fp32"]["flops_per_s"]  # TF32 is on only for tf32
    for precision, peak in found.items():
        sheet, _ = peaks.datasheet_peak(name, precision)
        if sheet is None:
            continue
        # above the dense datasheet figure: the table (or the timing) is wrong; far below: the benchmark is
        assert 0.3 * sheet < peak["flops_per_s"] < 1.1 * sheet, (name, precision, peak["flops_per_s"], sheet)


def test_a_cuda_cell_has_both_mfus(tmp_path):
    flags = ["--device", "cuda", "--strategy", "single", "--model", "gpt_tiny", "--dataset", "synthetic_tokens",
             "--precision", "bf16", "--batch-size", "64", "--dataset-size", "2048", "--test-size", "64",
             "--min-timed-steps", "10", "--min-timed-s", "0", "--warmup-steps", "2", "--timeout-s", "180"]  # fmt: skip
    out = tmp_path / "runs" / "cell" / "repeat~0"
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", "1", "--out", str(out), *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "ok", s["reason"]
    e = s["extra"]
    assert 0 < e["mfu_measured"] <= 1
    kept = s["env"]["peak_flops"]["file"]  # below the results folder, the folder above runs/
    assert kept.startswith("peaks/") and (tmp_path / kept).is_file()
    if peaks.datasheet(s["env"]["gpu_name"]) is not None:
        assert 0 < e["mfu_datasheet"] <= e["mfu_measured"] * 1.1 and e["peak_flops_datasheet_source"]
