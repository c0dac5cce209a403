"""FSDP's whole parameters gathered through the CPU (`strategies.fsdp.gathered_through_cpu`, the
path `bare` takes with gloo on CUDA tensors, where DTensor.full_tensor() crashed) equal
DTensor.full_tensor()'s, at world size 3, for shapes that split unevenly, leave a rank an empty
piece, or are smaller than the world. Checked here on CPU, where both paths run."""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from ddpbench.strategies.fsdp import gathered_through_cpu, whole

WORLD = 3


def worker(rank: int, store: str, results) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))  # fmt: skip
    try:
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import DTensor

        torch.set_num_threads(1)
        torch.manual_seed(0)
        # weights of 7, 2 and 9 rows (pieces 3+3+1, 1+1+0, 3+3+3), biases of 7, 2 and 9
        model = nn.Sequential(nn.Linear(5, 7), nn.Linear(7, 2), nn.Linear(2, 9))
        fully_shard(model)
        checked = []
        for name, p in model.state_dict().items():
            assert isinstance(p, DTensor), name
            ours = gathered_through_cpu(p.to_local(), p.shape, p.device_mesh.get_group())
            torchs = p.full_tensor()
            assert torch.equal(ours, torchs), (name, ours, torchs)
            assert torch.equal(whole(p), torchs), name  # on CPU, whole() is full_tensor()
            checked.append((name, tuple(p.to_local().shape)))
        if rank == 2:
            results.put(checked)
    finally:
        dist.destroy_process_group()


def test_sharded_parameters_gathered_through_the_cpu_equal_full_tensor(tmp_path):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    mp.start_processes(worker, args=(str(tmp_path / "store"), results), nprocs=WORLD, join=True,
                       start_method="spawn")  # fmt: skip
    pieces = dict(results.get(timeout=5))
    assert len(pieces) == 6
    assert pieces["0.weight"] == (1, 5) and pieces["1.weight"] == (0, 7)  # the last rank's short and empty pieces
