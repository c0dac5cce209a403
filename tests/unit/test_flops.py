"""MFU's parts (issue 42): the counted training FLOPs against hand-written formulas, the matmul peak and its
cache, the datasheet table, the MFU arithmetic, and the fields' way into runs.csv and cells.csv."""

from __future__ import annotations

import json
import math
import os
import time

import pytest
import torch

from ddpbench import analysis
from ddpbench.core import peaks, run_output, timers
from ddpbench.core.params import CellParams
from ddpbench.results import aggregate
from ddpbench.run import flops, models
from ddpbench.run.models import gpt
from ddpbench.run.data import TensorData
from ddpbench.strategies.base import Context

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def results_folder_peaks_only(monkeypatch):
    """The peak tests read and write each results folder's own peaks, not this host's copy (its tests set one)."""
    monkeypatch.setenv(peaks.HOST_PEAKS_ENV, "off")


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


QUIET = {"other_cpu_frac": 0.0, "loadavg": 0.1, "cores": 2, "busy": False}


@pytest.fixture
def quick_peak(monkeypatch):
    """Small matrices and short repeats: the method, not the machine (nor its load: quiet while measured,
    and never quiet at a later run's probe, so a kept peak is read back, not confirmed)."""
    monkeypatch.setattr(flops, "MAX_N", {"cpu": 256, "cuda": 1024})
    monkeypatch.setattr(flops, "REPEAT_S", 0.01)
    monkeypatch.setattr(flops, "load_since", lambda start, device_type: dict(QUIET))
    monkeypatch.setattr(flops, "quiet_now", lambda device_type: False)


def test_matmul_peak_is_positive_and_says_how_it_was_measured(quick_peak):
    found = flops.matmul_peak(CPU, "fp32", repeats=3)
    assert found["flops_per_s"] > 1e6
    assert found["matrix_n"] == 256 and found["dtype"] == "float32" and found["repeats"] == 3
    assert found["flops_per_s"] == pytest.approx(2 * 256**3 / found["best_s"])
    assert found["threads"] == torch.get_num_threads() and found["torch"] == torch.__version__
    assert flops.matmul_peak(CPU, "bf16", repeats=2)["dtype"] == "bfloat16"
    assert found["method_version"] == flops.PEAK_METHOD and found["sizes"][0]["n"] == 256
    assert {k: found[k] for k in QUIET} == QUIET  # the load beside it


def _fake_products(monkeypatch, rates: dict[int, float]):
    """Timing by a table instead of the clock: a product of size n runs at rates[n] FLOP/s, except the first
    timed repeat at each size (a busy spell), 3x slower; flops' clock advances by the products' time only."""
    import types

    calls: dict[int, int] = {}
    clock = [0.0]

    def per_product(a, b, c, device, count):
        n = a.shape[0]
        calls[n] = calls.get(n, 0) + 1
        t = 2 * n**3 / rates[n] * (3 if calls[n] == 2 else 1)  # call 1: the single product
        clock[0] += t * count
        return t

    monkeypatch.setattr(flops, "_per_product", per_product)
    monkeypatch.setattr(flops, "time", types.SimpleNamespace(perf_counter=lambda: clock[0], time=flops.time.time))


def test_the_peak_is_the_best_over_sizes_and_repeats_not_the_first_size_long_enough(quick_peak, monkeypatch):
    """Issue 58: the first size long enough to time set the peak (n 1024 on a busy machine: 82.8 GFLOP/s,
    n 2048 on a quiet one: 147.5). Now the larger sizes are timed too, within the budget, and the best
    repeat of the best size counts: here 512 beats the first timed size (256) and the larger 1024."""
    monkeypatch.setattr(flops, "MAX_N", {"cpu": 1024, "cuda": 1024})
    monkeypatch.setattr(flops, "TARGET_S", 0.0)  # every size long enough to time
    monkeypatch.setattr(flops, "BUDGET_S", 100.0)
    _fake_products(monkeypatch, {256: 40e9, 512: 100e9, 1024: 80e9})
    found = flops.matmul_peak(CPU, "fp32", repeats=5)
    assert [s["n"] for s in found["sizes"]] == [256, 512, 1024]
    assert found["matrix_n"] == 512 and found["flops_per_s"] == pytest.approx(100e9)
    assert found["best_s"] == found["median_s"] == pytest.approx(2 * 512**3 / 100e9)  # the slow repeat is not it
    assert [s["flops_per_s"] for s in found["sizes"]] == pytest.approx([40e9, 100e9, 80e9])


