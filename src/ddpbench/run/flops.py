"""Model FLOPs of a training step and the peak a rank can reach: what MFU is made of (core.peaks
does the arithmetic and holds the datasheet table; docs/metrics.md defines the fields).

`training_flops_per_sample`: torch.utils.flop_counter.FlopCounterMode over one real forward and
backward of a deep copy of the plain model, under the cell's autocast, on a batch of real samples,
divided by the batch. It counts the matrix products (mm, addmm, bmm, convolutions, attention), what
"model FLOPs" means; elementwise work, the optimizer and any recomputation are not in it.

`matmul_peak`: square matrix products in the cell's precision (fp32; tf32: fp32 with TF32 on,
CUDA only; bf16; fp16), timed after a warm-up, FLOP/s = 2n³/t, the best over sizes and repeats: the
size doubles from MIN_N; each size whose one product takes long enough to time (and the largest one
MAX_N or the device's memory allows) is timed in repeats, and the next larger one is tried too while
at least MIN_REPEATS of its repeats fit in BUDGET_S; so neither a small matrix nor a busy spell in
some repeats sets the peak. Beside it, the share of the machine's CPU other processes took meanwhile
(/proc/stat less this process's own): above peaks.BUSY_CPU_FRAC the peak is flagged busy. On CPU it runs with the
rank's threads, so it is what one rank can do. `cached_peak` keeps it in <results>/peaks/
(core.peaks.peak_file) per host, device, precision and results folder, and a copy for the host
(core.peaks.host_peaks_folder: every results folder of a host divides by one peak); later runs that find the
machine quiet measure it again, keeping the better, until two quiet measurements settle it (a busy
one only reads low, and a quiet-looking one can be slowed unseen: on a 2-core host a 2-thread peak
read 102 GFLOP/s with others at 1 % of the CPU, and 193 GFLOP/s three minutes later).

`measure`: both, on rank 0, after the timed steps and evaluation, between barriers, so no other
rank computes while the peak is measured and nothing of it lands in a timed step.
"""

from __future__ import annotations

import copy
import json
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ddpbench.core import peaks, run_record, safe_io, sysinfo
from ddpbench.run import transforms
from ddpbench.run.data import TensorData
from ddpbench.strategies.base import Context

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
COUNT_BATCH = 8  # samples of the counted step (FLOPs per sample do not depend on it; time and memory do)
MIN_N, MAX_N = {"cpu": 256, "cuda": 1024}, {"cpu": 4096, "cuda": 8192}
TARGET_S = 0.02  # a product this long can be timed: sizes from here on are timed
REPEAT_S = 0.1  # each timed repeat runs at least this long (several products)
REPEATS = 5
BUDGET_S = 2.5  # a larger size is tried while the measurement's estimated total stays within this
MIN_REPEATS = 2  # ... in at least this many repeats
# CPU times come in 10 ms ticks: over a shorter window a share is mostly rounding.
LOAD_MIN_S = 0.2
QUIET_PROBE_S = 0.25  # how long a kept busy peak's machine is watched before it is measured again
# A host probes at most this often once a probe found it busy (a marker beside its copy of the peak): a
# busy spell lasts minutes, and every probe is QUIET_PROBE_S of a run's wall (a test suite's hundreds of runs).
PROBE_EVERY_S = 60.0
# The way a peak is measured, kept in its file: a peak kept by another way (before sizes were compared
# and the load read) is measured again.
PEAK_METHOD = 2


class _NoTimer:
    def lap(self, phase: str) -> None:
        pass


def training_flops_per_sample(model: nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: Context) -> float:
    """FLOPs of one forward + backward per sample of `model` (left untouched: a deep copy is counted)
    on the batch (x, y), under the cell's autocast, with the loss the strategies train with."""
    from torch.utils.flop_counter import FlopCounterMode

    from ddpbench import strategies

    clone = copy.deepcopy(model).train()
    for p in clone.parameters():
        p.grad = None
    with FlopCounterMode(display=False) as counter:
        strategies.get("single").forward_backward(clone, x, y, 1.0, _NoTimer(), ctx)
    return counter.get_total_flops() / len(x)


