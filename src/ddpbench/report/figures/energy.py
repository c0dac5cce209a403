"""The energy a sample costs per cell: the average power of the timed steps (the hardware's counters:
RAPL's packages and DRAM on CPUs, NVML's per GPU; core.energy) over the throughput, drawn as the MFU
figure is (against the world size where the cells span several, else against the batch size where
that varies, else the strategies side by side), medians over repeats with their order-statistic
intervals. The title says which counters were read. Drawn where some cell has an energy reading; the
report says once where none could be read.
"""

from __future__ import annotations

import pandas as pd

from ddpbench.core.run_record import Extra
from ddpbench.report.figures.marks import level_note
from ddpbench.report.figures.mfu import _with_note
from ddpbench.report.figures.scaling import _tag, _vs_workers
from ddpbench.report.figures.sizes import _vs_axis
from ddpbench.report.figures.tables import Data, numeric
from ddpbench.report.findings.energy import source_note

ENERGY = Extra.energy_per_sample_j
YLABEL = "energy per sample [J] = average power / throughput"


def fig_energy(d: Data):
    c = d.cells
    if ENERGY not in c or not pd.to_numeric(c[ENERGY], errors="coerce").notna().any():
        return []
    cells = c.assign(**{ENERGY: pd.to_numeric(c[ENERGY], errors="coerce")})
    cells = cells[cells[ENERGY].notna()]
    data = Data(d.runs, cells, d.speed, d.fits, d.steps, d.comm, d.label_axes, d.profile)
    several_p = numeric(cells["world_size"]).nunique() > 1
    batches = numeric(cells["batch_size"]).nunique() if "batch_size" in cells else 0
    if several_p or batches < 2:
        figs = _vs_workers(data, "energy", _tag(data, cells), ENERGY, YLABEL, level_note(cells, ENERGY), absolute=True,
                           ymin0=True)  # fmt: skip
    else:
        figs = _vs_axis(data, "energy", "batch_size", [(ENERGY, YLABEL)])
    return _with_note(figs, source_note(d.runs))
