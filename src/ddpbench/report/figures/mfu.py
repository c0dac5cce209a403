"""Model FLOP utilisation (MFU) per cell: the achieved model FLOP/s (throughput × the counted training
FLOPs per sample) over p × the peak one rank measured with square matrix products in the cell's
precision (core.peaks, run.flops; docs/metrics.md). The measured peak is the reference on every
device (on CPU the only honest one); the datasheet MFU of a known GPU is in cells.csv and the findings.

Every cell with an MFU is drawn: against the world size where the MFU cells span several (strategies as
coloured series, p on a log2 axis, a panel per combination of the other axes, precision and grad_accum
included; a panel's cells at one p are points, not left out as the throughput figure leaves them), else
against the batch size where that varies, else the strategies side by side at the one p; medians over
repeats with their order-statistic intervals. The title says which measured peak per rank the MFU uses,
per precision (its matrix size; the span where a results folder's peak was measured again) and flags
one measured on a busy machine (findings.mfu.peak_text). Drawn when some cell has an MFU.
"""

from __future__ import annotations

import pandas as pd

from ddpbench.core.run_record import Extra
from ddpbench.report.figures.layout import GROUP_LABEL, place
from ddpbench.report.figures.marks import level_note
from ddpbench.report.figures.scaling import _tag, _vs_workers
from ddpbench.report.figures.sizes import _vs_axis
from ddpbench.report.figures.tables import Data, numeric
from ddpbench.report.findings.mfu import PEAK, flops_text, peak_text

MFU = Extra.mfu_measured
YLABEL = "MFU = achieved FLOP/s / (p × peak per rank)"


def peak_note(runs: pd.DataFrame) -> str:
    """'measured peak per rank: fp32 148 GFLOP/s (n = 2048 matmul); bf16 ...' over the runs with an MFU
    ('' when none recorded its peak); the precision named only where the runs hold several."""
    if runs is None or runs.empty or MFU not in runs or PEAK not in runs:
        return ""
    runs = runs[numeric(runs[MFU]).notna() & numeric(runs[PEAK]).notna()]
    if runs.empty:
        return ""
    several = "precision" in runs and runs["precision"].nunique() > 1
    parts = []
    for precision, g in runs.groupby("precision", sort=True) if several else [("", runs)]:
        values = numeric(g[PEAK]).unique()
        value = flops_text(values[0]) if len(values) == 1 else ""
        detail = peak_text(g)
        parts.append(" ".join(t for t in (str(precision), value) if t) + (f" ({detail})" if detail else ""))
    return "measured peak per rank: " + "; ".join(p.strip() for p in parts)


def _with_note(figs: list, note: str) -> list:
    """The figures with `note` at the end of the title, before the figure group's label; laid out again."""
    if not note:
        return figs
    group = GROUP_LABEL.get()
    tail = f" — {group}" if group else ""
    for fig in figs:
        title = " ".join(fig.get_suptitle().split("\n"))  # place() wrapped it at spaces
        head = title[: len(title) - len(tail)] if tail and title.endswith(tail) else title
        fig.suptitle(f"{head}; {note}{tail}", fontsize=10)
        place(fig)
    return figs


def per_cell(d: Data, kind: str, col: str, ylabel: str, always_p1: bool = False) -> list:
    """Every cell with a value of `col`: against the world size where the cells span several (p = 1 drawn
    too where they do, or `always_p1`), else against the batch size where that varies, else the strategies
    side by side at the one p; medians with their intervals. The MFU and energy figures."""
    c = d.cells
    if col not in c or not pd.to_numeric(c[col], errors="coerce").notna().any():
        return []
    cells = c.assign(**{col: pd.to_numeric(c[col], errors="coerce")})
    cells = cells[cells[col].notna()]
    data = Data(d.runs, cells, d.speed, d.fits, d.steps, d.comm, d.label_axes, d.profile)
    several_p = numeric(cells["world_size"]).nunique() > 1
    batches = numeric(cells["batch_size"]).nunique() if "batch_size" in cells else 0
    if several_p or batches < 2:  # every cell: a panel's cells at one p too (points)
        return _vs_workers(data, kind, _tag(data, cells), col, ylabel, level_note(cells, col),
                           absolute=several_p or always_p1, ymin0=True)  # fmt: skip
    return _vs_axis(data, kind, "batch_size", [(col, ylabel)])


def fig_mfu(d: Data):
    return _with_note(per_cell(d, "mfu", MFU, YLABEL), peak_note(d.runs))
