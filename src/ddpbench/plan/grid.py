"""The grid of a study, planned without Snakemake: the config's axes in path order with
their values checked, the exclusions and the baseline checked against them, the grid's
size bounded before it is expanded, every cell that no exclusion drops, and each cell's
run folder below runs/ (name~value folders).

The workflow (workflow/rules/common.smk) calls these at include time. A refused value
raises ConfigError naming its config key, which the workflow reports as one line; what
is only worth a warning goes to the `warn` callable the caller passes.
"""

from __future__ import annotations

import itertools
import math
import os
from typing import Any, Callable, Iterable, Mapping

import pandas as pd

from ddpbench.core.params import CellParams, ParamError, check_values, effective_params
from ddpbench.core.study_config import study_names
from ddpbench.plan.config_schema import CORE_AXES, LAUNCH_AXES, STUDIES, TIMING_KEYS
from ddpbench.strategies import unread_settings

PATH_UNSAFE = (os.sep, "~")  # axis values are folder names: name~value

Warn = Callable[[str], Any]


class ConfigError(ValueError):
    """A config value the plan refuses; `key` is where it is set (grid.model, exclude[0].colour,
    params.batch_size + params.scaling, ...)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"invalid config at '{key}': {message}")
        self.key = key
        self.message = message


def check_axis_values(key: str, name: str, values: Iterable[Any]) -> None:
    """Check values of cell parameter or launch axis `name`; `key` is the config path."""
    if name in LAUNCH_AXES:
        return  # integers >= 1, checked by the schema
    try:
        check_values(name, values)
    except ParamError as err:
        raise ConfigError(key, str(err)) from None


def fixed_cell_params(config: Mapping[str, Any], axes: Mapping[str, list]) -> dict[str, Any]:
    """The cell parameters shared by all cells: CellParams defaults <- params <- timing.
    timing's other keys (max_rel_ci) are the workflow's, never a cell flag. Each value
    is checked; a grid axis overrides its key, so the checks across keys (batch_size
    'auto' needs scaling weak) see only the keys that apply to every cell."""
    timing = {k: v for k, v in config["timing"].items() if k in TIMING_KEYS}
    values = {**config["params"], **timing}
    try:
        for name, value in values.items():
            check_values(name, [value])
        shared = {k: v for k, v in values.items() if k not in axes}
        return CellParams.from_mapping(shared).as_dict()
    except ParamError as err:
        section = "timing" if err.name in TIMING_KEYS else "params"
        raise ConfigError(f"{section}.{err.name}", str(err)) from None


def base_cell_params(config: Mapping[str, Any]) -> dict[str, Any]:
    """Every cell parameter as it would be without any grid axis: CellParams defaults <-
    params <- timing (each value already checked by fixed_cell_params)."""
    defaults = CellParams().as_dict()
    timing = {k: v for k, v in config["timing"].items() if k in TIMING_KEYS}
    return {**defaults, **config["params"], **timing, "world_size": 1, "nodes": 1}


def cell_path(cell: Mapping[str, Any], base: Mapping[str, Any]) -> str:
    """A cell's run folder below runs/: name~value for every core axis, and for any other
    axis only where the cell's value differs from the base one (and, for a strategy
    setting, only if the cell's strategy reads it). So adding an axis whose values include
    the old setting keeps the runs already measured at it."""
    unread = unread_settings(cell["strategy"])
    return "/".join(
        f"{name}~{value}"
        for name, value in cell.items()
        if name in CORE_AXES or (value != base[name] and name not in unread)
    )


def effective_cells(cells: pd.DataFrame, base: Mapping[str, Any]) -> pd.DataFrame:
    """The cells as runs: each cell's strategy-specific settings that its strategy does not
    read held at their defaults, and cells that thereby coincide run once (single is not
    repeated per bucket size); indexed by run folder."""
    records = [
        {name: effective_params({**base, **cell})[name] for name in cell}
        for cell in cells.to_dict(orient="records")
    ]
    paths = [cell_path(cell, base) for cell in records]
    unique = pd.DataFrame(records, index=paths, columns=cells.columns).astype(object)
    return unique[~unique.index.duplicated()]


def is_path_component(text: str) -> bool:
    """Axis values become folder names `name~value` of a run's path."""
    return text not in ("", ".", "..") and not any(ch in text for ch in PATH_UNSAFE)


def axis_order() -> list[str]:
    """Path order of the axes: the core axes (nodes after world_size), then the others in
    parameter order."""
    order = list(CORE_AXES)
    order.insert(order.index("world_size") + 1, "nodes")
    return order + [n for n in CellParams.names() if n not in order]


def grid_axes(config: Mapping[str, Any]) -> dict[str, list]:
    """The config's grid axes in path order (axis_order), each value checked and usable as
    a folder name."""
    grid = config["grid"]
    axes = {name: list(grid[name]) for name in axis_order() if name in grid}
    for name, values in axes.items():
        check_axis_values(f"grid.{name}", name, values)
        unsafe = [v for v in values if not is_path_component(str(v))]
        if unsafe:
            raise ConfigError(
                f"grid.{name}",
                f"{unsafe[0]!r} cannot be a folder name (no slash or tilde); set it in params instead",
            )
    return axes


