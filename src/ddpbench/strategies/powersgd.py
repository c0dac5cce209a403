"""`powersgd`: DDP with the PowerSGD hook (Vogels et al. 2019): each gradient matrix is
all-reduced as two rank-`powersgd_rank` factors P and Q, with error feedback and warm
start; the first `powersgd_start_iter` steps all-reduce plainly (compressing too early
hurts accuracy). Vectors (biases) and matrices too small to save at least
`MIN_COMPRESSION_RATE`x stay uncompressed. Bytes are measured on the wire (DDP's
`CountingGroup`), so the summary shows the compression actually achieved.

Timing covers the compressed regime only: the steady state starts at the effective
start iteration (`steady_step`), and the first step and the warm-up steps are counted
from there, so plain and compressed steps are never mixed in one figure (the summary
says where timing began: extra.first_timed_step).

On gloo the buckets are compressed one at a time: PowerSGD's future callbacks issue and
wait for the next all-reduce on gloo's worker threads, so two buckets in flight can
occupy both threads and deadlock. Its communication then blocks backward; DDP's timing
hook measures that time as exposed. On NCCL the buckets overlap as usual."""

import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

from ddpbench.core import run_record
from ddpbench.strategies.ddp import DDP

SETTINGS = ("bucket_mb", "powersgd_rank", "powersgd_start_iter")  # the strategy-specific cell parameters it reads

MIN_COMPRESSION_RATE = 2  # torch's default


class PowerSGD(DDP):
    name = "powersgd"
    exact = False

    @staticmethod
    def start_iter(ctx) -> int:
        # torch requires > 1 with error feedback / warm start (the first steps build the buckets)
        return max(2, ctx.params.powersgd_start_iter)

    def steady_step(self, ctx) -> int:
        # torch compresses from the step whose iteration count reaches start_powerSGD_iter
        return self.start_iter(ctx)

    def comm_hook(self, group, ctx):
        state = powerSGD_hook.PowerSGDState(
            process_group=group,
            matrix_approximation_rank=ctx.params.powersgd_rank,
            start_powerSGD_iter=self.start_iter(ctx),
            min_compression_rate=MIN_COMPRESSION_RATE,
            use_error_feedback=True,
            warm_start=True,
            random_seed=ctx.params.seed,
        )
        ctx.state["powersgd"] = state
        if dist.get_backend() == "gloo":
            return state, one_bucket_at_a_time
        return state, powerSGD_hook.powerSGD_hook

    def extra(self, model, ctx):
        state = ctx.state.get("powersgd")
        out = {**super().extra(model, ctx), **run_record.extra(powersgd_start_iter_effective=self.start_iter(ctx))}
        if state is not None and state.total_numel_after_compression:
            out.update(run_record.extra(powersgd_compression_rate=state.compression_stats()[0]))
        return out


def one_bucket_at_a_time(state, bucket):
    fut = powerSGD_hook.powerSGD_hook(state, bucket)
    fut.wait()
    return fut


STRATEGY = PowerSGD()
