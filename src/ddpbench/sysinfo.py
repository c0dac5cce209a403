"""Provenance: the environment block every summary.json carries (DESIGN.md, "Provenance")."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

from ddpbench.container import image_identity

ENV_PREFIXES = ("OMP_", "NCCL_", "GLOO_")


def usable_cores() -> int:
    """Cores this process may run on (respects affinity, cgroups via taskset, SLURM)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def git_commit() -> str | None:
    """The project's commit (+"-dirty" with uncommitted changes); DDPBENCH_GIT_COMMIT wins,
    for containers that carry no .git. Code outside a checkout (an image's installed copy)
    reports the commit the image was built from (DDPBENCH_IMAGE_REVISION)."""
    if os.environ.get("DDPBENCH_GIT_COMMIT"):
        return os.environ["DDPBENCH_GIT_COMMIT"]
    here = Path(__file__).resolve().parent
    # An image's own installed copy has no checkout: it reports the commit the image was
    # built from. A checkout whose git is unreadable (say, a worktree whose .git lies
    # outside the container's mounts) reports None rather than the image's commit.
    installed = "site-packages" in here.parts
    fallback = (os.environ.get("DDPBENCH_IMAGE_REVISION") or None) if installed else None
    try:
        run = lambda *a: subprocess.run(["git", *a], cwd=here, capture_output=True, text=True, timeout=10)  # noqa: E731
        head = run("rev-parse", "HEAD")
        if head.returncode != 0:
            return fallback
        dirty = run("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return fallback


def environment(backend: str | None, threads_per_rank: int | None) -> dict[str, Any]:
    import psutil
    import torch

    cuda = torch.cuda.is_available()
    nccl = None
    if cuda:
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # NCCL not built in
            nccl = None
    return {
        "host": socket.gethostname(),
        "cores": usable_cores(),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 2),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": importlib.metadata.version("torchvision"),  # without importing it
        "cuda": torch.version.cuda if cuda else None,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "nccl": nccl,
        "gpu_name": torch.cuda.get_device_name(0) if cuda else None,
        "backend": backend,
        "threads_per_rank": threads_per_rank,
        "env_vars": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "git_commit": git_commit(),
        "container_image": image_identity(),
    }