def real_batch(dataset, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `n` training samples (x, y) of `dataset` (a TensorData or any indexable dataset)."""
    n = max(1, min(n, len(dataset)))
    if isinstance(dataset, TensorData):
        return dataset.__getitems__(list(range(n)))
    xs, ys = zip(*(dataset[i] for i in range(n)))
    return torch.stack(xs), torch.stack([torch.as_tensor(v) for v in ys])


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _fits(n: int, dtype: torch.dtype, device: torch.device) -> bool:
    """Three n x n matrices in at most half the device's free memory (CPU: always)."""
    if device.type != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info(device)
    return 3 * n * n * torch.empty((), dtype=dtype).element_size() <= free / 2


def _operands(n: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    return a, b, torch.empty(n, n, device=device, dtype=dtype)


def _per_product(a, b, c, device: torch.device, count: int) -> float:
    """Seconds per product over `count` back-to-back products."""
    _sync(device)
    t = time.perf_counter()
    for _ in range(count):
        torch.mm(a, b, out=c)
    _sync(device)
    return (time.perf_counter() - t) / count


def _time_size(a, b, c, device: torch.device, single: float, repeats: int) -> dict[str, Any]:
    """`repeats` timed repeats of at least REPEAT_S each, at one size."""
    n = a.shape[0]
    per_repeat = max(1, math.ceil(REPEAT_S / max(single, 1e-9)))
    times = sorted(_per_product(a, b, c, device, per_repeat) for _ in range(repeats))
    return {"n": n, "flops_per_s": 2 * n**3 / times[0], "best_s": times[0], "median_s": times[len(times) // 2],
            "matmuls_per_repeat": per_repeat, "repeats": repeats}  # fmt: skip


def _timed_sizes(device: torch.device, dtype: torch.dtype, first: int, top: int, repeats: int) -> list[dict[str, Any]]:
    """Each size timed (see the module's docstring), smallest first: at least one. After the first timed
    size, the next is timed in as many repeats (at least MIN_REPEATS) as BUDGET_S has room for."""
    start, timed, n, allowed = time.perf_counter(), [], first, repeats
    while True:
        a, b, c = _operands(n, dtype, device)
        torch.mm(a, b, out=c)  # warm-up: kernels chosen, pages touched
        single = _per_product(a, b, c, device, 1)
        last = 2 * n > top or not _fits(2 * n, dtype, device)
        if single >= TARGET_S or last:
            timed.append(_time_size(a, b, c, device, single, allowed))
        del a, b, c
        # the next size: 8x the work a product; its warm-up and single product, then its repeats
        room = BUDGET_S - (time.perf_counter() - start) - 16 * single
        allowed = min(repeats, int(room // max(REPEAT_S, 8 * single))) if timed else repeats
        if last or allowed < MIN_REPEATS:
            return timed
        n *= 2


def load_start() -> tuple[float, float | None, float]:
    """A reading to measure the machine's load from (`load_since`): wall, machine and own CPU seconds."""
    return time.perf_counter(), sysinfo.machine_busy_s(), sysinfo.own_cpu_s()


def load_since(start: tuple[float, float | None, float], device_type: str) -> dict[str, Any]:
    """The share of the machine's CPU (every core, /proc/stat) other processes took since `start`
    (this process's own time left out; None over less than LOAD_MIN_S), the 1-minute load average
    beside it, and whether that is busy."""
    t0, busy0, own0 = start
    wall, busy1, own1 = time.perf_counter() - t0, sysinfo.machine_busy_s(), sysinfo.own_cpu_s()
    cores = os.cpu_count() or 1
    frac = None
    if busy0 is not None and busy1 is not None and wall >= LOAD_MIN_S:
        frac = round(min(1.0, max(0.0, (busy1 - busy0) - (own1 - own0)) / (wall * cores)), 4)
    return {"other_cpu_frac": frac, "loadavg": sysinfo.loadavg(), "cores": cores, "busy": peaks.is_busy(frac, device_type)}


def quiet_probe(device_type: str, marker: Path | None) -> bool:
    """quiet_now, unless a probe found the machine busy less than PROBE_EVERY_S ago (`marker`'s mtime,
    which such a probe writes; no marker: always probed): then not quiet."""
    try:
        if marker is not None and time.time() - marker.stat().st_mtime < PROBE_EVERY_S:
            return False
    except OSError:
        pass
    quiet = quiet_now(device_type)
    if not quiet and marker is not None:
        try:
            safe_io.atomic_write_text(marker, sysinfo.utc_iso(time.time()) + "\n")
        except OSError:
            pass
    return quiet


def quiet_now(device_type: str) -> bool:
    """Whether other processes leave the machine quiet for QUIET_PROBE_S (this process sleeps meanwhile)."""
    start = load_start()
    time.sleep(QUIET_PROBE_S)
    return not load_since(start, device_type)["busy"]


def matmul_peak(device: torch.device, precision: str, repeats: int = REPEATS, max_n: int | None = None) -> dict[str, Any]:
    """The best FLOP/s of square matrix products on `device` in `precision`, and how it was measured."""
    dtype = DTYPES[precision]
    kind = device.type if device.type in MIN_N else "cpu"
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    began = load_start()
    try:
        sizes = _timed_sizes(device, dtype, MIN_N[kind], max_n or MAX_N[kind], repeats)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
    load = load_since(began, device.type)
    best = max(sizes, key=lambda s: s["flops_per_s"])
    return {
        "flops_per_s": best["flops_per_s"],
        "method": "square torch.mm, best over sizes and repeats after a warm-up, 2n^3/t",
        "method_version": PEAK_METHOD,
        "matrix_n": best["n"],
        "dtype": str(dtype).removeprefix("torch."),
        "tf32": precision == "tf32",
        "matmuls_per_repeat": best["matmuls_per_repeat"],
        "repeats": best["repeats"],
        "best_s": best["best_s"],
        "median_s": best["median_s"],
        "sizes": [{k: s[k] for k in ("n", "flops_per_s", "median_s", "repeats")} for s in sizes],
        "seconds": round(time.perf_counter() - began[0], 3),
        **load,
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "torch": torch.__version__,
        "measured_utc": sysinfo.utc_iso(time.time()),
    }


def _read_cached(path: Path, device: str, precision: str, threads: int | None) -> dict[str, Any] | None:
    """A measured peak kept in `path`, if it is a regular file inside its folder, signed by this host
    (peaks.signed_here), holding one for this device, precision, thread count, torch version and way of
    measuring (anything else is measured again)."""
    if not path.exists() or not safe_io.inside(path, path.parent):
        return None
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not peaks.signed_here(kept):  # written elsewhere (a received results folder) or edited
        return None
    keys = ("device", "precision", "threads", "torch", "method_version")
    same = [kept.get(k) for k in keys] == [device, precision, threads, torch.__version__, PEAK_METHOD]
    value = kept.get("flops_per_s") if same else None
    return kept if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None


def cached_peak(results: Path, device: torch.device, precision: str) -> dict[str, Any]:
    """This rank's peak in `precision`: the kept one (of <results>/peaks/ and this host's own,
    peaks.host_peaks_folder(), the one more quiet measurements stand for), else measured now. A kept one
    is measured again by a run that finds the machine quiet until it is settled (peaks.settled: quiet
    twice), and the better one kept (peaks.better_peak) in both places (written atomically; a failed
    write only loses the cache). The host's copy makes every results folder of this host divide by the
    same peak, measured once. `file`: the path below the results folder; `cached`: a kept one is used;
    `remeasured`: a kept one was measured again."""
    name = device_name(device)
    threads = torch.get_num_threads() if device.type == "cpu" else None
    host = socket.gethostname()
    path = peaks.peak_file(results, host, name, precision, threads)
    shared = peaks.host_peaks_folder()
    host_path = peaks.peak_file(shared, host, name, precision, threads) if shared is not None else None
    where = str(path.relative_to(results))  # the results folder may move (archives, another machine)
    here = _read_cached(path, name, precision, threads)
    hosts = _read_cached(host_path, name, precision, threads) if host_path is not None else None
    kept = peaks.most_measured(here, hosts)
    marker = host_path.with_suffix(".busy-probe") if host_path is not None else None
    if kept is not None and (peaks.settled(kept) or not quiet_probe(device.type, marker)):
        return {**kept, **_kept_at(path, where, kept, here, results), "cached": True}
    found = {"host": host, "device": name, "precision": precision, **matmul_peak(device, precision)}
    keep = peaks.better_peak(kept, found)
    record = {**keep, "quiet_measurements": peaks.quiet_count(kept) + peaks.quiet_count(found)}
    used = {"cached": keep is kept, **({"remeasured": True} if kept is not None else {})}
    if host_path is not None:
        _kept_at(host_path, "", record, hosts, shared)  # (a failure there loses only the host's copy)
    return {**record, **_kept_at(path, where, record, here, results), **used}


def _kept_at(path: Path, where: str, record: dict[str, Any], there: dict[str, Any] | None, root: Path) -> dict[str, Any]:
    """Keep `record` in `path` (signed, atomically) unless it holds it already (`there`): {"file": where},
    or {"file": None, "not_kept": why} where it cannot be written. `root`: the results folder (or the
    host's) that `path` lies in: a peaks/ replaced by a link there since the workflow's check is refused."""
    if record == there:
        return {"file": where}
    try:
        safe_io.atomic_write_text(path, json.dumps(peaks.signed(record), indent=1) + "\n", root=root)
    except OSError as err:
        return {"file": None, "not_kept": f"{type(err).__name__}: {err}"}
    return {"file": where}


def count_key(params, data, batch: int) -> dict[str, Any]:
    """What a training step's FLOPs per sample depend on: the model (its code: the package's fingerprint,
    a user model's file digest), the sample's shape and labels, the precision, the counted batch, torch."""
    from ddpbench.core.params import is_user_model
    from ddpbench.run import user_model

    return {
        "model": params.model,
        "model_digest": user_model.source_digest(params.model, params.model_path) if is_user_model(params.model) else None,
        "code": sysinfo.code_fingerprint(), "kind": data.kind, "shape": list(data.shape), "classes": data.classes,
        "precision": params.precision, "batch": batch, "torch": torch.__version__,
    }  # fmt: skip


def cached_count(results: Path, key: dict[str, Any], count) -> dict[str, Any]:
    """FLOPs per sample for `key`, read from <results>/peaks/flops-<hash>.json where counted before, or from
    the host's copy (peaks.host_peaks_folder(); then kept in the results folder too), else `count()`ed now
    and kept in both. Counting runs the model under a Python dispatch mode, which imports torch._dynamo
    (about a second, and a slower exit): once per host, code and model, not per run or results folder."""
    import hashlib

    name = f"flops-{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]}.json"
    path = Path(results) / peaks.PEAKS_FOLDER / name
    where = str(path.relative_to(results))
    shared = peaks.host_peaks_folder()
    host_path = shared / peaks.PEAKS_FOLDER / name if shared is not None else None
    record = {"key": key}
    for source in (path, host_path):
        value = _kept_count(source, key) if source is not None else None
        if value is not None:
            kept = {**record, "flops_per_sample": value}
            kept_here = _kept_at(path, where, kept, kept if source == path else None, results)
            return {"flops_per_sample": value, **kept_here, "cached": True}
    record["flops_per_sample"] = float(count())
    if host_path is not None:
        _kept_at(host_path, "", record, None, shared)
    return {"flops_per_sample": record["flops_per_sample"], **_kept_at(path, where, record, None, results), "cached": False}


def _kept_count(path: Path, key: dict[str, Any]) -> float | None:
    """The FLOPs per sample kept in `path` for `key`: a regular file inside its folder, signed by this host."""
    if not path.exists() or not safe_io.inside(path, path.parent):
        return None
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    value = kept.get("flops_per_sample") if peaks.signed_here(kept) and kept.get("key") == key else None
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def measure(model: nn.Module, data, ctx: Context, batch: int, out: Path) -> dict[str, Any] | None:
    """Rank 0's FLOP count per sample of `model` (the plain model) and its measured and datasheet
    peaks, between barriers that every rank calls; None on the other ranks. A failure is recorded,
    never raised: MFU is left blank, the run is kept."""
    _barrier()
    result = None
    if ctx.rank == 0:
        result = {"count": {"method": "torch.utils.flop_counter.FlopCounterMode, one forward + backward"}}
        try:
            x, y = real_batch(data.train, min(batch, COUNT_BATCH))
            result["count"]["batch"] = len(x)
            (x, y), key, folder = transforms.to_device(x, y, ctx.device, ctx.params), count_key(ctx.params, data, len(x)), peaks.results_folder(out)

            def model_flops():  # without the recompute of checkpointed blocks
                with transforms.without_recompute():
                    return training_flops_per_sample(model, x, y, ctx)

            result["count"].update(cached_count(folder, key, model_flops))
            if ctx.params.activation_checkpointing != "none":  # the hardware's: with the recompute
                recompute = {**key, "activation_checkpointing": ctx.params.activation_checkpointing}
                result["hardware_count"] = cached_count(folder, recompute, lambda: training_flops_per_sample(model, x, y, ctx))
        except Exception as err:  # noqa: BLE001 - provenance-like: never fails the run
            result["count"]["error"] = f"{type(err).__name__}: {err}"
        try:
            result["peak"] = cached_peak(peaks.results_folder(out), ctx.device, ctx.params.precision)
        except Exception as err:  # noqa: BLE001
            result["peak"] = {"error": f"{type(err).__name__}: {err}"}
        value, source = peaks.datasheet_peak(device_name(ctx.device), ctx.params.precision)
        result["peak"].update(datasheet_flops_per_s=value, datasheet_source=source)
    _barrier()
    return result


def fields(result: dict[str, Any] | None, samples_per_s: float | None, world: int) -> dict[str, Any]:
    """summary.json extra's MFU fields (core.peaks.MFU_FIELDS) and the record of the peak they used
    (core.peaks.PEAK_FIELDS) from `measure`'s result."""
    result = result or {}
    peak = result.get("peak", {})
    per_sample = result.get("count", {}).get("flops_per_sample")
    hardware = result.get("hardware_count", {}).get("flops_per_sample")
    measured, sheet, source = (peak.get(k) for k in ("flops_per_s", "datasheet_flops_per_s", "datasheet_source"))
    mfu = peaks.mfu_fields(per_sample, samples_per_s, world, measured, sheet, source, hardware)
    return {**mfu, **peaks.peak_fields(peak)}


def provenance(result: dict[str, Any] | None) -> dict[str, Any]:
    """summary.json env's record of how the MFU's figures were measured: `peak_flops` (the matmul
    benchmark, its file, the datasheet figure) and `flop_count` (the counted step)."""
    result = result or {}
    return run_record.env(peak_flops=result.get("peak"), flop_count=result.get("count"))