def test_sizes_too_short_to_time_are_skipped_and_the_budget_bounds_the_larger_ones(quick_peak, monkeypatch):
    monkeypatch.setattr(flops, "MAX_N", {"cpu": 2048, "cuda": 2048})
    monkeypatch.setattr(flops, "TARGET_S", 0.002)  # 256 at 40 GFLOP/s: 0.84 ms, too short; 512: 2.7 ms

    def sizes(budget):
        monkeypatch.setattr(flops, "BUDGET_S", budget)
        _fake_products(monkeypatch, {256: 40e9, 512: 100e9, 1024: 120e9, 2048: 130e9})
        found = flops.matmul_peak(CPU, "fp32", repeats=3)
        return [(s["n"], s["repeats"]) for s in found["sizes"]], found["matrix_n"]

    assert sizes(100.0) == ([(512, 3), (1024, 3), (2048, 3)], 2048)
    # after 512 (57 ms so far), 1024 would take 16 x 2.7 ms and 21.5 ms a repeat: 2 repeats fit in 0.16 s,
    # the next (2048) none; in 0.12 s not even 2 of 1024's
    assert sizes(0.16) == ([(512, 3), (1024, 2)], 1024)
    assert sizes(0.12) == ([(512, 3)], 512)


def test_the_load_beside_the_peak_is_the_cpu_share_other_processes_took(monkeypatch):
    machine, own = iter([100.0, 101.0]), iter([10.0, 10.2])
    monkeypatch.setattr(flops.sysinfo, "machine_busy_s", lambda: next(machine))
    monkeypatch.setattr(flops.sysinfo, "own_cpu_s", lambda: next(own))
    monkeypatch.setattr(flops.os, "cpu_count", lambda: 2)
    start = flops.load_start()
    start = (start[0] - 2.0, *start[1:])  # two seconds ago: 4 CPU seconds of capacity
    load = flops.load_since(start, "cpu")
    assert load["other_cpu_frac"] == pytest.approx(0.8 / 4, abs=1e-3) and load["busy"] is True and load["cores"] == 2
    assert peaks.is_busy(0.2, "cuda") is False  # a GPU's matmuls do not wait for the CPU
    assert peaks.is_busy(0.05, "cpu") is False and peaks.is_busy(None, "cpu") is False
    monkeypatch.undo()
    assert flops.load_since(flops.load_start(), "cpu")["other_cpu_frac"] is None  # too short a window to tell
    start = flops.load_start()
    time.sleep(flops.LOAD_MIN_S + 0.05)
    real = flops.load_since(start, "cpu")  # this machine's own reading
    assert 0.0 <= real["other_cpu_frac"] <= 1.0 and real["busy"] == (real["other_cpu_frac"] > peaks.BUSY_CPU_FRAC)


def _peak_record(value: float, busy: bool, n: int = 1024) -> dict:
    return {"flops_per_s": value, "matrix_n": n, "busy": busy, "other_cpu_frac": 0.45 if busy else 0.01,
            "method_version": flops.PEAK_METHOD, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "measured_utc": "2026-11-27T15:20:00Z"}  # fmt: skip


def test_a_busy_peak_is_measured_again_when_quiet_and_a_quiet_one_is_kept(tmp_path, monkeypatch):
    """Issue 58: a peak measured on a busy machine is measured again by a later run that finds the machine
    quiet; a quiet one is never replaced by a busy one, and is final once a second quiet measurement
    confirms it (the higher of the two kept)."""
    measured = []

    def measure_as(*records):
        queue = list(records)

        def matmul_peak(device, precision):
            measured.append(queue[0])
            return queue.pop(0)

        monkeypatch.setattr(flops, "matmul_peak", matmul_peak)

    def quiet(answer):
        monkeypatch.setattr(flops, "quiet_now", lambda device_type: answer)

    def peak():
        return flops.cached_peak(tmp_path, CPU, "fp32")

    measure_as(_peak_record(80e9, busy=True))
    first = peak()
    assert first["cached"] is False and first["busy"] is True and "remeasured" not in first
    path = tmp_path / first["file"]
    measure_as()  # none: the machine is still busy, the kept busy peak is used
    quiet(False)
    assert peak()["flops_per_s"] == 80e9
    quiet(True)  # quiet at the probe, busy again while measuring, and lower: the kept one stays
    measure_as(_peak_record(70e9, busy=True))
    again = peak()
    assert again["flops_per_s"] == 80e9 and again["cached"] is True and again["remeasured"] is True
    assert json.loads(path.read_text())["flops_per_s"] == 80e9
    measure_as(_peak_record(150e9, busy=False, n=2048))  # quiet: replaces it
    quiet_one = peak()
    assert quiet_one["cached"] is False and quiet_one["remeasured"] is True and quiet_one["flops_per_s"] == 150e9
    kept = json.loads(path.read_text())
    assert kept["busy"] is False and kept["matrix_n"] == 2048 and kept["quiet_measurements"] == 1
    assert peaks.signed_here(kept)
    for busy_value in (100e9, 160e9):  # never a busy one over a quiet one, lower or higher
        measure_as(_peak_record(busy_value, busy=True))
        assert peak()["flops_per_s"] == 150e9 and json.loads(path.read_text()) == kept
    measure_as(_peak_record(140e9, busy=False))  # the second quiet measurement: the higher kept, settled
    confirmed = peak()
    assert confirmed["flops_per_s"] == 150e9 and confirmed["cached"] is True and confirmed["quiet_measurements"] == 2
    assert json.loads(path.read_text())["quiet_measurements"] == 2 and peaks.signed_here(json.loads(path.read_text()))
    measure_as()  # settled: neither probed nor measured again
    monkeypatch.setattr(flops, "quiet_now", lambda device_type: pytest.fail("probed a settled peak"))
    assert peak()["flops_per_s"] == 150e9 and len(measured) == 6


