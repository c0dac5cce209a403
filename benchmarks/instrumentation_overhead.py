"""What the harness's instrumentation costs: the same training loop with and without it,
side by side in one run, printed as a ratio of step times (target: <= 1.02).

    python benchmarks/instrumentation_overhead.py [--rounds 15 --steps 20] [cell flags]
    torchrun --standalone --nproc-per-node 2 benchmarks/instrumentation_overhead.py --strategy ddp

"Instrumented" is the loop as `ddpbench.run.train` runs it: device synchronisation and a clock
read at every phase boundary, the communication meter, DDP's timing hook, a step record.
"Bare" is `train_loop` with ctx.instrument False: none of that (DDP's built-in hook).
Both train their own copy of the same model on the same batches; blocks of `--steps`
steps alternate (ABBA order, so drift in machine load hits both alike) and the ratio is
the median over rounds of instrumented/bare block time. Not a test: timings on a shared
machine are noisy; run it on a quiet one. It also prints the cost of the bookkeeping
alone (no training), which noise does not blur.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

from ddpbench.run import data as datamod
from ddpbench.core import timers
from ddpbench.run import loop, models, rank
from ddpbench import strategies
from ddpbench.core.params import CellParams
from ddpbench.strategies.base import Context


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=20, help="steps per timed block")
    CellParams.add_arguments(parser)
    parser.set_defaults(strategy="single", warmup_steps=0)
    args = parser.parse_args()
    params = CellParams.from_namespace(args)
    ranks = rank.Ranks.from_env()
    if ranks.launched:
        dist.init_process_group("nccl" if params.device == "cuda" else "gloo")
    threads = rank.configure_threads(params, ranks)
    device = torch.device("cuda", ranks.local_rank) if params.device == "cuda" else torch.device("cpu")
    strategy = strategies.get(params.strategy)
    global_batch, _ = datamod.batch_sizes(params.batch_size, params.scaling, ranks.world)
    torch.manual_seed(params.seed)
    data = datamod.load(params)
    sampler = datamod.ShardedBatchSampler(len(data.train), global_batch, ranks.rank, ranks.world, params.seed)
    loader = datamod.train_loader(data, sampler, params.num_workers, pin_memory=device.type == "cuda")

    loops = {}
    for instrument in (False, True):
        torch.manual_seed(params.seed)
        model = models.build(params.model, data.shape, data.classes).to(device)
        ctx = Context(params, ranks.rank, ranks.world, device, timers.CommMeter(), timers.Clock(device.type))
        ctx.instrument = instrument
        model = strategy.wrap(model, ctx)
        loops[instrument] = (model, strategy.make_optimizer(model, ctx), ctx)

    def block(instrument: bool) -> tuple[float, float]:
        """(wall, CPU) seconds of one block; CPU time (this process, all threads) is far
        less disturbed by other jobs on a shared machine than wall time."""
        model, optimizer, ctx = loops[instrument]
        clock = timers.Clock(device.type)
        if ranks.launched:
            dist.barrier()
        start, cpu = clock.now(), time.process_time()
        loop.train_loop(model, optimizer, strategy, ctx, loader, sampler, args.steps, global_batch)
        return clock.now() - start, time.process_time() - cpu

    block(False), block(True)  # warm-up (allocator, DDP bucket rebuild, caches)
    ratios, cpu_ratios, bare, inst = [], [], [], []
    for r in range(args.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        times = {mode: block(mode) for mode in order}
        bare.append(times[False][0] / args.steps)
        inst.append(times[True][0] / args.steps)
        ratios.append(times[True][0] / times[False][0])
        cpu_ratios.append(times[True][1] / times[False][1])
    if ranks.rank == 0:
        ratio = statistics.median(ratios)
        cpu_ratio = statistics.median(cpu_ratios)
        print(
            f"instrumentation overhead: {params.strategy} {params.model} world {ranks.world} "
            f"batch {global_batch} threads {threads} {params.device}: "
            f"bare {statistics.median(bare) * 1e3:.2f} ms/step, instrumented {statistics.median(inst) * 1e3:.2f} "
            f"ms/step, ratio {ratio:.4f} (median of {args.rounds} rounds; IQR "
            f"{statistics.quantiles(ratios, n=4)[0]:.4f}-{statistics.quantiles(ratios, n=4)[2]:.4f}) "
            f"-> overhead {100 * (ratio - 1):+.2f}%; CPU-time ratio {cpu_ratio:.4f} "
            f"(IQR {statistics.quantiles(cpu_ratios, n=4)[0]:.4f}-{statistics.quantiles(cpu_ratios, n=4)[2]:.4f})"
        )
        cost = bookkeeping_s(device)
        print(
            f"bookkeeping alone (timer laps, clock reads, meter, heartbeat, step record; no model): "
            f"{cost * 1e6:.1f} us/step = {100 * cost / statistics.median(bare):.3f}% of the bare step"
        )
    if ranks.launched:
        dist.destroy_process_group()


def bookkeeping_s(device: torch.device, n: int = 5000) -> float:
    """Per-step cost of the instrumentation itself, free of the noise of training; on CUDA
    it includes the step's one wait for an idle device, a lower bound of the real cost."""
    import tempfile
    from pathlib import Path

    from ddpbench.run.diagnose import Heartbeat

    heartbeat = Heartbeat(Path(tempfile.mkdtemp()) / "heartbeat_rank0")  # the failure diagnosis's progress record
    timer, meter = timers.StepTimer(timers.Clock(device.type), on_lap=heartbeat.lap), timers.CommMeter()
    start = time.perf_counter()
    for i in range(n):
        heartbeat.start_step(i)
        timer.begin()
        for phase in ("data", "forward", "backward", "comm", "optimizer", "comm"):
            timer.lap(phase)
        timer.end()
        meter.resolve(timer.clock)
        loop._record(i, 0, 0, True, timer, meter, 0.0, 1)
        meter.reset()
    return (time.perf_counter() - start) / n


if __name__ == "__main__":
    main()
