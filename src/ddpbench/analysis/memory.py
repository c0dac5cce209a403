"""Memory held per rank and what it costs in time: the sharded strategies against ddp, and what
changing one setting (precision, grad_accum) does to a cell.

What a rank holds for training is counted, not measured: the bytes of its own parameters,
gradients and optimizer state (its shards under zero and the FSDP strategies; runs.csv's
extra_param_bytes, extra_grad_bytes, extra_optimizer_state_bytes and their sum extra_held_bytes,
the largest rank's), so it is exact and the same in every repeat of a cell. The peak is measured:
the largest rank's peak RSS on CPU, its peak CUDA allocation on a GPU, in MiB. Time is the
throughput, compared as comparisons.csv compares it: the ratio of two cells' geometric means over
their repeats with its Welch log-t interval, a difference only where that interval excludes 1, or
a sequential design's comparison where it asked the pair (`comparison.compare`).

`memory_savings(runs, cells)`: per setting (every axis but the strategy equal, world size
included) where ddp and a sharded strategy both ran, what the sharded one holds against ddp
and its throughput ratio. `axis_effects(runs, cells, axis, reference)`: per cell whose `axis`
is not `reference`, its throughput and memory against the cell that differs only in that axis
(the peak's ratio, too, with its Welch interval: what activation checkpointing saves, transforms).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench.analysis.comparison import Comparison, DesignAnswers, compare_pair
from ddpbench.analysis.tables import axes, numeric_column
from ddpbench.core.run_record import Extra
from ddpbench.strategies import REFERENCE, sharded  # REFERENCE: what each rank holds without sharding: everything

SHARDED = sharded()  # ZeRO-1 (optimizer state), ZeRO-2 (+ gradients), ZeRO-3 (+ parameters): zero, fsdp_grad_op, fsdp
HELD = Extra.held_bytes
HELD_PARTS = ((Extra.param_bytes, "parameters"), (Extra.grad_bytes, "gradients"),
              (Extra.optimizer_state_bytes, "optimizer state"))  # fmt: skip
PEAKS = (
    ("cuda_max_allocated_mb", "peak CUDA allocated"),
    ("peak_rss_mb", "peak RSS"),
)  # MiB; CUDA first where measured
MIB = 2**20

RATIO_COLUMNS = ["ratio", "ratio_ci_low", "ratio_ci_high", "ratio_ci_level", "verdict", "interval_from", "margin",
                 "unstable"]  # fmt: skip
SAVING_COLUMNS = [
    "strategy", "reference", "held_bytes", "reference_held_bytes", "saved_bytes", "held_ratio",
    *(f"{c}_ratio" for c, _ in HELD_PARTS), *RATIO_COLUMNS, "peak_kind", "peak_mib", "peak_ci_low", "peak_ci_high",
    "reference_peak_mib", "reference_peak_ci_low", "reference_peak_ci_high",
]  # fmt: skip
EFFECT_COLUMNS = ["axis", "reference_value", "held_ratio", *RATIO_COLUMNS, "peak_kind", "peak_mib", "peak_ci_low",
                  "peak_ci_high", "peak_ci_level", "reference_peak_mib", "reference_peak_ci_low", "reference_peak_ci_high",
                  "reference_peak_ci_level", "peak_ratio", "peak_ratio_ci_low", "peak_ratio_ci_high",
                  "peak_ratio_ci_level"]  # fmt: skip


def cell_key(values) -> tuple[str, ...]:
    """Axis values as text, a whole number without '.0' (a cells table read back from CSV may hold
    64.0 where the runs hold 64) and NaN as 'nan'."""
    out = []
    for v in values:
        if (
            isinstance(v, (int, float, np.integer, np.floating))
            and not isinstance(v, bool)
            and np.isfinite(v)
            and v == int(v)
        ):
            out.append(str(int(v)))
        else:
            out.append(str(v))
    return tuple(out)


def has_held(cells: pd.DataFrame) -> bool:
    """Whether the cells carry the memory held per rank (runs that counted it)."""
    return HELD in cells and pd.to_numeric(cells[HELD], errors="coerce").notna().any()


def peaks(cells: pd.DataFrame) -> pd.DataFrame:
    """Per cell, its peak memory in MiB with the interval: the CUDA allocation where measured, else the RSS;
    columns peak_kind, peak_mib, peak_ci_low, peak_ci_high, peak_ci_level (NaN where neither was recorded)."""
    parts = (("", "peak_mib"), ("_ci_low", "peak_ci_low"), ("_ci_high", "peak_ci_high"), ("_ci_level", "peak_ci_level"))
    out = pd.DataFrame({"peak_kind": "", **{target: np.nan for _, target in parts}}, index=cells.index)
    for col, kind in reversed(PEAKS):  # the RSS first, the CUDA allocation over it where there is one
        has = numeric_column(cells, col).notna()
        out.loc[has, "peak_kind"] = kind
        for suffix, target in parts:
            out.loc[has, target] = numeric_column(cells, col + suffix)[has]
    return out


def runs_by_cell(runs: pd.DataFrame, cols: list[str], col: str = "samples_per_s") -> dict[tuple, np.ndarray]:
    """Per cell (its `cols` as text, cell_key): `col` of its ok runs, what comparisons_table compares."""
    if runs.empty or col not in runs or "status" not in runs:
        return {}
    ok = runs[(runs["status"].astype(str) == "ok") & numeric_column(runs, col).notna()]
    return {cell_key(key if isinstance(key, tuple) else (key,)): numeric_column(g, col).to_numpy(float)
            for key, g in ok.groupby(cols, dropna=False, sort=False)}  # fmt: skip


def _ratio(thr: dict, a: pd.Series, b: pd.Series, design: DesignAnswers | None) -> dict:
    """Throughput of cell a over cell b (their axis values) as a comparison's columns (verdict
    faster: a is faster), the design's where it asked the pair."""
    ka, kb = cell_key(a), cell_key(b)
    return compare_pair(design, a.to_dict(), b.to_dict(), thr.get(ka, ()), thr.get(kb, ())).columns()


