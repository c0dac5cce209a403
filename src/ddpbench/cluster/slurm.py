"""Multi-node cells inside a SLURM allocation: one launcher per node, started with srun.

`ddpbench launch --nnodes N ...` without ``--rdzv-endpoint`` inside a SLURM job
(SLURM_JOB_ID set; profiles/slurm gives a train job ``nodes`` nodes) lands here: this
process runs on the allocation's first node, picks a free port there, and runs

    srun --overlap --nodes N --ntasks N --ntasks-per-node 1 --cpus-per-task C \\
        python -m ddpbench.cluster.slurm node -- <launch flags> --rdzv-endpoint ADDR:PORT

so every node runs ``ddpbench.run.launch --node-rank $SLURM_NODEID`` (torchrun with a c10d
rendezvous hosted by node 0 at its NodeAddr; ``--overlap`` because the Snakemake job step
that runs us already holds the CPUs). Node 0's launcher writes the summary; if none
appears (srun failed, a node never started), this process writes a failed one, so the
contract "a summary always exists" holds across nodes too.

Each node's torchrun is told its own address (PET_LOCAL_ADDR = the node's NodeAddr), and
node 0 that it hosts the rendezvous store (PET_RDZV_CONF is_host=1), unless the user set
these. Set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME for the interconnect as usual; srun
passes the environment on (--export=ALL).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from typing import Mapping, Sequence


def in_allocation(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return bool(env.get("SLURM_JOB_ID")) and shutil.which("srun") is not None


def job_hosts(env: Mapping[str, str] | None = None) -> list[str]:
    """The allocation's nodes in order (scontrol expands the compressed list)."""
    env = os.environ if env is None else env
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise RuntimeError("SLURM_JOB_NODELIST is not set: not inside a SLURM allocation")
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    return out.stdout.split()


def node_addr(node: str) -> str:
    """The address SLURM reaches a node at (its NodeAddr), else the node name."""
    proc = subprocess.run(["scontrol", "show", "node", node], capture_output=True, text=True)
    m = re.search(r"\bNodeAddr=(\S+)", proc.stdout)
    return m.group(1) if proc.returncode == 0 and m else node


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def srun_command(nnodes: int, cpus_per_node: int, launch_argv: Sequence[str], endpoint: str) -> list[str]:
    """One `ddpbench.cluster.slurm node` task per node of the allocation."""
    return [
        "srun", "--overlap", "--nodes", str(nnodes), "--ntasks", str(nnodes), "--ntasks-per-node", "1",
        "--cpus-per-task", str(max(1, cpus_per_node)), "--export=ALL", "--unbuffered",
        sys.executable, "-m", "ddpbench.cluster.slurm", "node", "--",
        *launch_argv, "--nnodes", str(nnodes), "--rdzv-endpoint", endpoint,
    ]  # fmt: skip


def launch_argv_without(argv: Sequence[str], drop: Sequence[str]) -> list[str]:
    """argv without the given options (and their values; both --opt v and --opt=v)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in drop:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def run_across_nodes(argv: Sequence[str], nnodes: int, nproc_per_node: int, threads_per_rank: int) -> int:
    """Run the launcher on every node of the allocation; return srun's exit code."""
    hosts = job_hosts()
    if len(hosts) < nnodes:
        raise RuntimeError(f"--nnodes {nnodes} but the SLURM allocation has {len(hosts)} node(s): {hosts}")
    endpoint = f"{node_addr(hosts[0])}:{free_port()}"
    cpus = nproc_per_node * max(1, threads_per_rank)
    cmd = srun_command(nnodes, cpus, launch_argv_without(argv, ("--nnodes", "--node-rank", "--rdzv-endpoint", "--log")), endpoint)
    print(f"[ddpbench] {nnodes} nodes {','.join(hosts[:nnodes])}, rendezvous {endpoint}", flush=True)
    return subprocess.run(cmd).returncode


def node_main(launch_argv: Sequence[str]) -> int:
    """On each node (an srun task): run the launcher as node $SLURM_NODEID."""
    rank = int(os.environ["SLURM_NODEID"])
    env = dict(os.environ)
    name = env.get("SLURMD_NODENAME")
    if name and "PET_LOCAL_ADDR" not in env:
        env["PET_LOCAL_ADDR"] = node_addr(name)  # torchrun --local-addr
    env.setdefault("PET_RDZV_CONF", f"is_host={1 if rank == 0 else 0}")  # node 0 hosts the store
    cmd = [sys.executable, "-m", "ddpbench.run.launch", *launch_argv, "--node-rank", str(rank)]
    return subprocess.run(cmd, env=env).returncode


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["node"]:
        rest = argv[1:]
        if rest[:1] == ["--"]:
            rest = rest[1:]
        return node_main(rest)
    print("usage: ddpbench slurm node -- <ddpbench launch flags>  (started by srun)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
