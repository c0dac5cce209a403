"""cores-and-gpus: how many processes or GPUs, per batch size (configs/studies/cores-and-gpus.yaml).

Per device, batch size and worker count: throughput, speedup, the communication share, runs out
of memory and the best count for each batch; the answer says how throughput grows with CPU
processes and with GPUs, where adding workers stops paying, and which batches did not fit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.core.run_record import Extra
from ddpbench.report.studies.common import (Study, StudyData, cell_ci, comm_share, devices_not_run, skipped_counts,
                                            study_cells, to_float)  # fmt: skip


def _out_of_memory(runs: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell: runs that ran out of memory (diagnosed failure kind oom) and runs in all."""
    oom = runs.get("failure_kind", pd.Series("", index=runs.index)).astype(str).eq("oom")
    frame = runs[cols].assign(_oom=oom.to_numpy(), _n=1)
    return frame.groupby(cols, dropna=False, sort=False)[["_oom", "_n"]].sum().reset_index()


def _oversubscribed(runs: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell: whether any of its runs had more ranks than the machine's cores (flagged per run)."""
    flag = runs.get(Extra.oversubscribed, pd.Series(False, index=runs.index)).map(A.truthy)
    frame = runs[cols].assign(_over=flag.to_numpy())
    return frame.groupby(cols, dropna=False, sort=False)["_over"].any().reset_index()


def _scaling_text(g: pd.DataFrame, unit: str) -> str:
    """Throughput against the worker count of one device and batch, with the speedup and the
    communication share at each count, and where adding workers stops paying."""
    g = g.sort_values("_p")
    parts = []
    for _, r in g.iterrows():
        extra = [f"speedup {cell_ci(r, 'speedup')}"] if r["_p"] > 1 and np.isfinite(to_float(r.get("speedup"))) else []
        if r["_p"] > 1 and np.isfinite(to_float(r.get("frac_comm"))):
            extra.append(f"{comm_share(r)}"
                         " of a step communicating")  # fmt: skip
        if r.get("_over"):
            extra.append("oversubscribed")
        parts.append(f"{int(r['_p'])} → {cell_ci(r, 'samples_per_s')} samples/s" + (f" ({', '.join(extra)})" if extra else ""))
    peak = g.sort_values("samples_per_s", ascending=False).iloc[0]
    after = g[g["_p"] > peak["_p"]]
    tail = (f"; beyond {int(peak['_p'])} {unit} throughput falls" if not after.empty and
            after["samples_per_s"].max() < peak["samples_per_s"] else "")  # fmt: skip
    return "; ".join(parts) + tail


_ONE = {"GPUs": "GPU", "processes": "process"}


def _counts_not_run(runs: pd.DataFrame, device, ran: int, unit: str) -> str:
    counts, _, reason = skipped_counts(runs, device, {ran})
    return f" (the {' and '.join(map(str, counts))}-{_ONE[unit]} cells were skipped: {reason})" if counts else ""


def _batch_text(g: pd.DataFrame) -> str:
    """Throughput per batch size of one worker count, and whether it keeps rising with the batch."""
    g = g.sort_values("_b")
    text = ", ".join(f"batch {int(r['_b'])} → {cell_ci(r, 'samples_per_s')}" for _, r in g.iterrows()) + " samples/s"
    if len(g) > 1:
        top = g.sort_values("samples_per_s").iloc[-1]
        rises = top["_b"] == g["_b"].max()
        text += "; it rises to the largest batch" if rises else f"; it peaks at batch {int(top['_b'])}"
    return text


def build(d: StudyData):
    cols = [c for c in dict.fromkeys(("device", "strategy", "world_size", "batch_size",
                                      *A.varying(d.runs, A.axes(d.runs)))) if c in d.cells]  # fmt: skip
    t = study_cells(d, cols)
    t = t.merge(_out_of_memory(d.runs, cols), on=cols, how="outer") if "device" in cols else t.assign(_oom=0, _n=0)
    t = t.merge(_oversubscribed(d.runs, cols), on=cols, how="left")
    t = t.assign(_p=pd.to_numeric(t["world_size"], errors="coerce"), _b=pd.to_numeric(t["batch_size"], errors="coerce"))
    columns = ["device", "batch", "processes / GPUs", "strategy", "throughput [samples/s]", "speedup", "comm [% of step]",
               "out of memory", "best for its batch"]  # fmt: skip
    best = {}
    for key, g in t.dropna(subset=["samples_per_s"]).groupby(["device", "_b"], dropna=False, sort=True):
        top = g.sort_values("samples_per_s", ascending=False).iloc[0]
        best[key] = top
    rows, found = [], []
    for _, r in t.sort_values(["device", "_b", "_p"], kind="stable").iterrows():
        top = best.get((r["device"], r["_b"]))
        is_best = top is not None and top["_p"] == r["_p"] and str(top["strategy"]) == str(r["strategy"])
        oom = f"{int(r['_oom'])} of {int(r['_n'])} runs" if to_float(r.get("_oom")) > 0 else ""
        comm = cell_ci(r, "frac_comm", 100) if r["_p"] > 1 and np.isfinite(to_float(r.get("frac_comm"))) else ""
        rows.append([str(r["device"]), str(r["batch_size"]), str(r["world_size"]) + (" (oversubscribed)" if r.get("_over") else ""),
                     str(r["strategy"]), cell_ci(r, "samples_per_s"), cell_ci(r, "speedup"), comm, oom,
                     "best" if is_best else ""])  # fmt: skip
    found += devices_not_run(d.runs, sorted({str(k[0]) for k in best}))
    ran = t.dropna(subset=["samples_per_s"])
    for device in sorted({k[0] for k in best}, key=str):
        unit = "GPUs" if str(device) == "cuda" else "processes"
        mine = ran[ran["device"] == device]
        if mine["_p"].nunique() == 1:  # one count (e.g. one GPU): no best count to name, but the batch still tells
            p = int(mine["_p"].iloc[0])
            found.append(f"On {device} only {p} {unit if p > 1 else _ONE[unit]} ran"
                         f"{_counts_not_run(d.runs, device, p, unit)}; throughput against the batch: "
                         f"{_batch_text(mine)}.")  # fmt: skip
            continue
        per = [f"batch {int(b)}: {int(top['_p'])} ({cell_ci(top, 'samples_per_s')} samples/s)"
               for (dev, b), top in best.items() if dev == device]  # fmt: skip
        found.append(f"On {device}, the number of {unit} with the highest throughput, per batch size: " + "; ".join(per) + ".")
        for b, g in mine.groupby("_b", sort=True):
            if g["_p"].nunique() > 1:
                found.append(f"On {device} at batch {int(b)}, throughput against {unit}: {_scaling_text(g, unit)}.")
    ooms = t[t["_oom"] > 0]
    if not ooms.empty:
        named = "; ".join(f"batch {r['batch_size']} at {r['world_size']} on {r['device']} ({int(r['_oom'])} of {int(r['_n'])} runs)"
                          for _, r in ooms.sort_values(["device", "_b", "_p"]).iterrows())  # fmt: skip
        found.append(f"Out of memory, recorded and the grid went on: {named}.")
    note = ("Throughput and speedup: geometric means over repeats [95 % intervals]; 'best for its batch': the cell with "
            "the highest throughput estimate for its device and batch size (the intervals say whether its lead is "
            "clear); comm: the share of a step spent communicating (the phases figure splits it); oversubscribed: more "
            "ranks than the machine's cores; out of memory: runs whose failure was diagnosed as oom (the failed-runs "
            "table has each reason).")  # fmt: skip
    return columns, rows, note, found


STUDY = Study(
    "cores-and-gpus",
    "Cores and GPUs: how many, per batch size",
    "How does throughput grow with CPU processes and with GPUs, which count is best for each batch size, and "
    "which batch sizes do not fit?",
    ("phases", "throughput", "speedup", "throughput_vs_batch", "memory_vs_batch"),
    build,
)
