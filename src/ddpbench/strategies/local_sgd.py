"""`local_sgd`: local SGD / federated averaging. Every rank steps on its own shard without
communicating; every `sync_period` steps the ranks average their parameters (one
all-reduce per bucket). `sync_period=1` is synchronous SGD with parameter averaging
(with plain or momentum SGD from a common start it equals gradient averaging, i.e.
`single`, up to rounding); larger periods trade accuracy for 1/sync_period of the
communication. Between rounds the ranks' parameters differ; momentum buffers stay local.

extra: rounds (averagings), round_time_s (mean wall time from one averaging to the
next, including it), round_comm_s (mean time of one averaging), steps_per_round.
"""

import torch
import torch.distributed as dist

from ddpbench.core import run_record
from ddpbench.strategies.base import Strategy, allreduce_bytes, buckets, nbytes

SETTINGS = ("bucket_mb", "sync_period")  # the strategy-specific cell parameters it reads


class LocalSGD(Strategy):
    name = "local_sgd"
    exact = False
    schedule = "periodic"

    def after_step(self, model, optimizer, ctx):
        st = ctx.state
        st["steps"] = st.get("steps", 0) + 1
        if st["steps"] % ctx.params.sync_period:
            return
        start = ctx.clock.now()
        with torch.no_grad():
            params = [p for p in model.parameters() if p.requires_grad]
            for group in buckets(params, ctx.params.bucket_mb):
                flat = torch.cat([p.reshape(-1) for p in group])
                dist.all_reduce(flat)
                flat.div_(ctx.world)
                ctx.meter.add(1, allreduce_bytes(nbytes(flat), ctx.world))
                offset = 0
                for p in group:
                    p.copy_(flat[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()
        end = ctx.clock.now()
        st.setdefault("sync_s", []).append(end - start)
        st.setdefault("round_ends", []).append(end)

    def extra(self, model, ctx):
        sync_s, ends = ctx.state.get("sync_s", []), ctx.state.get("round_ends", [])
        rounds = len(sync_s)
        return run_record.extra(
            rounds=rounds,
            steps_per_round=ctx.params.sync_period,
            # The first round includes start-up (first step, warm-up): measure from its end.
            round_time_s=(ends[-1] - ends[0]) / (rounds - 1) if rounds > 1 else None,
            round_comm_s=sum(sync_s) / rounds if rounds else None,
        )


STRATEGY = LocalSGD()