def test_every_results_folder_of_a_host_divides_by_the_hosts_peak(tmp_path, monkeypatch):
    """Issue 58: one host read 82.8 GFLOP/s in one results folder and 147.5 in the next. The host keeps
    a copy: a second results folder reads it (no measurement), holds it too, and a busy host copy is
    measured again when quiet, in both places."""
    monkeypatch.setenv(peaks.HOST_PEAKS_ENV, str(tmp_path / "host"))
    records = iter([_peak_record(98e9, busy=False), _peak_record(99e9, busy=False)])
    monkeypatch.setattr(flops, "matmul_peak", lambda device, precision: next(records))
    monkeypatch.setattr(flops, "quiet_now", lambda device_type: True)
    first = flops.cached_peak(tmp_path / "a", CPU, "fp32")
    host_file = peaks.peak_file(tmp_path / "host", first["host"], "cpu", "fp32", torch.get_num_threads())
    assert first["cached"] is False and json.loads(host_file.read_text())["flops_per_s"] == 98e9
    second = flops.cached_peak(tmp_path / "b", CPU, "fp32")  # quiet once: measured once more, the higher kept
    assert second["flops_per_s"] == 99e9 and second["quiet_measurements"] == 2
    third = flops.cached_peak(tmp_path / "c", CPU, "fp32")  # settled: read, never measured (next() would stop)
    assert third["cached"] is True and third["flops_per_s"] == 99e9 and third["file"] == second["file"]
    assert json.loads((tmp_path / "c" / third["file"]).read_text())["flops_per_s"] == 99e9  # the folder's own copy
    assert peaks.signed_here(json.loads((tmp_path / "c" / third["file"]).read_text()))
    # a folder's own settled peak stands over a host copy that fewer quiet measurements stand for
    host_file.write_text(json.dumps(peaks.signed({**json.loads(host_file.read_text()), "quiet_measurements": 1,
                                                  "flops_per_s": 50e9})))  # fmt: skip
    assert flops.cached_peak(tmp_path / "c", CPU, "fp32")["flops_per_s"] == 99e9
    # a copy another host's key signed (or edited) is not read: measured here
    host_file.write_text(json.dumps({**json.loads(host_file.read_text()), "flops_per_s": 500e9}))
    monkeypatch.setattr(flops, "matmul_peak", lambda device, precision: _peak_record(97e9, busy=False))
    assert flops.cached_peak(tmp_path / "d", CPU, "fp32")["flops_per_s"] == 97e9
    monkeypatch.setenv(peaks.HOST_PEAKS_ENV, "off")  # off: no host copy read or written
    assert peaks.host_peaks_folder() is None


def test_a_flop_count_is_kept_for_the_host_and_read_by_its_other_results_folders(tmp_path, monkeypatch):
    """The count imports torch._dynamo (a second and a slower exit): once per host, code and model."""
    monkeypatch.setenv(peaks.HOST_PEAKS_ENV, str(tmp_path / "host"))
    calls, key = [], {"model": "mlp", "code": "abc"}
    first = flops.cached_count(tmp_path / "a", key, lambda: calls.append(1) or 10.0)
    second = flops.cached_count(tmp_path / "b", key, lambda: calls.append(1) or 99.0)  # the host's: not counted
    assert first["cached"] is False and second == {"flops_per_sample": 10.0, "file": first["file"], "cached": True}
    assert len(calls) == 1 and (tmp_path / "b" / second["file"]).is_file()  # and kept in the second folder too
    host_file = tmp_path / "host" / first["file"]
    host_file.write_text(json.dumps({"key": key, "flops_per_sample": 1.0}))  # edited: not this host's signature
    assert flops.cached_count(tmp_path / "c", key, lambda: calls.append(1) or 10.0)["cached"] is False and len(calls) == 2


