"""The expanded cells checked before any job exists, without Snakemake: values valid alone
but not together, the synthetic stand-ins of `--config dataset=synthetic`, what this
machine cannot give some cells (cores, memory, network namespaces), and the baseline
table of compare_to.

The workflow (workflow/rules/common.smk) calls these at include time with the grid of
ddpbench.plan.grid. A refused cell raises ConfigError naming its config keys; a warning
goes to the `warn` callable the caller passes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from ddpbench.core import layout
from ddpbench.core.params import NO_LINK, CellParams, ParamError, check_auto_batch_scaling, check_backend, check_cell
from ddpbench.core.sysinfo import oversubscription, usable_cores
from ddpbench.plan.config_schema import OFFLINE_DATASET, TIMING_KEYS
from ddpbench.plan.grid import ConfigError, Warn, axis_order, effective_cells
from ddpbench.strategies import STRATEGY_SETTINGS, strategy_settings

REAL_DATASETS = ("cifar10", "mnist", "imagenette")
# Values per sample of the synthetic stand-ins (imagenette: 3 x image_size^2).
SAMPLE_VALUES = {"cifar10": 3 * 32 * 32, "mnist": 28 * 28, "imagenette": 3}


def key_of(name: str, axes: Mapping[str, list]) -> str:
    """Where a cell parameter is set in the config: its grid axis, else timing/params."""
    if name in axes:
        return f"grid.{name}"
    return f"{'timing' if name in TIMING_KEYS else 'params'}.{name}"


def check_cell_combinations(cells: pd.DataFrame, fixed: Mapping[str, Any], axes: Mapping[str, list]) -> None:
    """Values valid alone but not together: batch_size 'auto' fixes the per-rank batch,
    refused with strong scaling (the global batch would grow with world size yet be
    labelled speedup); backend nccl needs device cuda; and every cell the harness would
    refuse before or at its first step (params.check_cell: a global batch larger than
    dataset_size, ...), so no such cell pays a launch to fail. `fixed` holds the values
    shared by every cell (plan.grid.fixed_cell_params)."""
    for cell in cells.to_dict(orient="records"):
        value = {k: cell.get(k, fixed[k]) for k in ("batch_size", "scaling", "backend", "device")}
        try:
            check_auto_batch_scaling(value["batch_size"], value["scaling"])
        except ParamError as err:
            where = f"{key_of('batch_size', axes)} + {key_of('scaling', axes)}"
            raise ConfigError(where, f"{err} (exclude these cells or set scaling: weak)") from None
        try:
            check_backend(value["backend"], value["device"])
        except ParamError as err:
            where = f"{key_of('backend', axes)} + {key_of('device', axes)}"
            raise ConfigError(where, f"{err} (exclude these cells)") from None
        try:
            check_cell({**fixed, **cell})
        except ParamError as err:
            where = " + ".join(key_of(name, axes) for name in err.names)
            raise ConfigError(where, f"{err} (exclude these cells)") from None


def machine_memory_bytes() -> int:
    """This machine's physical memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def synthetic_stand_ins(
    cells: pd.DataFrame,
    dataset: str,
    fixed: Mapping[str, Any],
    base: Mapping[str, Any],
    warn: Warn,
    memory_bytes: int | None = None,
) -> pd.DataFrame:
    """`--config dataset=synthetic` (top-level `dataset`): every cell on a real dataset
    runs on dataset synthetic with synthetic_shape that dataset (its inputs' shape and
    classes; imagenette's side is the cell's image_size), so no prepare_data job is
    planned and nothing is fetched. Called after the exclusions and the cell checks, so
    the grid is the one written, the real datasets' sample limits included. The cells
    on synthetic data already keep their own synthetic_shape; a stand-in identical to
    one of them runs once. Run folders say dataset~synthetic (and synthetic_shape~X
    where X is not the shared synthetic_shape), never beside a real-data run's.
    `memory_bytes` (this machine's when None) bounds the stand-ins' data in memory."""
    if dataset != OFFLINE_DATASET:
        return cells
    frame = cells.reset_index(drop=True)
    real = frame["dataset"].isin(REAL_DATASETS)
    if not real.any():
        return cells
    if "synthetic_shape" not in frame.columns:
        frame["synthetic_shape"] = fixed["synthetic_shape"]
    frame.loc[real, "synthetic_shape"] = frame.loc[real, "dataset"]
    frame.loc[real, "dataset"] = OFFLINE_DATASET
    frame = frame[[name for name in axis_order() if name in frame.columns]]
    stand_ins = effective_cells(frame, base)
    warn_synthetic_memory(stand_ins, fixed, warn, memory_bytes)
    return stand_ins


