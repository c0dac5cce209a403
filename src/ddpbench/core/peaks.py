"""Model FLOP utilisation (MFU): the datasheet peaks of known GPUs, the arithmetic of a run's MFU
fields and where the measured peaks are kept. No torch: the matrix-multiply benchmark that measures
a peak and the FLOP count of a training step are run.flops'; docs/metrics.md defines the fields.

    achieved_flops_per_s = samples_per_s x train_flops_per_sample          (global, every rank)
    mfu_measured  = achieved_flops_per_s / (peak_flops_measured  x world_size)
    mfu_datasheet = achieved_flops_per_s / (peak_flops_datasheet x world_size)

`peak_flops_measured` is per rank: the best square matmul one rank does in the cell's precision
with its threads (on CPU) or its GPU, over several sizes and repeats, kept per host, device, precision
and results folder (the file `peak_file` names) with the share of the CPU other processes took while it
was measured; one measured on a busy machine (`is_busy`), or quiet only once, is measured again when a
later run finds the machine quiet (`settled`; `better_peak` says which to keep). A run records the peak
it used (`peak_fields`).
`peak_flops_datasheet` is per device from `DATASHEET`; none on CPU, where the measured peak is the
only honest reference.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpbench.core import run_record, safe_io, sysinfo


@dataclass(frozen=True)
class Datasheet:
    """A GPU's dense peak FLOP/s per cell precision (None: the precision has no tensor-core or vector
    figure on the sheet), and the document the figures are from."""

    device: str
    fp32: float | None
    tf32: float | None
    bf16: float | None
    fp16: float | None
    source: str


T = 1e12
# From vendor datasheets, dense (no structured sparsity): where a sheet quotes only the with-sparsity
# figure (marked there with an asterisk) the dense one is half of it. fp32 is the non-tensor FP32 rate
# (the cells' fp32 turns TF32 off); tf32, bf16 and fp16 are the tensor-core rates with FP32 accumulation
# (what torch's matmuls use). Matched against torch.cuda.get_device_name in this order, first match wins:
# the more specific names come first ("H100 PCIe" before "H100"); names are whole words ("A10" is not A100's
# prefix, "H200" not GH200's: a Grace Hopper superchip is not in the table).
H100, H200, HALVED = "NVIDIA H100 Tensor Core GPU datasheet", "NVIDIA H200 Tensor Core GPU datasheet", "sparsity halved"
DATASHEET: tuple[tuple[str, Datasheet], ...] = (
    (r"\bH100\b.*\bNVL\b", Datasheet("H100 NVL", 60 * T, 835 / 2 * T, 1671 / 2 * T, 1671 / 2 * T, f"{H100}, H100 NVL, {HALVED}")),
    (r"\bH100\b.*\bPCIe\b", Datasheet("H100 PCIe", 51 * T, 756 / 2 * T, 1513 / 2 * T, 1513 / 2 * T, f"{H100}, H100 PCIe, {HALVED}")),
    (r"\bH100\b", Datasheet("H100 SXM", 67 * T, 989 / 2 * T, 1979 / 2 * T, 1979 / 2 * T, f"{H100}, H100 SXM, {HALVED}")),
    (r"\bH200\b.*\bNVL\b", Datasheet("H200 NVL", 60 * T, 835 / 2 * T, 1671 / 2 * T, 1671 / 2 * T, f"{H200}, H200 NVL, {HALVED}")),
    (r"\bH200\b", Datasheet("H200 SXM", 67 * T, 989 / 2 * T, 1979 / 2 * T, 1979 / 2 * T, f"{H200}, H200 SXM, {HALVED}")),
    (r"\bA100\b", Datasheet("A100", 19.5 * T, 156 * T, 312 * T, 312 * T,
                            "NVIDIA A100 Tensor Core GPU datasheet, dense figures (SXM and PCIe alike)")),
    (r"\bV100S\b", Datasheet("V100S PCIe", 16.4 * T, None, None, 130 * T, "NVIDIA V100 Tensor Core GPU datasheet, V100S PCIe")),
    (r"\bV100\b.*PCI", Datasheet("V100 PCIe", 14 * T, None, None, 112 * T, "NVIDIA V100 Tensor Core GPU datasheet, V100 PCIe")),
    (r"\bV100\b", Datasheet("V100 SXM2", 15.7 * T, None, None, 125 * T, "NVIDIA V100 Tensor Core GPU datasheet, V100 SXM2")),
    (r"\bA10\b", Datasheet("A10", 31.2 * T, 62.5 * T, 125 * T, 125 * T, "NVIDIA A10 Tensor Core GPU datasheet, dense figures")),
    (r"\bL4\b", Datasheet("L4", 30.3 * T, 120 / 2 * T, 242 / 2 * T, 242 / 2 * T, f"NVIDIA L4 Tensor Core GPU datasheet, {HALVED}")),
    (r"\bT4\b", Datasheet("T4", 8.1 * T, None, None, 65 * T, "NVIDIA T4 Tensor Core GPU datasheet, FP16 mixed precision")),
    (r"\bRTX 4090\b", Datasheet("GeForce RTX 4090", 82.6 * T, 82.6 * T, 165.2 * T, 165.2 * T,
                                 "NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090, dense, FP32 accumulate")),
)  # fmt: skip


def datasheet(device_name: str | None) -> Datasheet | None:
    """The datasheet entry of a GPU by its name (torch.cuda.get_device_name), None for a CPU or a GPU
    not in the table."""
    if not device_name:
        return None
    for pattern, sheet in DATASHEET:
        if re.search(pattern, device_name, re.IGNORECASE):
            return sheet
    return None


def datasheet_peak(device_name: str | None, precision: str) -> tuple[float | None, str | None]:
    """(dense peak FLOP/s of one device in `precision`, its source), or (None, None)."""
    sheet = datasheet(device_name)
    value = getattr(sheet, precision, None) if sheet is not None and precision in ("fp32", "tf32", "bf16", "fp16") else None
    return (value, sheet.source) if value else (None, None)


def _positive(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def mfu_fields(
    flops_per_sample: float | None,
    samples_per_s: float | None,
    world: int,
    peak_measured: float | None,
    peak_datasheet: float | None,
    datasheet_source: str | None = None,
    hardware_flops_per_sample: float | None = None,
) -> dict[str, Any]:
    """summary.json extra's MFU fields (MFU_FIELDS): each null where a factor is unknown. Peaks are per
    rank (one device each): the whole run's reference is world x peak. The HFU counts the FLOPs the
    hardware did, the recompute of activation checkpointing included (`hardware_flops_per_sample`;
    without checkpointing the model's, so HFU = MFU)."""
    per_sample, rate = _positive(flops_per_sample), _positive(samples_per_s)
    achieved = per_sample * rate if per_sample and rate else None
    measured, sheet = _positive(peak_measured), _positive(peak_datasheet)
    hardware = _positive(hardware_flops_per_sample) or per_sample
    done = hardware * rate if hardware and rate else None

    def mfu(peak, flops_per_s=achieved):
        return flops_per_s / (peak * world) if flops_per_s and peak and world > 0 else None

    return run_record.extra(
        train_flops_per_sample=per_sample,
        achieved_flops_per_s=achieved,
        peak_flops_measured=measured,
        peak_flops_datasheet=sheet,
        peak_flops_datasheet_source=datasheet_source if sheet else None,
        mfu_measured=mfu(measured),
        mfu_datasheet=mfu(sheet),
        hardware_flops_per_sample=hardware,
        hfu_measured=mfu(measured, done),
        hfu_datasheet=mfu(sheet, done),
    )


MFU_FIELDS = tuple(mfu_fields(None, None, 1, None, None))


# -- which measured peak a run used, and which one to keep ---------------------------------------------

# Other processes took more than this share of the machine's CPU while the peak was measured: busy (the
# runs' own threshold, so a peak and a run are called busy alike).
BUSY_CPU_FRAC = sysinfo.BUSY_CPU_FRAC


def is_busy(other_cpu_frac: float | None, device_type: str) -> bool:
    """Whether a peak measured while others took `other_cpu_frac` of the CPU was measured on a busy
    machine. Judged on CPU only: a GPU's matmuls do not wait for the CPU (its own load is not read)."""
    frac = _positive(other_cpu_frac)
    return device_type == "cpu" and frac is not None and frac > BUSY_CPU_FRAC


def better_peak(kept: dict[str, Any] | None, found: dict[str, Any]) -> dict[str, Any]:
    """The peak to keep of a kept one and one measured now: a quiet measurement over a busy one (a busy
    one only reads low; so a quiet one is never replaced by a busy one), else the higher."""
    if kept is None:
        return found
    if bool(kept.get("busy")) != bool(found.get("busy")):
        return kept if not kept.get("busy") else found
    return found if (_positive(found.get("flops_per_s")) or 0) > (_positive(kept.get("flops_per_s")) or 0) else kept


QUIET_TO_SETTLE = 2  # quiet measurements after which a kept peak is never measured again


def quiet_count(record: dict[str, Any] | None) -> int:
    """How many quiet measurements a kept peak stands for (a busy one: none)."""
    if record is None or record.get("busy"):
        return 0
    return int(record.get("quiet_measurements") or 1)


def most_measured(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """Of a results folder's kept peak and the host's: the one more quiet measurements stand for,
    else the one better_peak keeps."""
    if a is None or b is None:
        return a or b
    if quiet_count(a) != quiet_count(b):
        return a if quiet_count(a) > quiet_count(b) else b
    return better_peak(a, b)


def settled(kept: dict[str, Any]) -> bool:
    """Whether a kept peak is final: quiet QUIET_TO_SETTLE times. One quiet measurement is measured once
    more by a later quiet run (the higher kept): a slowdown /proc/stat does not show (a neighbour on the
    same physical host, a frequency drop) can halve one measurement that looked quiet."""
    return quiet_count(kept) >= QUIET_TO_SETTLE


def peak_fields(peak: dict[str, Any] | None) -> dict[str, Any]:
    """summary.json extra's record of the measured peak a run's MFU used (PEAK_FIELDS): its matrix size,
    the CPU share others took while it was measured, whether that was a busy machine, when; all null
    without a measured peak (and the load's for a peak kept before the load was recorded)."""
    peak = peak if isinstance(peak, dict) and _positive(peak.get("flops_per_s")) else {}
    busy = peak.get("busy")
    return run_record.extra(
        peak_flops_matrix_n=peak.get("matrix_n"),
        peak_flops_other_cpu_frac=peak.get("other_cpu_frac"),
        peak_flops_busy=bool(busy) if busy is not None else None,
        peak_flops_measured_utc=peak.get("measured_utc"),
    )


PEAK_FIELDS = tuple(peak_fields(None))


# -- where a measured peak is kept -------------------------------------------------------------------

PEAKS_FOLDER = "peaks"
SIGNATURE = "signature"
KEY_ENV = "DDPBENCH_HOST_KEY"  # where this host's key is kept, if not the user's cache folder


def host_key_path() -> Path:
    """$DDPBENCH_HOST_KEY, else $XDG_CACHE_HOME/ddpbench/host.key (~/.cache by default)."""
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ddpbench" / "host.key"


def host_key() -> bytes | None:
    """This user's secret on this machine, made once (32 random bytes, mode 0600, outside any results
    folder). A kept peak or FLOP count is signed with it, so a peaks file this host's own benchmark did
    not write (one in a received results folder, or edited) is never taken for a measurement here.
    None where it cannot be kept: then nothing kept is trusted and everything is measured again."""
    try:
        path = host_key_path()
        if not path.exists():  # whole or not at all; another process may have made it first
            safe_io.publish_once(path, secrets.token_bytes(32), perms=0o600)
        key = path.read_bytes()
    except (OSError, RuntimeError):  # RuntimeError: no home folder
        return None
    return key if len(key) == 32 else None


def _mac(key: bytes, record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != SIGNATURE}
    return hmac.new(key, json.dumps(body, sort_keys=True, default=str).encode(), hashlib.sha256).hexdigest()


def signed(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with this host's signature (none where there is no key: it will not be trusted)."""
    key = host_key()
    return {**record, SIGNATURE: _mac(key, record)} if key else dict(record)


def signed_here(record: Any) -> bool:
    """Whether `record` (a kept peak or count) was written by this host's own benchmark, unchanged."""
    key = host_key()
    mark = record.get(SIGNATURE) if isinstance(record, dict) else None
    return bool(key) and isinstance(mark, str) and hmac.compare_digest(mark, _mac(key, record))


HOST_PEAKS_ENV = "DDPBENCH_HOST_PEAKS"  # where this host keeps its peaks for every results folder ("off": none)


def host_peaks_folder() -> Path | None:
    """The folder whose peaks/ holds this host's measured peaks for every results folder:
    $DDPBENCH_HOST_PEAKS, else $XDG_CACHE_HOME/ddpbench (~/.cache by default) beside the host key;
    None with DDPBENCH_HOST_PEAKS=off (each results folder measures its own)."""
    value = os.environ.get(HOST_PEAKS_ENV)
    if value == "off":
        return None
    return Path(value) if value else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ddpbench"


def results_folder(run_dir: str | Path) -> Path:
    """The results folder of a run: the folder above the nearest `runs` folder of its path (the workflow's
    <results>/runs/<cell>/repeat~N), else the folder the run folder is in (runs side by side)."""
    run_dir = Path(run_dir)
    for parent in run_dir.parents:
        if parent.name == "runs":
            return parent.parent
    return run_dir.parent


def _slug(text: str) -> str:
    """A file-name part: letters, digits, '_' and single dots; any other run of characters one '-'."""
    return re.sub(r"(?:[^A-Za-z0-9._]|\.{2,})+", "-", text).strip("-.")[:80] or "unknown"


def peak_file(results: str | Path, host: str, device: str, precision: str, threads: int | None) -> Path:
    """<results>/peaks/<host>-<device>-<precision>[-<threads>t].json: one measured peak per host,
    device (cpu or the GPU's name), precision and, on CPU, threads per rank."""
    name = "-".join([_slug(host), _slug(device), _slug(precision)]) + (f"-{int(threads)}t" if threads else "")
    return Path(results) / PEAKS_FOLDER / f"{name}.json"
