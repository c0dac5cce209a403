"""How much of the hardware's peak the training reaches (kind "mfu", anchor "fig-mfu").

Spoken where cells carry a model FLOP utilisation (cells.csv extra_mfu_measured: runs that counted
their training FLOPs and measured the peak, core.peaks). One sentence: the best and the worst cell by
MFU against the measured peak (median over repeats with its interval), each with the achieved model
FLOP/s and the reference it is a share of, p × the peak one rank measured in the cell's precision;
the datasheet MFU beside it where the device has a datasheet figure (a known GPU; never on CPU, where
the measured peak is the reference).
"""

from __future__ import annotations

import pandas as pd

from ddpbench.report.findings.common import Finding, cell_name, row_num
from ddpbench.report.text import finite, pct_text, sig3

ANCHOR = "fig-mfu"
MFU, SHEET = "extra_mfu_measured", "extra_mfu_datasheet"
ACHIEVED, PEAK, SHEET_PEAK = "extra_achieved_flops_per_s", "extra_peak_flops_measured", "extra_peak_flops_datasheet"
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


def _mfu(r, col: str) -> str:
    return pct_text(*(row_num(r, col + suffix) for suffix in ("", "_ci_low", "_ci_high", "_ci_level")))


def cell_text(r, shown: list[str]) -> str:
    """'ddp at world size 2: MFU 1.29 % [1.2, 1.4] (75 % interval), 1.63 GFLOP/s of 2 × 62.9 GFLOP/s (measured
    peak per rank)' and the datasheet's share where there is one."""
    p = row_num(r, "world_size")
    ranks = f"{int(p)} × " if finite(p) else ""
    text = (f"{cell_name(r, shown)}: MFU {_mfu(r, MFU)}, {flops_text(row_num(r, ACHIEVED))} of "
            f"{ranks}{flops_text(row_num(r, PEAK))} (measured peak per rank)")  # fmt: skip
    if finite(row_num(r, SHEET)):
        text += f", {_mfu(r, SHEET)} of {ranks}{flops_text(row_num(r, SHEET_PEAK))} (datasheet peak per device)"
    return text


def mfu_findings(cells: pd.DataFrame, shown: list[str]) -> list[Finding]:
    if cells.empty or MFU not in cells:
        return []
    c = cells[pd.to_numeric(cells[MFU], errors="coerce").notna()]
    if "n_repeats" in c:
        c = c[pd.to_numeric(c["n_repeats"], errors="coerce") > 0]
    if c.empty:
        return []
    v = pd.to_numeric(c[MFU], errors="coerce")
    best, worst = c.loc[v.idxmax()], c.loc[v.idxmin()]
    if len(c) == 1:
        text = f"Model FLOP utilisation of the one cell that measured it, {cell_text(best, shown)}."
    else:
        text = (f"Model FLOP utilisation over {len(c)} cells, highest: {cell_text(best, shown)}; "
                f"lowest: {cell_text(worst, shown)}.")  # fmt: skip
    return [Finding("mfu", text, ANCHOR)]