def warn_synthetic_memory(
    cells: pd.DataFrame, fixed: Mapping[str, Any], warn: Warn, memory_bytes: int | None = None
) -> None:
    """Synthetic data lives in each rank's memory (train + test samples as float32, and
    as much again while it is generated): warn when a cell's ranks on one node would need
    more than `memory_bytes` (this machine's memory when None; a full-size imagenette
    stand-in: 2.9 GB a rank)."""
    total = machine_memory_bytes() if memory_bytes is None else memory_bytes
    heavy = []
    for cell in cells.to_dict(orient="records"):
        p = {**fixed, **cell}
        if p["dataset"] != OFFLINE_DATASET:
            continue
        values = SAMPLE_VALUES[p["synthetic_shape"]]
        if p["synthetic_shape"] == "imagenette":
            values *= p["image_size"] ** 2
        per_rank = 2 * 4 * values * (p["dataset_size"] + p["test_size"])
        ranks = int(cell["world_size"]) // int(cell.get("nodes", 1))
        if ranks * per_rank > total:
            heavy.append(
                f"{p['synthetic_shape']} x {p['dataset_size']} on {ranks} ranks: "
                f"{ranks * per_rank / 2**30:.1f} GiB"
            )
    if heavy:
        warn(
            f"ddpbench: dataset=synthetic: {len(heavy)} cell(s) would hold more synthetic data "
            f"in memory than this machine's {total / 2**30:.0f} GiB (train + test samples as "
            "float32, twice while generated), e.g. "
            + "; ".join(heavy[:3])
            + ": lower their dataset_size (or test_size)"
        )


def warn_oversubscribed_cells(
    cells: pd.DataFrame, fixed: Mapping[str, Any], allowed: bool, warn: Warn, cores: int | None = None
) -> None:
    """CPU cells whose ranks per node x threads exceed `cores` (this machine's usable cores
    when None): the launcher records them as skipped (they stay rows), unless `allowed`
    (the config's allow_oversubscribe) runs them flagged."""
    cores = usable_cores() if cores is None else cores
    count = 0
    for cell in cells.to_dict(orient="records"):
        nodes = cell.get("nodes", 1)
        # A link's two nodes are namespaces sharing this machine's cores.
        on_lab = cell.get("link", fixed["link"]) != NO_LINK
        if oversubscription(
            cell.get("device", fixed["device"]),
            cell.get("threads_per_rank", fixed["threads_per_rank"]),
            cell["world_size"] // nodes,
            nodes,
            cores // nodes or 1 if on_lab else cores,
        ):
            count += 1
    if count and allowed:
        warn(
            f"ddpbench: {count} cell(s) will run oversubscribed on this machine "
            f"({cores} usable cores; allow_oversubscribe: true), flagged in their summaries"
        )
    elif count:
        warn(
            f"ddpbench: {count} cell(s) will be skipped as oversubscribed on this machine "
            f"(ranks per node x threads per rank > {cores} usable cores; "
            "set allow_oversubscribe: true to run them)"
        )


def warn_link_cells(
    cells: pd.DataFrame,
    fixed: Mapping[str, Any],
    warn: Warn,
    available: Callable[[], str | None] | None = None,
) -> None:
    """Cells over a link need two network namespaces on this machine (root, iproute2): where
    none can be made (`available`, ddpbench.cluster.netlab.available when None, says why)
    the launcher records them as skipped with the reason; say so now."""
    records = cells.to_dict(orient="records")
    count = sum(cell.get("link", fixed["link"]) != NO_LINK for cell in records)
    if not count:
        return
    if available is None:
        from ddpbench.cluster import netlab

        available = netlab.available
    reason = available()
    if reason:
        warn(
            f"ddpbench: {count} cell(s) over a link will be recorded as skipped on this machine: "
            f"two network namespaces {reason}"
        )


def warn_unread_settings(params: Mapping[str, Any], axes: Mapping[str, list], warn: Warn) -> None:
    """A strategy setting the config sets (params.bucket_mb, or a grid axis of it) that some of the
    grid's strategies do not read: they run once, at the setting's default (it cannot change their
    runs), and the report compares them as twins of the cells of the strategies that read it
    (analysis.tables.settings_as_read) at one value; at several, only at the default."""
    defaults = CellParams().as_dict()
    grid_strategies = sorted({str(s) for s in axes.get("strategy", [defaults["strategy"]])})
    for setting in STRATEGY_SETTINGS:
        values = list(axes[setting]) if setting in axes else [params[setting]] if setting in params else []
        if not values or values == [defaults[setting]]:
            continue
        readers = [s for s in grid_strategies if setting in strategy_settings(s)]
        others = [s for s in grid_strategies if s not in readers]
        if not others:
            continue
        key, shown = key_of(setting, axes), ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
        if not readers:
            warn(f"ddpbench: {key} {shown} is read by none of this grid's strategies ({', '.join(others)}): it changes no run")
        elif len(values) == 1:
            warn(f"ddpbench: {key} {shown} is read by {', '.join(readers)} only: {', '.join(others)} run at the default "
                 f"{setting} {defaults[setting]:g} (it cannot change their runs) and are compared with the others as "
                 f"their twins")  # fmt: skip
        else:
            warn(f"ddpbench: {key} [{shown}] is read by {', '.join(readers)} only: {', '.join(others)} run once, at the "
                 f"default {setting} {defaults[setting]:g}, and are compared only with the cells at {defaults[setting]:g}")  # fmt: skip


def compare_to_table(path: str | None, results: str) -> str | None:
    """compare_to: the baseline's runs.csv (a results folder or the file itself), checked
    before any job runs; None when not set. Not this study's own results."""
    if not path:
        return None
    given = Path(path)
    table = given / layout.RUNS_TABLE if given.is_dir() else given
    if not table.is_file():
        raise ConfigError(
            "compare_to",
            f"{path}: "
            + (
                "no aggregate/runs.csv in this folder (a results folder of a finished study?)"
                if given.is_dir()
                else "no such file or folder"
            ),
        )
    if table.resolve() == Path(layout.Layout.of(results).runs_table).resolve():
        raise ConfigError("compare_to", f"{path} is this study's own results; name a stored copy")
    return str(table)
