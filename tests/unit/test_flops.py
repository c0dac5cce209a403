"""MFU's parts (issue 42): the counted training FLOPs against hand-written formulas, the matmul peak and its
cache, the datasheet table, the MFU arithmetic, and the fields' way into runs.csv and cells.csv."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from ddpbench import analysis
from ddpbench.core import peaks, run_output, timers
from ddpbench.core.params import CellParams
from ddpbench.results import aggregate
from ddpbench.run import flops, gpt, models
from ddpbench.run.data import TensorData
from ddpbench.strategies.base import Context

CPU = torch.device("cpu")


def ctx(precision="fp32"):
    return Context(CellParams(precision=precision), 0, 1, CPU, timers.CommMeter(), timers.Clock("cpu"))


def mlp_batch(n, shape=(3, 32, 32)):
    return torch.randn(n, *shape), torch.randint(0, 10, (n,))


# -- the FLOP count --------------------------------------------------------------------------------------


def mlp_formula(d_in: int, widths=(512, 256, 10)) -> int:
    """The default mlp (Linear d_in->512->256->10) per sample. A Linear's forward is one matmul of
    2·in·out FLOPs; its backward is two of the same size, the weight gradient (xᵀ·dy) and the input
    gradient (dy·Wᵀ), except for the first layer: its input is the data, which needs no gradient, so
    autograd skips that product and FlopCounterMode counts the weight gradient alone. Biases, ReLU and
    the loss are not matrix products: not counted."""
    dims = (d_in, *widths)
    forward = sum(2 * a * b for a, b in zip(dims, dims[1:]))
    first = 2 * dims[0] * dims[1]
    return forward + 2 * forward - first  # = 3·forward − the first layer's input gradient


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_mlp_training_flops_per_sample_are_the_hand_formula(precision):
    model = models.build("mlp", (3, 32, 32), 10)
    x, y = mlp_batch(6)
    counted = flops.training_flops_per_sample(model, x, y, ctx(precision))
    assert counted == mlp_formula(3 * 32 * 32) == 3 * 3_412_992 - 2 * 3072 * 512 == 7_093_248
    # per sample: the same on another batch size; the model itself is left as it was (a copy is counted)
    assert flops.training_flops_per_sample(model, *mlp_batch(17), ctx(precision)) == counted
    assert all(p.grad is None for p in model.parameters())


def test_mnist_mlp_formula_follows_the_input_size():
    model = models.build("mlp", (1, 28, 28), 10)
    assert flops.training_flops_per_sample(model, *mlp_batch(4, (1, 28, 28)), ctx()) == mlp_formula(784) == 2_407_424


GPT_TOLERANCE = 0.02  # the 6N rule counts biases and LayerNorm weights as matmul weights: ~0.5 % at gpt_tiny


def _gpt_tiny(vocab, seq_len):
    return models.build("gpt_tiny", (seq_len,), vocab, kind="tokens"), gpt


def test_gpt_tiny_training_flops_per_token_are_6n_plus_the_attention_term():
    """Per token, training FLOPs ≈ 6·N + 12·L·T·d (Kaplan et al. 2020, PaLM appendix B, nanoGPT's
    estimate_mfu): N the non-embedding parameters plus the tied head's d·V matmul (the head is a matrix
    product the embedding lookup is not), L layers, T the sequence length, d = heads × head size; the
    attention's QKᵀ and AV over the full T×T (no causal halving), forward 4·T·d per layer, ×3 for training.
    FlopCounterMode's own convention for the fused attention backward is 2.5× its forward (the flash
    backward recomputes QKᵀ): 14·L·T·d, which the tolerance below allows for."""
    vocab, seq_len = 256, 64
    model, gpt = _gpt_tiny(vocab, seq_len)
    size = gpt.SIZES["gpt_tiny"]
    L, d = size.n_layer, size.d_model
    torch.manual_seed(0)
    x, y = torch.randint(0, vocab, (3, seq_len)), torch.randint(0, vocab, (3, seq_len))
    per_token = flops.training_flops_per_sample(model, x, y, ctx()) / seq_len
    n = gpt.non_embedding_parameters(model) + d * vocab
    rule = 6 * n + 12 * L * seq_len * d
    assert per_token == pytest.approx(rule, rel=GPT_TOLERANCE)
    # and exactly, term by term: every Linear weight and the head 6·in·out (their inputs all need a
    # gradient: the embeddings are trained), attention 12 to 14·L·T·d by the backward's convention
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    matmuls = 6 * (weights + d * vocab)
    attention = per_token - matmuls
    assert 12 * L * seq_len * d <= attention <= 14 * L * seq_len * d


def test_gpt_tiny_flops_grow_with_the_sequence_as_the_attention_term_says():
    vocab = 256
    counted = {}
    for seq_len in (32, 64):
        model, gpt = _gpt_tiny(vocab, seq_len)
        x = torch.randint(0, vocab, (2, seq_len))
        counted[seq_len] = flops.training_flops_per_sample(model, x, x, ctx()) / seq_len
    size = gpt.SIZES["gpt_tiny"]
    # per token, only the attention term depends on T (position embeddings add no FLOPs)
    grown = counted[64] - counted[32]
    assert 12 * size.n_layer * 32 * size.d_model <= grown <= 14 * size.n_layer * 32 * size.d_model


def test_a_real_batch_is_the_first_training_samples():
    data = TensorData(torch.arange(40.0).reshape(10, 4), torch.arange(10))
    x, y = flops.real_batch(data, 3)
    assert x.shape == (3, 4) and y.tolist() == [0, 1, 2]
    listed = [(torch.full((2,), float(i)), i) for i in range(5)]  # any indexable dataset
    x, y = flops.real_batch(listed, 32)
    assert x.shape == (5, 2) and y.tolist() == [0, 1, 2, 3, 4]


# -- the measured peak ------------------------------------------------------------------------------------


@pytest.fixture
def quick_peak(monkeypatch):
    """Small matrices and short repeats: the method, not the machine."""
    monkeypatch.setattr(flops, "MAX_N", {"cpu": 256, "cuda": 1024})
    monkeypatch.setattr(flops, "REPEAT_S", 0.01)


def test_matmul_peak_is_positive_and_says_how_it_was_measured(quick_peak):
    found = flops.matmul_peak(CPU, "fp32", repeats=3)
    assert found["flops_per_s"] > 1e6
    assert found["matrix_n"] == 256 and found["dtype"] == "float32" and found["repeats"] == 3
    assert found["flops_per_s"] == pytest.approx(2 * 256**3 / found["best_s"])
    assert found["threads"] == torch.get_num_threads() and found["torch"] == torch.__version__
    assert flops.matmul_peak(CPU, "bf16", repeats=2)["dtype"] == "bfloat16"


def test_the_peak_is_measured_once_per_results_folder_and_read_back(quick_peak, tmp_path, monkeypatch):
    first = flops.cached_peak(tmp_path, CPU, "fp32")
    assert first["cached"] is False and first["flops_per_s"] > 0
    path = tmp_path / first["file"]
    assert path.parent == tmp_path / "peaks" and path.name.endswith(f"-cpu-fp32-{torch.get_num_threads()}t.json")
    assert json.loads(path.read_text())["flops_per_s"] == first["flops_per_s"]

    def never(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(flops, "matmul_peak", never)
    again = flops.cached_peak(tmp_path, CPU, "fp32")
    assert again["cached"] is True and again["flops_per_s"] == first["flops_per_s"]
    with pytest.raises(AssertionError, match="measured again"):  # another precision is another file
        flops.cached_peak(tmp_path, CPU, "bf16")


def test_a_kept_peak_of_other_torch_or_a_planted_link_is_measured_again(quick_peak, tmp_path):
    first = flops.cached_peak(tmp_path, CPU, "fp32")
    path = tmp_path / first["file"]
    path.write_text(json.dumps({**json.loads(path.read_text()), "torch": "0.0.1"}))
    assert flops.cached_peak(tmp_path, CPU, "fp32")["cached"] is False  # another torch: measured, rewritten
    elsewhere = tmp_path / "elsewhere.json"  # a valid peak, but outside peaks/: never read through a link
    elsewhere.write_text(path.read_text())
    planted = elsewhere.read_text()
    path.unlink()
    os.symlink(elsewhere, path)
    again = flops.cached_peak(tmp_path, CPU, "fp32")
    assert again["cached"] is False and not path.is_symlink()  # replaced by a file of its own
    assert elsewhere.read_text() == planted  # the link's target untouched


def test_a_kept_peak_or_count_this_host_did_not_sign_is_measured_again(quick_peak, tmp_path, monkeypatch):
    """Issue 54: a planted peaks/*.json (a received results folder, or an edited file) fed fake peaks
    into new runs' MFU. Only a file signed with this host's key (peaks.host_key) is read back."""
    monkeypatch.setenv(peaks.KEY_ENV, str(tmp_path / "mine" / "host.key"))
    results = tmp_path / "results"
    first = flops.cached_peak(results, CPU, "fp32")
    path = results / first["file"]
    kept = json.loads(path.read_text())
    assert peaks.signed_here(kept) and os.stat(peaks.host_key_path()).st_mode & 0o777 == 0o600
    assert flops.cached_peak(results, CPU, "fp32")["cached"] is True
    path.write_text(json.dumps({**kept, "flops_per_s": kept["flops_per_s"] * 100}))  # edited: MFU 100x lower
    again = flops.cached_peak(results, CPU, "fp32")
    assert again["cached"] is False and again["flops_per_s"] != kept["flops_per_s"] * 100  # measured, not read
    assert json.loads(path.read_text())["flops_per_s"] == again["flops_per_s"] and peaks.signed_here(json.loads(path.read_text()))
    monkeypatch.setenv(peaks.KEY_ENV, str(tmp_path / "elsewhere" / "host.key"))  # the folder moved to another host
    assert flops.cached_peak(results, CPU, "fp32")["cached"] is False
    calls = []
    key = {"model": "mlp"}
    assert flops.cached_count(results, key, lambda: calls.append(1) or 10.0)["cached"] is False
    count_file = next((results / "peaks").glob("flops-*.json"))
    count_file.write_text(json.dumps({"key": key, "flops_per_sample": 1.0}))  # planted, unsigned
    assert flops.cached_count(results, key, lambda: calls.append(1) or 10.0) == {
        "flops_per_sample": 10.0, "file": str(count_file.relative_to(results)), "cached": False}
    assert flops.cached_count(results, key, lambda: calls.append(1) or 10.0)["cached"] is True and len(calls) == 2
    monkeypatch.setenv(peaks.KEY_ENV, str(tmp_path / "no-such-folder-file" / "x" / "host.key"))
    (tmp_path / "no-such-folder-file").write_text("")  # no key can be kept: nothing kept is trusted
    assert peaks.host_key() is None and not peaks.signed_here(json.loads(count_file.read_text()))


def test_results_folder_and_peak_file_names():
    assert peaks.results_folder("res/runs/device~cpu/strategy~ddp/repeat~0") == peaks.Path("res")
    assert peaks.results_folder("/tmp/cells/w2/ddp-mlp") == peaks.Path("/tmp/cells/w2")  # runs side by side
    f = peaks.peak_file("res", "node 1/../x", "NVIDIA H100 80GB HBM3", "bf16", None)
    assert f.parent == peaks.Path("res/peaks") and "/" not in f.name and ".." not in f.name
    assert f.name == "node-1-x-NVIDIA-H100-80GB-HBM3-bf16.json"
    assert peaks.peak_file("res", "h", "cpu", "fp32", 2).name == "h-cpu-fp32-2t.json"


# -- the datasheet and the arithmetic ---------------------------------------------------------------------


@pytest.mark.parametrize("name, precision, expected, device", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.5e12, "H100 SXM"),
    ("NVIDIA H100 80GB HBM3", "fp32", 67e12, "H100 SXM"),
    ("NVIDIA H100 PCIe", "tf32", 378e12, "H100 PCIe"),
    ("NVIDIA H100 NVL", "fp16", 835.5e12, "H100 NVL"),
    ("NVIDIA H200", "bf16", 989.5e12, "H200 SXM"),
    ("NVIDIA A100-SXM4-80GB", "tf32", 156e12, "A100"),
    ("NVIDIA A100 80GB PCIe", "bf16", 312e12, "A100"),
    ("NVIDIA A10", "bf16", 125e12, "A10"),  # a word of its own, not A100's prefix
    ("Tesla V100-SXM2-16GB", "fp16", 125e12, "V100 SXM2"),
    ("Tesla V100-PCIE-32GB", "fp16", 112e12, "V100 PCIe"),
    ("NVIDIA L4", "bf16", 121e12, "L4"),
    ("Tesla T4", "fp16", 65e12, "T4"),
    ("NVIDIA GeForce RTX 4090", "bf16", 165.2e12, "GeForce RTX 4090"),
])  # fmt: skip
def test_datasheet_peaks_by_device_name(name, precision, expected, device):
    value, source = peaks.datasheet_peak(name, precision)
    assert value == pytest.approx(expected) and source
    assert peaks.datasheet(name).device == device


@pytest.mark.parametrize("name, precision", [
    ("cpu", "fp32"), (None, "bf16"), ("NVIDIA L40S", "bf16"), ("NVIDIA A10G", "fp16"),  # not in the table
    ("NVIDIA GH200 480GB", "bf16"),
    ("Tesla V100-SXM2-16GB", "bf16"), ("Tesla T4", "tf32"),  # no such units on the chip
])  # fmt: skip
def test_no_datasheet_peak_where_the_table_has_none(name, precision):
    assert peaks.datasheet_peak(name, precision) == (None, None)


def test_every_datasheet_entry_has_a_source_and_dense_figures_in_order():
    for _, sheet in peaks.DATASHEET:
        assert "datasheet" in sheet.source or "whitepaper" in sheet.source, sheet.device
        figures = [v for v in (sheet.fp32, sheet.tf32, sheet.bf16, sheet.fp16) if v]
        assert all(1e12 < v < 2e15 for v in figures), sheet.device  # dense: no GPU here reaches 2 PFLOP/s


def test_mfu_is_achieved_over_world_times_the_peak_per_rank():
    f = peaks.mfu_fields(7e6, 1000.0, 2, 60e9, 989.5e12, "sheet")
    assert f["achieved_flops_per_s"] == 7e9
    assert f["mfu_measured"] == pytest.approx(7e9 / 120e9)
    assert f["mfu_datasheet"] == pytest.approx(7e9 / (2 * 989.5e12))
    assert f["peak_flops_datasheet_source"] == "sheet"
    assert set(f) == set(peaks.MFU_FIELDS)
    cpu = peaks.mfu_fields(7e6, 1000.0, 1, 60e9, None, None)
    assert cpu["mfu_datasheet"] is None and cpu["peak_flops_datasheet_source"] is None
    for blank in (peaks.mfu_fields(None, 1000.0, 2, 60e9, None), peaks.mfu_fields(7e6, None, 2, 60e9, None),
                  peaks.mfu_fields(7e6, 1000.0, 2, math.nan, None), peaks.mfu_fields(7e6, 0.0, 2, 60e9, None)):  # fmt: skip
        assert blank["mfu_measured"] is None


def test_flops_fields_read_measures_result_and_blank_without_one():
    result = {"count": {"flops_per_sample": 7e6}, "peak": {"flops_per_s": 70e9, "datasheet_flops_per_s": None}}
    f = flops.fields(result, 1000.0, 1)
    assert f["mfu_measured"] == pytest.approx(0.1) and f["mfu_datasheet"] is None
    assert all(v is None for v in flops.fields(None, 1000.0, 2).values())
    assert flops.provenance(result) == {"peak_flops": result["peak"], "flop_count": result["count"]}


# -- into the tables ---------------------------------------------------------------------------------------


def _summary(root, strategy, world, repeat, samples_per_s):
    run_dir = root / "runs" / f"strategy~{strategy}" / f"world_size~{world}" / f"repeat~{repeat}"
    run_dir.mkdir(parents=True)
    extra = peaks.mfu_fields(7_093_248, samples_per_s, world, 60e9, None)
    summary = run_output.make_summary("ok", "", CellParams(strategy=strategy).as_dict(), world, 1,
                                      {"host": "h", "peak_flops": {"flops_per_s": 60e9, "matrix_n": 1024}},
                                      {"samples_per_s": samples_per_s, "epoch_time_s": 5e4 / samples_per_s}, extra)  # fmt: skip
    run_output.write_json(run_dir / "summary.json", summary)
    for rank in range(world):
        (run_dir / f"steps_rank{rank}.csv").write_text(",".join(run_output.STEP_COLUMNS) + "\n")
    return run_dir / "summary.json"


def test_mfu_fields_reach_runs_csv_and_cells_csv_as_medians(tmp_path):
    rates = {("ddp", 2): [800.0, 1000.0, 900.0], ("single", 1): [600.0, 650.0, 700.0]}
    paths = [_summary(tmp_path, s, p, r, v) for (s, p), vs in rates.items() for r, v in enumerate(vs)]
    aggregate.aggregate(paths, tmp_path / "runs.csv", tmp_path / "steps.csv")
    runs = analysis.load_runs(tmp_path / "runs.csv")
    for field in peaks.MFU_FIELDS:
        assert f"extra_{field}" in runs, field
    assert "env_peak_flops" not in runs  # the measurement's record stays in summary.json's env
    cells = analysis.cell_stats(runs).set_index("strategy")
    ddp = cells.loc["ddp"]
    assert ddp["extra_mfu_measured"] == pytest.approx(900.0 * 7_093_248 / (2 * 60e9))  # the median run's
    assert ddp["extra_mfu_measured_ci_low"] <= ddp["extra_mfu_measured"] <= ddp["extra_mfu_measured_ci_high"]
    assert cells.loc["single", "extra_achieved_flops_per_s"] == pytest.approx(650.0 * 7_093_248)
    assert cells.loc["single", "extra_train_flops_per_sample"] == 7_093_248


# -- in the report -----------------------------------------------------------------------------------------


def _mfu_cells(datasheet=False):
    import pandas as pd

    rows = []
    for strategy, p, mfu in (("ddp", 2, 0.20), ("allreduce", 2, 0.12), ("single", 1, 0.31)):
        row = dict(strategy=strategy, world_size=p, n_repeats=3, extra_mfu_measured=mfu, extra_mfu_measured_ci_low=mfu * 0.9,
                   extra_mfu_measured_ci_high=mfu * 1.1, extra_mfu_measured_ci_level=0.75,
                   extra_achieved_flops_per_s=mfu * p * 60e9, extra_peak_flops_measured=60e9)  # fmt: skip
        if datasheet:
            row.update(extra_mfu_datasheet=mfu / 10, extra_peak_flops_datasheet=600e9)
        rows.append(row)
    return pd.DataFrame(rows)


def test_the_mfu_finding_names_the_best_and_worst_cell_with_the_reference_peak():
    from ddpbench.report.findings.mfu import mfu_findings

    (f,) = mfu_findings(_mfu_cells(), ["strategy", "world_size"])
    assert f.kind == "mfu" and f.anchor == "fig-mfu"
    best, worst = f.text.split("; lowest: ")
    assert "highest: single at world size 1: MFU 31.0 % [27.9, 34.1] (75 % interval)" in best
    assert "18.6 GFLOP/s of 1 × 60.0 GFLOP/s (measured peak per rank)" in best
    assert worst.startswith("allreduce at world size 2: MFU 12.0 %") and "of 2 × 60.0 GFLOP/s" in worst
    assert "datasheet" not in f.text  # CPU: the measured peak is the only reference
    (g,) = mfu_findings(_mfu_cells(datasheet=True), ["strategy", "world_size"])
    assert "(measured peak per rank), 3.10 % (no interval) of 1 × 600 GFLOP/s (datasheet peak per device)" in g.text
    assert mfu_findings(_mfu_cells().drop(columns="extra_mfu_measured"), ["strategy"]) == []


def test_the_mfu_figure_is_drawn_against_p_else_the_batch_and_left_out_without_mfu():
    import sys
    from pathlib import Path

    import matplotlib.pyplot as plt

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from report_synth import make_runs

    from ddpbench.report.figures.layout import TITLES
    from ddpbench.report.figures.mfu import fig_mfu
    from ddpbench.report.figures.tables import Data

    def data(runs):
        runs = analysis.load_runs_frame(runs)
        speed = analysis.speedup_table(runs)
        return Data(runs, analysis.cell_stats(runs), speed, analysis.fits_table(runs, speed, n_boot=10))

    (fig,) = fig_mfu(data(make_runs(strategies=("single", "ddp"), world_sizes=(1, 2, 4), failures=False)))
    assert fig.get_suptitle().startswith(TITLES["mfu"])
    assert any("workers p" in ax.get_xlabel() for ax in fig.axes)
    (by_batch,) = fig_mfu(data(make_runs(strategies=("ddp",), world_sizes=(2,), batch_sizes=(32, 64), failures=False)))
    assert any("batch size" in ax.get_xlabel() for ax in by_batch.axes)
    runs = make_runs(strategies=("single", "ddp"), world_sizes=(1, 2), failures=False)
    assert fig_mfu(data(runs.drop(columns=[c for c in runs if "mfu" in c]))) == []  # runs from before MFU
    plt.close("all")


def test_the_count_is_kept_per_results_folder_and_key(tmp_path):
    """The FLOP count imports torch._dynamo (a dispatch mode): counted once per results folder and
    model, read back by later runs; another key (precision, shape, model code) is counted again."""
    from ddpbench.run.flops import cached_count

    calls = []

    def count():
        calls.append(1)
        return 1234.0

    key = {"model": "mlp", "shape": [3, 32, 32], "precision": "fp32"}
    first = cached_count(tmp_path, key, count)
    again = cached_count(tmp_path, key, count)
    assert first["cached"] is False and again["cached"] is True and again["flops_per_sample"] == 1234.0
    assert len(calls) == 1 and (tmp_path / first["file"]).is_file()
    assert cached_count(tmp_path, {**key, "precision": "bf16"}, count)["cached"] is False and len(calls) == 2
