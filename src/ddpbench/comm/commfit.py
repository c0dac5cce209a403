"""Bus-bandwidth definitions and the latency-bandwidth (alpha, B) fit of a collective sweep.

No torch here: the report imports this module to turn the sweep's CSV
(`ddpbench commbench` under torchrun) into the cost model's communication term.

Definitions (nccl-tests, doc/PERFORMANCE.md), with ``t`` the time of one call and
``p`` the world size:

* ``algbw = bytes / t``
* ``busbw = algbw * factor(p)`` with factor ``2(p-1)/p`` for all-reduce (the
  hand-written ring included), ``(p-1)/p`` for all-gather and reduce-scatter, ``1``
  for broadcast. For all-gather and reduce-scatter ``bytes`` is the *total* buffer
  (the gathered output, the reduce-scatter input = p x the per-rank part), as in
  nccl-tests. Bus bandwidth is what each rank's link carries, so it is comparable
  across collectives and world sizes and against a hardware ceiling.
* ``memcpy`` (the same run's plain copy of one tensor into another) uses factor 1:
  ``bytes / t`` where the copy reads ``bytes`` and writes ``bytes`` once each.

GB/s throughout means 1e9 bytes per second.

The fit: ``t(M) = alpha + c(p) * M / B`` with ``c`` the bus-bandwidth factor, i.e. a
straight line in ``x = c(p) * M`` with intercept ``alpha`` (per-call latency, seconds)
and slope ``1/B`` (``B`` the bus bandwidth in bytes/s). Because the sweep's sizes span
seven orders of magnitude, an ordinary least-squares line is decided by the largest
messages alone and its intercept can even come out negative; the default therefore
minimises *relative* residuals ``(t_fit - t) / t`` (weights ``1/t^2``), which fits the
latency-bound and the bandwidth-bound ends alike. ``weighting="absolute"`` gives
ordinary least squares. For a ring all-reduce, ``alpha`` is the latency of the whole
call; the per-step latency of the cost model's ``alpha * steps`` (docs/metrics.md) is ``alpha / (2(p-1))``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

import numpy as np

# Columns of the sweep's CSV, exactly as the interface contract lists them.
CSV_COLUMNS = (
    "collective",
    "backend",
    "device",
    "world_size",
    "bytes",
    "iters",
    "time_median_s",
    "time_p95_s",
    "algbw_gbps",
    "busbw_gbps",
)

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "ring_all_reduce")
MEMCPY = "memcpy"
# Collectives whose `bytes` is the total buffer, p times what one rank contributes/keeps.
TOTAL_SIZE_COLLECTIVES = ("all_gather", "reduce_scatter")


def busbw_factor(collective: str, world_size: int) -> float:
    """nccl-tests' bus-bandwidth factor of `collective` at world size `world_size`."""
    p = int(world_size)
    if p < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size!r}")
    if collective in ("all_reduce", "ring_all_reduce"):
        return 2.0 * (p - 1) / p
    if collective in ("all_gather", "reduce_scatter"):
        return (p - 1) / p
    if collective in ("broadcast", MEMCPY):
        return 1.0
    raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES + (MEMCPY,))}")


def algbw_gbps(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 B/s): bytes / time."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds!r}")
    return nbytes / seconds / 1e9


def busbw_gbps(collective: str, world_size: int, nbytes: float, seconds: float) -> float:
    """Bus bandwidth in GB/s: algbw x busbw_factor."""
    return algbw_gbps(nbytes, seconds) * busbw_factor(collective, world_size)


@dataclass(frozen=True)
class CommFit:
    """t(M) = alpha_s + c(p) * M / bandwidth (bandwidth in bytes/s, M in bytes)."""

    collective: str
    alpha_s: float
    bandwidth_bps: float
    r2: float
    n_points: int
    weighting: str
    max_rel_error: float

    @property
    def bandwidth_gbps(self) -> float:
        return self.bandwidth_bps / 1e9

    def predict_s(self, nbytes: float, world_size: int) -> float:
        """Predicted time of one call moving `nbytes` at world size `world_size`."""
        return self.alpha_s + busbw_factor(self.collective, world_size) * nbytes / self.bandwidth_bps

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "bandwidth_gbps": self.bandwidth_gbps}


