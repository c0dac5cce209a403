"""One rank's place and set-up: where it sits in the torchrun world (`Ranks`), its threads,
its device and the process group it joins, and the few collectives the harness runs outside
the timed steps (the ranks agreeing on a maximum, the parameters' spread across ranks, the
gather of every rank's results to rank 0).
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ddpbench.core import sysinfo
from ddpbench.core.params import CellParams
from ddpbench.run import rendezvous


@dataclass(frozen=True)
class Ranks:
    """Where this process sits, from the torchrun environment (world size 1 without it)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1
    launched: bool = False  # under torchrun: a process group can be initialised

    @classmethod
    def from_env(cls) -> "Ranks":
        env = os.environ
        if "RANK" not in env or "MASTER_ADDR" not in env:
            return cls()
        return cls(
            int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"]), True
        )

    @property
    def nodes(self) -> int:
        return max(1, self.world // self.local_world)


def configure_threads(params: CellParams, ranks: Ranks) -> int:
    """threads_per_rank, default cores // processes on this node (at least 1), for torch and OpenMP."""
    threads = sysinfo.rank_threads(params.threads_per_rank, ranks.local_world)
    os.environ.update({name: str(threads) for name in sysinfo.THREAD_POOL_VARS})
    torch.set_num_threads(threads)
    return threads


def seed_streams(seed: int) -> None:
    """Seed every global random stream a model or its data code may draw from: torch's, Python's
    `random` and NumPy's. Ranks forked from the zygote inherit its NumPy and `random` state, so
    without this every rank drew the same "random" numbers (plain torchrun's ranks differ only
    by chance of their start); seeded from the cell's seed, a rank's draws are reproducible."""
    import random

    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy
    except ImportError:  # NumPy is torch's optional dependency
        return
    numpy.random.seed(seed % 2**32)


def cuda_device(params: CellParams, ranks: Ranks) -> torch.device:
    """One GPU per local rank; with gloo, ranks beyond the GPU count share them round-robin."""
    return torch.device("cuda", ranks.local_rank % max(1, torch.cuda.device_count()))


def join_process_group(params: CellParams, ranks: Ranks, device: torch.device) -> None:
    """Make `device` this rank's current GPU (CUDA cells) and, under torchrun, join the
    process group: the cell's backend, with the cell's timeout for every collective."""
    backend = params.process_group_backend
    if params.device == "cuda":
        torch.cuda.set_device(device)
    if ranks.launched:
        store = rendezvous.group_store(ranks.world)  # a single-node cell meets in a private folder
        where = {"store": store, "rank": ranks.rank, "world_size": ranks.world} if store is not None else {}
        dist.init_process_group(
            backend,
            timeout=datetime.timedelta(seconds=params.timeout_s),
            device_id=device if backend == "nccl" else None,
            **where,
        )


def oversubscribed(threads: int, local_world: int) -> bool:
    """More busy threads on this node than usable cores (CPU cells)."""
    return threads * local_world > sysinfo.usable_cores()


def agreed_max(values: list[float], device: torch.device) -> list[float]:
    """Element-wise maximum over ranks (one collective), so every rank decides alike."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def rank_spread(flat: torch.Tensor) -> float:
    """Largest difference of any parameter between ranks (0 when they agree exactly)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return 0.0
    hi, lo = flat.clone(), flat.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    return float((hi - lo).max())


def gather_to_rank0(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's `payload` on rank 0, in rank order (one collective); [] on the others."""
    if not dist.is_initialized():
        return [payload]
    gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(payload, gathered, dst=0)
    return gathered or []