def _truthy(v) -> bool:
    return str(v).strip().lower() in ("true", "1", "1.0", "yes")


def _ratio_of(a, b) -> float:
    a, b = float(a), float(b)
    return a / b if np.isfinite(a) and np.isfinite(b) and b > 0 else np.nan


def _measured(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells with repeats that measured something, their peaks beside them."""
    c = cells[numeric_column(cells, "n_repeats") > 0] if "n_repeats" in cells else cells
    return pd.concat([c, peaks(c)], axis=1) if not c.empty else c


def memory_savings(runs: pd.DataFrame, cells: pd.DataFrame, sharded=SHARDED, reference: str = REFERENCE,
                   design: DesignAnswers | None = None) -> pd.DataFrame:  # fmt: skip
    """One row per sharded strategy and setting (all axes but the strategy equal, world size above 1)
    that has ddp beside it: the bytes each holds per rank and their difference and ratio (saved_bytes = ddp's − its;
    held_ratio and each part's ratio = its / ddp's), its throughput over ddp's with the Welch interval
    and verdict (faster: the sharded strategy is faster; the design's where it asked), unstable when either cell is, and both
    cells' peaks (MiB). Empty (with the columns) where the cells have no held bytes."""
    cols = [c for c in axes(cells) if c in runs] if not runs.empty else axes(cells)
    setting = [c for c in cols if c != "strategy"]
    if cells.empty or "strategy" not in cols or not has_held(cells):
        return pd.DataFrame(columns=[*setting, *SAVING_COLUMNS])
    c = _measured(cells)
    if "world_size" in c:  # one rank has nothing to shard
        c = c[~(pd.to_numeric(c["world_size"], errors="coerce") <= 1)]
    strategy = c["strategy"].astype(str)
    refs = {cell_key(r[setting]): r for _, r in c[strategy == reference].iterrows()}
    thr = runs_by_cell(runs, cols)
    rows = []
    for _, r in c[strategy.isin(sharded)].iterrows():
        ref = refs.get(cell_key(r[setting]))
        if ref is None:
            continue
        held, ref_held = float(r[HELD]), float(ref[HELD])
        row = {k: r[k] for k in setting}
        row.update(strategy=str(r["strategy"]), reference=reference, held_bytes=held, reference_held_bytes=ref_held,
                   saved_bytes=ref_held - held, held_ratio=_ratio_of(held, ref_held),
                   **{f"{p}_ratio": _ratio_of(r.get(p, np.nan), ref.get(p, np.nan)) for p, _ in HELD_PARTS},
                   **_ratio(thr, r[cols], ref[cols], design),
                   unstable=_truthy(r.get("unstable", False)) or _truthy(ref.get("unstable", False)),
                   peak_kind=r["peak_kind"], peak_mib=r["peak_mib"], peak_ci_low=r["peak_ci_low"],
                   peak_ci_high=r["peak_ci_high"], reference_peak_mib=ref["peak_mib"],
                   reference_peak_ci_low=ref["peak_ci_low"], reference_peak_ci_high=ref["peak_ci_high"])  # fmt: skip
        rows.append(row)
    out = pd.DataFrame(rows, columns=[*setting, *SAVING_COLUMNS])
    order = {s: i for i, s in enumerate(sharded)}
    return out.sort_values(setting + ["strategy"], key=lambda s: s.map(order) if s.name == "strategy" else s.astype(str),
                           kind="stable").reset_index(drop=True)  # fmt: skip


def _peak_ratio(runs: pd.DataFrame, cols: list[str], kind: str, a: tuple, b: tuple) -> dict:
    """Cell a's peak over cell b's (the runs' `kind` of peak, MiB) with the Welch log-t interval over their
    repeats, as a throughput ratio is compared: peak_ratio, peak_ratio_ci_low/_high/_level."""
    col = dict((k, c) for c, k in PEAKS).get(kind)
    peaks = runs_by_cell(runs, cols, col) if col else {}
    r = Comparison.measured(peaks.get(a, ()), peaks.get(b, ())).columns("peak_ratio")
    return {k: v for k, v in r.items() if k.startswith("peak_ratio")}


def axis_effects(runs: pd.DataFrame, cells: pd.DataFrame, axis: str, reference,
                 design: DesignAnswers | None = None) -> pd.DataFrame:  # fmt: skip
    """One row per cell whose `axis` is not `reference` and whose twin with `reference` (every other axis
    equal) was measured: its throughput over the twin's (Welch interval, verdict faster: this cell is
    faster; the design's where it asked the pair), its memory held per rank over the twin's (NaN where not counted), both peaks (MiB, medians with
    their order-statistic intervals) and the peak's ratio to the twin's (Welch interval over the repeats)."""
    cols = [c for c in axes(cells) if c in runs] if not runs.empty else axes(cells)
    if cells.empty or axis not in cols:
        return pd.DataFrame(columns=[*cols, *EFFECT_COLUMNS])
    c = _measured(cells)
    others = [x for x in cols if x != axis]
    value = c[axis].map(lambda v: cell_key([v])[0])
    twins = {cell_key(r[others]): r for _, r in c[value == cell_key([reference])[0]].iterrows()}
    thr = runs_by_cell(runs, cols)
    rows = []
    for _, r in c[value != cell_key([reference])[0]].iterrows():
        twin = twins.get(cell_key(r[others]))
        if twin is None:
            continue
        row = {k: r[k] for k in cols}
        row.update(axis=axis, reference_value=twin[axis],
                   held_ratio=_ratio_of(r.get(HELD, np.nan), twin.get(HELD, np.nan)),
                   **_ratio(thr, r[cols], twin[cols], design),
                   unstable=_truthy(r.get("unstable", False)) or _truthy(twin.get("unstable", False)),
                   peak_kind=r["peak_kind"], **{f"{side}{k}": x[k] for side, x in (("", r), ("reference_", twin))
                                                for k in ("peak_mib", "peak_ci_low", "peak_ci_high", "peak_ci_level")},
                   **_peak_ratio(runs, cols, r["peak_kind"], cell_key(r[cols]), cell_key(twin[cols])))  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows, columns=[*cols, *EFFECT_COLUMNS])
