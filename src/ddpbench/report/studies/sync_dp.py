"""sync-dp: synchronous data parallelism, what communication costs (configs/studies/sync-dp.yaml).

Per strategy and cell: iteration, compute and communication time per step, the communication
share and calls per step and per epoch, and the speedup; the answer compares the shares at the
largest world size, what bucketing saves in calls and time, and what DDP's overlap hides.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.report.studies.common import (Study, StudyData, axes_text, cell_ci, comm_share, ms_text, study_cells,
                                            to_float)  # fmt: skip
from ddpbench.report.text import num, pct_text, ratio_text


def build(d: StudyData):
    cols = [c for c in dict.fromkeys(("strategy", "world_size", *A.varying(d.runs, A.axes(d.runs)))) if c in d.cells]
    t = study_cells(d, cols)
    columns = ["strategy", "cell", "iteration [ms]", "compute [ms]", "comm [ms]", "comm [% of step]", "calls/step",
               "calls/epoch", "compute : exp. comm", "epoch [s]", "speedup"]  # fmt: skip
    rows, found = [], []
    for _, r in t.sort_values(cols, kind="stable").iterrows():
        per_epoch = to_float(r["calls"]) * to_float(r.get("dataset_size")) / to_float(r["global_batch"])
        rows.append([str(r["strategy"]), axes_text(r, cols), cell_ci(r, "step_time_median_s", 1e3), ms_text(r["compute_s"]),
                     ms_text(r["comm_s"]), cell_ci(r, "frac_comm", 100), num(to_float(r["calls"])),
                     num(to_float(per_epoch)), cell_ci(r, "compute_comm_ratio"),
                     cell_ci(r, "epoch_time_s"), cell_ci(r, "speedup")])  # fmt: skip
    multi = t[pd.to_numeric(t["world_size"], errors="coerce") > 1]
    if not multi.empty and "frac_comm" in multi:  # (runs without phase timings have no shares to compare)
        p = int(pd.to_numeric(multi["world_size"]).max())
        top = multi[pd.to_numeric(multi["world_size"]) == p].sort_values("frac_comm", ascending=False)
        parts = [f"{r['strategy']} {comm_share(r)}"
                 f" ({num(to_float(r['calls']))} calls per step)" for _, r in top.iterrows()]  # fmt: skip
        found.append(f"With {p} processes, the share of each step spent communicating: " + "; ".join(parts) + ".")
        by = {str(r["strategy"]): r for _, r in top.iterrows()}
        if "allreduce" in by and "bucketed_allreduce" in by:
            a, b = by["allreduce"], by["bucketed_allreduce"]
            found.append(f"Bucketing cuts the calls per step from {num(to_float(a['calls']))} (per-parameter all-reduce) to "
                         f"{num(to_float(b['calls']))}, and communication per step from {ms_text(a['comm_s'])} to "
                         f"{ms_text(b['comm_s'])} ms.")  # fmt: skip
        if "ddp" in by and np.isfinite(to_float(by["ddp"].get("frac_exposed_comm"))):
            r = by["ddp"]
            found.append(f"DDP overlaps communication with the backward pass: of the {pct_text(r['frac_comm'])} of its "
                         f"step spent communicating, {pct_text(r['frac_exposed_comm'])} is exposed (not hidden)."
                         .replace(" (no interval)", ""))  # fmt: skip
        if "speedup" in top:
            best = top.dropna(subset=["speedup"]).sort_values("speedup", ascending=False)
            if not best.empty:
                r = best.iloc[0]
                found.append(f"The best effective speedup at p = {p} is {r['strategy']}'s: "
                             f"{ratio_text(r['speedup'], r.get('speedup_ci_low'), r.get('speedup_ci_high'))}.")  # fmt: skip
    note = ("Iteration, epoch time and speedup: geometric means over repeats [95 % intervals]; compute (data, forward, "
            "backward, optimizer) and communication (comm) per step, calls: medians over the cell's runs of the pacing rank's "
            "phase seconds per timed step; calls per epoch = calls per step × dataset size / global batch; compute : "
            "exposed (exp.) comm as in cells.csv.")  # fmt: skip
    return columns, rows, note, found


STUDY = Study(
    "sync-dp",
    "Synchronous data parallelism: what communication costs",
    "How much of each step do the synchronising strategies spend communicating, how many calls does it take, "
    "and what do bucketing and DDP's overlap buy?",
    ("phases", "speedup", "efficiency", "profile"),
    build,
)
