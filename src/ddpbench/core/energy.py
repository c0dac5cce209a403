"""The energy the timed steps took, from the hardware's own cumulative counters, read by every rank
when its timed steps start and when they end (run.loop), and summed on rank 0 (run.cell):

- CPU packages and their DRAM: the kernel's RAPL zones under /sys/class/powercap (`intel-rapl:N` named
  `package-N`, and its `dram` sub-zone; AMD's packages appear there too; `psys`, the platform, holds
  the packages again and is left out), each `energy_uj` a microjoule
  count that wraps at `max_energy_range_uj`, updated about every millisecond. A host's zones are read
  once per host (every rank of the host reads the same counters: the widest window is kept). The core
  and uncore sub-zones are inside their package and are not added again.
- GPUs: NVML's total energy since the driver loaded (`nvmlDeviceGetTotalEnergyConsumption`, millijoules,
  Volta and newer), read through the driver's own library (no Python package), per rank's GPU.

From them: `energy_j` (the window's joules, CPU and GPU apart in `energy_cpu_j`, `energy_gpu_j`),
`power_w` (joules over the window: the average), and per unit of work `energy_per_sample_j` and
`energy_per_token_j` = power / throughput (samples/s and tokens/s over the same timed steps), with
`energy_window_s` and `energy_source`. Where no counter can be read (no powercap, zones only root may
read, no NVML) or a counter did not advance over the window, there is no field at all: the report
says "not available here" once, never a zero. A window shorter than MIN_WINDOW_S for its counter is
kept and flagged (`energy_short_window`): NVML's counter moves in steps of about 100 ms on the GPUs
documented, so a 1 s window may be 10 % off; RAPL's, about 1 ms, holds at 0.1 s.
"""

from __future__ import annotations

import ctypes
import os
import socket
import time
from pathlib import Path
from typing import Any

from ddpbench.core import run_record

POWERCAP_ENV = "DDPBENCH_POWERCAP_ROOT"  # a tree laid out as the kernel's (the tests'), else /sys/class/powercap
POWERCAP = Path("/sys/class/powercap")
# Shortest windows for a reading within about 5 % (MLPerf's power rules state 5 %): NVML's energy counter
# moves every ~100 ms (a step is 2 % of 5 s); RAPL's every ~1 ms.
MIN_WINDOW_S = {"rapl": 0.1, "nvml": 5.0}


# -- reading the counters ---------------------------------------------------------------------------


def powercap_root() -> Path:
    return Path(os.environ.get(POWERCAP_ENV) or POWERCAP)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):  # absent, or readable by root only (energy_uj since Linux 5.10)
        return None


def rapl_zones(root: Path | None = None) -> dict[str, list[int]]:
    """Zone -> [energy_uj, max_energy_range_uj] of each readable package zone and its dram sub-zone."""
    root = root or powercap_root()
    out: dict[str, list[int]] = {}
    # the package zones (intel-rapl:N, named package-N); psys, where there is one, holds the packages again
    tops = sorted(p for p in root.glob("*-rapl:*") if p.name.count(":") == 1) if root.is_dir() else []
    packages = [p for p in tops if _name(p).startswith("package")]
    for package in packages:
        zones = [package] + sorted(z for z in package.glob(f"{package.name}:*") if _name(z) == "dram")
        for zone in zones:
            energy, span = _read_int(zone / "energy_uj"), _read_int(zone / "max_energy_range_uj")
            if energy is not None and span:
                out[package.name if zone == package else f"{package.name}/dram"] = [energy, span]
    return out


def _name(zone: Path) -> str:
    try:
        return (zone / "name").read_text().strip()
    except OSError:
        return ""


class _Nvml:
    """The driver's libnvidia-ml, loaded once; None where it is not there."""

    lib: Any = None
    tried = False

    @classmethod
    def get(cls) -> Any:
        if not cls.tried:
            cls.tried = True
            try:
                lib = ctypes.CDLL("libnvidia-ml.so.1")
                if lib.nvmlInit_v2() == 0:
                    cls.lib = lib
            except (OSError, AttributeError):
                cls.lib = None
        return cls.lib


