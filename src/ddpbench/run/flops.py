"""Model FLOPs of a training step and the peak a rank can reach: what MFU is made of (core.peaks
does the arithmetic and holds the datasheet table; docs/metrics.md defines the fields).

`training_flops_per_sample`: torch.utils.flop_counter.FlopCounterMode over one real forward and
backward of a deep copy of the plain model, under the cell's autocast, on a batch of real samples,
divided by the batch. It counts the matrix products (mm, addmm, bmm, convolutions, attention), what
"model FLOPs" means; elementwise work, the optimizer and any recomputation are not in it.

`matmul_peak`: square matrix products in the cell's precision (fp32; tf32: fp32 with TF32 on,
CUDA only; bf16; fp16), timed after a warm-up, best of several repeats, FLOP/s = 2n³/t; the size
grows until one product takes long enough to time (or the device's memory or MAX_N stops it). On
CPU it runs with the rank's threads, so it is what one rank can do. `cached_peak` keeps it in
<results>/peaks/ (core.peaks.peak_file), measured once per host, device, precision and results folder.

`measure`: both, on rank 0, after the timed steps and evaluation, between barriers, so no other
rank computes while the peak is measured and nothing of it lands in a timed step.
"""

from __future__ import annotations

import copy
import json
import math
import socket
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ddpbench.core import peaks, safe_io, sysinfo
from ddpbench.run import transforms
from ddpbench.run.data import TensorData
from ddpbench.strategies.base import Context

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
COUNT_BATCH = 8  # samples of the counted step (FLOPs per sample do not depend on it; time and memory do)
MIN_N, MAX_N = {"cpu": 256, "cuda": 1024}, {"cpu": 4096, "cuda": 8192}
TARGET_S = 0.02  # grow the matrices until one product takes this long
REPEAT_S = 0.1  # each timed repeat runs at least this long (several products)
REPEATS = 5


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


def matmul_peak(device: torch.device, precision: str, repeats: int = REPEATS, max_n: int | None = None) -> dict[str, Any]:
    """The best FLOP/s of square matrix products on `device` in `precision`, and how it was measured."""
    dtype = DTYPES[precision]
    kind = device.type if device.type in MIN_N else "cpu"
    top = max_n or MAX_N[kind]
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    try:
        n, single = MIN_N[kind], 0.0
        while True:
            a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
            c = torch.empty(n, n, device=device, dtype=dtype)
            torch.mm(a, b, out=c)  # warm-up: kernels chosen, pages touched
            _sync(device)
            t = time.perf_counter()
            torch.mm(a, b, out=c)
            _sync(device)
            single = time.perf_counter() - t
            if single >= TARGET_S or 2 * n > top or not _fits(2 * n, dtype, device):
                break
            del a, b, c
            n *= 2
        per_repeat = max(1, math.ceil(REPEAT_S / max(single, 1e-9)))
        times = []
        for _ in range(repeats):
            _sync(device)
            t = time.perf_counter()
            for _ in range(per_repeat):
                torch.mm(a, b, out=c)
            _sync(device)
            times.append((time.perf_counter() - t) / per_repeat)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
    best = min(times)
    return {
        "flops_per_s": 2 * n**3 / best,
        "method": "square torch.mm, best of repeats after a warm-up, 2n^3/t",
        "matrix_n": n,
        "dtype": str(dtype).removeprefix("torch."),
        "tf32": precision == "tf32",
        "matmuls_per_repeat": per_repeat,
        "repeats": repeats,
        "best_s": best,
        "median_s": sorted(times)[len(times) // 2],
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "torch": torch.__version__,
        "measured_utc": sysinfo.utc_iso(time.time()),
    }


def _read_cached(path: Path, device: str, precision: str, threads: int | None) -> dict[str, Any] | None:
    """A measured peak kept in `path`, if it is a regular file inside its folder, signed by this host
    (peaks.signed_here), holding one for this device, precision, thread count and torch version
    (anything else is measured again)."""
    if not path.exists() or not safe_io.inside(path, path.parent):
        return None
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not peaks.signed_here(kept):  # written elsewhere (a received results folder) or edited
        return None
    same = [kept.get(k) for k in ("device", "precision", "threads", "torch")] == [device, precision, threads, torch.__version__]
    value = kept.get("flops_per_s") if same else None
    return kept if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None


def cached_peak(results: Path, device: torch.device, precision: str) -> dict[str, Any]:
    """This rank's peak in `precision`: read from <results>/peaks/ where measured before, else measured
    now and kept there (written atomically; a failed write only loses the cache). `file`: the path
    below the results folder."""
    name = device_name(device)
    threads = torch.get_num_threads() if device.type == "cpu" else None
    host = socket.gethostname()
    path = peaks.peak_file(results, host, name, precision, threads)
    where = str(path.relative_to(results))  # the results folder may move (archives, another machine)
    kept = _read_cached(path, name, precision, threads)
    if kept is not None:
        return {**kept, "file": where, "cached": True}
    found = {"host": host, "device": name, "precision": precision, **matmul_peak(device, precision)}
    try:
        safe_io.real_dir(path.parent)
        safe_io.atomic_write_text(path, json.dumps(peaks.signed(found), indent=1) + "\n")
        found["file"] = where
    except OSError as err:
        found["file"] = None
        found["not_kept"] = f"{type(err).__name__}: {err}"
    return {**found, "cached": False}


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
    """FLOPs per sample for `key`, read from <results>/peaks/flops-<hash>.json where counted before, else
    `count()`ed now and kept there. Counting runs the model under a Python dispatch mode, which imports
    torch._dynamo (about a second, and a slower exit): once per results folder and model, not per run."""
    import hashlib

    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = Path(results) / peaks.PEAKS_FOLDER / f"flops-{digest}.json"
    where = str(path.relative_to(results))
    if path.exists() and safe_io.inside(path, path.parent):
        try:
            kept = json.loads(path.read_text())
            value = kept.get("flops_per_sample") if peaks.signed_here(kept) and kept.get("key") == key else None
            if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
                return {"flops_per_sample": value, "file": where, "cached": True}
        except (OSError, ValueError):
            pass
    value = float(count())
    found = {"flops_per_sample": value, "file": where, "cached": False}
    try:
        safe_io.real_dir(path.parent)
        safe_io.atomic_write_text(path, json.dumps(peaks.signed({"key": key, "flops_per_sample": value}), indent=1) + "\n")
    except OSError as err:
        found.update(file=None, not_kept=f"{type(err).__name__}: {err}")
    return found


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
            x, y, key, folder = x.to(ctx.device), y.to(ctx.device), count_key(ctx.params, data, len(x)), peaks.results_folder(out)

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
    """summary.json extra's MFU fields (core.peaks.MFU_FIELDS) from `measure`'s result."""
    result = result or {}
    peak = result.get("peak", {})
    per_sample = result.get("count", {}).get("flops_per_sample")
    hardware = result.get("hardware_count", {}).get("flops_per_sample")
    measured, sheet, source = (peak.get(k) for k in ("flops_per_s", "datasheet_flops_per_s", "datasheet_source"))
    return peaks.mfu_fields(per_sample, samples_per_s, world, measured, sheet, source, hardware)


def provenance(result: dict[str, Any] | None) -> dict[str, Any]:
    """summary.json env's record of how the MFU's figures were measured: `peak_flops` (the matmul
    benchmark, its file, the datasheet figure) and `flop_count` (the counted step)."""
    result = result or {}
    return {"peak_flops": result.get("peak"), "flop_count": result.get("count")}
