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
    """Cores this process may run on: CPU affinity (cpusets, taskset, SLURM binding),
    further limited by a cgroup CPU quota (a container started with --cpus=2)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(cores, int(quota))) if quota else cores


def rank_threads(requested: int, ranks_per_node: int, cores: int | None = None) -> int:
    """Threads per rank: the requested count, else the node's usable cores shared by its
    ranks (at least 1). The one rule: the launcher judges oversubscription with it and
    the ranks set their thread counts with it."""
    return requested or max(1, (usable_cores() if cores is None else cores) // ranks_per_node)


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs allowed by this process's cgroup quota (v2 cpu.max, v1 cfs), None without one."""
    try:
        text = (root / "cpu.max").read_text().split()
        if text and text[0] != "max":
            return int(text[0]) / int(text[1])
        return None
    except (OSError, ValueError, IndexError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def loadavg() -> float | None:
    """The machine's 1-minute load average (None where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def machine_busy_s() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (all cores; /proc/stat)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal: busy = user + nice + system + steal.
    # Interrupt time is left out: it is no process's, and on one machine most of it is the
    # ranks' own loopback traffic (gloo over TCP), not another load. Steal is the hypervisor
    # running someone else on our cores: another load.
    user, nice, system, _idle, _iowait, _irq, _softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds of this process and its live children (DataLoader workers)."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:  # exited meanwhile
            pass
    return total


def cpu_snapshot() -> dict[str, Any]:
    """One rank's reading at the start or end of its timed steps (see `other_cpu`)."""
    return {"host": socket.gethostname(), "machine_busy_s": machine_busy_s(), "own_s": own_cpu_s()}


def other_cpu(readings: list[dict[str, Any]], timed_wall_s: float | None) -> dict[str, Any]:
    """CPU time other processes took while the ranks were timed: per host, the machine's
    busy time minus the ranks' own, from each rank's start and end snapshots. other_cpu_frac
    is that time over the cores' capacity during the timed wall time (0: a quiet machine;
    0.5: half of the machine was busy with something else)."""
    hosts: dict[str, list[float]] = {}
    for r in readings:
        start, end = r.get("start"), r.get("end")
        if not start or not end or start["machine_busy_s"] is None or end["machine_busy_s"] is None:
            return {"other_cpu_s": None, "other_cpu_frac": None}
        busy, own = hosts.setdefault(start["host"], [0.0, 0.0])
        # Every rank of a host read the same machine counter: keep the widest window.
        hosts[start["host"]] = [max(busy, end["machine_busy_s"] - start["machine_busy_s"]), own + end["own_s"] - start["own_s"]]
    if not hosts or not timed_wall_s:
        return {"other_cpu_s": None, "other_cpu_frac": None}
    other = sum(max(0.0, busy - own) for busy, own in hosts.values())
    capacity = timed_wall_s * (os.cpu_count() or 1) * len(hosts)  # /proc/stat counts every core
    return {"other_cpu_s": round(other, 3), "other_cpu_frac": round(other / capacity, 4)}


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
