"""How a single-node cell's processes find each other without anything another host can reach.

`torchrun --standalone` rendezvous through a TCPStore at `localhost:0`, and torch's TCPStore binds
every interface whatever host it is given, with no authentication: the agent unpickles the
rendezvous state it reads there, and the ranks' process group takes its peers' addresses from a
second such store. A pickle written into a running cell's store from another address ran code in
the agent as the benchmark's user (issue 69).

A cell on one node needs no network to meet, so it gets none (`private`):
- the agent's rendezvous is torch's own c10d rendezvous over a FileStore (`store_type=file`) in a
  folder only this user can enter (mkdtemp: mode 0700), and the agent shares no TCPStore with
  its ranks (TORCH_DISABLE_SHARE_RDZV_TCP_STORE);
- the ranks' process group is initialised from a second FileStore there (GROUP_STORE_ENV,
  ddpbench.run.rank.join_process_group), not from MASTER_ADDR:MASTER_PORT;
- gloo's and NCCL's own sockets bind the loopback interface only (GLOO_SOCKET_IFNAME,
  NCCL_SOCKET_IFNAME).
The folder is removed when the cell is over. Multi-node cells (SLURM, netlab) must listen where
their peers can reach them: they keep the c10d TCP rendezvous and need a trusted network
(docs/security.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

GROUP_STORE_ENV = "DDPBENCH_GROUP_STORE"  # the ranks' process-group FileStore (a private path)


@dataclass(frozen=True)
class Private:
    """The private folder's two stores: the agent's rendezvous and the ranks' process group."""

    folder: Path

    @property
    def rendezvous_file(self) -> Path:
        return self.folder / "rendezvous"

    @property
    def group_file(self) -> Path:
        return self.folder / "group"

    def torchrun_args(self) -> list[str]:
        """torchrun's rendezvous arguments: c10d over the private FileStore, one node."""
        return [
            "--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", str(self.rendezvous_file),
            "--rdzv-conf", "store_type=file", "--rdzv-id", uuid.uuid4().hex,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        """What the agent and its ranks need in their environment to meet only through the folder."""
        env = {GROUP_STORE_ENV: str(self.group_file), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
        loopback = loopback_interface()
        if loopback:
            env.update(GLOO_SOCKET_IFNAME=loopback, NCCL_SOCKET_IFNAME=loopback)
        return env


@contextlib.contextmanager
def private() -> Iterator[Private]:
    """A folder only this user can enter (mode 0700), for one cell's stores; removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="ddpbench-rdzv-"))
    try:
        yield Private(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def loopback_interface() -> str | None:
    """The loopback interface's name (Linux: lo; macOS: lo0), or None where none is listed."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((name for name in names if name.startswith("lo")), None)


def group_store(world: int):
    """The ranks' process-group store, when the cell meets privately (GROUP_STORE_ENV), else None
    (torch's env:// rendezvous: MASTER_ADDR and MASTER_PORT, as across nodes)."""
    path = os.environ.get(GROUP_STORE_ENV)
    if not path:
        return None
    import torch.distributed as dist

    return dist.FileStore(path, world)
