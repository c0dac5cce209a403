"""The fitted step model and its predictions: step time, throughput and the parts, with intervals."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ddpbench.analysis.intervals import LEVEL
from ddpbench.stepmodel import comm as comm_law
from ddpbench.stepmodel import compute as compute_law
from ddpbench.stepmodel import schedule
from ddpbench.stepmodel.comm import MissingPart
from ddpbench.stepmodel.parts import Measured, annotate, measure

PREDICTION_COLUMNS = [
    "step_time_s", "step_time_s_low", "step_time_s_high", "samples_per_s", "samples_per_s_low", "samples_per_s_high",
    "tokens_per_s", "tokens_per_s_low", "tokens_per_s_high", "compute_s", "comm_s", "exposed_comm_s",
    "beyond_validated", "note",
]  # fmt: skip


@dataclass
class StepModel:
    measured: Measured
    compute: dict[str, compute_law.DeviceLaw]
    links: comm_law.LinkLaw
    delta: dict[str, np.ndarray]
    #: The model's own error on held-out cells, as a log half-width added to every interval (holdout.py).
    widen: float = 0.0
    #: How far the held-out checks reached: the largest world size and the slowest link rate held out.
    validated: dict = field(default_factory=dict)

    def parts(self, target: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """(compute, comm, exposed) [draws] for one annotated target cell; MissingPart where a part was
        never measured."""
        device = str(target.get("device", "cpu"))
        law = self.compute.get(device)
        if law is None:
            raise MissingPart(f"no cell was measured on device {device}: run single there first")
        if target["compute_key"] not in law.keys:
            raise MissingPart(f"no measured cell computed this model and setting on {device}: run single at "
                              f"per-rank batch {target['per_rank_batch']:g} with these settings")  # fmt: skip
        p = int(target["world_size"])
        if target["schedule"] == "stages":
            raise MissingPart("the pipeline's schedule (micro-batches through stages) is not modelled")
        compute = compute_law.predict(law, target["compute_key"], target["strategy"], float(target["per_rank_batch"]), p)
        if p == 1 or target["schedule"] == "none":
            zero = np.zeros_like(compute)
            return compute, zero, zero, []
        comm, calls, notes = comm_law.predict(self.links, target)
        backward = compute * schedule.backward_share(self.measured.cells, self.measured.draws, target)
        buckets = schedule.readiness(self.measured.cells, target, calls) if target["schedule"] == "overlap" else None
        x = schedule.modelled_share(target["schedule"], device, calls, compute, backward, comm, buckets)
        x = np.clip(x + self.delta.get(target["strategy"], 0.0), 0.0, 1.0)
        return compute, comm, x * comm, notes

    def predict(self, targets: pd.DataFrame, strict: bool = True) -> pd.DataFrame:
        """One row per target cell: its columns, then PREDICTION_COLUMNS. `strict`: a missing part
        raises MissingPart naming the cell; else the row says why in `note` and has no numbers."""
        cells = annotate(targets.reset_index(drop=True), self.measured.axes)
        rows = []
        for _, t in cells.iterrows():
            try:
                rows.append(self._row(t))
            except MissingPart as err:
                if strict:
                    raise MissingPart(f"cannot predict {describe(t)}: {err}") from None
                rows.append({"note": str(err)})
        out = pd.DataFrame(rows, columns=PREDICTION_COLUMNS)
        return pd.concat([targets.reset_index(drop=True), out], axis=1)

    def _row(self, t: pd.Series) -> dict:
        compute, comm, exposed, notes = self.parts(t)
        step = compute + exposed
        point, lo, hi = self.interval(step)
        samples = float(t["per_rank_batch"]) * int(t["world_size"])
        tokens = self.tokens_per_sample(t)
        beyond = self.beyond(t)
        return dict(
            step_time_s=point, step_time_s_low=lo, step_time_s_high=hi,
            samples_per_s=samples / point, samples_per_s_low=samples / hi, samples_per_s_high=samples / lo,
            tokens_per_s=tokens * samples / point, tokens_per_s_low=tokens * samples / hi, tokens_per_s_high=tokens * samples / lo,
            compute_s=float(compute[0]), comm_s=float(comm[0]), exposed_comm_s=float(exposed[0]),
            beyond_validated="; ".join(beyond), note="; ".join(notes),
        )  # fmt: skip

    def interval(self, draws: np.ndarray) -> tuple[float, float, float]:
        """The point (draw 0) and its interval: the draws' percentiles at LEVEL, widened on the log scale
        by the model's held-out error."""
        point = float(draws[0])
        rest = draws[1:][np.isfinite(draws[1:])]
        tail = 100 * (1 - LEVEL) / 2
        lo, hi = (np.percentile(rest, [tail, 100 - tail]) if len(rest) else (point, point))
        down = np.sqrt(np.log(point / min(lo, point)) ** 2 + self.widen**2)
        up = np.sqrt(np.log(max(hi, point) / point) ** 2 + self.widen**2)
        return point, point * float(np.exp(-down)), point * float(np.exp(up))

    def tokens_per_sample(self, t: pd.Series) -> float:
        same = self.measured.cells[self.measured.cells["compute_key"] == t["compute_key"]]
        vals = same["tokens_per_sample"].dropna() if "tokens_per_sample" in same else []
        return float(np.median(vals)) if len(vals) else np.nan

    def beyond(self, t: pd.Series) -> list[str]:
        """Where the target lies past what the held-out checks covered (or, before any, what was measured)."""
        out = []
        top = self.validated.get("world_size", self.measured.cells["world_size"].max())
        if int(t["world_size"]) > top:
            out.append(f"world size {int(t['world_size'])} > {int(top)} held out")
        slowest = self.validated.get("link_bps", np.nan)
        rate = float(t.get("link_bps", np.nan))
        if np.isfinite(rate) and np.isfinite(slowest) and rate < slowest:
            out.append(f"link {rate / 1e6:g} Mbit/s < the slowest held out, {slowest / 1e6:g}")
        law = self.compute.get(str(t.get("device", "cpu")))
        if law is not None and t["compute_key"] in law.batches:
            low, high = law.batches[t["compute_key"]]
            if not low <= float(t["per_rank_batch"]) <= high:
                out.append(f"per-rank batch {float(t['per_rank_batch']):g} outside the measured {low:g}-{high:g}")
        return out


def describe(t: pd.Series) -> str:
    keys = [k for k in ("strategy", "world_size", "per_rank_batch", "link", "bucket_mb", "model") if k in t and pd.notna(t[k])]
    return ", ".join(f"{k}={t[k]}" for k in keys)


def fit(runs_or_measured: pd.DataFrame | Measured, sweep: pd.DataFrame | None = None) -> StepModel:
    """The step model of a runs table (or of already measured cells)."""
    m = runs_or_measured if isinstance(runs_or_measured, Measured) else measure(runs_or_measured)
    if m.cells.empty:
        raise MissingPart("no ok run with a step time: nothing to build the model from")
    devices = m.cells["device"].astype(str) if "device" in m.cells else pd.Series("cpu", index=m.cells.index)
    compute = {}
    for device in sorted(set(devices)):
        ix = np.flatnonzero(devices.to_numpy() == device)
        compute[device] = compute_law.fit_device(m.cells.iloc[ix].reset_index(drop=True), m.draws["compute"][:, ix])
    links = comm_law.fit(m.cells, m.draws["comm"], sweep)
    return StepModel(m, compute, links, schedule.corrections(m.cells, m.draws))
