"""The measured parts: each measured cell's step split into compute, communication, exposed
communication and backward (per step, from the pacing rank's phase fractions, which partition the
step), with bootstrap draws of their means over the cell's repeats, and the axes that say which
cells share a part (the same compute, the same message, the same link)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ddpbench.analysis.health import timed_runs
from ddpbench.analysis.links import ACHIEVED, NOMINAL, link_rate_bps
from ddpbench.analysis.tables import LAUNCH_AXES, axes, numeric_column
from ddpbench.core.params import NO_LINK, backend_for
from ddpbench.core.run_record import Extra, text_numbers
from ddpbench.strategies import STRATEGY_SETTINGS, names as strategy_names, strategy_traits

N_BOOT = 200  # resamples of every cell's repeats
SEED = 0
# Axes that do not change what one rank computes for one sample: the compute key is a cell's axes
# without them (the per-rank batch enters the compute law itself).
COMPUTE_FREE = (*LAUNCH_AXES, "strategy", "link", "scaling", "batch_size", "dataset_size", "test_size", "epochs",
                "max_steps", "timeout_s", "profile_steps", "data_root", *STRATEGY_SETTINGS)  # fmt: skip
# Settings that change the bytes a strategy sends per call (bucket_mb and sync_period are scaled instead).
MESSAGE_SETTINGS = ("powersgd_rank",)
PARTS = ("step", "compute", "comm", "exposed", "backward")


@dataclass
class Measured:
    """Measured cells: `cells` one row each (its axes, `strategy`, `world_size`, `per_rank_batch`,
    `compute_key`, `message_key`, `link_class`, `link_bps`, `calls`, `bytes`, `n_runs`, `samples_per_step`,
    `tokens_per_sample`, `bucket_ready` and `bucket_bytes`: `bucket_readiness`), `draws[part]` an array [1 + n_boot, cells] of the part's mean per step: row 0
    the cells' means, the others resamples of their repeats."""

    cells: pd.DataFrame
    draws: dict[str, np.ndarray]
    axes: list[str]

    def subset(self, keep: np.ndarray) -> "Measured":
        keep = np.asarray(keep, bool)
        return Measured(self.cells[keep].reset_index(drop=True), {k: v[:, keep] for k, v in self.draws.items()}, self.axes)


def compute_axes(cols: list[str]) -> list[str]:
    return [a for a in cols if a not in COMPUTE_FREE]


def text(value) -> str:
    """A value as a key holds it, the same whether it came from runs.csv or a config: a number in one
    form (25, 25.0 and "25.0" alike), nothing (None, NaN, "") as ""."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{number:.12g}" if np.isfinite(number) else str(value)


def keys(frame: pd.DataFrame, cols: list[str]) -> pd.Series:
    """One text key per row over `cols` (the cells that share a part share it)."""
    if not cols:
        return pd.Series("", index=frame.index)
    return frame[cols].map(text).agg("|".join, axis=1)


def link_class(frame: pd.DataFrame) -> pd.Series:
    """What a cell communicates over: device, backend, one node or several, and the link."""
    link = frame["link"].astype(str) if "link" in frame else pd.Series(NO_LINK, index=frame.index)
    nodes = numeric_column(frame, "nodes").fillna(1).astype(int) if "nodes" in frame else 1
    parts = [frame[c].astype(str) if c in frame else pd.Series("", index=frame.index) for c in ("device", "backend")]
    return parts[0] + "/" + parts[1] + "/" + pd.Series(nodes, index=frame.index).astype(str) + " node(s)/" + link


def annotate(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """The keys the model joins cells by, for measured and target cells alike."""
    out = frame.copy()
    if "backend" in out and "device" in out:  # runs.csv records the setting (auto); the sweep names the backend
        out["backend"] = [backend_for(str(b), str(d)) for b, d in zip(out["backend"], out["device"])]
    out["compute_key"] = keys(out, compute_axes(cols))
    out["message_key"] = out["compute_key"] + "|" + out["strategy"].astype(str) + "|" + keys(
        out, [c for c in MESSAGE_SETTINGS if c in out])
    out["link_class"] = link_class(out)
    if "link_bps" not in out:
        out["link_bps"] = [link_rate_bps(v) for v in out["link"]] if "link" in out else np.nan
    out["schedule"] = [strategy_traits(s).schedule for s in out["strategy"]]
    out["law"] = [strategy_traits(s).comm_volume for s in out["strategy"]]
    return out


def per_step(runs: pd.DataFrame) -> pd.DataFrame:
    """Each run's parts per step: the phase fractions times the mean step time (the fractions partition
    the step whatever the phases' own unit was in the runs table's version)."""
    step = numeric_column(runs, "step_time_mean_s")

    def part(name: str) -> pd.Series:
        frac = numeric_column(runs, f"frac_{name}")
        return frac * step if frac.notna().any() else numeric_column(runs, f"phase_{name}_s")

    exposed = part("exposed_comm").fillna(0.0)
    return pd.DataFrame({"step": step, "compute": step - exposed, "comm": part("comm").fillna(0.0),
                         "exposed": exposed, "backward": part("backward")}, index=runs.index)  # fmt: skip


def bucket_readiness(runs: pd.DataFrame) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    """A cell's recorded buckets over its repeats, from runs.csv's text (run_record.numbers_text): the
    median fraction of backward at which each bucket was ready and the median bytes per bucket, over the
    runs with the most common bucket count; (None, None) where no run recorded them (older runs, strategies
    without buckets). Not resampled: the parts' intervals do not carry its run-to-run spread."""
    if Extra.bucket_ready not in runs:
        return None, None
    ready = [text_numbers(v) for v in runs[Extra.bucket_ready]]
    sizes = [text_numbers(v) for v in runs[Extra.bucket_bytes]] if Extra.bucket_bytes in runs else [[]] * len(ready)
    counts = Counter(len(r) for r in ready if r)
    if not counts:
        return None, None
    m = counts.most_common(1)[0][0]
    kept = [r for r in ready if len(r) == m]
    bytes_kept = [b for r, b in zip(ready, sizes) if len(r) == m and len(b) == m]
    return (tuple(float(v) for v in np.median(kept, axis=0)),
            tuple(float(v) for v in np.median(bytes_kept, axis=0)) if bytes_kept else None)  # fmt: skip


