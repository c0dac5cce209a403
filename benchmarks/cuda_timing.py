"""Timing truth on CUDA: the harness's step time and phases against a bare loop timed with
CUDA events around whole steps, side by side in one process (targets: step times <= 2 %
apart, phases summing to the step within 2 %).

    python benchmarks/cuda_timing.py [--models resnet18 resnet50] [--batches 64 128]
        [--rounds 6 --steps 20] [--json FILE]

For each model and batch (single, synthetic 224 px images, 10 classes), blocks of `--steps`
steps alternate between
- harness: `ddpbench.run.loop.train_loop` instrumented as a run is (an event at every phase
  boundary, one wait for the device per step); its step time is the median of the
  records' total_s, as summary.json reports it;
- bare: a plain loop written here (no harness code) with one CUDA event recorded after
  each step and no synchronisation until the block ends; its step time is the median of
  the times between consecutive events.
ABBA order, so drift in clocks or load hits both alike. Also printed: the harness block's
timed wall per step (what its throughput divides by) over the bare block's per step.
Needs a GPU; prints the torch version and device beside every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from ddpbench.run import data as datamod
from ddpbench.core import timers
from ddpbench.run import loop, models
from ddpbench import strategies
from ddpbench.core.params import CellParams
from ddpbench.strategies.base import Context

PHASES = ("data_s", "forward_s", "backward_s", "exposed_comm_s", "optimizer_s", "other_s")


def bare_block(model, optimizer, batches, device, steps: int) -> tuple[list[float], float]:
    """(per-step seconds from events between steps, block seconds from events around it)."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    events[0].record()
    for i in range(steps):
        x, y = next(batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        events[i + 1].record()
    events[-1].synchronize()
    steps_s = [a.elapsed_time(b) / 1000 for a, b in zip(events, events[1:])]
    return steps_s, events[0].elapsed_time(events[-1]) / 1000


def endless(loader, sampler):
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def measure(model_name: str, batch: int, rounds: int, steps: int, image_size: int, lags=()) -> dict:
    device = torch.device("cuda", 0)
    params = CellParams.from_mapping(
        dict(
            device="cuda", strategy="single", model=model_name, synthetic_shape="imagenette", image_size=image_size,
            dataset_size=4 * batch, test_size=0, batch_size=batch, warmup_steps=0, min_timed_steps=0, min_timed_s=0,
        )
    )  # fmt: skip
    torch.manual_seed(0)
    data = datamod.load(params)
    single = strategies.get("single")
    loops = {}
    for mode in ("harness", "bare"):
        torch.manual_seed(0)
        model = models.build(model_name, data.shape, data.classes).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=params.lr, momentum=params.momentum)
        sampler = datamod.ShardedBatchSampler(len(data.train), batch, 0, 1, params.seed)
        loader = datamod.train_loader(data, sampler, 0, pin_memory=True)
        loops[mode] = (model, opt, sampler, loader)
    bare_batches = endless(loops["bare"][3], loops["bare"][2])
    default_lag = loop.StepRecorder.LAG

    def harness_block(lag: int = loop.StepRecorder.LAG) -> tuple[list[dict], float]:
        """(records, the timed wall time that the harness's throughput divides by)."""
        model, opt, sampler, loader = loops["harness"]
        loop.StepRecorder.LAG = lag
        ctx = Context(params, 0, 1, device, timers.CommMeter(), timers.Clock("cuda"))
        try:
            run = loop.train_loop(model, opt, single, ctx, loader, sampler, steps, batch, first_timed=0)
        finally:
            loop.StepRecorder.LAG = default_lag
        return run.records, run.timed_wall_s

    harness_block(), bare_block(*loops["bare"][:2], bare_batches, device, steps)  # warm-up: cuDNN, allocator
    h_step, b_step, h_block, b_block, phase_dev = [], [], [], [], []
    for r in range(rounds):
        for mode in (("harness", "bare") if r % 2 == 0 else ("bare", "harness")):
            if mode == "harness":
                records, block = harness_block()
                h_step += [rec["total_s"] for rec in records]
                h_block.append(block / steps)
                phase_dev += [abs(sum(rec[p] for p in PHASES) - rec["total_s"]) / rec["total_s"] for rec in records]
            else:
                per_step, block = bare_block(*loops["bare"][:2], bare_batches, device, steps)
                b_step += per_step
                b_block.append(block / steps)
    h, b = statistics.median(h_step), statistics.median(b_step)
    other_lags = {}
    for lag in lags:  # the records' lag behind the host, side by side with the default
        walls, bares = [], []
        for r in range(rounds):
            for mode in (("harness", "bare") if r % 2 == 0 else ("bare", "harness")):
                if mode == "harness":
                    walls.append(harness_block(lag)[1] / steps)
                else:
                    bares.append(bare_block(*loops["bare"][:2], bare_batches, device, steps)[1] / steps)
        other_lags[f"lag{lag}_block_ratio"] = statistics.median(walls) / statistics.median(bares)
    return {
        "model": model_name,
        "batch": batch,
        "image_size": image_size,
        "harness_step_ms": 1e3 * h,
        "bare_step_ms": 1e3 * b,
        "step_ratio": h / b,
        "harness_block_ms_per_step": 1e3 * statistics.median(h_block),
        "bare_block_ms_per_step": 1e3 * statistics.median(b_block),
        "block_ratio": statistics.median(h_block) / statistics.median(b_block),
        "phases_max_rel_dev": max(phase_dev),
        "steps": len(h_step),
        **other_lags,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "resnet50"])
    parser.add_argument("--batches", nargs="+", type=int, default=[64, 128])
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lags", nargs="*", type=int, default=[], help="also time these record lags (StepRecorder.LAG)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("cuda_timing: no CUDA device visible to torch")
    where = f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name(0)}"
    print(where, flush=True)
    rows = []
    for model_name in args.models:
        for batch in args.batches:
            t = time.perf_counter()
            row = measure(model_name, batch, args.rounds, args.steps, args.image_size, args.lags)
            rows.append(row)
            print(
                f"{model_name:9s} batch {batch:4d}: harness {row['harness_step_ms']:8.2f} ms/step, bare "
                f"{row['bare_step_ms']:8.2f} ms/step, ratio {row['step_ratio']:.4f}; phases sum to the step within "
                f"{100 * row['phases_max_rel_dev']:.4f} %; timed wall per step harness/bare {row['block_ratio']:.4f} "
                f"({row['steps']} timed steps, {time.perf_counter() - t:.0f} s)"
                + "".join(f"; {k} {v:.4f}" for k, v in row.items() if k.startswith("lag")),
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": where, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
