"""The plan's warnings fire on the grids they describe and stay quiet otherwise."""

import json
import os
from pathlib import Path

from ddpbench.plan import catalog, estimate, preflight as plan
from ddpbench.core.params import CellParams


QUIET = (0.0, "")  # the machine's load now, for the time estimate: as if quiet


def cell(**changes):
    return {**CellParams().as_dict(), "world_size": 2, **changes}


def test_timed_steps_follow_epochs_minimums_and_the_cap():
    # 2048 samples / batch 128 = 16 steps an epoch; 1 + 2 warm-up steps are not timed
    assert estimate.timed_steps(cell(dataset_size=2048, batch_size=128, epochs=1, warmup_steps=2, min_timed_steps=5, max_steps=0)) == 13
    assert estimate.timed_steps(cell(dataset_size=512, batch_size=128, epochs=1, warmup_steps=2, min_timed_steps=20, max_steps=0)) == 20
    assert estimate.timed_steps(cell(dataset_size=512, batch_size=128, epochs=1, warmup_steps=2, min_timed_steps=20, max_steps=10)) == 7
    assert estimate.timed_steps(cell(batch_size="auto")) is None


def test_capped_cells_are_named_with_the_setting_to_change():
    lines = plan.step_warnings([cell(min_timed_steps=20, max_steps=10), cell(min_timed_steps=20, max_steps=0, strategy="single", world_size=1)])
    assert any("1 cell(s) get fewer than min_timed_steps" in line and "raise timing.max_steps" in line for line in lines)
    assert not any("fewer" in line for line in plan.step_warnings([cell(min_timed_steps=20, max_steps=0)]))


def test_a_bucket_larger_than_the_gradient_is_named_and_a_smaller_one_is_not():
    grad_mb = catalog.gradient_bytes("simple_cnn", "cifar10") / 2**20  # 2.08 MiB
    big = plan.bucket_warnings([cell(strategy="ddp", model="simple_cnn", bucket_mb=25.0)])
    assert len(big) == 1 and "ddp" in big[0] and "simple_cnn" in big[0] and "set params.bucket_mb below" in big[0]
    assert plan.bucket_warnings([cell(strategy="ddp", model="simple_cnn", bucket_mb=grad_mb / 4)]) == []
    assert plan.bucket_warnings([cell(strategy="allreduce", model="simple_cnn", bucket_mb=25.0)]) == []
    # every DDP that overlaps its buckets (base.Strategy.overlaps_buckets), zero among them; not one that does not
    assert len(plan.bucket_warnings([cell(strategy="zero", model="simple_cnn", bucket_mb=25.0)])) == 1
    assert plan.bucket_warnings([cell(strategy="bucketed_allreduce", model="simple_cnn", bucket_mb=25.0)]) == []


def test_a_warning_names_each_cell_once_with_what_tells_it_apart():
    """Issue 68: the sharding preset's bucket warning named "ddp p=2 batch 64 mlp n=1024" three
    times (its cells differ in precision and grad_accum, which the name left out)."""
    cells = [cell(strategy="ddp", model="mlp", batch_size=64, dataset_size=1024, precision=precision, grad_accum=accum)
             for precision in ("fp32", "bf16") for accum in (1, 4)]  # fmt: skip
    (line,) = plan.bucket_warnings(cells)
    named = line[line.index("nothing to overlap (") + len("nothing to overlap ("):line.index("); set")]
    assert named == ("ddp p=2 batch 64 mlp n=1024 precision=fp32 grad_accum=1, ddp p=2 batch 64 mlp n=1024 "
                     "precision=fp32 grad_accum=4, ddp p=2 batch 64 mlp n=1024 precision=bf16 grad_accum=1 and 1 more")  # fmt: skip
    assert "(ddp p=2 batch 25 mlp n=4096)" in plan.bucket_warnings([cell(strategy="ddp", model="mlp", batch_size=25)] * 2)[0]


def test_fits_the_world_sizes_cannot_support_are_named_with_what_to_add():
    two = [cell(world_size=1, strategy="single"), cell(world_size=2)]
    assert "Amdahl's fit" in plan.fit_warnings(two)[0] and "add world sizes" in plan.fit_warnings(two)[0]
    assert plan.fit_warnings(two + [cell(world_size=4)]) == []
    weak = [cell(world_size=1, strategy="single", scaling="weak"), cell(world_size=2, scaling="weak")]
    assert "Gustafson" in plan.fit_warnings(weak)[0]
    assert plan.fit_warnings(weak + [cell(world_size=3, scaling="weak")]) == []


