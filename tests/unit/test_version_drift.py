"""The versions pinned by the images, envs/*.yaml, the bootstrap script and uv.lock agree.

One lock (uv.lock) is the source of every installed version; these tests fail as soon
as a Dockerfile, a conda environment or the bootstrap pins something else.
"""

import importlib.util
import pathlib
import re
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((ROOT / "containers").glob("*.Dockerfile"))
ENV_FILES = sorted((ROOT / "envs").glob("*.yaml"))
LOCK = tomllib.loads((ROOT / "uv.lock").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _sync_envs():
    spec = importlib.util.spec_from_file_location("sync_envs", ROOT / "scripts" / "sync_envs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


sync_envs = _sync_envs()


def dockerfile_args(path):
    """ARG NAME=default lines of a Dockerfile."""
    return dict(re.findall(r"^ARG\s+(\w+)=(\S*)", path.read_text(), flags=re.M))


def bootstrap_uv_version():
    m = re.search(r"^UV_VERSION=(\S+)", (ROOT / "scripts" / "bootstrap.sh").read_text(), re.M)
    return m.group(1)


def locked_versions():
    out = {}
    for pkg in LOCK["package"]:
        out.setdefault(pkg["name"], set()).add(pkg["version"])
    return out


def test_both_images_are_defined():
    assert {p.name for p in DOCKERFILES} >= {"cpu.Dockerfile", "cuda.Dockerfile"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_pins_uv_python_and_project_version(dockerfile):
    args = dockerfile_args(dockerfile)
    assert args["UV_VERSION"] == bootstrap_uv_version()
    assert args["PYTHON_VERSION"] == sync_envs.PYTHON
    name, tag = args["IMAGE_NAME"].split(":")
    assert name == "ddpbench-" + dockerfile.name.split(".")[0]
    assert tag == PYPROJECT["project"]["version"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_installs_exactly_the_lock(dockerfile):
    text = dockerfile.read_text()
    syncs = re.findall(r"uv sync ([^\n\\]*)", text)
    assert syncs, "no `uv sync` in " + dockerfile.name
    for flags in syncs:
        assert "--locked" in flags.split() and "--no-dev" in flags.split(), flags
    assert re.search(r"^COPY .*\buv\.lock\b", text, re.M)
    # pip installs the pinned uv and nothing else.
    for line in re.findall(r"pip install[^\n]*", text):
        assert line.endswith('"uv==${UV_VERSION}" \\'), line
    # No downloaded interpreter: the Python is the base's, pinned by PYTHON_VERSION.
    assert "UV_PYTHON_DOWNLOADS=never" in text
    assert "UV_PYTHON=/usr/bin/python${PYTHON_VERSION}" in text


def test_cpu_base_is_debian_bookworm_whose_python_is_311():
    args = dockerfile_args(ROOT / "containers" / "cpu.Dockerfile")
    assert args["BASE_IMAGE"].endswith("debian:bookworm-slim")
    build = (ROOT / "containers" / "build.sh").read_text()
    assert re.search(r"^SUITE=bookworm$", build, re.M)
    assert sync_envs.PYTHON == "3.11"  # bookworm's python3


def test_cuda_base_is_official_and_matches_torch_cuda_major():
    base = dockerfile_args(ROOT / "containers" / "cuda.Dockerfile")["BASE_IMAGE"]
    m = re.fullmatch(r"(docker\.io/)?nvidia/cuda:(\d+)\.\d+\.\d+-(base|runtime)-ubuntu22\.04", base)
    assert m, base
    runtime = locked_versions()["nvidia-cuda-runtime"]
    assert {v.split(".")[0] for v in runtime} == {m.group(2)}


def test_images_python_picks_one_lock_branch():
    """The lock forks on python 3.12; the images and envs sit on the 3.11 branch."""
    assert tomllib.loads((ROOT / "uv.lock").read_text())["requires-python"] == ">=3.11"
    closure = sync_envs.locked_closure()
    closure_312 = sync_envs.locked_closure(env={"python_full_version": "3.12.3", "python_version": "3.12"})
    assert closure != closure_312  # why the Python minor is pinned at all


def test_envs_exist_and_match_the_lock():
    assert ENV_FILES, "envs/*.yaml missing: run scripts/sync_envs.py"
    assert sync_envs.main(["--check"]) == 0


@pytest.mark.parametrize("env_file", ENV_FILES, ids=lambda p: p.name)
def test_env_pins_equal_lock_versions(env_file):
    python, pins = sync_envs.env_file_pins(env_file)
    assert python == sync_envs.PYTHON
    locked = locked_versions()
    for name, version in pins.items():
        assert version in locked.get(name, ()), f"{env_file.name}: {name}=={version} not in uv.lock"
    assert pins == sync_envs.locked_closure()
    for key in ("torch", "torchvision", "snakemake", "pandas", "numpy"):
        assert key in pins


def test_closure_matches_the_projects_direct_dependencies():
    closure = sync_envs.locked_closure()
    for req in PYPROJECT["project"]["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower()
        assert name in closure, name
    for dev in PYPROJECT["dependency-groups"]["dev"]:
        name = re.match(r"[A-Za-z0-9_.-]+", dev).group(0).lower()
        assert name not in closure, f"dev-only {name} leaked into the runtime set"
