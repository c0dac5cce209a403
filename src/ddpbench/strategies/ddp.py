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

When each bucket's gradients are ready (what the step model's overlap law simulates,
ddpbench.stepmodel.schedule): per timed step, each bucket's hand-over as a fraction of
backward's computation, in hand-over order (`ready_fractions`), from the same stamps and
the loop's own laps around backward (the end of forward, the end of backward), resolved
in the same deferred account: no extra synchronisation, one more number per bucket.
extra.bucket_ready is rank 0's median per bucket over the timed steps, extra.bucket_bytes
each bucket's gradient bytes (its buffer), both as `run_record.numbers_text`.
"""

from __future__ import annotations

import contextlib
import statistics
from collections import Counter
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ddpbench.core import run_record
from ddpbench.core.run_record import numbers_text
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

    def forward_backward(self, model, x, y, scale, timer, ctx):
        out = super().forward_backward(model, x, y, scale, timer, ctx)
        if ctx.instrument:  # backward's laps (with grad_accum: the last micro-batch's, the one that syncs)
            ctx.state["ddp_backward"] = (timer.stamp_of("forward"), timer.stamp_of("backward"))
        return out

    def extra(self, model, ctx):
        return bucket_fields(ctx.state.get("ddp_ready") or [])

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
            # handed over, returned to backward, done; the bucket's gradient bytes
            span = [start, clock.stamp(), None, bucket.buffer().numel() * bucket.buffer().element_size()]

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
            window = ctx.state.get("ddp_backward") if ctx.timed else None
            ready = ctx.state.setdefault("ddp_ready", [])

            def account(clock, meter):  # once the device has reached the step's end
                ref = taken[0][0] if window is None or None in window else window[0]  # backward's start
                rows = sorted((tuple(clock.elapsed(ref, t) for t in span[:3]), span[3]) for span in taken)
                times = [t for t, _ in rows]
                comm = interval_union((a, b) for a, _, b in times)
                # Exposed is part of the communication: stamps a microsecond apart on
                # different streams must not make it more.
                exposed = min(comm, exposed_comm(times))
                meter.overlapped(comm, exposed)
                if window is not None and None not in window:
                    fractions = ready_fractions(times, 0.0, clock.elapsed(ref, window[1]), exposed)
                    if fractions:
                        ready.append((fractions, [n for _, n in rows]))

            ctx.meter.defer(account)


def exposed_comm(times: list[tuple[float, float, float]]) -> float:
    """Communication not hidden behind backward, from per-bucket (handed over, hook
    returned, completed) times sorted by hand-over: time held inside the earlier hooks,
    plus last hand-over to last completion."""
    held = sum(max(0.0, r - a) for a, r, _ in times[:-1])
    return held + max(0.0, max(b for _, _, b in times) - times[-1][0])


def ready_fractions(times: list[tuple[float, float, float]], start: float, end: float, exposed: float) -> list[float]:
    """Each bucket's hand-over as a fraction of backward's computation, from per-bucket (handed
    over, hook returned, completed) times sorted by hand-over and backward's start and end on the
    same clock: the time backward was held inside earlier hooks and the exposed communication are
    not computation (the loop moves them out of backward), so bucket i is at
        (hand-over_i − start − held in hooks before it) / (end − start − exposed),
    the last one just under 1 (backward returns a moment after the last completion). [] when the
    computation's window is empty."""
    window = end - start - exposed
    if window <= 0:
        return []
    out, held = [], 0.0
    for a, r, _ in times:
        out.append((a - start - held) / window)
        held += max(0.0, r - a)
    return out


def bucket_fields(steps: list[tuple[list[float], list[int]]]) -> dict[str, str]:
    """summary.json's bucket_ready (the median fraction per bucket over the timed steps) and
    bucket_bytes, as text, from each timed step's (fractions, bytes); the steps with the most common
    bucket count only (DDP rebuilds its buckets once, after the first step). {} without steps."""
    if not steps:
        return {}
    count = Counter(len(f) for f, _ in steps).most_common(1)[0][0]
    kept = [(f, n) for f, n in steps if len(f) == count]
    medians = [statistics.median(f[i] for f, _ in kept) for i in range(count)]
    return run_record.extra(bucket_ready=numbers_text(medians, 4), bucket_bytes=numbers_text([int(v) for v in kept[-1][1]]))


STRATEGY = DDP()