def gpu_energy_mj(uuid: str | None, index: int) -> int | None:
    """The GPU's energy counter in millijoules (by its UUID, else its index); None without NVML or a counter."""
    lib = _Nvml.get()
    if lib is None:
        return None
    handle = ctypes.c_void_p()
    found = lib.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}".encode(), ctypes.byref(handle)) if uuid else 1
    if found != 0 and lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) != 0:
        return None
    energy = ctypes.c_ulonglong()
    if lib.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(energy)) != 0:  # pre-Volta: not supported
        return None
    return int(energy.value)


def snapshot(gpu: tuple[str | None, int] | None = None) -> dict[str, Any]:
    """One rank's reading at the start or end of its timed steps: the host's RAPL zones and, for a rank
    on a GPU (`gpu`: its UUID and index), that GPU's counter."""
    reading: dict[str, Any] = {"host": socket.gethostname(), "t": time.time(), "rapl": rapl_zones()}
    if gpu is not None:
        mj = gpu_energy_mj(*gpu)
        if mj is not None:
            reading["gpu"] = {"id": gpu[0] or str(gpu[1]), "mj": mj}
    return reading


# -- the window's energy ----------------------------------------------------------------------------


def _rapl_joules(start: dict, end: dict) -> float | None:
    """Joules of a host's zones between two readings (a counter that wrapped counted once round); None
    where no zone read at both ends advanced."""
    total, moved = 0.0, False
    for zone, (e0, span) in start.items():
        if zone not in end:
            continue
        delta = (end[zone][0] - e0) % span
        moved |= delta > 0
        total += delta / 1e6
    return total if moved else None


def fields(readings: list[dict[str, Any]], samples_per_s: float | None, tokens_per_s: float | None) -> dict[str, Any]:
    """The summary's energy fields from every rank's {"start": snapshot, "end": snapshot} (module doc);
    {} where no counter advanced."""
    cpu: dict[str, tuple[float, float]] = {}  # host -> (joules, window)
    gpu: dict[tuple, tuple[float, float]] = {}  # (host, GPU) -> (joules, window)
    for r in readings:
        start, end = (r or {}).get("start"), (r or {}).get("end")
        if not start or not end or start.get("host") != end.get("host"):
            continue
        window = end["t"] - start["t"]
        if window <= 0:
            continue
        joules = _rapl_joules(start.get("rapl") or {}, end.get("rapl") or {})
        if joules is not None and window > cpu.get(start["host"], (0.0, 0.0))[1]:
            cpu[start["host"]] = (joules, window)
        g0, g1 = start.get("gpu"), end.get("gpu")
        if g0 and g1 and g0["id"] == g1["id"] and g1["mj"] > g0["mj"]:
            gpu[(start["host"], g0["id"])] = ((g1["mj"] - g0["mj"]) / 1e3, window)
    if not cpu and not gpu:
        return {}
    parts = {"cpu": list(cpu.values()), "gpu": list(gpu.values())}
    power = sum(j / w for part in parts.values() for j, w in part)
    window = min(w for part in parts.values() for _, w in part)
    sources = [name for name, part in (("rapl", cpu), ("nvml", gpu)) if part]
    return run_record.extra(
        energy_j=round(sum(j for part in parts.values() for j, _ in part), 4),
        energy_cpu_j=round(sum(j for j, _ in parts["cpu"]), 4) if cpu else None,
        energy_gpu_j=round(sum(j for j, _ in parts["gpu"]), 4) if gpu else None,
        power_w=round(power, 3),
        energy_window_s=round(window, 4),
        energy_source="+".join(sources),
        energy_short_window=any(window < MIN_WINDOW_S[s] for s in sources),
        energy_per_sample_j=power / samples_per_s if samples_per_s else None,
        energy_per_token_j=power / tokens_per_s if tokens_per_s else None,
    )
