"""How much of the hardware's peak the training reaches (kind "mfu", anchor "fig-mfu").

Spoken where cells carry a model FLOP utilisation (cells.csv extra_mfu_measured: runs that counted
their training FLOPs and measured the peak, core.peaks). One sentence: the best and the worst cell by
MFU against the measured peak (median over repeats with its interval), each with its HFU beside it (the
hardware's FLOPs, activation checkpointing's recompute included: the MFU's equal without checkpointing),
its compile and checkpointing modes, the achieved model FLOP/s and the reference it is a share of, p × the
peak one rank measured in the cell's precision;
the datasheet MFU beside it where the device has a datasheet figure (a known GPU; never on CPU, where
the measured peak is the reference). Given the runs, it says which measured peak each of the two used
(its matrix size; several where the results folder's peak was measured again) and flags one measured
on a busy machine (runs.csv extra_peak_flops_busy: others took more than 10 % of the CPU meanwhile, so
the peak reads low and the MFU high), and how many of the cells use such a peak. `peak_text` words it,
for the MFU figure too.
"""

from __future__ import annotations

import pandas as pd

from ddpbench import analysis
from ddpbench.core.run_record import Extra
from ddpbench.report.findings.common import Finding, cell_name, key_texts, matching_rows, ok_runs, row_num
from ddpbench.report.text import finite, pct_text, sig3
from ddpbench.report.training import HFU_DATASHEET, hfu_text, modes_text

# The kinds this module gives (ddpbench.report.findings discovers them; fields: common.Kind).
KINDS = {"mfu": dict(find=lambda t: mfu_findings(t.cells, t.shown, t.runs), at_most=1, order=50, trim=50, drop=20)}

