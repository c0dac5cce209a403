"""ddpbench.cluster.slurm's command construction and launch's multi-node guard (no SLURM needed)."""

import subprocess
import sys

from ddpbench.cluster import slurm


def test_srun_runs_one_launcher_per_node_with_rendezvous_on_the_first():
    cmd = slurm.srun_command(3, 4, ["--nproc-per-node", "2", "--out", "d", "--model", "mlp"], "10.0.0.1:2345")
    assert cmd[:2] == ["srun", "--overlap"]
    for flag, value in (("--nodes", "3"), ("--ntasks", "3"), ("--ntasks-per-node", "1"), ("--cpus-per-task", "4")):
        assert cmd[cmd.index(flag) + 1] == value
    tail = cmd[cmd.index("ddpbench.cluster.slurm") :]
    assert tail[:3] == ["ddpbench.cluster.slurm", "node", "--"]
    assert tail[-4:] == ["--nnodes", "3", "--rdzv-endpoint", "10.0.0.1:2345"]


def test_node_options_are_dropped_before_they_are_set_again():
    argv = ["--nnodes", "2", "--out", "d", "--node-rank=1", "--rdzv-endpoint", "h:1", "--model", "mlp"]
    assert slurm.launch_argv_without(argv, ("--nnodes", "--node-rank", "--rdzv-endpoint")) == [
        "--out", "d", "--model", "mlp",
    ]  # fmt: skip


def test_multi_node_without_endpoint_or_allocation_is_refused(tmp_path):
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("SLURM_")}
    proc = subprocess.run(
        [sys.executable, "-m", "ddpbench.run.launch", "--nnodes", "2", "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--rdzv-endpoint" in proc.stderr and "SLURM" in proc.stderr
