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
import json
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


def in_flight(runs: Path) -> bool:
    """A two-rank cell has started (its rank 1 beats) and is not done."""
    started = {p.parent for p in runs.rglob("heartbeat_rank1")}
    done = {p.parent for p in runs.rglob("summary.json")}
    return bool(started - done)


def as_a_terminal_would() -> None:
    """Snakemake started as from a terminal's foreground: SIGINT and SIGQUIT at their defaults.
    A suite started in the background (`cmd &`) has them ignored, and the ignore is inherited
    by every process it starts: Ctrl-C would then reach no one."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def stop_mid_grid_then_rerun(tmp_path: Path, sig: signal.Signals, inject: str | None, cue) -> Path | None:
    """Run the tiny grid (single, ddp at 1 and 2 ranks) with DDPBENCH_INJECT=`inject`, send
    `sig` once `cue(runs)` names the run folder to stop (or True), check that nothing is left
    running, rerun after --unlock-stale and check that every cell was measured once, the
    runs finished before kept. Returns the folder `cue` named."""
    config = yaml.safe_load(TINY.read_text())
    # Runs of a few seconds; a hanging rank waits timeout_s 30, longer than the wait for the
    # processes to go.
    config["timing"]["timeout_s"] = 30
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    cmd = [sys.executable, "-m", "snakemake", *snakemake_args(tmp_path), "--until", "aggregate"]
    env = {**ENV, "DDPBENCH_INJECT": inject} if inject else ENV
    runs = tmp_path / RESULTS / "runs"
    first_log = tmp_path / "first_run.log"  # what the interrupted Snakemake said: in the failure message
    with open(first_log, "w") as log:
        run = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               preexec_fn=as_a_terminal_would)  # fmt: skip
    deadline = time.monotonic() + 240
    while not (stopped := cue(runs)) and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run.poll() is None and stopped, "the grid never reached the moment: " + first_log.read_text()[-3000:]
    time.sleep(1)
    # By content, not mtime: Snakemake touches a job's outputs after the job, so a cell that
    # finished within the second above may get a later mtime with the same record.
    finished = {p: p.read_bytes() for p in runs.rglob("summary.json") if p.parent != stopped}
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
    if isinstance(stopped, Path):  # the interrupted run is not recorded as measured
        assert not (stopped / "summary.json").exists(), (stopped / "summary.json").read_text()

    unlock = subprocess.run([sys.executable, "-m", "ddpbench.plan.status", "--unlock-stale", *snakemake_args(tmp_path)],
                            cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert unlock.returncode == 0, unlock.stdout + unlock.stderr
    rerun = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-5000:]
    with open(tmp_path / RESULTS / "aggregate" / "runs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and len({r["run_dir"] for r in rows}) == 3  # every cell once
    assert {r["status"] for r in rows} <= {"ok", "skipped"}, (
        [(r["run_dir"], r["reason"]) for r in rows], first_log.read_text()[-6000:])
    assert {p: p.read_bytes() for p in finished} == finished  # the runs done before were kept, not remeasured
    return stopped if isinstance(stopped, Path) else None


@pytest.mark.parametrize(
    ("sig", "hang"), [(signal.SIGTERM, False), (signal.SIGINT, True), (signal.SIGKILL, True)], ids=["sigterm", "sigint", "sigkill"]
)
def test_snakemake_stopped_mid_grid_leaves_nothing_running_and_a_rerun_completes_the_grid(tmp_path, sig, hang):
    # With `hang`, the in-flight cell's rank 1 is stuck inside a collective (rank 0 waits in it).
    stop_mid_grid_then_rerun(tmp_path, sig, "hang:1:3" if hang else None, in_flight)


def paused_run(runs: Path) -> Path | None:
    """The run folder a process paused in (faults.pause_point's cue), or None."""
    return next((p.parent for p in runs.rglob("paused_*")), None) if runs.exists() else None


# Where Ctrl-C can find a run: before the launcher's handlers exist, in the rendezvous, with the
# run measured but its summary not written, with torchrun gone but the summary not completed.
# (Inside a collective: the sigint case above.)
MOMENTS = ["launcher:start", "1:rendezvous", "0:summary", "launcher:finish"]


@pytest.mark.parametrize("moment", MOMENTS)
def test_ctrl_c_at_each_moment_of_a_run_leaves_it_to_the_rerun_which_measures_it_once(tmp_path, moment):
    stopped = stop_mid_grid_then_rerun(tmp_path, signal.SIGINT, f"pause:{moment}", paused_run)
    summary = json.loads((stopped / "summary.json").read_text())
    assert summary["status"] in ("ok", "skipped") and not list(stopped.glob("paused_*"))
