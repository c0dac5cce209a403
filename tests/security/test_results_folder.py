"""A received results folder cannot make the workflow write, move or delete outside itself
(issue 54, hole 2), and a dry run changes nothing in it.

A folder below the results root that is a symlink (aggregate/, superseded/, a run folder; to
an absolute or a relative target) is refused before anything is read, written or moved, with
the link named: the workflow, `snakemake -n` and `ddpbench.plan.status --rerun` all stop, and
the link's target is untouched. The results root itself may be a link (the user named it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ddpbench.core import safe_io
from ddpbench.plan.status import PLAN_ENV

ROOT = Path(__file__).resolve().parents[2]
RESULTS = "results/tiny"
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def workdir(tmp_path: Path) -> Path:
    """A folder set up to run the tiny grid (configs/tiny.yaml) with its results at results/tiny."""
    tmp_path.mkdir()
    (tmp_path / "grid.yaml").write_text((ROOT / "configs" / "tiny.yaml").read_text())
    (tmp_path / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    assert yaml.safe_load((tmp_path / "grid.yaml").read_text())["results"] == RESULTS
    return tmp_path


def snakemake_args(work: Path) -> list[str]:
    return ["--snakefile", str(ROOT / "Snakefile"), "--directory", str(work), "--configfile", str(work / "grid.yaml")]


def snakemake(work: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snakemake", *snakemake_args(work), *args], cwd=work, env=env or ENV,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def victim_folder(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "runs.csv").write_text("precious\n")
    (victim / "keep.txt").write_text("precious\n")
    return victim, {"runs.csv": "precious\n", "keep.txt": "precious\n"}


def unchanged(victim: Path, before: dict[str, str]) -> bool:
    return {p.name: p.read_text() for p in victim.iterdir()} == before


# Where a link can sit: a top-level folder the workflow writes (aggregate/, report/, design/,
# logs/), one it moves runs into (superseded/), a folder of the run tree; absolute or relative.
PLANTS = [("aggregate", False), ("aggregate", True), ("report", True), ("logs", False), ("design", True),
          ("peaks", False), ("data", True), ("runs/device~cpu", False), ("runs/device~cpu", True)]  # fmt: skip


@pytest.mark.parametrize(("where", "relative"), PLANTS, ids=[f"{w}-{'relative' if r else 'absolute'}" for w, r in PLANTS])
def test_a_linked_folder_in_the_results_folder_stops_the_workflow_before_anything_is_written(tmp_path, where, relative):
    work = workdir(tmp_path / "work")
    victim, before = victim_folder(tmp_path)
    link = work / RESULTS / where
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.relpath(victim, link.parent) if relative else victim, target_is_directory=True)
    for args in (["--cores", "2"], ["-n"]):
        proc = snakemake(work, *args)
        assert proc.returncode != 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        said = proc.stdout + proc.stderr
        assert "refusing to use the results folder" in said and str(link.relative_to(work)) in said, said[-3000:]
        assert unchanged(victim, before)
    assert not list((work / RESULTS).rglob("summary.json")), "a run was measured"


def planned_run(work: Path) -> Path:
    """The first run folder the workflow plans (its plan, as ddpbench.plan.status asks for it)."""
    plan = work.parent / "plan.json"
    proc = snakemake(work, "-n", "--quiet", "rules", env={**ENV, PLAN_ENV: str(plan)})
    assert proc.returncode == 0 and plan.is_file(), proc.stderr[-3000:]
    return work / sorted(json.loads(plan.read_text())["runs"])[0]


def test_status_rerun_moves_nothing_through_a_linked_superseded_folder(tmp_path):
    work = workdir(tmp_path / "work")
    victim, before = victim_folder(tmp_path)
    run = planned_run(work)
    run.mkdir(parents=True)
    (run / "summary.json").write_text('{"status": "ok", "env": {"code_fingerprint": "older code"}}')  # stale
    (work / RESULTS / "superseded").symlink_to("../../../victim", target_is_directory=True)
    assert (work / RESULTS / "superseded").resolve() == victim
    proc = subprocess.run([sys.executable, "-m", "ddpbench.plan.status", "--rerun", *snakemake_args(work), "--cores", "2"],
                          cwd=work, env=ENV, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode != 0 and "superseded" in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert unchanged(victim, before) and (run / "summary.json").exists()


def test_a_results_root_that_is_itself_a_link_is_the_users_choice(tmp_path):
    real = tmp_path / "scratch"
    (real / "runs" / "a").mkdir(parents=True)
    (tmp_path / "results").symlink_to(real, target_is_directory=True)
    safe_io.refuse_linked_folders(tmp_path / "results")  # no error
    (real / "runs" / "b").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(safe_io.UnsafePathError, match="runs/b"):
        safe_io.refuse_linked_folders(tmp_path / "results")


def test_reading_the_workflow_names_a_damaged_run_and_changes_nothing(tmp_path):
    """Issue 70, item 5: nothing is moved while the workflow is read, dry run or not (a real run
    would then measure the rest and list the damaged one as failed; `ddpbench status --rerun`
    measures it again: tests/faults/test_storage_faults.py)."""
    work = workdir(tmp_path / "work")
    run = planned_run(work)
    run.mkdir(parents=True)
    (run / "summary.json").write_text('{"status": "ok", "cut sh')

    def files() -> list[tuple[Path, int]]:
        return sorted((p.relative_to(work), p.stat().st_mtime_ns) for p in work.rglob("*") if ".snakemake" not in p.parts)

    before = files()
    proc = snakemake(work, "-n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stdout + proc.stderr
    assert "1 damaged run(s), listed as failed: `ddpbench status --rerun`" in said and str(run.relative_to(work)) in said
    assert files() == before


def test_the_workflow_refuses_a_fault_variable_without_the_opt_in(tmp_path):
    work = workdir(tmp_path / "work")
    env = {k: v for k, v in ENV.items() if k != "DDPBENCH_FAULTS"}
    proc = snakemake(work, "--cores", "2", env={**env, "DDPBENCH_FILL": str(tmp_path / "filler")})
    assert proc.returncode != 0 and "DDPBENCH_FILL is set" in proc.stdout + proc.stderr
    assert not (work / RESULTS / "runs").exists()