def test_the_time_estimate_learns_only_from_summaries_it_can_place(tmp_path):
    """Summaries without a host (or failed) are not this host's runs: the default stays (the
    learning itself: test_plan_estimate.py)."""
    cells, results = [cell(min_timed_s=5.0)], tmp_path / "results"
    assert "9 s a run, a default" in estimate.time_estimate(cells, 3, 3, results, now=QUIET)  # 3 + 1.2 x 5
    runs = results / "runs" / "a"
    for i, s in enumerate((20.0, 30.0, 40.0)):
        (runs / f"repeat~{i}").mkdir(parents=True)
        timeline = {"launcher_start": 1000.0, "launcher_exit": 1000.0 + s}
        (runs / f"repeat~{i}" / "summary.json").write_text(json.dumps({"status": "ok", "timeline": timeline}))
    (runs / "repeat~9").mkdir()
    (runs / "repeat~9" / "summary.json").write_text(json.dumps({"status": "failed"}))
    line = estimate.time_estimate(cells, 3, 10, results, now=QUIET)
    assert "9 s a run, a default, no run of this host in" in line and "about 2 min" in line, line


def test_the_default_estimate_counts_what_a_link_cell_adds(tmp_path):
    one_node, on_link = cell(min_timed_s=1.0), cell(min_timed_s=1.0, link="100mbit")
    line = estimate.time_estimate([one_node], 3, 3, tmp_path / "results", now=QUIET)
    assert "4 s a run, a default" in line and ": 3 s fixed + the steps" in line, line
    # a cell over a link starts cold (6 s) and adds the link's 4 s: (4.2 + 3 x 11.2) / 4 s a run
    line = estimate.time_estimate([one_node, on_link, on_link, on_link], 3, 90, tmp_path / "results", now=QUIET)
    assert "9 s a run, a default" in line and "3 s (warm CPU cells) to 6 s fixed (+ 4 s a cell over a link)" in line
    assert "about 14 min" in line, line


def test_the_default_estimate_counts_what_compiling_adds(tmp_path):
    eager, compiled = cell(min_timed_s=1.0), cell(min_timed_s=1.0, compile="model")
    line = estimate.time_estimate([eager, compiled], 3, 6, tmp_path / "results", now=QUIET)
    assert "9 s a run, a default" in line and "3 s fixed (+ 10 s a compiled cell)" in line, line
    assert "about 55 s" in line  # 6 x (3 + 10 / 2 + 1.2)


def test_the_default_estimate_counts_a_heavy_models_steps(tmp_path):
    """The sync-strategies preset said 'about 2 min' for a 30-minute study: VGG-11's steps count now."""
    vgg = dict(model="vgg11", dataset="synthetic", synthetic_shape="cifar10", batch_size=256, dataset_size=12800,
               epochs=1, warmup_steps=0, min_timed_steps=40, max_steps=41, min_timed_s=0.0, profile_steps=5,
               test_size=1000, threads_per_rank=1, scaling="strong")  # fmt: skip
    one, four = cell(**vgg, strategy="single", world_size=1), cell(**vgg, strategy="ddp", world_size=4)
    flops = catalog.forward_flops("vgg11", "cifar10")
    expected = (46 * 256 + 1000 / 3) * flops / estimate.CPU_FORWARD_FLOPS_PER_S
    assert estimate.compute_s(one, cores=2) == expected  # ~154 s; measured 122 s (31 GFLOP/s on this VM)
    # 4 ranks of 64 on 2 cores: a quarter of the work each, two ranks to a core
    assert estimate.compute_s(four, cores=2) == (46 * 64 + 1000 / 3) * flops / estimate.CPU_FORWARD_FLOPS_PER_S * 2
    assert estimate.compute_s({**one, "device": "cuda"}, cores=2) == 0 and estimate.compute_s({**one, "batch_size": "auto"}, cores=2) == 0
    line = estimate.time_estimate([one] + [four] * 6, 3, 21, tmp_path / "results", now=QUIET)  # 30 min measured for its 21 runs on 2 cores
    cores = os.cpu_count()
    per_run = estimate.FIXED_RUN_S + (estimate.compute_s(one, cores) + 6 * estimate.compute_s(four, cores)) / 7
    assert f"({per_run:.0f} s a run, a default" in line and f"{estimate.FIXED_RUN_S:g} s fixed + the steps" in line, line
    # imagenette's FLOPs follow the image's area
    assert catalog.forward_flops("densenet121", "imagenette", 80) == catalog.forward_flops("densenet121", "imagenette") / 4


