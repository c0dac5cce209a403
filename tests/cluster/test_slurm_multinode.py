"""A cell across two SLURM nodes on one machine: slurmd n0 and n1 in two network
namespaces (ddpbench.cluster.netlab), slurmctld with n0, `sbatch -N 2` running the launcher.

On request (markers `slurm` and `multinode`; root):
    bash scripts/test_cluster.sh all
The launcher, inside the 2-node allocation with --nnodes 2 and no endpoint, starts one
launcher per node with srun and a c10d rendezvous on n0's NodeAddr (ddpbench.cluster.slurm):
the path a train job with nodes: 2 takes under profiles/slurm.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from ddpbench.cluster import netlab

pytestmark = [pytest.mark.slurm, pytest.mark.multinode]

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm_cluster.sh"
CONF = pathlib.Path("/etc/slurm/slurm.conf")
MARKER = "# written by ddpbench scripts/slurm_cluster.sh"
CELL = (
    "--strategy allreduce --model mlp --synthetic-shape mnist --batch-size 32 --dataset-size 256"
    " --test-size 0 --max-steps 4 --warmup-steps 1 --threads-per-rank 1 --timeout-s 180"
)


@pytest.fixture(scope="module")
def two_node_slurm(tmp_path_factory):
    reason = netlab.available()
    if reason:
        pytest.skip(reason)
    if CONF.exists() and not CONF.read_text().startswith(MARKER):
        pytest.skip(f"{CONF} belongs to another SLURM installation")
    state = tmp_path_factory.mktemp("slurm2-state")
    lab = netlab.TwoNodeLab()
    env = dict(os.environ, DDPBENCH_SLURM_DIR=str(state))
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    try:
        lab.__enter__()
        env["DDPBENCH_SLURM_NODES"] = " ".join(
            f"n{i}:{addr}:{ns}" for i, (addr, ns) in enumerate(zip(lab.addresses, lab.namespaces))
        )
        start = subprocess.run(["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=600)
        assert start.returncode == 0, start.stderr[-4000:]
        yield lab, env
    finally:
        pids = {p.stem: int(p.read_text()) for p in state.glob("*.ourpid")}
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, text=True, timeout=120)
        lab.close()
        alive = [name for name, pid in pids.items() if pathlib.Path(f"/proc/{pid}").exists()]
        assert not alive, f"daemons still running after stop: {alive}"
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not any(ns in left for ns in lab.namespaces), left


def test_cell_across_two_slurm_nodes(two_node_slurm, tmp_path):
    lab, env = two_node_slurm
    out, log = tmp_path / "run", tmp_path / "job.log"
    job_env = dict(env, GLOO_SOCKET_IFNAME=lab.ifname)
    wrap = f"{sys.executable} -m ddpbench.run.launch --nproc-per-node 2 --nnodes 2 --out {out} {CELL}"
    proc = subprocess.run(
        ["nsenter", f"--net=/run/netns/{lab.namespaces[0]}", "sbatch", "--wait", "--parsable", "-N", "2", "-c", "2",
         "--mem", "2000", "-t", "10", "-o", str(log), "--wrap", wrap],
        env=job_env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    text = log.read_text() if log.exists() else ""
    assert proc.returncode == 0, proc.stderr + text[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok", summary["reason"] + text[-3000:]
    assert summary["world_size"] == 4 and summary["nodes"] == 2
    assert f"2 nodes n0,n1, rendezvous {lab.addresses[0]}:" in text
    assert (out / "train.log").exists() and (out / "train_node1.log").exists()
    assert len(list(out.glob("steps_rank*.csv"))) == 4
