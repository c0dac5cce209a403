"""Model FLOP utilisation (MFU) per cell: the achieved model FLOP/s (throughput × the counted training
FLOPs per sample) over p × the peak one rank measured with square matrix products in the cell's
precision (core.peaks, run.flops; docs/metrics.md). The measured peak is the reference on every
device (on CPU the only honest one); the datasheet MFU of a known GPU is in cells.csv and the findings.

Against the world size where the grid varies it (strategies as coloured series, p on a log2 axis, the
panels the other axes), else against the batch size; medians over repeats with their order-statistic
intervals. Drawn when some cell has an MFU (runs that counted their FLOPs).
"""

from __future__ import annotations

import pandas as pd

from ddpbench.report.figures.scaling import _cells_vs_workers
from ddpbench.report.figures.sizes import _vs_axis
from ddpbench.report.figures.tables import Data

MFU = "extra_mfu_measured"
YLABEL = "MFU = achieved FLOP/s / (p × peak per rank)"


def fig_mfu(d: Data):
    c = d.cells
    if MFU not in c or not pd.to_numeric(c[MFU], errors="coerce").notna().any():
        return []
    cells = c.assign(**{MFU: pd.to_numeric(c[MFU], errors="coerce")})
    data = Data(d.runs, cells, d.speed, d.fits, d.steps, d.comm, d.label_axes, d.profile)
    return _cells_vs_workers(data, "mfu", MFU, YLABEL, ymin0=True) or _vs_axis(data, "mfu", "batch_size", [(MFU, YLABEL)])