def test_a_busy_host_is_probed_at_most_once_a_minute(tmp_path, monkeypatch):
    """Each probe for a quiet spell is 0.25 s of a run's wall; on a machine busy for minutes (a test suite)
    the host's copy marks the last one, and runs within PROBE_EVERY_S of it use the kept busy peak."""
    monkeypatch.setenv(peaks.HOST_PEAKS_ENV, str(tmp_path / "host"))
    monkeypatch.setattr(flops, "matmul_peak", lambda device, precision: _peak_record(80e9, busy=True))
    flops.cached_peak(tmp_path / "a", CPU, "fp32")  # measured, busy: kept for the host
    probes = []
    monkeypatch.setattr(flops, "quiet_now", lambda device_type: probes.append(1) and False)
    for folder in ("b", "c", "d"):
        assert flops.cached_peak(tmp_path / folder, CPU, "fp32")["flops_per_s"] == 80e9
    assert len(probes) == 1  # the first probed and found it busy (the mark); the next two did not
    (mark,) = (tmp_path / "host" / "peaks").glob("*.busy-probe")
    os.utime(mark, (time.time() - flops.PROBE_EVERY_S - 1,) * 2)
    flops.cached_peak(tmp_path / "e", CPU, "fp32")
    assert len(probes) == 2


def test_a_second_quiet_measurement_that_is_higher_replaces_the_first(tmp_path, monkeypatch):
    records = iter([_peak_record(102e9, busy=False), _peak_record(193e9, busy=False)])  # issue 58's 2-thread pair
    monkeypatch.setattr(flops, "matmul_peak", lambda device, precision: next(records))
    monkeypatch.setattr(flops, "quiet_now", lambda device_type: True)
    assert flops.cached_peak(tmp_path, CPU, "fp32")["flops_per_s"] == 102e9
    second = flops.cached_peak(tmp_path, CPU, "fp32")
    assert second["flops_per_s"] == 193e9 and second["cached"] is False and second["quiet_measurements"] == 2
    assert flops.cached_peak(tmp_path, CPU, "fp32")["cached"] is True  # settled: no third measurement (next() would stop)


def test_a_peak_kept_by_the_older_method_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setattr(flops, "matmul_peak", lambda device, precision: _peak_record(150e9, busy=False))
    first = flops.cached_peak(tmp_path, CPU, "fp32")
    path = tmp_path / first["file"]
    old = {k: v for k, v in json.loads(path.read_text()).items() if k not in ("method_version", peaks.SIGNATURE)}
    path.write_text(json.dumps(peaks.signed({**old, "flops_per_s": 82.8e9})))  # first size long enough, no load
    assert flops.cached_peak(tmp_path, CPU, "fp32")["flops_per_s"] == 150e9


def test_quiet_measurements_settle_a_peak():
    records = (None, {"busy": True}, {"busy": False}, {"busy": False, "quiet_measurements": 2})
    assert [peaks.quiet_count(r) for r in records] == [0, 0, 1, 2]
    assert not peaks.settled({"busy": False}) and peaks.settled({"busy": False, "quiet_measurements": 2})
    assert not peaks.settled({"busy": True, "quiet_measurements": 2})


@pytest.mark.parametrize("kept, found, keep", [
    (None, (80e9, True), "found"),
    ((80e9, True), (60e9, False), "found"),  # a quiet one over a busy one, even lower
    ((150e9, False), (100e9, True), "kept"),  # never a lower busy one over a quiet one
    ((150e9, False), (160e9, True), "kept"),  # nor a higher busy one: a busy machine says nothing sure
    ((80e9, True), (90e9, True), "found"),  # both busy: the higher
    ((80e9, True), (70e9, True), "kept"),
    ((150e9, False), (155e9, False), "found"),
])  # fmt: skip
def test_which_peak_is_kept(kept, found, keep):
    k = {"flops_per_s": kept[0], "busy": kept[1]} if kept else None
    f = {"flops_per_s": found[0], "busy": found[1]}
    assert peaks.better_peak(k, f) is (k if keep == "kept" else f)


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
    result = {"count": {"flops_per_sample": 7e6}, "peak": {"flops_per_s": 70e9, "datasheet_flops_per_s": None,
                                                           **_peak_record(70e9, busy=True, n=2048)}}
    f = flops.fields(result, 1000.0, 1)
    assert f["mfu_measured"] == pytest.approx(0.1) and f["mfu_datasheet"] is None
    assert set(f) == {*peaks.MFU_FIELDS, *peaks.PEAK_FIELDS}
    assert (f["peak_flops_matrix_n"], f["peak_flops_busy"], f["peak_flops_other_cpu_frac"]) == (2048, True, 0.45)
    assert f["peak_flops_measured_utc"] == "2026-11-27T15:20:00Z"
    assert all(v is None for v in flops.fields(None, 1000.0, 2).values())
    failed = flops.fields({"peak": {"error": "RuntimeError: x", "datasheet_flops_per_s": None}}, 1000.0, 1)
    assert all(failed[k] is None for k in peaks.PEAK_FIELDS)
    assert flops.provenance(result) == {"peak_flops": result["peak"], "flop_count": result["count"]}


