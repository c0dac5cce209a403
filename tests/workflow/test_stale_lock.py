"""A snakemake killed with SIGKILL mid-grid leaves its lock; `ddpbench status
--unlock-stale` (what scripts/main.sh runs before snakemake) refuses to touch it while
that snakemake lives, names its PID, and removes it once the process is gone, after which
snakemake plans again without LockException."""

import os
import shutil
import signal
import subprocess
import sys
import time

from ddpbench.plan import status

from test_workflow import ROOT, TINY


def test_lock_of_a_killed_snakemake_is_removed_a_live_ones_kept(tmp_path):
    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    args = ["--snakefile", str(ROOT / "Snakefile"), "--configfile", str(TINY), "--cores", "1"]
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.Popen(
        [sys.executable, "-m", "snakemake", *args], cwd=tmp_path, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not status.lock_files(tmp_path) and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.lock_files(tmp_path), "snakemake never locked its directory"
        assert status.live_snakemakes(tmp_path) == [run.pid]
        held = subprocess.run(
            [sys.executable, "-m", "ddpbench.plan.status", "--unlock-stale", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True,
        )  # fmt: skip
        assert held.returncode == 1 and f"PID {run.pid}" in held.stderr, held.stderr
        assert status.lock_files(tmp_path)
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # snakemake and whatever job it had started
        run.wait()
    assert status.lock_files(tmp_path)  # what the next run would stop at
    freed = subprocess.run(
        [sys.executable, "-m", "ddpbench.plan.status", "--unlock-stale", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert freed.returncode == 0, freed.stdout + freed.stderr
    lines = freed.stdout.strip().splitlines()
    assert len(lines) == 1 and "stale lock" in lines[0], freed.stdout
    assert not status.lock_files(tmp_path)
    plan = subprocess.run(
        [sys.executable, "-m", "snakemake", *args, "-n", "--quiet", "rules"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert plan.returncode == 0 and "LockException" not in plan.stderr, plan.stderr[-3000:]