def resample_means(values: np.ndarray, cell: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """[1 + n_boot, cells, parts]: each cell's mean of `values` [runs, parts] over its runs (`cell` the run's
    cell, 0..cells-1), then over `n_boot` resamples of its runs; cells with as many runs are drawn together."""
    order = np.argsort(cell, kind="stable")
    counts = np.bincount(cell)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    v = values[order]
    out = np.empty((1 + n_boot, len(counts), values.shape[1]))
    out[0] = np.add.reduceat(np.nan_to_num(v), starts, axis=0) / np.maximum(
        np.add.reduceat(~np.isnan(v), starts, axis=0), 1)
    for n in np.unique(counts):
        same = np.flatnonzero(counts == n)
        picks = starts[same][:, None, None] + rng.integers(0, n, size=(len(same), n_boot, n))
        out[1:, same] = np.nanmean(v[picks], axis=2).transpose(1, 0, 2)
    return out


def measure(runs: pd.DataFrame, n_boot: int = N_BOOT, seed: int = SEED) -> Measured:
    """The measured cells of a runs table (ok runs with a step time of a strategy this checkout has), with
    `n_boot` resamples of every cell's repeats."""
    ok = runs[runs["status"].astype(str) == "ok"] if "status" in runs else runs
    ok = timed_runs(ok)
    ok = ok[(numeric_column(ok, "step_time_mean_s") > 0) & ok["strategy"].astype(str).isin(strategy_names())]
    cols = axes(ok)
    if ok.empty:
        return Measured(pd.DataFrame(columns=[*cols, "compute_key"]), {p: np.zeros((1 + n_boot, 0)) for p in PARTS}, cols)
    groups = ok.groupby([ok[c].astype(str) for c in cols], sort=True, dropna=False)
    cell = groups.ngroup().to_numpy()
    with np.errstate(invalid="ignore"):
        means = resample_means(per_step(ok)[list(PARTS)].to_numpy(float), cell, n_boot, np.random.default_rng(seed))
    numbers = pd.DataFrame({
        "per_rank_batch": numeric_column(ok, "per_rank_batch"), "calls": numeric_column(ok, "comm_calls_per_step"),
        "bytes": numeric_column(ok, "comm_bytes_per_step"),
        "link_bps": numeric_column(ok, ACHIEVED).fillna(numeric_column(ok, NOMINAL)),
        "samples_per_step": numeric_column(ok, "samples_per_s") * numeric_column(ok, "step_time_mean_s"),
        "tokens_per_sample": numeric_column(ok, "tokens_per_s") / numeric_column(ok, "samples_per_s"),
    }).groupby(cell).median()  # fmt: skip
    first = ok.groupby(cell)[cols].first()
    buckets = [bucket_readiness(g) for _, g in ok.groupby(cell)] if Extra.bucket_ready in ok else [(None, None)] * len(first)
    cells = pd.concat([first, numbers], axis=1).reset_index(drop=True)
    cells["bucket_ready"] = [b[0] for b in buckets]
    cells["bucket_bytes"] = [b[1] for b in buckets]
    cells["n_runs"] = np.bincount(cell)
    cells = annotate(cells, cols)
    if Extra.comm_volume in ok:  # the law the runs recorded, where they did (older strategies' law may differ)
        recorded = ok.groupby(cell)[Extra.comm_volume].first()
        cells["law"] = [r if isinstance(r, str) and r else law for r, law in zip(recorded.to_numpy(), cells["law"])]
    return Measured(cells, {p: means[:, :, i] for i, p in enumerate(PARTS)}, cols)
