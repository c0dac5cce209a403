"""accelerators: what a GPU changes for the same workload (configs/studies/accelerators.yaml).

Per device, model, strategy, world size, batch and DataLoader workers: throughput overall and per
epoch, epoch and round time, peak memory, test accuracy and speedup; the answer compares GPU and
CPU on the same cells, the first epoch against the later ones, the batch `auto` chose, the batch
× workers sweep, the strategies at their common batch, and the CPU's epoch time against processes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.report.studies.common import (Study, StudyData, cell_ci, devices_not_run, ms_text, skipped_counts,
                                            study_cells, to_float)  # fmt: skip
from ddpbench.report.text import num, sig3


def _memory(r) -> tuple[str, str]:
    """A cell's peak memory and what it is: CUDA allocated on a GPU, the ranks' largest RSS on CPU."""
    cuda = str(r.get("device")) == "cuda" and np.isfinite(to_float(r.get("cuda_max_allocated_mb")))
    col = "cuda_max_allocated_mb" if cuda else "peak_rss_mb"
    return cell_ci(r, col), "GPU" if cuda else "RSS"


def _epochs_text(values: list, shown: int = 4) -> str:
    """Throughput per epoch, first to last; more than `shown` epochs: the first two, an ellipsis, the
    last, and how many (the epoch_throughput figure draws them all)."""
    if len(values) <= shown:
        return " → ".join(num(v) for v in values) or "–"
    return " → ".join([num(values[0]), num(values[1]), "…", num(values[-1])]) + f" ({len(values)} epochs)"


def build(d: StudyData):
    cols = [c for c in dict.fromkeys(("device", "model", "strategy", "world_size", "batch_size", "num_workers",
                                      *A.varying(d.runs, A.axes(d.runs)))) if c in d.cells]  # fmt: skip
    t = study_cells(d, cols).merge(A.round_time(d.runs, cols), on=cols, how="left")
    t = t.merge(A.auto_batch(d.runs, cols)[[*cols, "chosen", "method"]], on=cols, how="left")
    per_epoch = A.epoch_throughput(d.runs, d.steps, cols) if d.steps is not None else pd.DataFrame(columns=[*cols, "epoch"])
    epochs = {tuple(map(str, k)): g.sort_values("epoch")["samples_per_s"].tolist()
              for k, g in per_epoch.groupby(cols, dropna=False, sort=False)} if not per_epoch.empty else {}  # fmt: skip
    t = t.assign(_p=pd.to_numeric(t["world_size"], errors="coerce"), _key=[tuple(map(str, k)) for k in t[cols].itertuples(index=False)])
    columns = ["device", "model", "strategy", "p", "batch", "workers", "throughput [samples/s]", "per epoch [samples/s]",
               "epoch [s]", "round [ms]", "peak memory [MiB]", "test accuracy [%]", "speedup"]  # fmt: skip
    rows = []
    order = ["device", "model", "_p", "strategy", "batch_size", "num_workers"]
    for _, r in t.sort_values([c for c in order if c in t], kind="stable", key=lambda s: s.astype(str)).iterrows():
        batch = str(r["batch_size"]) + (f" → {num(to_float(r['chosen']))}" if np.isfinite(to_float(r.get("chosen"))) else "")
        mem, what = _memory(r)
        rows.append([str(r["device"]), str(r.get("model", "")), str(r["strategy"]), str(r["world_size"]), batch,
                     str(r.get("num_workers", "")), cell_ci(r, "samples_per_s"),
                     _epochs_text(epochs.get(r["_key"], [])), cell_ci(r, "epoch_time_s"),
                     ms_text(r.get("round_s")), f"{mem} ({what})" if mem != "–" else mem, cell_ci(r, "test_acc", 100),
                     cell_ci(r, "speedup")])  # fmt: skip
    found = _accelerator_findings(d, t, per_epoch, cols)
    note = ("Throughput, epoch time, speedup: geometric means over repeats [95 % intervals]; per epoch: each epoch's global "
            "samples over its steps' time (the slowest rank's per step; the first epoch holds the warm-up steps), medians "
            "over repeats; round: local SGD's local steps and their averaging (extra.round_time_s), one step for the "
            "other strategies, medians; batch 'auto → N': the per-rank batch it chose; peak memory: CUDA allocated on a "
            "GPU (GPU), the largest rank's resident set on CPU (RSS), medians [order-statistic intervals]; test accuracy: "
            "medians.")  # fmt: skip
    return columns, rows, note, found


def _after_steps(r) -> str:
    """' after N steps of B samples', where the run recorded them (accuracy depends on both)."""
    steps, batch = to_float(r.get("steps")), to_float(r.get("global_batch"))
    return f" after {int(steps)} steps of {int(batch)}" if np.isfinite(steps) and np.isfinite(batch) else ""


def _accelerator_findings(d: StudyData, t: pd.DataFrame, per_epoch: pd.DataFrame, cols: list[str]) -> list[str]:
    ran = t.dropna(subset=["samples_per_s"])
    devices = sorted(ran["device"].astype(str).unique())
    found = devices_not_run(d.runs, devices)
    # the same cell on each device
    if len(devices) > 1:
        keys = [c for c in cols if c != "device"]
        both = ran.pivot_table(index=keys, columns="device", values="samples_per_s", aggfunc="first").dropna()
        if not both.empty and {"cpu", "cuda"} <= set(both.columns):
            ratio = both["cuda"] / both["cpu"]
            found.append(f"On the same cells, the GPU's throughput is {sig3(ratio.median())}× the CPU's (median over "
                         f"{len(ratio)} cells; {sig3(ratio.min())}–{sig3(ratio.max())}×).")  # fmt: skip
    # the first epoch against the later ones
    if not per_epoch.empty and per_epoch["epoch"].nunique() > 1:
        first = per_epoch[per_epoch["epoch"] == per_epoch["epoch"].min()].set_index(cols)["samples_per_s"]
        later = per_epoch[per_epoch["epoch"] > per_epoch["epoch"].min()].groupby(cols, dropna=False)["samples_per_s"].median()
        share = (first / later).dropna()
        for device, s in share.groupby(level="device"):
            found.append(f"On {device}, the first epoch (with the warm-up steps) runs at {sig3(100 * s.median())} % of the later "
                         f"epochs' throughput (median over {len(s)} cells).")  # fmt: skip
    # batch auto: what it chose, at what memory, against the static batch
    for _, r in ran[np.isfinite(pd.to_numeric(ran["chosen"], errors="coerce"))].iterrows():
        mem, what = _memory(r)
        static = A.matching(ran, dict(device=r["device"], model=r.get("model"), strategy=r["strategy"],
                                      world_size=r["world_size"], num_workers=r.get("num_workers")))  # fmt: skip
        static = static[pd.to_numeric(static["batch_size"], errors="coerce").notna()]
        vs = ""
        if not static.empty:
            top = static.sort_values("samples_per_s", ascending=False).iloc[0]
            vs = (f"; the best static batch ({top['batch_size']}) reaches {cell_ci(top, 'samples_per_s')} samples/s, "
                  f"auto {cell_ci(r, 'samples_per_s')}")  # fmt: skip
        found.append(f"batch_size auto on {r['device']} ({r.get('model')}) chose {num(to_float(r['chosen']))} samples per rank "
                     f"({r.get('method')}), peak memory {mem} MB ({what}){vs}.")  # fmt: skip
    # batch x DataLoader workers (one process)
    sweep = ran[(ran["_p"] == 1) & pd.to_numeric(ran["batch_size"], errors="coerce").notna()]
    if "num_workers" in sweep and sweep["num_workers"].astype(str).nunique() > 1:
        for (device, model), g in sweep.groupby(["device", "model"], sort=True):
            if g["num_workers"].astype(str).nunique() < 2:  # no sweep for this model (ResNet-18's CPU cells)
                continue
            top = g.sort_values("samples_per_s", ascending=False).iloc[0]
            w = g.pivot_table(index="batch_size", columns="num_workers", values="samples_per_s", aggfunc="first")
            lo, hi = w.columns.min(), w.columns.max()
            gain = (w[hi] / w[lo]).dropna()
            found.append(f"On {device} ({model}), the batch × DataLoader-workers sweep peaks at batch {top['batch_size']} with "
                         f"{top['num_workers']} workers ({cell_ci(top, 'samples_per_s')} samples/s); {hi} workers instead of "
                         f"{lo} change throughput by {'+' if gain.median() >= 1 else ''}{sig3(100 * (gain.median() - 1))} % (median over {len(gain)} batch "
                         f"sizes).")  # fmt: skip
    # the strategies, per device and model, at their common batch and world size
    multi = ran[ran["_p"] > 1]
    for (device, model), g in multi.groupby(["device", "model"], sort=True):
        p = int(g["_p"].min())
        at = g[g["_p"] == p]
        base = A.matching(ran, dict(device=device, model=model, strategy=A.BASELINE_STRATEGY))
        base = base[base["batch_size"].astype(str).isin(at["batch_size"].astype(str)) &
                    base["num_workers"].astype(str).isin(at["num_workers"].astype(str))] if "num_workers" in base else base  # fmt: skip
        both = pd.concat([base, at])
        parts = [f"{r['strategy']} {ms_text(r['round_s'])} ms a round, {cell_ci(r, 'samples_per_s')} samples/s, accuracy "
                 f"{cell_ci(r, 'test_acc', 100)} %{_after_steps(r)}" for _, r in both.iterrows()]  # fmt: skip
        fastest = at.sort_values("samples_per_s", ascending=False).iloc[0]
        fewer = ""
        if both["steps"].nunique() > 1 and both["test_acc"].nunique() > 1:  # weak scaling: fewer, larger steps
            fewer = (" The accuracies come after different numbers of optimizer steps (the same epochs in steps of "
                     f"{p}× the samples), so they compare training budgets, not the strategies' maths.")  # fmt: skip
        found.append(f"On {device} ({model}), one process against {p} (per-rank batch {fastest['batch_size']}): "
                     + "; ".join(parts) + f". Fastest at p = {p}: {fastest['strategy']}." + fewer)  # fmt: skip
    for device in devices:  # e.g. one GPU: NCCL wants a GPU per rank, so no strategy ran at p > 1
        counts, n, reason = skipped_counts(d.runs, device, set(multi[multi["device"].astype(str) == device]["_p"]))
        if counts and n:
            found.append(f"On {device} the strategies at p = {', '.join(map(str, counts))} did not run: their {n} runs "
                         f"were recorded as skipped ({reason}).")  # fmt: skip
    # CPU epoch time against processes (DDP)
    ddp = A.matching(ran, dict(device="cpu", strategy="ddp"))
    for model, g in ddp.groupby("model", sort=True) if "model" in ddp else []:
        one = A.matching(ran, dict(device="cpu", model=model, strategy=A.BASELINE_STRATEGY))
        one = one[one["batch_size"].astype(str).isin(g["batch_size"].astype(str))]
        if "num_workers" in one:
            one = one[one["num_workers"].astype(str).isin(g["num_workers"].astype(str))]
        series = [f"{cell_ci(r, 'epoch_time_s')} s at {int(r['_p'])}" for _, r in pd.concat([one, g]).sort_values("_p").iterrows()]
        found.append(f"On CPU ({model}), the epoch time against processes (one process, then DDP): " + ", ".join(series) + ".")
    return found


STUDY = Study(
    "accelerators",
    "Accelerators: what a GPU changes for the same workload",
    "How do throughput per epoch, the largest batch that fits and its memory, the DataLoader's workers, and "
    "single vs pipeline vs federated averaging vs DDP differ between CPU and GPU, and how does the CPU's epoch "
    "time fall with processes?",
    ("epoch_throughput", "memory_vs_batch", "throughput_vs_batch", "strategy_bars", "epoch_time"),
    build,
)
