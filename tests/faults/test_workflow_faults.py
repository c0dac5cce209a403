"""Snakemake stopped mid-grid: no cell keeps running, and the next run (after
`ddpbench.plan.status --unlock-stale`, what scripts/main.sh does first) measures every run
exactly once, keeping the runs finished before.

SIGTERM is Snakemake's graceful stop (it finishes the cells in flight, then exits);
Ctrl-C (SIGINT to the foreground process group, Snakemake and its jobs' launchers) stops
them now; SIGKILL (as a power loss or the OOM killer would) gives
Snakemake no say: the launcher, exec'd by the job, stops its cell when its parent dies.
For the last two, the in-flight cell's rank 1 hangs, so a cell left behind would outlive
the test's wait."""

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from test_faults import assert_no_process_left, processes_of

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
RESULTS = "results/tiny"
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def snakemake_args(workdir: Path) -> list[str]:
    return ["--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir), "--configfile", str(workdir / "grid.yaml"),
            "--cores", "2"]  # fmt: skip


def in_flight(workdir: Path) -> bool:
    """A two-rank cell has started (its rank 1 beats) and is not done."""
    runs = workdir / RESULTS / "runs"
    started = {p.parent for p in runs.rglob("heartbeat_rank1")}
    done = {p.parent for p in runs.rglob("summary.json")}
    return bool(started - done)


@pytest.mark.parametrize(
    ("sig", "hang"), [(signal.SIGTERM, False), (signal.SIGINT, True), (signal.SIGKILL, True)], ids=["sigterm", "sigint", "sigkill"]
)
def test_snakemake_stopped_mid_grid_leaves_nothing_running_and_a_rerun_completes_the_grid(tmp_path, sig, hang):
    config = yaml.safe_load(TINY.read_text())
    # The tiny grid (single, ddp at 1 and 2 ranks), runs of a few seconds; a hanging rank
    # waits timeout_s 30, longer than the wait for the processes to go.
    config["timing"]["timeout_s"] = 30
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    cmd = [sys.executable, "-m", "snakemake", *snakemake_args(tmp_path), "--until", "aggregate"]
    env = {**ENV, "DDPBENCH_INJECT": "hang:1:3"} if hang else ENV
    run = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 240
    while not in_flight(tmp_path) and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run.poll() is None and in_flight(tmp_path), "the grid never had a cell in flight"
    time.sleep(1)
    finished = {p: p.stat().st_mtime_ns for p in (tmp_path / RESULTS / "runs").rglob("summary.json")}
    if sig == signal.SIGINT:
        os.killpg(run.pid, sig)  # Ctrl-C: the terminal signals the whole foreground group
    else:
        run.send_signal(sig)
    try:
        run.wait(timeout=60)
    except subprocess.TimeoutExpired:
        left = processes_of(tmp_path)
        os.killpg(run.pid, signal.SIGKILL)
        pytest.fail(f"snakemake still running 60 s after {sig.name}; processes in the workflow's folder: {left}")
    assert_no_process_left(tmp_path, within_s=15)

    unlock = subprocess.run([sys.executable, "-m", "ddpbench.plan.status", "--unlock-stale", *snakemake_args(tmp_path)],
                            cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert unlock.returncode == 0, unlock.stdout + unlock.stderr
    rerun = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-5000:]
    with open(tmp_path / RESULTS / "aggregate" / "runs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and len({r["run_dir"] for r in rows}) == 3  # every cell once
    assert {r["status"] for r in rows} <= {"ok", "skipped"}, [(r["run_dir"], r["reason"]) for r in rows]
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # the runs done before were kept