def test_cpu_flags_are_read_from_cpuinfo_on_x86_and_arm(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu sse2 avx512f avx512_bf16\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd asimdhp bf16\n")
    assert plan.cpu_flags(x86) == {"fpu", "sse2", "avx512f", "avx512_bf16"}
    assert plan.cpu_flags(arm) == {"fp", "asimd", "asimdhp", "bf16"}
    assert plan.cpu_flags(tmp_path / "none") is None


def test_a_cuda_language_model_whose_vocabulary_is_not_a_multiple_of_64_is_told_the_padded_size():
    lm = dict(dataset="synthetic_tokens", model="gpt2_small")
    cells = [cell(device="cuda", vocab_size=50257, **lm), cell(device="cuda", vocab_size=50304, **lm),
             cell(device="cpu", vocab_size=50257, **lm), cell(device="cuda", vocab_size=1000, **lm)]  # fmt: skip
    (line,) = plan.vocab_warnings(cells)
    assert line.startswith("2 CUDA cell(s) have vocab_size 1,000, 50,257") and "set params.vocab_size to 1,024, 50,304" in line
    assert plan.vocab_warnings(cells[1:3]) == []  # aligned on CUDA, or on a CPU
    assert any("vocab_size" in w for w in plan.warnings(cells[:1], 1, 1, Path("/nonexistent"), frozenset()))


def test_low_precision_on_a_cpu_without_its_arithmetic_is_named_as_emulated():
    cells = [cell(precision="bf16"), cell(precision="fp16"), cell(precision="fp32"), cell(precision="bf16", device="cuda")]
    lines = plan.precision_warnings(cells, frozenset({"avx512f"}))
    assert len(lines) == 2
    bf16, fp16 = lines
    assert bf16.startswith("1 cell(s) train in bf16 on CPU") and "avx512_bf16/amx_bf16" in bf16 and "slower than fp32" in bf16
    assert fp16.startswith("1 cell(s) train in fp16 on CPU") and "avx512_fp16/amx_fp16" in fp16 and "emulated" in fp16
    only_fp16 = plan.precision_warnings(cells, frozenset({"avx512f", "amx_bf16"}))
    assert len(only_fp16) == 1 and "fp16" in only_fp16[0]
    assert plan.precision_warnings(cells, frozenset({"avx512_bf16", "avx512_fp16"})) == []
    assert plan.precision_warnings(cells, None) == []  # flags unknown: no guess
    assert plan.precision_warnings([cell(precision="fp32")], frozenset()) == []


def test_adamw_at_an_sgd_learning_rate_is_named_and_a_usual_one_is_not():
    lines = plan.optimizer_warnings([cell(optimizer="adamw", lr=0.05), cell(optimizer="adamw", lr=0.1), cell(lr=0.05)])
    assert len(lines) == 1
    assert lines[0].startswith("2 adamw cell(s) have lr 0.05, 0.1 (> 0.01") and "likely diverges" in lines[0]
    assert "1e-4 to 1e-3" in lines[0] and "set params.lr" in lines[0]
    assert plan.optimizer_warnings([cell(optimizer="adamw", lr=1e-3), cell(optimizer="sgd", lr=0.5)]) == []


def test_adamw_cells_that_differ_only_in_momentum_are_one_measurement():
    from ddpbench.core.params import CellParams, effective_params

    values = {**CellParams().as_dict(), "optimizer": "adamw", "lr": 1e-3}
    assert effective_params({**values, "momentum": 0.0}) == effective_params({**values, "momentum": 0.5})
    sgd = {**values, "optimizer": "sgd"}
    assert effective_params({**sgd, "momentum": 0.0}) != effective_params({**sgd, "momentum": 0.5})


def test_the_plan_lines_carry_the_training_setting_warnings(tmp_path):
    cells = [cell(precision="bf16", optimizer="adamw", lr=0.05)]
    lines = plan.warnings(cells, 1, 1, tmp_path, flags=frozenset({"sse2"}))
    assert all(line.startswith(plan.PREFIX) for line in lines)
    assert any("train in bf16 on CPU" in line for line in lines) and any("adamw cell(s) have lr" in line for line in lines)
    assert not any("bf16" in line for line in plan.warnings(cells, 1, 1, tmp_path, flags=frozenset({"amx_bf16"})))
