"""DDP's communication as ddpbench measures it, beside PyTorch's own DDP logger
(`DistributedDataParallel._get_ddp_logging_data()`), and what ddpbench's timing hook costs.

    torchrun --standalone --nproc-per-node 2 benchmarks/ddp_vs_pytorch_logger.py \
        [--rounds 12 --steps 30] [cell flags: --model mlp --bucket-mb 0.5 --batch-size 64 ...]

Three DDP copies of the same model train on the same batches, in blocks of `--steps` steps
whose order rotates every round (so drift in machine load hits all alike):

  pytorch  DDP with its built-in all-reduce and a bare loop: no ddpbench code at all.
  hook     the same, with ddpbench's timing hook registered instead of the built-in one:
           its step time against `pytorch` is the hook's own cost.
  ddpbench the loop as `ddpbench.run.train` runs it (strategy `ddp`, instrumented).

Every copy has PyTorch's runtime logging on at every iteration (sample rate 1), so the
`ddpbench` copy is measured by both instruments in the very same steps. PyTorch's
definitions (torch/csrc/distributed/c10d/logger.cpp, reducer.cpp), per iteration:
  backward_compute = backward start -> the last gradient is ready
  backward_comm    = the first bucket's all-reduce launched -> all buckets finished and
                     copied back into .grad (one span, gaps included)
  overlap          = the first bucket launched -> the last gradient ready
ddpbench's (strategies/ddp.py): comm = the union of per-bucket hand-over -> all-reduce
callback intervals; exposed = time backward waited inside the hooks + last hand-over ->
last callback. Printed per step, rank 0, median over rounds of each block's mean (PyTorch's
are averages over all iterations since the start). Not a test: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from ddpbench import strategies
from ddpbench.core import timers
from ddpbench.core.params import CellParams
from ddpbench.run import data as datamod
from ddpbench.run import loop, models, rank
from ddpbench.strategies.base import Context
from ddpbench.strategies.ddp import DDP

PYTORCH_KEYS = {  # logging-data key -> printed name (values in ns)
    "avg_forward_compute_time": "forward",
    "avg_backward_compute_time": "backward_compute",
    "avg_backward_comm_time": "backward_comm",
    "avg_backward_compute_comm_overlap_time": "overlap",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=30, help="steps per timed block")
    CellParams.add_arguments(parser)
    parser.set_defaults(strategy="ddp", model="mlp", warmup_steps=0, min_timed_steps=1, min_timed_s=0.0)
    args = parser.parse_args()
    params = CellParams.from_namespace(args)
    ranks = rank.Ranks.from_env()
    if not ranks.launched:
        raise SystemExit("run it under torchrun with 2 or more processes (see the docstring)")
    dist.init_process_group("gloo")
    threads = rank.configure_threads(params, ranks)
    device = torch.device("cpu")
    global_batch, _ = datamod.batch_sizes(params.batch_size, params.scaling, ranks.world)
    torch.manual_seed(params.seed)
    data = datamod.load(params)
    sampler = datamod.ShardedBatchSampler(len(data.train), global_batch, ranks.rank, ranks.world, params.seed)
    loader = datamod.train_loader(data, sampler, params.num_workers, pin_memory=False)

    def context(instrument: bool) -> Context:
        ctx = Context(params, ranks.rank, ranks.world, device, timers.CommMeter(), timers.Clock(device.type))
        ctx.instrument = instrument
        return ctx

    def fresh_model() -> torch.nn.Module:
        torch.manual_seed(params.seed)
        return models.build(params.model, data.shape, data.classes).to(device)

    def plain_ddp(with_hook: bool):
        ddp = DistributedDataParallel(fresh_model(), bucket_cap_mb=params.bucket_mb)
        if with_hook:  # the hook alone: no meter reads, no phase timers
            ddp.register_comm_hook(dist.group.WORLD, DDP()._timed(None, context(True)))
        return ddp, torch.optim.SGD(ddp.parameters(), lr=params.lr, momentum=params.momentum)

    strategy = strategies.get("ddp")
    ctx = context(True)
    harness = strategy.wrap(fresh_model(), ctx)
    arms = {
        "pytorch": plain_ddp(False),
        "hook": plain_ddp(True),
        "ddpbench": (harness, strategy.make_optimizer(harness, ctx)),
    }
    for ddp, _ in arms.values():
        ddp._set_ddp_runtime_logging_sample_rate(1)

    batches = iter(())

    def next_batch():
        nonlocal batches
        try:
            return next(batches)
        except StopIteration:
            batches = iter(loader)
            return next(batches)

    def bare_block(name: str) -> None:
        ddp, optimizer = arms[name]
        for _ in range(args.steps):
            x, y = next_batch()
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(x), y).backward()
            optimizer.step()

    measured: dict[str, list[float]] = {"comm": [], "exposed": [], "backward": [], "step": []}

    def harness_block() -> None:
        model, optimizer = arms["ddpbench"]
        result = loop.train_loop(model, optimizer, strategy, ctx, loader, sampler, args.steps, global_batch, first_timed=0)
        rows = [r for r in result.records if r["timed"]]
        for key, column in (("comm", "comm_s"), ("exposed", "exposed_comm_s"), ("backward", "backward_s"), ("step", "total_s")):
            measured[key].append(statistics.fmean(r[column] for r in rows))

    def block(name: str) -> float:
        dist.barrier()
        start, cpu = time.perf_counter(), time.process_time()
        harness_block() if name == "ddpbench" else bare_block(name)
        cpu_s[name].append((time.process_time() - cpu) / args.steps)  # this process, all threads: less noisy
        dist.barrier()
        return (time.perf_counter() - start) / args.steps

    cpu_s: dict[str, list[float]] = {name: [] for name in arms}
    for name in arms:  # warm-up: allocator, DDP's bucket rebuild
        block(name)
    names = list(arms)
    step_s: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names[r % 3 :] + names[: r % 3]:
            step_s[name].append(block(name))

    if ranks.rank == 0:
        ms = lambda v: f"{v * 1e3:7.2f}"  # noqa: E731
        print(f"DDP {params.model} bucket_mb {params.bucket_mb} world {ranks.world} batch {global_batch} "
              f"threads {threads}: rank 0, ms per step, median over {args.rounds} rounds of {args.steps} steps")
        for name in names:
            print(f"  step time, {name:8s} {ms(statistics.median(step_s[name]))}")
        ratios = [h / p for h, p in zip(step_s["hook"], step_s["pytorch"])]
        cost = statistics.median(h - p for h, p in zip(step_s["hook"], step_s["pytorch"]))
        print(f"  timing hook's cost: {cost * 1e3:+.3f} ms/step, ratio hook/pytorch {statistics.median(ratios):.4f} "
              f"(IQR {statistics.quantiles(ratios, n=4)[0]:.4f}-{statistics.quantiles(ratios, n=4)[2]:.4f})")
        cpu = [h - p for h, p in zip(cpu_s["hook"][-args.rounds:], cpu_s["pytorch"][-args.rounds:])]
        print(f"  timing hook's CPU time (all threads of rank 0): {statistics.median(cpu) * 1e3:+.3f} ms/step "
              f"(IQR {statistics.quantiles(cpu, n=4)[0] * 1e3:+.3f} to {statistics.quantiles(cpu, n=4)[2] * 1e3:+.3f})")
        print("  the ddpbench copy, the same steps by two instruments:")
        for key in ("step", "backward", "comm", "exposed"):
            print(f"    ddpbench {key:9s} {ms(statistics.median(measured[key]))}")
        logged = arms["ddpbench"][0]._get_ddp_logging_data()
        for key, label in PYTORCH_KEYS.items():
            if key in logged:
                print(f"    pytorch  {label:16s} {logged[key] / 1e6:7.2f}")
        print("  the pytorch copy (no ddpbench code), PyTorch's logger:")
        logged = arms["pytorch"][0]._get_ddp_logging_data()
        for key, label in PYTORCH_KEYS.items():
            if key in logged:
                print(f"    pytorch  {label:16s} {logged[key] / 1e6:7.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
