"""Provenance: the environment block every summary.json carries (docs/configuration.md, provenance)."""

from __future__ import annotations

import datetime
import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import re
import shlex
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from ddpbench import PACKAGE_DIR, REPO_ROOT
from ddpbench.core import safe_io
from ddpbench.core.container import image_identity
from ddpbench.core import run_record
from ddpbench.core.run_record import ENV_VARS, Env

#: Environment variables recorded in env.env_vars: the ones that select threads and
#: devices or tune the communication libraries, and an injected fault or slowdown
#: (DDPBENCH_INJECT, DDPBENCH_FILL, and the opt-in DDPBENCH_FAULTS), so a comparison names it as what differs.
ENV_PREFIXES = ("OMP_", "MKL_", "KMP_", "OPENBLAS_", "TORCH_", "PYTORCH_", "CUDA_VISIBLE_DEVICES", "NCCL_", "GLOO_",
                "DDPBENCH_INJECT", "DDPBENCH_FILL", "DDPBENCH_FAULTS", "DDPBENCH_COMPILE_BACKEND")  # fmt: skip
#: Packages whose versions shape a number, recorded by their names (torch's is
#: torch.__version__, the others' from their metadata, without importing them).
VERSIONED_PACKAGES = ("torchvision", "numpy", "scipy", "pandas", "psutil", "matplotlib", "snakemake")
#: The launcher's command line, passed to the ranks (the rank writing the summary records it).
LAUNCH_COMMAND_ENV = "DDPBENCH_LAUNCH_COMMAND"
#: The launcher's timeline marks (JSON) to its ranks: rank 0's summary starts its timeline from them.
TIMELINE_ENV = "DDPBENCH_TIMELINE"
#: The lock's hash for a copy of ddpbench that has no uv.lock beside it.
LOCK_HASH_ENV = "DDPBENCH_LOCK_HASH"
#: The env fields a rank's run adds to `environment`'s (run.cell: the load, the user's model, the MFU's records).
RUN_ENV_FIELDS = {run_record.field(c) for c in (Env.user_model_digest, Env.loadavg_start, Env.loadavg_end,
                                                Env.other_cpu_s, Env.other_cpu_frac, Env.peak_flops, Env.flop_count)}  # fmt: skip
#: Every key of a summary's env block, whoever wrote it (a rank or the launcher): `environment`'s.
PROVENANCE_KEYS = (*(k for k in run_record.columns(Env) if k not in RUN_ENV_FIELDS), ENV_VARS)
# Which workflow invocation (job) a run belongs to: the workflow sets it once per `snakemake` call
# (workflow/rules/common.smk); runs started otherwise record null. Compare estimates the between-job
# noise from cells measured in several jobs (`--job-noise estimate`, docs/compare.md).
JOB_ID_ENV = "DDPBENCH_JOB_ID"


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


# The variables that size a BLAS or OpenMP thread pool. Snakemake sets each of them to the
# job's threads (all ranks together); every rank must see its own share in all of them.
def oversubscription(device: str, threads_per_rank: int, ranks_per_node: int, nodes: int, cores: int) -> str | None:
    """Why a cell would oversubscribe a node's cores, or None (also used by the workflow
    at plan time). CUDA ranks compute on GPUs, so they are exempt (their data-loader
    workers are not counted)."""
    if device != "cpu":
        return None
    threads = rank_threads(threads_per_rank, ranks_per_node, cores)
    if ranks_per_node * threads <= cores:
        return None
    ranks = f"{ranks_per_node} ranks{' per node' if nodes > 1 else ''}"
    return (
        f"oversubscribed: {ranks} x {threads} thread{'s' if threads > 1 else ''} = {ranks_per_node * threads}"
        f" > {cores} usable cores (set allow_oversubscribe: true to run it anyway)"
    )


THREAD_POOL_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


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


# Other processes took more than this share of the machine's CPU: the machine was busy. One threshold
# for a run (analysis.health), a measured peak (core.peaks) and the plan's estimate (plan.estimate),
# so that all three call the same spell busy.
BUSY_CPU_FRAC = 0.10


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
            return run_record.env(other_cpu_s=None, other_cpu_frac=None)
        busy, own = hosts.setdefault(start["host"], [0.0, 0.0])
        # Every rank of a host read the same machine counter: keep the widest window.
        hosts[start["host"]] = [max(busy, end["machine_busy_s"] - start["machine_busy_s"]), own + end["own_s"] - start["own_s"]]
    if not hosts or not timed_wall_s:
        return run_record.env(other_cpu_s=None, other_cpu_frac=None)
    other = sum(max(0.0, busy - own) for busy, own in hosts.values())
    capacity = timed_wall_s * (os.cpu_count() or 1) * len(hosts)  # /proc/stat counts every core
    return run_record.env(other_cpu_s=round(other, 3), other_cpu_frac=round(other / capacity, 4))


