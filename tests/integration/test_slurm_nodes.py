"""launch --nnodes 2 inside a (simulated) SLURM allocation: the srun path end to end.

Stand-ins for `srun` and `scontrol` on PATH play a 2-node allocation on this machine:
srun starts each task with SLURM_NODEID/SLURMD_NODENAME set, scontrol expands the node
list and reports NodeAddr 127.0.0.1. Everything of ddpbench's own runs for real: the
launcher's SLURM mode, one launcher per node, torchrun with a c10d rendezvous on node 0.
"""

import json
import os
import stat
import subprocess
import sys

FAKE_SRUN = r"""#!/usr/bin/env python3
import os, subprocess, sys
args = sys.argv[1:]
nodes = int(args[args.index("--nodes") + 1])
cmd = args[args.index("--unbuffered") + 1:]  # the command follows the last srun option
with open(os.environ["FAKE_SRUN_LOG"], "a") as f:
    f.write(" ".join(args) + "\n")
procs = [subprocess.Popen(cmd, env=dict(os.environ, SLURM_NODEID=str(i), SLURMD_NODENAME=f"n{i}")) for i in range(nodes)]
sys.exit(max(p.wait() for p in procs))
"""
FAKE_SCONTROL = r"""#!/bin/sh
case "$1 $2" in
  "show hostnames") echo n0; echo n1 ;;
  "show node") echo "NodeName=$3 Arch=x86_64"; echo "   NodeAddr=127.0.0.1 NodeHostName=$3" ;;
  *) exit 1 ;;
esac
"""


def _tool(folder, name, text):
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_two_node_cell_through_srun(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "srun", FAKE_SRUN)
    _tool(bin_dir, "scontrol", FAKE_SCONTROL)
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PET_"))}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env['PATH']}",
        SLURM_JOB_ID="42",
        SLURM_JOB_NODELIST="n[0-1]",
        FAKE_SRUN_LOG=str(tmp_path / "srun.log"),
        GLOO_SOCKET_IFNAME="lo",
    )
    cell = ["--strategy", "allreduce", "--model", "mlp", "--synthetic-shape", "mnist", "--batch-size", "16",
            "--dataset-size", "64", "--test-size", "0", "--max-steps", "3", "--warmup-steps", "1",
            "--threads-per-rank", "1", "--timeout-s", "120"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", "1", "--nnodes", "2", "--out", str(out), *cell],
        capture_output=True, text=True, env=env, timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok", summary["reason"]
    assert summary["world_size"] == 2 and summary["nodes"] == 2
    srun = (tmp_path / "srun.log").read_text()
    assert "--nodes 2 --ntasks 2 --ntasks-per-node 1" in srun and "--rdzv-endpoint 127.0.0.1:" in srun
    assert (out / "train.log").exists() and (out / "train_node1.log").exists()
    assert "[ddpbench] " in proc.stdout and ": ok " in proc.stdout
