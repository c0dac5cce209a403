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
