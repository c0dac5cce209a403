"""The tiny grid through profiles/slurm on a real one-node SLURM cluster on localhost.

On request (marker `slurm`; root; installs slurm-wlm and munge with apt-get if missing):
    bash scripts/test_cluster.sh slurm
scripts/slurm_cluster.sh starts munged, slurmctld and slurmd; the fixture stops every
daemon it started, by process id, whatever the tests did.
"""

import csv
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
pytestmark = pytest.mark.slurm

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm_cluster.sh"
TINY = ROOT / "configs" / "tiny.yaml"
CONF = pathlib.Path("/etc/slurm/slurm.conf")
MARKER = "# written by ddpbench scripts/slurm_cluster.sh"


def _env(state_dir):
    path = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, "PATH": path, "DDPBENCH_SLURM_DIR": str(state_dir)}


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("a local SLURM cluster needs root")
    if CONF.exists() and not CONF.read_text().startswith(MARKER):
        pytest.skip(f"{CONF} belongs to another SLURM installation")
    state = tmp_path_factory.mktemp("slurm-state")
    env = _env(state)
    try:
        start = subprocess.run(["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=600)
        if start.returncode != 0:
            if shutil.which("slurmctld") is None:
                pytest.skip(f"slurm-wlm could not be installed: {start.stderr[-2000:]}")
            pytest.fail(f"cluster did not start:\n{start.stderr[-4000:]}")
        yield env
    finally:
        pids = {p.stem: int(p.read_text()) for p in state.glob("*.ourpid")}
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, text=True, timeout=120)
        alive = [name for name, pid in pids.items() if pathlib.Path(f"/proc/{pid}").exists()]
        assert not alive, f"daemons still running after stop: {alive}"
        assert not (CONF.exists() and CONF.read_text().startswith(MARKER))


def test_trivial_sbatch(slurm_cluster, tmp_path):
    out = tmp_path / "job.out"
    proc = subprocess.run(
        ["sbatch", "--wait", "--parsable", "-t", "1", "-c", "1", "--mem", "100", "-o", str(out),
         "--wrap", "srun -n1 hostname"],
        env=slurm_cluster, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().strip() == subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()


def planned_train_jobs(cmd, cwd, env):
    """How many train jobs the grid has (the workflow's own dry run: exclusions applied)."""
    proc = subprocess.run([*cmd, "--dry-run", "--quiet", "rules"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.search(r"^train\s+(\d+)\s*$", proc.stdout + "\n" + proc.stderr, re.M)
    assert m, proc.stdout[-2000:] + proc.stderr[-2000:]
    return int(m.group(1))


def test_tiny_grid_through_slurm_profile(slurm_cluster, tmp_path):
    """snakemake --workflow-profile profiles/slurm --configfile configs/tiny.yaml: every
    cell is a SLURM job with its log collected, and runs.csv has a row per cell."""
    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    cmd = [
        sys.executable, "-m", "snakemake",
        "--snakefile", str(ROOT / "Snakefile"),
        "--directory", str(tmp_path),
        "--workflow-profile", str(ROOT / "profiles" / "slurm"),
        "--configfile", str(TINY),
    ]  # fmt: skip
    n_cells = planned_train_jobs(cmd, tmp_path, slurm_cluster)
    assert n_cells >= 2
    cmd += [
        # a test cluster answers at once: poll sooner than the profile's cluster defaults
        "--slurm-init-seconds-before-status-checks", "2",
        "--seconds-between-status-checks", "3",
        "results/tiny/aggregate/runs.csv",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env=slurm_cluster, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    log = proc.stdout + proc.stderr
    assert log.count("has been submitted with SLURM jobid") >= n_cells + 1  # + aggregate
    with open(tmp_path / "results/tiny/aggregate/runs.csv", newline="") as f:
        runs = list(csv.DictReader(f))
    assert len(runs) == n_cells
    summaries = sorted((tmp_path / "results/tiny/runs").rglob("summary.json"))
    assert sorted(r["run_dir"] for r in runs) == sorted(str(p.parent.relative_to(tmp_path)) for p in summaries)
    # every cell left a summary the workflow could use (none failed or timed out)
    assert all(r["status"] in ("ok", "skipped") for r in runs), [(r["run_dir"], r["reason"]) for r in runs]
    assert any(r["status"] == "ok" and int(r["world_size"]) >= 2 for r in runs)
    # SLURM's own log of every train job is collected (kept for successful jobs too)
    slurm_logs = list((tmp_path / "results/logs/slurm/rule_train").rglob("*.log"))
    assert len(slurm_logs) == n_cells