def value_matches(value: Any, spec: Any) -> bool:
    """Exclusion filter syntax: value (equal), list (one of), {not:, min:, max:}."""
    if isinstance(spec, list):
        return value in spec
    if not isinstance(spec, dict):
        return value == spec
    if "not" in spec:
        banned = spec["not"] if isinstance(spec["not"], list) else [spec["not"]]
        if value in banned:
            return False
    numeric = isinstance(value, (int, float))
    if "min" in spec and not (numeric and value >= spec["min"]):
        return False
    if "max" in spec and not (numeric and value <= spec["max"]):
        return False
    return True


def filter_matches(cell: Mapping[str, Any], entry: Mapping[str, Any]) -> bool:
    """A cell matches an exclude entry when it matches every key of it."""
    return all(value_matches(cell[key], spec) for key, spec in entry.items())


def check_exclusions(exclusions: list[dict[str, Any]], axes: Mapping[str, list]) -> None:
    """Every key of an exclude entry is a grid axis, and every value it names is one the
    axis could take."""
    for i, entry in enumerate(exclusions):
        for key, spec in entry.items():
            where = f"exclude[{i}].{key}"
            if key not in axes:
                raise ConfigError(where, f"'{key}' is not a grid axis (axes: {', '.join(axes)})")
            if isinstance(spec, dict):
                listed = spec.get("not", [])
                listed = listed if isinstance(listed, list) else [listed]
            else:
                listed = spec if isinstance(spec, list) else [spec]
            check_axis_values(where, key, listed)


def check_baseline(baseline: Mapping[str, Any], axes: Mapping[str, list]) -> None:
    """Every key of baseline is a grid axis, and its value one the axis could take."""
    for key, value in baseline.items():
        if key not in axes:
            raise ConfigError(f"baseline.{key}", f"'{key}' is not a grid axis (axes: {', '.join(axes)})")
        check_axis_values(f"baseline.{key}", key, [value])


def check_studies(config: Mapping[str, Any]) -> None:
    """Every name in the config's `study` is a study with a report section (config_schema.STUDIES,
    the modules of report/studies/): the schema checks only that each is a word, so that a new
    study module needs no schema change, and this names the key and the studies there are."""
    unknown = [name for name in study_names(config) if name not in STUDIES]
    if unknown:
        raise ConfigError("study", f"unknown study {', '.join(map(repr, unknown))}: the studies with a report "
                                   f"section are {', '.join(STUDIES)} (src/ddpbench/report/studies/)")  # fmt: skip


RAISE_MAX_RUNS = "raise max_runs (e.g. --config max_runs=N) for a deliberately large study"


def check_grid_size(axes: Mapping[str, list], repeats: int, max_runs: int, raise_it: str = RAISE_MAX_RUNS) -> None:
    """Refuse a grid whose product of axes x repeats exceeds max_runs, before expanding it
    (a typo such as 1,000 values on four axes would otherwise exhaust memory); `raise_it` says
    how to allow more."""
    cells = math.prod(len(values) for values in axes.values())
    runs = cells * repeats
    if runs > max_runs:
        sizes = " x ".join(f"{len(v)} {name}" for name, v in axes.items() if len(v) > 1)
        raise ConfigError(
            "max_runs",
            f"the grid's axes multiply to {cells:,} cells ({sizes or '1'}; before exclusions)"
            f" x {repeats:,} repeats = "
            f"{runs:,} runs, more than max_runs ({max_runs:,}); narrow the grid or exclude "
            f"cells, or {raise_it}",
        )


def expand_grid(axes: Mapping[str, list], exclusions: list[dict[str, Any]], warn: Warn,
                unmatched: bool = True) -> pd.DataFrame:  # fmt: skip
    """Every combination of axis values that no exclusion drops (nor a world_size that is
    not a multiple of nodes), as a data frame; `warn` hears of an exclusion that matches
    no cell (unless `unmatched` is False: exclusions the user did not write) and of the
    uneven cells left out."""
    names = list(axes)
    cells = [dict(zip(names, combo)) for combo in itertools.product(*axes.values())]
    used = [False] * len(exclusions)
    kept, uneven = [], 0
    for cell in cells:
        hits = [i for i, entry in enumerate(exclusions) if filter_matches(cell, entry)]
        for i in hits:
            used[i] = True
        if hits:
            continue
        if cell["world_size"] % cell.get("nodes", 1):
            uneven += 1
            continue
        kept.append(cell)
    for i in (i for i, hit in enumerate(used) if not hit and unmatched):
        warn(f"ddpbench: exclude[{i}] matches no cell of the grid")
    if uneven:
        warn(f"ddpbench: {uneven} cell(s) left out: world_size is not a multiple of nodes")
    if not kept:
        raise ConfigError("exclude", "the exclusions drop every cell of the grid")
    return pd.DataFrame(kept, columns=names).astype(object)
