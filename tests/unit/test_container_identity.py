"""ddpbench.core.container.image_identity(): name from the image, digest from the runtime."""

import pytest

from ddpbench.core import container

pytestmark = pytest.mark.unit

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(autouse=True)
def no_containerenv(tmp_path, monkeypatch):
    monkeypatch.setattr(container, "CONTAINERENV", tmp_path / "absent")


def test_outside_any_container_is_none():
    assert container.image_identity({}) is None


def test_name_and_digest_from_env():
    env = {"DDPBENCH_CONTAINER_IMAGE": "ddpbench-cpu:0.1.0", "DDPBENCH_CONTAINER_DIGEST": DIGEST[7:]}
    assert container.image_identity(env) == f"ddpbench-cpu:0.1.0@{DIGEST}"


def test_name_that_already_carries_a_digest_is_kept():
    ref = f"ddpbench-cpu:0.1.0@{DIGEST}"
    assert container.image_identity({"DDPBENCH_CONTAINER_IMAGE": ref, "DDPBENCH_CONTAINER_DIGEST": DIGEST}) == ref


def test_bad_digest_is_ignored():
    env = {"DDPBENCH_CONTAINER_IMAGE": "x:1", "DDPBENCH_CONTAINER_DIGEST": "latest"}
    assert container.image_identity(env) == "x:1"


def test_podman_containerenv(tmp_path, monkeypatch):
    f = tmp_path / ".containerenv"
    f.write_text(f'engine="podman-4.3.1"\nimage="localhost/ddpbench-cpu:0.1.0"\nimageid="{DIGEST[7:]}"\n')
    monkeypatch.setattr(container, "CONTAINERENV", f)
    assert container.image_identity({}) == f"localhost/ddpbench-cpu:0.1.0@{DIGEST}"


def test_sif_checksum_is_computed_once_and_cached(tmp_path):
    import hashlib

    sif = tmp_path / "ddpbench-cpu.sif"
    sif.write_bytes(b"SIF" * 1000)
    want = "sha256:" + hashlib.sha256(sif.read_bytes()).hexdigest()
    env = {"APPTAINER_CONTAINER": str(sif), "DDPBENCH_CONTAINER_IMAGE": "ddpbench-cpu:0.1.0"}
    assert container.image_identity(env) == f"ddpbench-cpu:0.1.0@{want}"
    cache = tmp_path / "ddpbench-cpu.sif.sha256"
    assert cache.read_text().split()[-1] == want
    # The cache is trusted while size and mtime match ...
    key = cache.read_text().rsplit(" ", 1)[0]
    cache.write_text(f"{key} {DIGEST}\n")
    assert container.image_digest(env) == DIGEST
    # ... and ignored once the file changes.
    sif.write_bytes(b"other")
    assert container.image_digest(env) == "sha256:" + hashlib.sha256(b"other").hexdigest()


def test_sif_name_when_image_env_is_missing(tmp_path):
    sif = tmp_path / "abc.simg"
    sif.write_bytes(b"x")
    ident = container.image_identity({"SINGULARITY_CONTAINER": str(sif)})
    assert ident.startswith("abc.simg@sha256:")


def test_summary_env_carries_name_and_digest(monkeypatch):
    from ddpbench.core import sysinfo

    monkeypatch.setenv("DDPBENCH_CONTAINER_IMAGE", "ddpbench-cpu:0.1.0")
    monkeypatch.setenv("DDPBENCH_CONTAINER_DIGEST", DIGEST)
    assert sysinfo.environment(None, 1)["container_image"] == f"ddpbench-cpu:0.1.0@{DIGEST}"


def test_image_revision_only_for_the_images_installed_copy(monkeypatch):
    import pathlib
    import subprocess

    from ddpbench.core import sysinfo

    monkeypatch.delenv("DDPBENCH_GIT_COMMIT", raising=False)
    monkeypatch.setenv("DDPBENCH_IMAGE_REVISION", "abc123")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 128, "", "not a repo"))
    # A checkout whose git cannot be read: unknown, not the image's commit.
    assert sysinfo.git_commit() is None
    installed = pathlib.Path("/opt/ddpbench/.venv/lib/python3.11/site-packages/ddpbench")
    monkeypatch.setattr(sysinfo, "_package_dir", lambda: installed)
    assert sysinfo.git_commit() == "abc123"
