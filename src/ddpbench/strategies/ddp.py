"""`ddp`: torch DistributedDataParallel, `bucket_mb` as bucket_cap_mb: bucketing, and
communication overlapped with backward.

How its communication is measured. DDP communicates inside `loss.backward()`, so
timing a phase after backward would see nothing. A communication hook wraps the bucket
all-reduce and stamps, per bucket, when the bucket was handed to communication (its
gradients are computed), when the hook returned control to backward, and when its
all-reduce completed (a callback on its future):
  comm_s         = the union of the hand-over..completion intervals (concurrent buckets
                   count once);
  exposed_comm_s = the time backward was held inside the hooks of all but the last
                   bucket (a hook that waits, like PowerSGD's on gloo, blocks backward:
                   measured, not assumed hidden), plus from the hand-over of the last
                   bucket (backward's computation is over) to the completion of the last
                   all-reduce: the part not hidden.
The loop subtracts the exposed part from the backward phase, so the phases still add up
to the step. Bytes are measured where they leave: the hooks run on a `CountingGroup`, a
process group that counts every tensor handed to its all-reduce (the fp16 hook's
compressed tensor, PowerSGD's P and Q matrices), in the ring convention of
`allreduce_bytes`. Models with buffers (BatchNorm) also have them broadcast at every
forward: that broadcast is timed as exposed communication inside forward and counted. Uninstrumented runs use DDP's built-in hook (the overhead benchmark
compares the two). Variants (ddp_fp16, powersgd, zero) override `comm_hook` or
`make_optimizer` and inherit the measurement.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ddpbench.core.timers import interval_union
from ddpbench.strategies.base import Context, Strategy, allreduce_bytes, nbytes, timed_blocking

SETTINGS = ("bucket_mb",)  # the strategy-specific cell parameters it reads

Hook = Callable[[Any, Any], torch.futures.Future]


class CountingGroup:
    """A process group that counts what is all-reduced through it (calls and bytes this
    rank sends, `allreduce_bytes`) and forwards everything to the real group."""

    def __init__(self, group: Any, ctx: Context):
        self._group, self._meter, self._world = group, ctx.meter, ctx.world

    def allreduce(self, tensors, *args, **kwargs):
        for t in tensors:
            self._meter.add(1, allreduce_bytes(nbytes(t), self._world))
        return self._group.allreduce(tensors, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._group, name)


class DDP(Strategy):
    name = "ddp"
    imports_dynamo = True
    schedule = "overlap"

    def comm_hook(self, group: Any, ctx: Context) -> tuple[Any, Hook] | None:
        """(state, hook) to register, communicating over `group` (None: the default
        group), or None for DDP's built-in all-reduce."""
        return None

    def wrap(self, model, ctx):
        cuda = ctx.device.type == "cuda"
        ddp = DistributedDataParallel(
            model, device_ids=[ctx.device.index] if cuda else None, bucket_cap_mb=ctx.params.bucket_mb
        )
        group = CountingGroup(dist.group.WORLD, ctx) if ctx.instrument else None
        hook = self.comm_hook(group, ctx)
        if ctx.instrument:
            state, inner = hook or (group, None)
            ddp.register_comm_hook(state, self._timed(inner, ctx))
            self._time_buffer_broadcast(ddp, ctx)
        elif hook is not None:
            ddp.register_comm_hook(*hook)
        return ddp

    @staticmethod
    def _time_buffer_broadcast(ddp: DistributedDataParallel, ctx: Context) -> None:
        """Models with buffers (BatchNorm statistics) get them broadcast from rank 0 at the
        start of every forward (broadcast_buffers): blocking communication inside forward,
        timed apart as such and counted (one coalesced call; the root sends the bytes)."""
        if not ddp.will_sync_module_buffers():
            return
        sync = timed_blocking(ddp._sync_buffers, ctx, "forward")

        def counted_sync():
            sync()
            ctx.meter.add(1, sum(nbytes(t) for t in ddp.modules_buffers) if ctx.rank == 0 else 0)

        ddp._sync_buffers = counted_sync

    def bare(self, model):
        return model.module

    def accumulating(self, model, ctx, last):
        return contextlib.nullcontext() if last else model.no_sync()

    def _timed(self, inner: Hook | None, ctx: Context) -> Hook:
        spans = ctx.state.setdefault("ddp_spans", [])
        clock = ctx.clock

        def timed_hook(state, bucket):
            start = clock.stamp()
            if inner is None:  # plain all-reduce: one callback, not allreduce_hook's two
                buf = bucket.buffer().div_(ctx.world)
                fut = dist.all_reduce(buf, group=state, async_op=True).get_future()
            else:
                fut = inner(state, bucket)
            span = [start, clock.stamp(), None]  # handed over, returned to backward, done

            def done(f):
                span[2] = clock.stamp()
                spans.append(span)
                value = f.value()
                return value[0] if inner is None else value

            return fut.then(done)

        return timed_hook

    def sync_gradients(self, model, ctx):
        # Nothing left to send (backward waited for every bucket); account for what was.
        spans = ctx.state.get("ddp_spans")
        if spans:
            taken = list(spans)
            spans.clear()

            def account(clock, meter):  # once the device has reached the step's end
                ref = taken[0][0]
                times = sorted(tuple(clock.elapsed(ref, t) for t in span) for span in taken)
                comm = interval_union((a, b) for a, _, b in times)
                # Exposed is part of the communication: stamps a microsecond apart on
                # different streams must not make it more.
                meter.overlapped(comm, min(comm, exposed_comm(times)))

            ctx.meter.defer(account)


def exposed_comm(times: list[tuple[float, float, float]]) -> float:
    """Communication not hidden behind backward, from per-bucket (handed over, hook
    returned, completed) times sorted by hand-over: time held inside the earlier hooks,
    plus last hand-over to last completion."""
    held = sum(max(0.0, r - a) for a, r, _ in times[:-1])
    return held + max(0.0, max(b for _, _, b in times) - times[-1][0])


STRATEGY = DDP()
