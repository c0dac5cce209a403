"""Storage faults for real, on a tiny tmpfs: a disk that fills during a cell, a grid that
runs out of space, a read-only results folder, a damaged summary. Each is named where the
user looks (the terminal, with the path and the free space), leaves no temporaries, and a
rerun after the cause is gone completes the grid with every run exactly once.

Mounting needs root (as in CI); elsewhere these tests are skipped with that reason. The
disk is filled by another "program" (DDPBENCH_INJECT=fill:RANK:STEP writes the file
DDPBENCH_FILL names until the filesystem is full), so the failures are the kernel's own.
"""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_faults import FLAGS, assert_no_process_left

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
LEFT_BEHIND = (".*.tmp", ".ddpbench-probe-*")


@pytest.fixture
def tiny_fs(tmp_path):
    """A tmpfs of a given size at tmp_path/fs, unmounted afterwards."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tiny filesystem needs root")
    mounted = []

    def make(size: str, read_only: bool = False) -> Path:
        where = tmp_path / f"fs{len(mounted)}"
        where.mkdir()
        options = f"size={size}" + (",ro" if read_only else "")
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(where)
        return where

    yield make
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def litter(folder: Path) -> list[Path]:
    return [p for pattern in LEFT_BEHIND for p in folder.rglob(pattern)]


def test_a_disk_that_fills_during_a_cell_is_named_on_the_terminal_and_a_rerun_measures_it(tiny_fs):
    fs = tiny_fs("1m")
    out, log = fs / "run", fs / "launch.log"
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", "2", "--out", str(out), *FLAGS,
           "--strategy", "allreduce", "--log", str(log)]  # fmt: skip
    env = {**ENV, "DDPBENCH_INJECT": "fill:1:3", "DDPBENCH_FILL": str(fs / "filler")}
    full = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert full.returncode == 1, full.stdout + full.stderr  # nothing could be kept: the job fails
    said = full.stdout
    assert f"[ddpbench] {out}: failed (rank " in said and "could not write its files" in said, said
    assert "No space left on device" in said and f"0 B free of 1 MiB on {fs}" in said
    assert f"cannot write {out}/summary.json" in said and "free space and rerun" in said
    assert litter(fs) == []
    assert_no_process_left(out)

    (fs / "filler").unlink()  # space freed
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=ENV)
    assert again.returncode == 0 and f"[ddpbench] {out}: ok" in again.stdout, again.stdout + again.stderr
    assert json.loads((out / "summary.json").read_text())["status"] == "ok"
    assert litter(fs) == []


def snakemake(workdir: Path, *extra: str, env=ENV, verb: list[str] | None = None) -> subprocess.CompletedProcess:
    """Snakemake on the grid in `workdir`, or `ddpbench VERB` with the same snakemake arguments."""
    start = ["ddpbench", *verb] if verb else ["snakemake"]
    cmd = [sys.executable, "-m", *start, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
           "--profile", str(ROOT / "profiles" / "default"), "--configfile", str(workdir / "grid.yaml"), "--cores", "2",
           *extra]  # fmt: skip
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    proc.said = proc.stdout + proc.stderr
    return proc


def tiny_grid(workdir: Path, results: Path, **settings) -> None:
    config = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    config.update(results=str(results.relative_to(workdir)), **settings)
    (workdir / "grid.yaml").write_text(yaml.safe_dump(config))
    (workdir / "config.yaml").write_text((ROOT / "config.yaml").read_text())


def runs_table(results: Path) -> list[dict]:
    with open(results / "aggregate" / "runs.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_a_grid_on_a_full_disk_is_refused_then_named_then_completed_once_space_is_freed(tmp_path, tiny_fs):
    fs = tiny_fs("2m")
    results = fs / "results"
    tiny_grid(tmp_path, results)
    # 1. Before the first job: the estimate does not fit; both numbers named, nothing started.
    refused = snakemake(tmp_path)
    assert refused.returncode != 0
    assert re.search(r"has 2 MiB free on .*, the grid needs about [\d.]+ MiB \(3 run\(s\) to measure", refused.said), refused.said
    assert "allow_low_space=true" in refused.said and not (results / "runs").exists()

    # 2. Started anyway; the disk fills during the two-rank cell: every job that could not
    # write fails, and the workflow ends with one line naming the cause and what is kept.
    tiny_grid(tmp_path, results, allow_low_space=True)
    env = {**ENV, "DDPBENCH_INJECT": "fill:1:2", "DDPBENCH_FILL": str(fs / "filler")}
    full = snakemake(tmp_path, env=env)
    assert full.returncode != 0
    kept = len(list((results / "runs").rglob("summary.json")))
    assert f"ddpbench: {results.relative_to(tmp_path)}/ is full (0 B free of 2 MiB on {fs}): free space and rerun; " \
           f"{kept} of 3 runs are kept" in full.said, full.said[-4000:]  # fmt: skip
    assert "No space left on device" in full.said and kept < 3
    assert litter(fs) == []
    finished = {p: p.stat().st_mtime_ns for p in (results / "runs").rglob("summary.json")}

    # 3. Space freed: the rerun measures only what is missing, each run once, no litter.
    (fs / "filler").unlink()
    rerun = snakemake(tmp_path)
    assert rerun.returncode == 0, rerun.said[-4000:]
    assert "ddpbench plan: " in rerun.said  # the plan, before any run
    assert re.search(rf"\[{3 - kept}/{3 - kept} runs, [\d a-z]+ elapsed, done\]", rerun.said), rerun.said[-3000:]
    rows = runs_table(results)
    assert len(rows) == 3 and len({r["run_dir"] for r in rows}) == 3
    assert {r["status"] for r in rows} <= {"ok", "skipped"}, [(r["run_dir"], r["reason"]) for r in rows]
    assert {p: p.stat().st_mtime_ns for p in finished} == finished
    assert litter(fs) == []

    # 4. A damaged summary (cut short): aggregating it names it with its path as a failed row; the
    # workflow names it when read and changes nothing; `ddpbench status` lists it and `--rerun`
    # moves its folder aside (kept, under superseded/) and measures it again.
    damaged = next(p for p in (results / "runs").rglob("summary.json") if "world_size~2" in str(p))
    cut = damaged.read_text()[:100]
    damaged.write_text(cut)
    listed = subprocess.run([sys.executable, "-m", "ddpbench.results.aggregate", str(damaged), "--runs", str(tmp_path / "r.csv"),
                             "--steps", str(tmp_path / "s.csv")], capture_output=True, text=True, env=ENV)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    with open(tmp_path / "r.csv", newline="") as f:
        (row,) = csv.DictReader(f)
    assert row["status"] == "failed" and row["failure_kind"] == "damaged" and str(damaged.parent) in row["reason"]
    healed = snakemake(tmp_path, verb=["status", "--rerun"])
    assert healed.returncode == 0, healed.said[-4000:]
    assert re.search(r"damaged +" + re.escape(str(damaged.relative_to(tmp_path).parent)), healed.said), healed.said[-3000:]
    assert "moved 1 damaged run(s)" in healed.said
    (kept,) = (results / "superseded").rglob("summary.json")
    assert kept.read_text() == cut
    assert json.loads(damaged.read_text())["status"] == "ok"
    rows = runs_table(results)
    assert len(rows) == 3 and {r["status"] for r in rows} <= {"ok", "skipped"}
    assert litter(fs) == []


def test_a_read_only_results_folder_is_refused_before_any_job(tmp_path, tiny_fs):
    fs = tiny_fs("1m", read_only=True)
    tiny_grid(tmp_path, fs / "results")
    proc = snakemake(tmp_path)
    assert proc.returncode != 0
    assert f"{fs.relative_to(tmp_path)}/results/ cannot be written ({fs} is read-only" in proc.said, proc.said[-3000:]
    assert "nothing was started" in proc.said and "localrule train" not in proc.said
