"""The tables a figure is drawn from (`Data`), and their split into figure groups.

`Data` holds one grid's tables from analysis (runs, cells, speedups, fits; the steps, the
collective sweep and the profiler's operators where there are some) and the axes that tell its
series and panels apart. The grid's varying axes that no figure plots or tells apart as series
(model, device, ...) split the figures into groups (`figure_groups`): each group its own small
multiples, never one figure holding every cell.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ddpbench import analysis as A
from ddpbench.report.figures.style import text


@dataclass
class Data:
    runs: pd.DataFrame
    cells: pd.DataFrame
    speed: pd.DataFrame
    fits: pd.DataFrame
    steps: pd.DataFrame | None = None
    comm: pd.DataFrame | None = None
    label_axes: list[str] | None = None  # a figure group's data: the whole grid's series axes (fits.csv's labels)
    profile: pd.DataFrame | None = None  # aggregate's profile.csv: top operators of profiled steps

    @property
    def series_axes(self) -> list[str]:
        """Axes that tell apart scaling groups (the grid's axes minus p): strategy and the panels' axes."""
        return self.label_axes if self.label_axes is not None else A.varying(self.runs, A.group_axes(self.runs))

    @property
    def panel_axes(self) -> list[str]:
        """Axes that tell apart panels of a plot against workers: the series axes minus strategy (and
        minus a figure group's own axes, which are constant in it)."""
        return [a for a in self.series_axes if a != "strategy" and a in A.varying(self.runs, [a])]


def numeric(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce")


# Axes a reader filters on: every varying grid axis that no figure puts on its x axis or tells
# apart as series. Each combination of them is a figure group (one model on one device, ...):
# its own small multiples, never one figure holding every cell. The training options a study
# compares side by side (precision, gradient accumulation, compiling, activation checkpointing) stay
# in the figures, as panels (and the checkpointing figure's rows), so the figures show them side by side.
PLOTTED_AXES = ("strategy", "world_size", "nodes", "batch_size", "dataset_size", "link", "precision", "grad_accum",
                "compile", "activation_checkpointing")  # fmt: skip


def group_axes(runs: pd.DataFrame) -> list[str]:
    """The axes that split the figures into groups (none for a grid that varies only plotted axes)."""
    return [a for a in A.varying(runs, A.axes(runs)) if a not in PLOTTED_AXES]


def _of_runs(df: pd.DataFrame | None, runs: pd.DataFrame) -> pd.DataFrame | None:
    """The rows of a per-run table (steps, profile) that belong to `runs`, by run folder: those
    tables name only some axes (steps.csv has no num_workers), so selecting by value would
    leave other groups' runs in."""
    if df is None or df.empty or "run_dir" not in df or "run_dir" not in runs:
        return df
    return df[df["run_dir"].isin(runs["run_dir"])]


def figure_groups(d: Data) -> list[tuple[str, dict, Data]]:
    """(label, {axis: value}, data of the group) per combination of `group_axes`, sorted; one
    ("", {}, d) for a grid without such axes. The collective sweep belongs to no group: the first
    group carries it."""
    cols = group_axes(d.runs)
    if not cols:
        return [("", {}, d)]
    out = []
    for key, _ in d.runs.groupby(cols, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        info = {c: v for c, v in zip(cols, key)}
        runs = A.matching(d.runs, info)
        part = Data(runs, A.matching(d.cells, info), A.matching(d.speed, info), A.matching(d.fits, info),
                    _of_runs(d.steps, runs), d.comm if not out else None, d.series_axes, _of_runs(d.profile, runs))  # fmt: skip
        out.append((text(", ".join(f"{c}={v}" for c, v in info.items())), info, part))
    return out
