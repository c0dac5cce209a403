"""The CPU image builds without any registry and runs a smoke cell (slow: on request).

    pytest -m container            # or: bash containers/build.sh

Runs `containers/build.sh --cuda-standin` (debootstrap base once, podman build —
cached layers make a rebuild take seconds — then a world-size-2 smoke cell inside the
CPU image, and the same for cuda.Dockerfile built on the local base), then checks the
summaries and that the image holds exactly the lock's versions. Not part of the
default test command (scripts/test.sh deselects the `container` marker).
"""

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.container

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "containers" / "build"
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]


def _version():
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


IMAGE = f"ddpbench-cpu:{_version()}"


@pytest.fixture(scope="module")
def built():
    if shutil.which("podman") is None and os.geteuid() != 0:
        pytest.skip("podman missing and not root (build.sh installs it with apt-get as root)")
    proc = subprocess.run(
        ["bash", "containers/build.sh", "--cuda-standin"], cwd=ROOT, capture_output=True, text=True, timeout=3600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.parametrize("image", [IMAGE, f"ddpbench-cuda-standin:{_version()}"])
def test_smoke_cell_summary_is_ok_and_names_the_image(built, image):
    """The CPU image, and cuda.Dockerfile built on the local base (all of it but the base)."""
    name = image.split(":")[0]
    digest = (BUILD / f"{name}.digest").read_text().strip()
    summary = json.loads((BUILD / f"smoke-{name}" / "summary.json").read_text())
    assert summary["status"] == "ok", summary.get("reason")
    assert summary["world_size"] == 2
    assert summary["samples_per_s"] > 0
    assert summary["env"]["container_image"] == f"{image}@{digest}"
    assert summary["env"]["python"].startswith("3.11")
    assert summary["env"]["torch"].startswith("2.15.0")
    for rank in (0, 1):
        assert (BUILD / f"smoke-{name}" / f"steps_rank{rank}.csv").exists()
    assert f"smoke ok: {image}@{digest}" in built.stderr


def test_image_holds_exactly_the_locked_versions(built):
    spec = importlib.util.spec_from_file_location("sync_envs", ROOT / "scripts" / "sync_envs.py")
    sync_envs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sync_envs)
    code = (
        "import importlib.metadata as m, json, re;"
        "print(json.dumps({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version"
        " for d in m.distributions()}))"
    )
    out = subprocess.run(
        [*PODMAN, "run", "--rm", "--network=none", "--ulimit", "nofile=1024:1024",
         "--ulimit", "nproc=1024:1024", f"localhost/{IMAGE}", "python", "-c", code],
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout
    installed = json.loads(out)
    assert installed.pop("ddpbench") == _version()
    installed.pop("pip", None)  # the venv's own seed package, if any
    assert installed == sync_envs.locked_closure()


def test_workflow_train_rule_runs_in_the_image(built, tmp_path):
    """`snakemake --use-singularity` on the tiny grid: every job in the CPU image.

    Apptainer is not packaged here, so tests/container/apptainer_shim.sh stands in
    for it (Snakemake's `apptainer exec` -> `podman run`); the ".sif" is a text file
    naming the podman image. Checks the workflow's `container:` wiring and that every
    row of runs.csv names the image, with the .sif checksum as its digest."""
    if not (ROOT / "configs" / "tiny.yaml").exists() or not (ROOT / "workflow" / "rules" / "train.smk").exists():
        pytest.skip("the workflow (configs/tiny.yaml, train rule) is not in this checkout")
    import csv
    import hashlib
    import sys

    work = tmp_path / "repo"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (ROOT / rel).is_file():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, work / rel)
    sif = work / "containers" / "ddpbench-cpu.sif"
    sif.write_text(f"localhost/{IMAGE}\n")
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    shutil.copy2(ROOT / "tests" / "container" / "apptainer_shim.sh", shim_dir / "apptainer")
    env = {**os.environ, "PATH": f"{shim_dir}:{pathlib.Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(
        ["snakemake", "results/aggregate/runs.csv", "--configfile", "configs/tiny.yaml", "--cores", "2",
         "--use-singularity", "--config", "images={cpu: containers/ddpbench-cpu.sif}"],
        cwd=work, env=env, capture_output=True, text=True, timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Activating singularity image containers/ddpbench-cpu.sif" in proc.stderr
    rows = list(csv.DictReader((work / "results" / "aggregate" / "runs.csv").open()))
    assert rows and {r["status"] for r in rows} <= {"ok", "skipped"}
    assert "ok" in {r["status"] for r in rows}
    digest = "sha256:" + hashlib.sha256(sif.read_bytes()).hexdigest()
    assert {r["env_container_image"] for r in rows} == {f"{IMAGE}@{digest}"}
    assert {r["env_python"] for r in rows} == {"3.11.2"}  # bookworm's, not the host's
