"""The energy a sample costs per cell: the average power of the timed steps (the hardware's counters:
RAPL's packages and DRAM on CPUs, NVML's per GPU; core.energy) over the throughput, drawn as the MFU
figure is (against the world size where the cells span several, else against the batch size where
that varies, else the strategies side by side), medians over repeats with their order-statistic
intervals. The title says which counters were read. Drawn where some cell has an energy reading; the
report says once where none could be read.
"""

from __future__ import annotations

from ddpbench.core.run_record import Extra
from ddpbench.report.figures.mfu import _with_note, per_cell
from ddpbench.report.figures.tables import Data
from ddpbench.report.findings.energy import source_note

ENERGY = Extra.energy_per_sample_j
YLABEL = "energy per sample [J] = average power / throughput"


def fig_energy(d: Data):
    return _with_note(per_cell(d, "energy", ENERGY, YLABEL, always_p1=True), source_note(d.runs))