# -- into the tables ---------------------------------------------------------------------------------------


def _summary(root, strategy, world, repeat, samples_per_s):
    run_dir = root / "runs" / f"strategy~{strategy}" / f"world_size~{world}" / f"repeat~{repeat}"
    run_dir.mkdir(parents=True)
    extra = {**peaks.mfu_fields(7_093_248, samples_per_s, world, 60e9, None),
             **peaks.peak_fields(_peak_record(60e9, busy=strategy == "ddp"))}
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
    for field in (*peaks.MFU_FIELDS, *peaks.PEAK_FIELDS):
        assert f"extra_{field}" in runs, field
    busy = runs.set_index("strategy")["extra_peak_flops_busy"].map(analysis.truthy)
    assert busy["ddp"].all() and not busy["single"].any()  # which peak each run used, per run
    assert (runs["extra_peak_flops_matrix_n"] == 1024).all()
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


def _mfu_runs(busy_strategy: str | None, folder_remeasured: bool = False):
    """runs.csv rows of _mfu_cells' cells, 3 repeats each: the peak each used (n 2048, quiet), the
    `busy_strategy`'s measured on a busy machine (n 1024, others took 45 % of the CPU)."""
    import pandas as pd

    rows = []
    for strategy, p in (("ddp", 2), ("allreduce", 2), ("single", 1)):
        busy = strategy == busy_strategy
        for repeat in range(3):
            peak = 82.8e9 if folder_remeasured and repeat == 0 else 60e9
            rows.append(dict(strategy=strategy, world_size=p, repeat=repeat, status="ok", extra_mfu_measured=0.2,
                             extra_peak_flops_measured=peak, extra_peak_flops_matrix_n=1024 if busy else 2048,
                             extra_peak_flops_busy="True" if busy else "False",
                             extra_peak_flops_other_cpu_frac=0.45 if busy else 0.01))  # fmt: skip
    return pd.DataFrame(rows)


def test_the_mfu_finding_says_which_peak_each_cell_used_and_flags_a_busy_one():
    """Issue 58: the report did not say the peak was measured on a busy machine (its MFU reads high)."""
    from ddpbench.report.findings.mfu import mfu_findings, peak_text

    shown = ["strategy", "world_size"]
    (f,) = mfu_findings(_mfu_cells(), shown, _mfu_runs(busy_strategy="allreduce"))
    best, worst = f.text.split("; lowest: ")
    assert "of 1 × 60.0 GFLOP/s (measured peak per rank, n = 2048 matmul)" in best and "busy" not in best
    assert ("of 2 × 60.0 GFLOP/s (measured peak per rank, n = 1024 matmul, measured on a busy machine in 3 of 3 runs "
            "(others took up to 45.0 % of the CPU): the MFU reads high)") in worst  # fmt: skip
    assert f.text.endswith(" 1 of 3 cells' MFU use a peak measured on a busy machine (others took over 10 % of the "
                           "CPU): read high until a run on a quiet machine measures the peak again.")  # fmt: skip
    (quiet,) = mfu_findings(_mfu_cells(), shown, _mfu_runs(busy_strategy=None))
    assert "busy" not in quiet.text and "n = 2048 matmul" in quiet.text
    # runs from before the peak was recorded: as before
    before = _mfu_runs(None).drop(columns=["extra_peak_flops_matrix_n", "extra_peak_flops_busy"])
    (old,) = mfu_findings(_mfu_cells(), shown, before)
    assert "(measured peak per rank)" in old.text
    # a results folder whose peak was measured again: the cell's runs used two
    assert peak_text(_mfu_runs(None, folder_remeasured=True).query("strategy == 'ddp'")) == (
        "2 peaks, 60.0 GFLOP/s–82.8 GFLOP/s, n = 2048 matmul")


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
