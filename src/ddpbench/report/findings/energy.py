"""What a sample costs in energy (kind "energy", anchor "fig-energy").

Where cells carry an energy reading (cells.csv extra_energy_per_sample_j: the timed steps' average
power from the hardware's counters over the throughput, core.energy), one sentence: the cell with the
least energy per sample and the one with the most (medians over repeats with their intervals), each
with its average power and, on token data, its energy per token, and which counters were read. Where
no run could read a counter (no RAPL zone readable, no NVML GPU counter: this VM), one sentence says
so, once: never a zero.
"""

from __future__ import annotations

import pandas as pd

from ddpbench.core.run_record import Extra
from ddpbench.report.findings.common import Finding, cell_name, row_num
from ddpbench.report.text import finite, sig3

KINDS = {"energy": dict(find=lambda t: energy_findings(t.cells, t.shown, t.runs), at_most=1, order=56, trim=5, drop=5)}

ANCHOR = "fig-energy"
PER_SAMPLE, PER_TOKEN, POWER = Extra.energy_per_sample_j, Extra.energy_per_token_j, Extra.power_w
NOT_HERE = ("Energy per sample: not available here: no run could read an energy counter (RAPL's CPU packages and "
            "DRAM under /sys/class/powercap, readable by root only on recent kernels; NVML's GPU counter, Volta and "
            "newer), so none is reported rather than a zero (docs/metrics.md).")  # fmt: skip


SOURCES = {"rapl": "RAPL (CPU packages and DRAM)", "nvml": "NVML (GPU)"}


def source_note(runs: pd.DataFrame | None) -> str:
    """'counters: RAPL (CPU packages and DRAM)' for the runs with an energy reading ('' without)."""
    if runs is None or Extra.energy_source not in runs:
        return ""
    used = sorted({s for text in runs[Extra.energy_source].dropna().astype(str) for s in text.split("+") if s})
    return "counters: " + ", ".join(SOURCES.get(s, s) for s in used) if used else ""


def joules(x) -> str:
    """'3.1 mJ', '0.42 J' (three significant digits); '–' when absent."""
    if not finite(x):
        return "–"
    x = float(x)
    for scale, unit in ((1.0, "J"), (1e-3, "mJ"), (1e-6, "µJ")):
        if abs(x) >= scale:
            return f"{sig3(x / scale)} {unit}"
    return f"{sig3(x / 1e-9)} nJ"


def _interval(r, col: str) -> str:
    low, high = row_num(r, f"{col}_ci_low"), row_num(r, f"{col}_ci_high")
    level = row_num(r, f"{col}_ci_level")
    if not (finite(low) and finite(high)):
        return joules(row_num(r, col))
    return f"{joules(row_num(r, col))} [{joules(low)}, {joules(high)}]" + (f" ({level:.0%} interval)" if finite(level) else "")


def cell_text(r, shown: list[str]) -> str:
    token = f", {joules(row_num(r, PER_TOKEN))} per token" if finite(row_num(r, PER_TOKEN)) else ""
    return f"{_interval(r, PER_SAMPLE)} for {cell_name(r, shown)} ({sig3(row_num(r, POWER))} W on average{token})"


def energy_findings(cells: pd.DataFrame, shown: list[str], runs: pd.DataFrame | None = None) -> list[Finding]:
    if cells is None or cells.empty:
        return []
    values = pd.to_numeric(cells[PER_SAMPLE], errors="coerce") if PER_SAMPLE in cells else pd.Series(dtype=float)
    if not values.notna().any():  # said of runs that ran: tables without them say nothing
        ran = runs is not None and not runs.empty and "status" in runs and (runs["status"].astype(str) == "ok").any()
        return [Finding("energy", NOT_HERE, ANCHOR)] if ran else []
    c = cells[values.notna()].assign(_e=values[values.notna()]).sort_values("_e", kind="stable")
    least, most = c.iloc[0], c.iloc[-1]
    counters = source_note(runs)
    tail = f"; {counters}" if counters else ""
    if len(c) == 1:
        return [Finding("energy", f"Energy per sample: {cell_text(least, shown)}{tail}.", ANCHOR)]
    return [Finding("energy", f"Energy per sample, the timed steps' average power over their throughput: least "
                              f"{cell_text(least, shown)}, most {cell_text(most, shown)}{tail}.", ANCHOR)]
