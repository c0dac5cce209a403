"""A cell across two "nodes": network namespaces joined by a veth pair (ddpbench.cluster.netlab).

On request (marker `multinode`; root; iproute2):
    bash scripts/test_cluster.sh multinode
Two namespaces at 198.18.0.1 and 198.18.0.2 (the benchmarking range), one core each,
torchrun --nnodes 2 --nproc-per-node 1 in each with the c10d rendezvous on the first, then the
same cell over a link shaped with tbf: the measured communication time must grow as the
rate falls. The namespaces are deleted in every case.
"""

import json
import subprocess

import pytest

from ddpbench.cluster import netlab

pytestmark = pytest.mark.multinode

# An MLP on 28x28 inputs: 0.54 M parameters, a 2.1 MB gradient all-reduced every step.
CELL = [
    "--strategy", "allreduce", "--model", "mlp", "--synthetic-shape", "mnist",
    "--batch-size", "32", "--dataset-size", "512", "--test-size", "0",
    "--max-steps", "6", "--warmup-steps", "1", "--timeout-s", "180",
]  # fmt: skip
LINKS = ["unshaped", "100mbit", "20mbit"]
MARGIN = 1.5  # each slower link must cost at least this factor more comm time per step


def namespaces():
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.fixture()
def lab():
    reason = netlab.available()
    if reason:
        pytest.skip(reason)
    lab = netlab.TwoNodeLab()
    try:
        lab.__enter__()
        yield lab
    finally:
        lab.close()
        left = namespaces()
        assert not any(ns in left for ns in lab.namespaces), left


def comm_per_step(summary):
    return summary["phase_comm_s"] / summary["timed_steps"]


def test_two_node_cell_and_shaped_link(lab, tmp_path):
    assert "tbf rate" not in " ".join(lab.qdisc())
    comm = {}
    for link in LINKS:
        summary = netlab.run_cell(tmp_path / link, link, nproc_per_node=1, cell_args=[*CELL, "--link", link],
                                  timeout_s=180, lab=lab)  # fmt: skip
        assert summary["status"] == "ok", summary.get("reason")
        assert summary["world_size"] == 2 and summary["nodes"] == 2
        assert summary["params"]["link"] == link
        recorded = json.loads((tmp_path / link / "summary.json").read_text())["extra"]
        assert recorded["link_rate_bps"] == netlab.Link(link).rate_bps
        if link != "unshaped":  # the probe measures the set rate (TCP over the bucket: a few % below)
            assert 0.9 < recorded["link_achieved_bps"] / recorded["link_rate_bps"] < 1.05, recorded
        assert len(list((tmp_path / link).glob("steps_rank*.csv"))) == 2
        if link != "unshaped":
            assert all(f"rate {link[:-4]}Mbit" in q for q in lab.qdisc()), lab.qdisc()
        comm[link] = comm_per_step(summary)
    print("comm time per step (s):", {k: round(v, 4) for k, v in comm.items()})
    for faster, slower in zip(LINKS, LINKS[1:]):
        assert comm[slower] > MARGIN * comm[faster], comm



def test_launcher_runs_a_link_cell_end_to_end(tmp_path):
    """What the train rule runs for a link cell: the launcher makes the lab, probes the link,
    runs both nodes, deletes the lab; the timeline spans all of it."""
    if netlab.available():
        pytest.skip(netlab.available())
    import subprocess as sp
    import sys

    before = set(namespaces().split())
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", "1", "--nnodes", "2", "--out", str(out),
           *CELL, "--link", "100mbit"]  # fmt: skip
    proc = sp.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "ok", s.get("reason")
    assert s["params"]["link"] == "100mbit" and s["world_size"] == 2 and s["nodes"] == 2
    assert 0.9 < s["extra"]["link_achieved_bps"] / 100e6 < 1.05, s["extra"]
    marks = list(s["timeline"].values())
    assert marks == sorted(marks) and list(s["timeline"])[0] == "launcher_start" and list(s["timeline"])[-1] == "launcher_exit"
    assert s["timeline_s"]["launcher"] > s["extra"]["link_probe_s"]  # the lab and the probe are the launcher's
    assert not {ns for ns in set(namespaces().split()) - before if ns.startswith("ddpb-")}
