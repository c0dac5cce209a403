"""The summary's env block: the locked torch/torchvision pair, and every provenance key
(docs/configuration.md, provenance) with a sensible value."""

import datetime
import json
import re
import shutil
import subprocess

import pytest

from ddpbench.core import sysinfo

pytestmark = pytest.mark.unit

HEX16 = re.compile(r"^[0-9a-f]{16}$")


def test_torchvision_resnet18_forward():
    import torch
    import torchvision

    model = torchvision.models.resnet18(num_classes=10).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10)
    assert torch.isfinite(out).all()
    # The pair comes from one release train: torchvision's minor follows torch's.
    assert int(torchvision.__version__.split(".")[1]) == int(torch.__version__.split(".")[1]) + 14


def parse_utc(text):
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", text), text
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)


def test_every_provenance_key_has_a_sensible_value(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    monkeypatch.setenv("SLURM_JOB_ID", "7")  # not a thread/device variable: not recorded
    monkeypatch.setenv("DDPBENCH_INJECT", "slow:0:20")  # an injected slowdown is recorded
    monkeypatch.delenv(sysinfo.LAUNCH_COMMAND_ENV, raising=False)
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    env = sysinfo.environment("gloo", 2, started=before.timestamp() - 5)
    after = datetime.datetime.now(datetime.timezone.utc)
    assert list(env) == list(sysinfo.PROVENANCE_KEYS)
    json.dumps(env)  # all of it goes into summary.json
    # Flat: runs.csv keeps scalar env keys (and env_vars) only.
    assert all(not isinstance(v, (dict, list)) for k, v in env.items() if k != "env_vars")
    assert env["env_vars"]["DDPBENCH_INJECT"] == "slow:0:20" and "SLURM_JOB_ID" not in env["env_vars"]

    started, ended = parse_utc(env["started_utc"]), parse_utc(env["ended_utc"])
    assert started == before - datetime.timedelta(seconds=5)
    assert before <= ended <= after
    assert env["cpu_model"] and env["os"] and env["kernel"]
    assert env["glibc"] is None or env["glibc"].startswith("glibc ")
    import numpy
    import torch

    assert env["torch"] == torch.__version__ and env["numpy"] == numpy.__version__
    for name in sysinfo.VERSIONED_PACKAGES:  # all locked dependencies of this venv
        assert env[name] and env[name][0].isdigit(), name
    assert HEX16.match(env["lock_hash"]) and HEX16.match(env["code_fingerprint"])
    assert env["off_lock"] == ""  # this venv is synced from uv.lock
    assert env["code_fingerprint"] == sysinfo.code_fingerprint()
    assert env["git_commit"] is None or re.match(r"^[0-9a-f]{40}(-dirty)?$", env["git_commit"])
    if env["git_commit"] and env["git_commit"].endswith("-dirty"):
        assert HEX16.match(env["git_diff_hash"])
    assert env["env_vars"]["CUDA_VISIBLE_DEVICES"] == "" and env["env_vars"]["MKL_NUM_THREADS"] == "1"
    assert "SLURM_JOB_ID" not in env["env_vars"]
    assert env["command"].startswith("python ")


def test_default_start_is_this_process_start():
    import psutil

    env = sysinfo.environment(None, 1)
    start = parse_utc(env["started_utc"]).timestamp()
    assert abs(start - psutil.Process().create_time()) < 1.5
    assert parse_utc(env["started_utc"]) <= parse_utc(env["ended_utc"])


def test_command_is_the_launchers_when_it_passed_one(monkeypatch):
    monkeypatch.setenv(sysinfo.LAUNCH_COMMAND_ENV, "python -m ddpbench launch --out x")
    assert sysinfo.environment(None, 1)["command"] == "python -m ddpbench launch --out x"
    assert sysinfo.environment(None, 1, command="given")["command"] == "given"
    monkeypatch.delenv(sysinfo.LAUNCH_COMMAND_ENV)
    monkeypatch.setattr("sys.argv", ["/x/src/ddpbench/run/train.py", "--out", "a b"])
    assert sysinfo.command_line() == "python -m ddpbench.run.train --out 'a b'"
    monkeypatch.setattr("sys.argv", ["/x/src/ddpbench/__main__.py", "train", "--out", "a b"])
    assert sysinfo.command_line() == "python -m ddpbench train --out 'a b'"


def test_environment_is_fast():
    import time

    sysinfo.environment(None, 1)  # torch imported, per-process caches filled
    took = []
    for _ in range(3):  # the best of three: a busy machine delays the git calls
        start = time.perf_counter()
        sysinfo.environment(None, 1)
        took.append(time.perf_counter() - start)
    assert min(took) < 0.2


def test_a_failing_lookup_gives_none_not_an_error(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("no")

    monkeypatch.setattr(sysinfo, "git_provenance", boom)
    monkeypatch.setattr(sysinfo, "cpu_model", boom)
    monkeypatch.setattr(sysinfo, "_cached_off_lock", boom)
    monkeypatch.setattr(sysinfo, "code_fingerprint", boom)
    env = sysinfo.environment(None, 1)
    assert env["git_commit"] is env["git_diff_hash"] is env["cpu_model"] is env["off_lock"] is None
    assert env["code_fingerprint"] is None and set(env) == set(sysinfo.PROVENANCE_KEYS)


# --- the lock -------------------------------------------------------------------------

LOCK = """version = 1
revision = 3
requires-python = ">=3.11"

[[package]]
name = "ddpbench"
version = "0.1.0"
source = { editable = "." }
dependencies = [
    { name = "torch" },
]

[[package]]
name = "Typing_Extensions"
version = "4.15.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "torch"
version = "{torch}"
source = { registry = "https://pypi.org/simple" }
wheels = [
    { url = "https://example.org/torch.whl", hash = "sha256:00" },
]

[package.optional-dependencies]
cuda = [
    { name = "nvidia-nccl-cu13" },
]

[[package]]
name = "nvidia-nccl-cu13"
version = "2.28.0"
source = { registry = "https://pypi.org/simple" }
"""


def fake_lock(tmp_path, torch):
    path = tmp_path / "uv.lock"
    path.write_text(LOCK.replace("{torch}", torch))
    return path


def test_off_lock_names_every_package_off_its_pin(tmp_path):
    lock = fake_lock(tmp_path, "2.15.0")
    installed = {"torch": "2.13.0+cpu", "typing-extensions": "4.15.0", "ddpbench": "9.9.9", "other": "1"}
    assert sysinfo.off_lock(lock, installed) == "torch 2.13.0+cpu (lock 2.15.0)"
    installed["typing-extensions"] = "4.14.0"  # the lock spells it Typing_Extensions
    assert sysinfo.off_lock(lock, installed) == (
        "torch 2.13.0+cpu (lock 2.15.0); typing-extensions 4.14.0 (lock 4.15.0)"
    )


def test_off_lock_accepts_a_local_label_the_lock_does_not_spell(tmp_path):
    installed = {"torch": "2.15.0+cu132", "typing-extensions": "4.15.0"}
    assert sysinfo.off_lock(fake_lock(tmp_path, "2.15.0"), installed) == ""
    # ... but a lock that pins the local version wants exactly that build.
    assert sysinfo.off_lock(fake_lock(tmp_path, "2.15.0+cpu"), installed) == "torch 2.15.0+cu132 (lock 2.15.0+cpu)"


def test_off_lock_with_the_real_lookup(tmp_path, monkeypatch):
    import importlib.metadata

    real = importlib.metadata.version("torch")
    lock = tmp_path / "uv.lock"
    torch_only = '[[package]]\nname = "torch"\nversion = "{v}"\nsource = {{ registry = "https://pypi.org/simple" }}\n'
    lock.write_text(torch_only.format(v=real))
    assert sysinfo.off_lock(lock) == ""
    lock.write_text(torch_only.format(v="0.0.1"))
    assert sysinfo.off_lock(lock) == f"torch {real} (lock 0.0.1)"
    monkeypatch.setattr(sysinfo, "installed_versions", lambda: {"torch": "2.13.0+cpu"})
    lock.write_text(torch_only.format(v="2.15.0"))
    assert sysinfo.off_lock(lock) == "torch 2.13.0+cpu (lock 2.15.0)"


def test_off_lock_on_this_venv_is_empty_and_none_without_a_lock(tmp_path):
    assert sysinfo.off_lock() == ""
    assert sysinfo.off_lock(tmp_path / "absent.lock") is None


def test_the_quick_lock_reading_equals_a_full_parse():
    import tomllib

    text = sysinfo.lock_path().read_text()
    full = [{k: p[k] for k in ("name", "version", "source") if k in p} for p in tomllib.loads(text)["package"]]
    assert sysinfo.lock_packages(text) == full
    names = [p["name"] for p in sysinfo.lock_packages(LOCK)]
    assert names == ["ddpbench", "Typing_Extensions", "torch", "nvidia-nccl-cu13"]


def test_installed_versions_read_the_metadata():
    import importlib.metadata

    installed = sysinfo.installed_versions()
    for name in ("torch", "numpy", "psutil", "typing-extensions"):
        assert installed[name] == importlib.metadata.version(name)


def test_lock_hash_from_the_file_else_the_environment(tmp_path, monkeypatch):
    import hashlib

    lock = fake_lock(tmp_path, "2.15.0")
    assert sysinfo.lock_hash(lock) == hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    assert sysinfo.lock_hash() == hashlib.sha256(sysinfo.lock_path().read_bytes()).hexdigest()[:16]
    # An installed copy with no uv.lock beside it or its venv: the image tells.
    monkeypatch.setattr(sysinfo, "lock_path", lambda: None)
    monkeypatch.setenv(sysinfo.LOCK_HASH_ENV, "feedfacefeedface")
    assert sysinfo.lock_hash() == "feedfacefeedface"
    monkeypatch.delenv(sysinfo.LOCK_HASH_ENV)
    assert sysinfo.lock_hash() is None and sysinfo.off_lock() is None


# --- the code -------------------------------------------------------------------------


def test_code_fingerprint_follows_the_source(tmp_path):
    pkg = tmp_path / "ddpbench"
    shutil.copytree(sysinfo._package_dir(), pkg, ignore=shutil.ignore_patterns("__pycache__"))
    first = sysinfo.code_fingerprint(pkg)
    assert HEX16.match(first)
    assert first == sysinfo.code_fingerprint()  # same files, same lock
    (pkg / "__pycache__").mkdir(exist_ok=True)
    (pkg / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (pkg / "notes.txt").write_text("not code")
    assert sysinfo.code_fingerprint(pkg) == first
    train = pkg / "run" / "train.py"
    train.write_text(train.read_text() + "\n# changed\n")
    changed = sysinfo.code_fingerprint(pkg)
    assert changed != first
    (pkg / "strategies" / "new_strategy.py").write_text("")
    assert sysinfo.code_fingerprint(pkg) not in (first, changed)
    # A renamed module is other code, even with the same contents.
    (pkg / "strategies" / "new_strategy.py").rename(pkg / "strategies" / "other.py")
    assert sysinfo.code_fingerprint(pkg) not in (first, changed)
    # A module that only reads results is not part of it: the report changes no run.
    before = sysinfo.code_fingerprint(pkg)
    for reader in ("report/build.py", "report/findings/__init__.py", "report/studies/__init__.py", "analysis/__init__.py"):
        (pkg / reader).write_text((pkg / reader).read_text() + "\n# changed\n")
        assert sysinfo.code_fingerprint(pkg) == before, reader
    # The lock is part of it.
    assert sysinfo.code_fingerprint(pkg, lock="0" * 16) != sysinfo.code_fingerprint(pkg, lock="1" * 16)


# --- git ------------------------------------------------------------------------------


def git(repo, *args):
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args],
        cwd=repo, check=True, capture_output=True,
    )  # fmt: skip


@pytest.fixture
def repo(tmp_path, monkeypatch):
    if shutil.which("git") is None:
        pytest.skip("no git")
    monkeypatch.delenv("DDPBENCH_GIT_COMMIT", raising=False)
    repo = tmp_path / "repo"
    (repo / "src" / "pkg").mkdir(parents=True)
    (repo / "src" / "pkg" / "a.py").write_text("a = 1\n")
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    return repo


def test_git_dirty_counts_untracked_files_but_not_ignored_ones(repo):
    pkg = repo / "src" / "pkg"
    commit, diff = sysinfo.git_provenance(pkg)
    assert re.fullmatch(r"[0-9a-f]{40}", commit) and diff is None  # clean
    assert sysinfo.git_commit(pkg) == commit and sysinfo.git_diff_hash(pkg) is None
    (pkg / "run.log").write_text("ignored\n")
    assert sysinfo.git_provenance(pkg) == (commit, None)

    (repo / "src" / "new_strategy.py").write_text("x = 1\n")  # untracked, outside cwd's folder
    dirty, untracked = sysinfo.git_provenance(pkg)
    assert dirty == commit + "-dirty" and HEX16.match(untracked)
    (repo / "src" / "new_strategy.py").write_text("x = 2\n")  # its contents count
    assert sysinfo.git_diff_hash(pkg) not in (None, untracked)
    (repo / "src" / "new_strategy.py").unlink()
    assert sysinfo.git_provenance(pkg) == (commit, None)

    (pkg / "a.py").write_text("a = 2\n")  # a tracked change
    modified = sysinfo.git_diff_hash(pkg)
    assert sysinfo.git_commit(pkg) == commit + "-dirty" and HEX16.match(modified)
    (pkg / "a.py").write_text("a = 3\n")
    assert sysinfo.git_diff_hash(pkg) != modified
    git(repo, "add", "src/pkg/a.py")  # staged or not: the same difference from HEAD
    assert sysinfo.git_commit(pkg) == commit + "-dirty"


def test_git_outside_a_repository_is_none(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert sysinfo.git_provenance(tmp_path) == (None, None)


def test_git_commit_from_the_environment_wins(monkeypatch):
    monkeypatch.setenv("DDPBENCH_GIT_COMMIT", "abc123-dirty")
    assert sysinfo.git_commit() == "abc123-dirty"
    assert sysinfo.environment(None, 1)["git_commit"] == "abc123-dirty"