def _rows(sweep: Any) -> list[Mapping[str, Any]]:
    """Accept a pandas DataFrame, a CSV path or an iterable of row mappings."""
    if isinstance(sweep, (str, bytes)) or hasattr(sweep, "__fspath__"):
        import csv

        with open(sweep, newline="") as fh:
            return list(csv.DictReader(fh))
    if hasattr(sweep, "to_dict"):
        return sweep.to_dict("records")
    return list(sweep)


def fit_latency_bandwidth(
    sweep: Any,
    collective: str = "all_reduce",
    *,
    weighting: str = "relative",
    min_bytes: int = 0,
    max_bytes: int | None = None,
    backend: str | None = None,
    device: str | None = None,
) -> CommFit:
    """Fit alpha (s) and B (bytes/s) of `collective` from a sweep's rows.

    `sweep`: DataFrame, CSV path or rows with the contract's columns; rows of several
    world sizes may be mixed (c(p) differs per row). Uses `time_median_s`. Optional
    filters select a size window, a backend or a device. Raises ValueError when fewer
    than two distinct sizes remain or the fitted slope is not positive.
    """
    if weighting not in ("relative", "absolute"):
        raise ValueError(f"weighting must be 'relative' or 'absolute', got {weighting!r}")
    x, t = [], []
    for row in _rows(sweep):
        if row["collective"] != collective:
            continue
        if backend is not None and row.get("backend") != backend:
            continue
        if device is not None and row.get("device") != device:
            continue
        nbytes, p, sec = float(row["bytes"]), int(row["world_size"]), float(row["time_median_s"])
        if nbytes < min_bytes or (max_bytes is not None and nbytes > max_bytes):
            continue
        if not (sec > 0 and math.isfinite(sec)):
            continue
        x.append(busbw_factor(collective, p) * nbytes)
        t.append(sec)
    x_arr, t_arr = np.asarray(x, dtype=float), np.asarray(t, dtype=float)
    if len(np.unique(x_arr)) < 2:
        raise ValueError(f"need at least two distinct message sizes of {collective!r} to fit, got {len(x_arr)} rows")
    w = 1.0 / t_arr if weighting == "relative" else np.ones_like(t_arr)
    design = np.column_stack([np.ones_like(x_arr), x_arr])
    (alpha, slope), *_ = np.linalg.lstsq(design * w[:, None], t_arr * w, rcond=None)
    if not slope > 0:
        raise ValueError(f"fitted slope for {collective!r} is {slope:g} s/B (not positive): no bandwidth term")
    fitted = alpha + slope * x_arr
    # R^2 of the (weighted) problem that was solved.
    wt = w**2
    mean = np.sum(wt * t_arr) / np.sum(wt)
    ss_res = float(np.sum(wt * (t_arr - fitted) ** 2))
    ss_tot = float(np.sum(wt * (t_arr - mean) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return CommFit(
        collective=collective,
        alpha_s=float(alpha),
        bandwidth_bps=float(1.0 / slope),
        r2=float(r2),
        n_points=int(len(t_arr)),
        weighting=weighting,
        max_rel_error=float(np.max(np.abs(fitted - t_arr) / t_arr)),
    )


def fit_all(sweep: Any, collectives: Iterable[str] | None = None, **kwargs: Any) -> dict[str, CommFit]:
    """Fit every collective present in the sweep (memcpy excluded); skips those that cannot be fitted."""
    rows = _rows(sweep)
    names = collectives or sorted({r["collective"] for r in rows if r["collective"] != MEMCPY})
    fits = {}
    for name in names:
        try:
            fits[name] = fit_latency_bandwidth(rows, name, **kwargs)
        except ValueError:
            continue
    return fits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ddpbench commfit",
        description="Fit latency alpha and bus bandwidth B per collective from a commbench CSV.",
    )
    parser.add_argument("csv", help="CSV written by ddpbench commbench")
    parser.add_argument("--weighting", choices=("relative", "absolute"), default="relative")
    parser.add_argument("--min-bytes", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    fits = fit_all(args.csv, weighting=args.weighting, min_bytes=args.min_bytes)
    if args.json:
        json.dump({k: v.as_dict() for k, v in fits.items()}, sys.stdout, indent=2)
        print()
        return 0
    print(f"{'collective':<16} {'alpha (us)':>11} {'B (GB/s)':>9} {'r2':>7} {'max rel err':>12} {'n':>4}")
    for name, fit in fits.items():
        print(
            f"{name:<16} {fit.alpha_s * 1e6:>11.1f} {fit.bandwidth_gbps:>9.3f} {fit.r2:>7.4f} "
            f"{fit.max_rel_error:>12.3f} {fit.n_points:>4}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
