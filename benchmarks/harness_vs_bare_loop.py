"""The harness against a bare training loop of the same model: tokens/s (or samples/s) of a
`single` cell run by `ddpbench.run.train` and of the plainest loop that trains the same
model on the same batches, compiled and checkpointed as the cell asks (run.transforms; forward
under the cell's autocast, loss, backward, optimizer step; no timers, no records), side by side in one process, alternating (ABBA), printed as
the median ratio harness / bare over rounds (target >= 0.98). Also prints each side's MFU
where the harness measured it.

    python benchmarks/harness_vs_bare_loop.py                                  # gpt_tiny on CPU
    python benchmarks/harness_vs_bare_loop.py --compile model --rounds 2       # both sides compiled
    python benchmarks/harness_vs_bare_loop.py --device cuda --model gpt2_small --seq-len 1024 \
        --vocab-size 50257 --batch-size 8 --precision bf16 --rounds 3            # docs/gpu.md

Not a test: timings on a shared machine are noisy; run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ddpbench.core.params import CellParams
from ddpbench.run import data as datamod
from ddpbench.run import models, precision, train, transforms
from ddpbench.strategies.base import make_optimizer
from ddpbench.strategies.fsdp import LOW_PRECISION


def bare_rate(params: CellParams, steps: int, warmup: int, profile: int = 0) -> float:
    """Samples/s of the plainest loop over `steps` steps after `warmup`; then, if `profile`, that
    many more steps under torch.profiler, printing the kernels that took the most device time."""
    device = torch.device("cuda") if params.device == "cuda" else torch.device("cpu")
    precision.configure(params, device)
    torch.manual_seed(params.seed)
    data = datamod.load(params)
    model = models.build(params.model, data.shape, data.classes, kind=data.kind, model_path=params.model_path).to(device)
    transforms.apply(model, params)  # the same compile and checkpointing as the harness's cell
    loss = transforms.loss(params)  # and the same loss (compiled with the blocks)
    optimizer = make_optimizer(model.parameters(), params)
    low = LOW_PRECISION.get(params.precision)
    batches = [
        (data.train.x[i : i + params.batch_size].to(device), data.train.y[i : i + params.batch_size].to(device))
        for i in range(0, len(data.train) - params.batch_size + 1, params.batch_size)
    ]
    scaler = torch.amp.GradScaler(device.type, enabled=params.precision == "fp16")

    def step(i: int) -> None:
        x, y = batches[i % len(batches)]
        with torch.autocast(device.type, dtype=low, enabled=low is not None):
            value = loss(model(x), y)
        scaler.scale(value).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    for i in range(warmup):
        step(i)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(steps):
        step(warmup + i)
    if device.type == "cuda":
        torch.cuda.synchronize()
    rate = steps * params.batch_size / (time.perf_counter() - start)
    if profile:
        print_top_kernels(lambda i: step(warmup + steps + i), profile, device)
    return rate


def ratio_interval(ratios: list[float]) -> str:
    """', 95 % interval [a, b]' of the rounds' geometric mean ratio (Student t on the logs), from 3 rounds on."""
    if len(ratios) < 3:
        return ""
    from scipy import stats

    logs = [math.log(r) for r in ratios]
    mean, se = statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(len(logs))
    half = stats.t.ppf(0.975, len(logs) - 1) * se
    return f", 95 % interval of the geometric mean [{math.exp(mean - half):.3f}, {math.exp(mean + half):.3f}]"


def print_top_kernels(step, steps: int, device: torch.device) -> None:
    """Where the step's time goes: the 20 kernels (or CPU ops) with the most self time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for i in range(steps):
            step(i)
        if device.type == "cuda":
            torch.cuda.synchronize()
    averages = prof.key_averages()
    for key in ("self_device_time_total", "self_cuda_time_total", "self_cpu_time_total"):
        try:  # the column's name changed across torch versions
            print(averages.table(sort_by=key, row_limit=20), flush=True)
            return
        except (AttributeError, KeyError, ValueError):
            continue


def harness_run(params: CellParams, out: Path) -> dict:
    assert train.run(params, out) == 0, (out / "summary.json").read_text() if (out / "summary.json").exists() else out
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30, help="timed steps on each side")
    parser.add_argument("--profile", type=int, default=0, metavar="STEPS",
                        help="after the rounds, profile this many steps of the bare loop and print its top kernels")
    CellParams.add_arguments(parser)
    parser.set_defaults(strategy="single", model="gpt_tiny", dataset="synthetic_tokens", batch_size=16, warmup_steps=3,
                        optimizer="adamw", lr=0.001, dataset_size=512, test_size=0)  # fmt: skip
    args = parser.parse_args()
    rounds, steps = args.rounds, args.steps
    params = CellParams.from_namespace(args)
    values = {**params.as_dict(), "min_timed_steps": steps, "max_steps": 1 + params.warmup_steps + steps, "epochs": 10**4}
    params = CellParams.from_mapping(values)
    unit, per_sample = ("tokens/s", params.seq_len) if params.dataset == "synthetic_tokens" else ("samples/s", 1)
    ratios, summaries = [], []
    with tempfile.TemporaryDirectory() as tmp:
        harness_run(params, Path(tmp) / "warm-up")  # first-use costs (allocator, kernels) on neither side's clock
        bare_rate(params, 2, 1)  # ... and the harness has set this process's threads: the bare loop uses the same
        for r in range(rounds):
            order = ("harness", "bare") if r % 2 == 0 else ("bare", "harness")  # ABBA
            rate = {}
            for side in order:
                torch.compiler.reset()  # each side compiles its own blocks (in its untimed warm-up)
                if side == "bare":
                    rate[side] = bare_rate(params, steps, params.warmup_steps + 1)
                else:
                    summary = harness_run(params, Path(tmp) / f"round{r}")
                    summaries.append(summary)
                    rate[side] = summary["samples_per_s"]
            ratios.append(rate["harness"] / rate["bare"])
            print(f"round {r}: harness {rate['harness'] * per_sample:,.0f} {unit}, bare {rate['bare'] * per_sample:,.0f} "
                  f"{unit}, ratio {ratios[-1]:.3f}", flush=True)  # fmt: skip
        if args.profile:
            torch.compiler.reset()
            bare_rate(params, 2, params.warmup_steps + 1, profile=args.profile)
    extra = summaries[-1]["extra"]
    print(f"median harness/bare over {rounds} rounds: {statistics.median(ratios):.3f}{ratio_interval(ratios)} "
          f"(target >= 0.98); torch {torch.__version__}, {params.device}, {params.model}, {params.precision}")  # fmt: skip
    print(f"  compile {params.compile}, activation_checkpointing {params.activation_checkpointing}, "
          f"peak CUDA allocation {summaries[-1].get('cuda_max_allocated_mb')} MiB, peak RSS {summaries[-1].get('peak_rss_mb')} MiB")
    for key in ("train_flops_per_sample", "hardware_flops_per_sample", "peak_flops_measured", "peak_flops_datasheet",
                "mfu_measured", "mfu_datasheet", "hfu_measured", "hfu_datasheet", "compile_s", "compiled_graphs",
                "optimizer_impl", "power_w", "energy_per_sample_j", "energy_per_token_j", "energy_window_s",
                "energy_short_window", "energy_source"):
        if key in extra:
            print(f"  {key}: {extra[key]}")


if __name__ == "__main__":
    main()
