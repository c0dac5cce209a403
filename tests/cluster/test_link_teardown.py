"""A cell over a link, stopped mid-run, leaves nothing behind: no namespace, no veth end, no
process of the cell (the workflow stops a job with SIGTERM; a SIGKILLed launcher's nodes stop
with it and the next lab sweeps its namespaces).

On request (marker `multinode`; root; iproute2):
    bash scripts/test_cluster.sh multinode
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from ddpbench.cluster import netlab

pytestmark = pytest.mark.multinode

# Long enough to be stopped while the ranks train over the slow link.
CELL = [
    "--strategy", "allreduce", "--model", "mlp", "--synthetic-shape", "mnist", "--batch-size", "32",
    "--dataset-size", "512", "--test-size", "0", "--min-timed-s", "120", "--warmup-steps", "1",
    "--timeout-s", "300", "--link", "20mbit",
]  # fmt: skip


@pytest.fixture(autouse=True)
def needs_a_lab():
    reason = netlab.available()
    if reason:
        pytest.skip(reason)


def ours(pid: int) -> dict:
    """What a lab owned by `pid` could leave: namespaces, veth ends, processes of its run folder."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return {
        "namespaces": [line.split()[0] for line in ns.splitlines() if line.startswith(f"ddpb-{pid}-")],
        "veth": [word for word in links.split() if word.startswith(f"ddpb{pid}")],
    }


def cell_processes(out) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if str(out) in line and "ps -eo" not in line]


def start_cell(out):
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", "1", "--nnodes", "2", "--out", str(out), *CELL]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    # Training has begun when both nodes' ranks write heartbeats (ddpbench.run.diagnose).
    while not list(out.glob("heartbeat*")) or len(ours(proc.pid)["namespaces"]) < 2:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the cell did not start training"
        time.sleep(0.5)
    time.sleep(2)
    return proc


def wait_gone(out, limit_s=30):
    deadline = time.monotonic() + limit_s
    while cell_processes(out) and time.monotonic() < deadline:
        time.sleep(0.5)
    return cell_processes(out)


def test_sigterm_mid_run_tears_the_lab_down(tmp_path):
    out = tmp_path / "run"
    proc = start_cell(out)
    assert ours(proc.pid)["namespaces"], "no lab while the cell runs"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert ours(proc.pid) == {"namespaces": [], "veth": []}
    assert wait_gone(out) == []


def test_sigkill_mid_run_stops_the_nodes_and_the_next_lab_sweeps(tmp_path):
    out = tmp_path / "run"
    proc = start_cell(out)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert wait_gone(out) == [], "the nodes outlived their launcher"
    assert ours(proc.pid)["namespaces"], "expected the dead launcher's namespaces to be left for the sweep"
    swept = netlab.sweep_stale()
    assert ours(proc.pid) == {"namespaces": [], "veth": []}
    assert any(name.startswith(f"ddpb-{proc.pid}-") for name in swept)