def utc_iso(epoch_s: float) -> str:
    """ISO 8601 UTC to the second with a Z: 2026-11-23T04:21:43Z."""
    return datetime.datetime.fromtimestamp(epoch_s, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def process_started() -> float:
    """When this process started (epoch seconds)."""
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:  # no psutil, no /proc: when this module was imported
        return _IMPORTED


_IMPORTED = time.time()


def _package_dir() -> Path:
    return PACKAGE_DIR


def _safe(fn, *args: Any) -> Any:
    """fn(*args), None if it raises: provenance never stops a run."""
    try:
        return fn(*args)
    except Exception:
        return None


@functools.cache
def cpu_model() -> str | None:
    """/proc/cpuinfo's first "model name", else platform.processor()."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


@functools.cache
def os_name() -> str:
    """PRETTY_NAME of /etc/os-release, else platform.platform()."""
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and key == "PRETTY_NAME":
                return shlex.split(value)[0] if value.strip() else platform.platform()
    except (OSError, ValueError, IndexError):
        pass
    return platform.platform()


@functools.cache
def glibc() -> str | None:
    lib, version = platform.libc_ver()
    return f"{lib} {version}".strip() if lib or version else None


#: Device nodes without which torch sees no GPU: NVIDIA's driver, Jetson's, ROCm's, WSL's.
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvmap", "/dev/kfd", "/dev/dxg")


def no_gpu_here() -> bool:
    """Whether torch certainly finds no GPU here (no GPU_DEVICE_NODES), told without importing
    torch (2 s): the launcher then records a CUDA cell as skipped without starting a rank."""
    return not any(os.path.exists(node) for node in GPU_DEVICE_NODES)


def cuda_unavailable(torch_version: str | None) -> str:
    """A CUDA cell's skip reason where torch finds no GPU (the ranks' and the launcher's)."""
    return f"device cuda requested but CUDA is not available here (torch {torch_version})"


def torch_version() -> str | None:
    """torch.__version__ (its local tag, e.g. +cu132, included), read from the torch/version.py
    that `import torch` would run, without importing torch where it is not imported yet."""
    if "torch" in sys.modules:
        return sys.modules["torch"].__version__
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    text = (Path(spec.submodule_search_locations[0]) / "version.py").read_text()
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return found.group(1) if found else None


def package_version(name: str) -> str | None:
    """An installed distribution's version, read from its metadata (nothing imported)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def lock_path() -> Path | None:
    """The project's uv.lock: at the checkout's root (src/ddpbench/../../uv.lock), else
    beside the virtual environment running this (an image's installed copy: the image
    syncs its .venv from the uv.lock next to it); None without one."""
    for candidate in (REPO_ROOT / "uv.lock", Path(sys.prefix).parent / "uv.lock"):
        if candidate.is_file():
            return candidate
    return None


def _file_hash(path: Path) -> str:
    return safe_io.sha256_file(path)[:16]


def lock_hash(path: Path | None = None) -> str | None:
    """sha256 (16 hex) of uv.lock; without one, DDPBENCH_LOCK_HASH (else None)."""
    path = lock_path() if path is None else path
    if path is not None and path.is_file():
        return _file_hash(path)
    return os.environ.get(LOCK_HASH_ENV) or None


_cached_lock_hash = functools.cache(lock_hash)


def normalise_name(name: str) -> str:
    """PEP 503: lowercase, runs of - _ . become one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_versions() -> dict[str, str]:
    """Normalised name -> version of every installed distribution (the first one found
    on sys.path wins, as for an import)."""
    out: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        # Only the headers: dist.metadata parses the whole file (readme included), which
        # takes ~2 ms a package.
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
        head = dict(_META_HEADER.findall(text.split("\n\n", 1)[0]))
        name, version = head.get("Name"), head.get("Version")
        if name and version:
            out.setdefault(normalise_name(name), version)
    return out


_META_HEADER = re.compile(r"^(Name|Version):[ \t]*(\S+)[ \t]*$", re.M)


def lock_packages(text: str) -> list[dict[str, Any]]:
    """uv.lock's [[package]] tables, their name, version and source. Parsing the whole
    lock (~400 kB) takes tomllib ~80 ms; its tables open with these keys on lines of
    their own, so only those lines are parsed (~4 ms), unless that fails to account for
    every table: then the whole file."""
    lines = [line for line in text.splitlines() if line == "[[package]]" or _LOCK_KEY.match(line)]
    try:
        packages = tomllib.loads("\n".join(lines)).get("package", [])
        if len(packages) == text.count("[[package]]") and all("name" in p for p in packages):
            return packages
    except tomllib.TOMLDecodeError:
        pass
    return tomllib.loads(text).get("package", [])


_LOCK_KEY = re.compile(r"(name|version|source) = ")


def off_lock(path: Path | None = None, installed: dict[str, str] | None = None) -> str | None:
    """Installed packages whose version differs from uv.lock's pin, "; "-joined
    ("torch 2.13.0+cpu (lock 2.15.0)"); "" when all agree, None without a lock. Packages
    the lock pins but that are not installed (another platform's, dev-only) and installed
    ones it does not pin are not compared; the project itself (editable) is skipped."""
    path = lock_path() if path is None else path
    if path is None or not path.is_file():
        return None
    pinned: dict[str, set[str]] = {}
    for pkg in lock_packages(path.read_text()):
        source = pkg.get("source", {})
        if "editable" in source or "virtual" in source or "version" not in pkg:
            continue  # the project itself
        pinned.setdefault(normalise_name(pkg["name"]), set()).add(str(pkg["version"]))
    installed = installed_versions() if installed is None else installed
    off = []
    for name in sorted(pinned.keys() & installed.keys()):
        versions, have = pinned[name], installed[name]
        # A local label ("+cu132", "+cpu") that the lock does not spell out names the
        # build the index served, not another release: compare the public version then.
        # Where the lock pins a local version, it must match in full.
        public = have.split("+")[0]
        if any(have == v or ("+" not in v and public == v) for v in versions):
            continue
        off.append(f"{name} {have} (lock {' or '.join(sorted(versions))})")
    return "; ".join(off)


_cached_off_lock = functools.cache(off_lock)  # once per process: the installed set is fixed


def code_fingerprint(root: Path | None = None, lock: str | None = None) -> str:
    """sha256 (16 hex) over the package's run-time source (every *.py under `root`, default
    this package's folder, in the MEASURED_PACKAGES; by relative path: the path and the
    contents) and the lock hash
    (`lock`, default the project's): "same code, same locked environment", without git."""
    if root is None and lock is None:
        return _cached_code_fingerprint()
    root = _package_dir() if root is None else Path(root)
    return _code_fingerprint(root, _cached_lock_hash() if lock is None else lock)


# The code that runs a cell, by folder (and the package's own __init__). What only plans,
# reads or renders results (plan/, results/, analysis/, report/, the command line cli.py and
# __main__.py) changes no measurement, so a change there is not "other code" for a run (the
# report is rebuilt from the runs anyway).
MEASURED_PACKAGES = ("core", "strategies", "run", "comm", "cluster")


def measured(rel: str) -> bool:
    """Whether the package file at relative path `rel` (posix) is part of the code fingerprint."""
    return rel == "__init__.py" or rel.split("/", 1)[0] in MEASURED_PACKAGES


def _code_fingerprint(root: Path, lock: str | None) -> str:
    h = hashlib.sha256()
    files = (p.relative_to(root).as_posix() for p in root.rglob("*.py") if p.is_file())
    for rel in sorted(f for f in files if measured(f)):
        h.update(rel.encode() + b"\0")
        h.update(hashlib.sha256((root / rel).read_bytes()).digest())
    h.update(b"lock\0" + (lock or "").encode())
    return h.hexdigest()[:16]


@functools.cache
def _cached_code_fingerprint() -> str:
    return _code_fingerprint(_package_dir(), _cached_lock_hash())


def git_provenance(cwd: Path | None = None) -> tuple[str | None, str | None]:
    """(git_commit, git_diff_hash) of the repository holding `cwd` (default: this
    package's folder). The commit gets "-dirty" when anything differs from HEAD,
    untracked files included (ignored ones not); the diff hash (sha256, 16 hex) covers
    `git diff HEAD` and every untracked file's path and contents, None when clean.
    DDPBENCH_GIT_COMMIT wins for the commit (containers that carry no .git); code outside
    a checkout (an image's installed copy) reports the commit the image was built from
    (DDPBENCH_IMAGE_REVISION)."""
    if cwd is None and os.environ.get("DDPBENCH_GIT_COMMIT"):
        return os.environ["DDPBENCH_GIT_COMMIT"], None
    here = _package_dir() if cwd is None else Path(cwd)
    # An image's own installed copy has no checkout: it reports the commit the image was
    # built from. A checkout whose git is unreadable (say, a worktree whose .git lies
    # outside the container's mounts) reports None rather than the image's commit.
    installed = "site-packages" in here.parts
    fallback = (os.environ.get("DDPBENCH_IMAGE_REVISION") or None) if installed else None
    head = _git(here, "rev-parse", "HEAD", "--show-toplevel")
    status = _git(here, "status", "--porcelain", "-z", "--untracked-files=all") if head else None
    if head is None or status is None or len(head.split()) < 2:
        return fallback, None
    commit, top = head.split()[0], Path(head.strip().split("\n", 1)[1])
    entries = [e for e in status.split("\0") if e]
    if not entries:
        return commit, None
    return commit + "-dirty", _diff_hash(top, [e[3:] for e in entries if e.startswith("?? ")])


def _diff_hash(top: Path, untracked: list[str]) -> str | None:
    diff = _git(top, "diff", "HEAD", "--binary", text=False)
    if diff is None:
        return None
    h = hashlib.sha256(diff)
    for rel in sorted(untracked):  # porcelain paths: relative to the top, whatever the cwd
        h.update(b"\0" + rel.encode() + b"\0")
        try:
            h.update(hashlib.sha256((top / rel).read_bytes()).digest())
        except OSError:  # gone meanwhile, or unreadable
            h.update(b"?")
    return h.hexdigest()[:16]


def _git(cwd: Path, *args: str, text: bool = True) -> Any:
    """stdout of a git command; None when git is missing or the command fails."""
    try:
        run = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=text, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return run.stdout if run.returncode == 0 else None


def git_commit(cwd: Path | None = None) -> str | None:
    return git_provenance(cwd)[0]


def git_diff_hash(cwd: Path | None = None) -> str | None:
    return git_provenance(cwd)[1]


def command_line() -> str:
    """The command that started this run: the launcher's (DDPBENCH_LAUNCH_COMMAND, set
    for its ranks), else this process's own (train run directly, under torchrun or not)."""
    if os.environ.get(LAUNCH_COMMAND_ENV):
        return os.environ[LAUNCH_COMMAND_ENV]
    argv = list(sys.argv)
    if argv and Path(argv[0]).name == "train.py" and Path(argv[0]).parent.name == "run":
        argv = ["-m", "ddpbench.run.train", *argv[1:]]  # how `-m ddpbench.run.train` shows in sys.argv
    elif argv and Path(argv[0]).name == "__main__.py" and Path(argv[0]).parent.name == "ddpbench":
        argv = ["-m", "ddpbench", *argv[1:]]  # how `python -m ddpbench train` shows in sys.argv
    return shlex.join(["python", *argv])


def environment(
    backend: str | None, threads_per_rank: int | None, started: float | None = None, command: str | None = None
) -> dict[str, Any]:
    """The summary's env block: provenance (docs/configuration.md), every key of PROVENANCE_KEYS.
    `started`: when the run began (epoch seconds; default: this process's start);
    `command`: the command line that ran it (default: `command_line()`). It ends now.
    A key whose look-up fails is None: collecting provenance never fails a run."""
    import psutil

    # Where torch is not imported and cannot see a GPU (a cell the launcher skipped), its
    # version is read from its files: importing it would only cost 2 s.
    torch = sys.modules.get("torch")
    if torch is None and not no_gpu_here():
        import torch
    cuda = bool(torch and _safe(torch.cuda.is_available))
    nccl = None
    if cuda:
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # NCCL not built in
            nccl = None
    commit, diff_hash = _safe(git_provenance) or (None, None)
    fields = run_record.env(
        started_utc=_safe(utc_iso, process_started() if started is None else started),
        ended_utc=_safe(utc_iso, time.time()),
        host=socket.gethostname(),
        cores=usable_cores(),
        ram_gb=_safe(lambda: round(psutil.virtual_memory().total / 2**30, 2)),
        cpu_model=_safe(cpu_model),
        os=_safe(os_name),
        kernel=_safe(platform.release) or None,
        glibc=_safe(glibc),
        python=platform.python_version(),
        torch=torch.__version__ if torch else _safe(torch_version),
        **{name: _safe(package_version, name) for name in VERSIONED_PACKAGES},  # without importing them
        cuda=torch.version.cuda if cuda else None,
        cudnn=_safe(torch.backends.cudnn.version) if cuda else None,
        nccl=nccl,
        gpu_name=_safe(torch.cuda.get_device_name, 0) if cuda else None,
        backend=backend,
        threads_per_rank=threads_per_rank,
        **{ENV_VARS: {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}},
        lock_hash=_safe(_cached_lock_hash),
        off_lock=_safe(_cached_off_lock),
        code_fingerprint=_safe(code_fingerprint),
        git_commit=commit,
        git_diff_hash=diff_hash,
        container_image=_safe(image_identity),
        command=_safe(command_line) if command is None else command,
        job_id=os.environ.get(JOB_ID_ENV),
    )
    return {k: fields[k] for k in PROVENANCE_KEYS}  # in Env's order, every key (a KeyError if one is missing)
