"""`batch-size auto`: the largest power-of-two per-rank batch whose training step fits.

Trial steps (forward, backward and an SGD-with-momentum step on a copy of the model,
zero-filled inputs, no communication) double the batch from 1:

- CUDA: until a trial raises out-of-memory (caught, memory freed) or, when
  `memory_budget_gb` > 0, the trial's peak allocation exceeds the budget.
- CPU: within a budget, `memory_budget_gb` or by default half of the available RAM
  shared by this node's ranks. A trial's need is its peak RSS growth: Linux's peak
  (VmHWM) is reset before the trial (/proc/self/clear_refs), so earlier peaks do not
  count; elsewhere the lifetime peak (ru_maxrss) gives a conservative bound. A batch
  whose need, extrapolated linearly from the last two trials, would exceed the budget
  is not tried; one that was tried and measured over it is rejected.

Batches never exceed the rank's share of the training set. The ranks agree on the
smallest choice (all_reduce MIN); the summary records it as extra.auto_batch with
auto_batch_tried (the batches tried), auto_batch_method and auto_batch_need_mb.
"""

from __future__ import annotations

import copy
import gc
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from ddpbench.core import run_record, timers
from ddpbench.strategies.base import SGD, task_loss

MAX_BATCH = 2**16
CLEAR_REFS = "/proc/self/clear_refs"


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _peak_since_reset() -> int:
    """Peak RSS in bytes since the last reset (VmHWM), else the lifetime peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(timers.peak_rss_mb() * 2**20)


def _reset_peak() -> None:
    try:
        with open(CLEAR_REFS, "w") as f:
            f.write("5")
    except OSError:
        pass  # _peak_since_reset then reports the lifetime peak: conservative


def cpu_budget_bytes(memory_budget_gb: float, local_ranks: int) -> int:
    if memory_budget_gb > 0:
        return int(memory_budget_gb * 2**30)
    import psutil

    return int(psutil.virtual_memory().available * 0.5 / max(1, local_ranks))


Place = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def trial_step(model: nn.Module, shape: tuple[int, ...], batch: int, device: torch.device, tokens: bool = False,
               place: Place | None = None) -> None:  # fmt: skip
    """One training step at `batch` on a copy of `model` (its memory freed afterwards);
    `tokens`: shape is (seq_len,) and the inputs are token ids, a target per position; `place`: how
    a batch reaches the device as the cell's model reads it (run.transforms.to_device)."""
    net = copy.deepcopy(model).to(device)
    opt = SGD(net.parameters(), lr=0.0, momentum=0.9)  # the harness's optimizer: the same state, no torch._dynamo
    if tokens:
        x, y = torch.zeros(batch, *shape, dtype=torch.long), torch.zeros(batch, *shape, dtype=torch.long)
    else:
        x, y = torch.zeros(batch, *shape), torch.zeros(batch, dtype=torch.long)
    x, y = place(x, y) if place else (x.to(device), y.to(device))
    task_loss(net(x), y).backward()
    opt.step()
    del net, opt, x, y


def _trial_need(model: nn.Module, shape: tuple[int, ...], batch: int, device: torch.device, tokens: bool,
                place: Place | None) -> int | None:  # fmt: skip
    """Bytes one trial step at `batch` needs beyond what is held already; None when CUDA
    runs out of memory. The out-of-memory error's traceback holds the trial's tensors:
    memory is released only after the handler has let it go."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        out_of_memory = False
        try:
            trial_step(model, shape, batch, device, tokens, place)
            torch.cuda.synchronize(device)
        except torch.cuda.OutOfMemoryError:
            out_of_memory = True
        if out_of_memory:
            gc.collect()
            torch.cuda.empty_cache()
            return None
        return torch.cuda.max_memory_allocated(device) - before
    before = _rss()
    _reset_peak()
    trial_step(model, shape, batch, device, tokens, place)
    return max(0, _peak_since_reset() - before)


def search(
    model: nn.Module, shape: tuple[int, ...], device: torch.device, memory_budget_gb: float, limit: int, local_ranks: int,
    tokens: bool = False, place: Place | None = None,
) -> dict[str, Any]:
    """This rank's largest fitting power-of-two batch <= limit: {chosen, tried, method, need_mb}."""
    limit = max(1, min(limit, MAX_BATCH))
    cuda = device.type == "cuda"
    budget = int(memory_budget_gb * 2**30) if cuda else cpu_budget_bytes(memory_budget_gb, local_ranks)
    tried: list[int] = []
    needs: dict[int, int] = {}
    chosen, batch = 0, 1
    while batch <= limit:
        if not cuda and len(needs) >= 1:
            b1 = max(needs)
            b0 = b1 // 2
            slope = (needs[b1] - needs[b0]) / (b1 - b0) if b0 in needs else needs[b1] / b1
            if needs[b1] + slope * (batch - b1) > budget:
                break  # predicted not to fit: not tried
        tried.append(batch)
        need = _trial_need(model, shape, batch, device, tokens, place)
        if need is None:  # out of memory
            break
        if budget and need > budget:
            break
        needs[batch] = need
        chosen = batch
        batch *= 2
    if cuda:
        method = "cuda: doubled until out of memory" + (f" or over {memory_budget_gb} GB" if budget else "")
    else:
        method = f"cpu: peak RSS growth of a trial step within {budget / 2**30:.3g} GB"
    if batch > limit:
        method += f"; capped by the data at {limit}"
    if chosen == 0:
        chosen, method = 1, method + "; not even 1 sample fits the budget: 1"
    return {
        "chosen": chosen,
        "tried": tried,
        "method": method,
        "need_mb": needs.get(chosen, 0) / 2**20,
        "budget_gb": budget / 2**30 if budget else None,
    }


def agree(found: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Every rank trains with the smallest of the ranks' choices."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        t = torch.tensor([found["chosen"]], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        if int(t) != found["chosen"]:
            found = {**found, "chosen": int(t), "method": found["method"] + "; a smaller choice of another rank"}
    return found


def extra(found: dict[str, Any]) -> dict[str, Any]:
    """summary.json's extra keys (scalars: the aggregate tables drop lists)."""
    return run_record.extra(
        auto_batch=found["chosen"],
        auto_batch_tried=",".join(map(str, found["tried"])),
        auto_batch_method=found["method"],
        auto_batch_need_mb=found["need_mb"],
        auto_batch_budget_gb=found["budget_gb"],
    )


__all__ = ["search", "agree", "extra", "trial_step", "cpu_budget_bytes"]