ANCHOR = "fig-mfu"
MFU, SHEET = Extra.mfu_measured, Extra.mfu_datasheet
ACHIEVED, PEAK, SHEET_PEAK = Extra.achieved_flops_per_s, Extra.peak_flops_measured, Extra.peak_flops_datasheet
MATRIX_N, BUSY, OTHER = Extra.peak_flops_matrix_n, Extra.peak_flops_busy, Extra.peak_flops_other_cpu_frac
UNITS = ((1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s"))


def flops_text(x) -> str:
    """A FLOP rate with its unit: '62.9 GFLOP/s', '989 TFLOP/s'; '–' when absent."""
    if not finite(x):
        return "–"
    x = float(x)
    for scale, unit in UNITS:
        if abs(x) >= scale:
            return f"{sig3(x / scale)} {unit}"
    return f"{sig3(x)} FLOP/s"


def _truthy(s: pd.Series) -> pd.Series:
    """A flag column as runs.csv reads back (True/False, 1/0; blank: False)."""
    return s.map(analysis.truthy).astype(bool)


def _span(values, fmt) -> str:
    lo, hi = min(values), max(values)
    return fmt(lo) if lo == hi else f"{fmt(lo)}–{fmt(hi)}"


def peak_text(runs: pd.DataFrame) -> str:
    """Which measured peak `runs` used: 'n = 2048 matmul' (several: 'peaks 82.8–148 GFLOP/s, n = 1024–2048
    matmul'), and where some was measured on a busy machine ', measured on a busy machine in 2 of 3
    runs (others took up to 45 % of the CPU): the MFU reads high'; '' when the runs recorded neither."""
    if runs is None or runs.empty or PEAK not in runs:
        return ""
    value = pd.to_numeric(runs[PEAK], errors="coerce")
    runs = runs[value.notna()]
    if runs.empty:
        return ""
    parts = []
    values = sorted(set(value.dropna()))
    if len(values) > 1:
        parts.append(f"{len(values)} peaks, {_span(values, flops_text)}")  # the folder's peak measured again
    sizes = pd.to_numeric(runs[MATRIX_N], errors="coerce").dropna() if MATRIX_N in runs else pd.Series(dtype=float)
    if len(sizes):
        parts.append(f"n = {_span(sizes.astype(int).tolist(), str)} matmul")
    text = ", ".join(parts)
    busy = _truthy(runs[BUSY]) if BUSY in runs else pd.Series(False, index=runs.index)
    if busy.any():
        other = pd.to_numeric(runs.loc[busy, OTHER], errors="coerce").max() if OTHER in runs else float("nan")
        took = f" (others took up to {sig3(100 * other)} % of the CPU)" if finite(other) else ""
        text += (", " if text else "") + (f"measured on a busy machine in {int(busy.sum())} of {len(runs)} runs{took}: "
                                          "the MFU reads high")  # fmt: skip
    return text


def _mfu(r, col: str) -> str:
    return pct_text(*(row_num(r, col + suffix) for suffix in ("", "_ci_low", "_ci_high", "_ci_level")))


def cell_text(r, shown: list[str], runs: pd.DataFrame | None = None) -> str:
    """'ddp at world size 2 (compile=none, activation_checkpointing=none): MFU 1.29 % [1.2, 1.4] (75 % interval),
    HFU 1.29 % [...], 1.63 GFLOP/s of 2 × 62.9 GFLOP/s (measured peak per rank, n = 2048 matmul)' and the
    datasheet's shares where there are some; `runs`: the cell's. The modes the name leaves out are named."""
    p = row_num(r, "world_size")
    ranks = f"{int(p)} × " if finite(p) else ""
    used = peak_text(runs) if runs is not None else ""
    modes = modes_text(r, skip=shown)
    hfu = hfu_text(r)
    text = (f"{cell_name(r, shown)}{f' ({modes})' if modes else ''}: MFU {_mfu(r, MFU)}{', ' + hfu if hfu else ''}, "
            f"{flops_text(row_num(r, ACHIEVED))} of {ranks}{flops_text(row_num(r, PEAK))} (measured peak per rank"
            f"{', ' + used if used else ''})")  # fmt: skip
    if finite(row_num(r, SHEET)):
        sheet_hfu = hfu_text(r, HFU_DATASHEET)
        text += (f", {_mfu(r, SHEET)}{f' ({sheet_hfu})' if sheet_hfu else ''} of {ranks}"
                 f"{flops_text(row_num(r, SHEET_PEAK))} (datasheet peak per device)")  # fmt: skip
    return text


def _cell_runs(runs: pd.DataFrame | None, cells: pd.DataFrame, r) -> pd.DataFrame | None:
    """The cell's finished runs (None without a runs table)."""
    if runs is None or runs.empty:
        return None
    return matching_rows(ok_runs(runs), r, [c for c in analysis.axes(cells) if c in runs])


def _busy_note(runs: pd.DataFrame | None, cells: pd.DataFrame) -> str:
    """' 2 of 5 cells' MFU use a peak measured on a busy machine: ...' where some does, else ''. By key
    (vectorised): a report of 1,620 cells would match 8,100 runs once per cell otherwise."""
    if runs is None or runs.empty or BUSY not in runs:
        return ""
    ok = ok_runs(runs)
    busy = ok[_truthy(ok[BUSY]).to_numpy()]
    if busy.empty:
        return ""
    cols = [c for c in analysis.axes(cells) if c in runs]
    if cols:
        flagged = set(zip(*(key_texts(busy[c]) for c in cols)))
        n = sum(k in flagged for k in zip(*(key_texts(cells[c]) for c in cols)))
    else:
        n = len(cells)
    if not n:
        return ""
    return (f" {n} of {len(cells)} cells' MFU use a peak measured on a busy machine (others took over 10 % of "
            "the CPU): read high until a run on a quiet machine measures the peak again.")  # fmt: skip


def mfu_findings(cells: pd.DataFrame, shown: list[str], runs: pd.DataFrame | None = None) -> list[Finding]:
    """The MFU finding; with `runs` (runs.csv) it names the peak each quoted cell used and flags busy ones."""
    if cells.empty or MFU not in cells:
        return []
    c = cells[pd.to_numeric(cells[MFU], errors="coerce").notna()]
    if "n_repeats" in c:
        c = c[pd.to_numeric(c["n_repeats"], errors="coerce") > 0]
    if c.empty:
        return []
    v = pd.to_numeric(c[MFU], errors="coerce")
    best, worst = c.loc[v.idxmax()], c.loc[v.idxmin()]
    said = {k: cell_text(r, shown, _cell_runs(runs, c, r)) for k, r in (("best", best), ("worst", worst))}
    if len(c) == 1:
        text = f"Model FLOP utilisation of the one cell that measured it, {said['best']}."
    else:
        text = f"Model FLOP utilisation over {len(c)} cells, highest: {said['best']}; lowest: {said['worst']}."
    return [Finding("mfu", text + _busy_note(runs, c), ANCHOR)]
