"""The model checked on what it did not see: every measured cell that communicates held out in turn
(the model fitted on the others predicts it), and as blocks the largest world size and each measured
link in turn (all its cells at once), the way a user extrapolates. Each held-out prediction is compared with the cell's measured
mean step time.

Intervals: the parts' bootstrap widened by the model's error on the *other* held-out cells (the 90th
percentile of their absolute log errors, jackknife+): whether a cell's interval covers its measurement
is then a fair test, never the cell judging itself. The model handed to predictions is widened by the
same percentile over all held-out cells.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ddpbench.analysis.intervals import LEVEL
from ddpbench.analysis.tables import varying
from ddpbench.stepmodel.model import StepModel, fit
from ddpbench.stepmodel.parts import Measured, measure

ERROR_QUANTILE = 0.9  # of the held-out absolute log errors, added to every interval
EACH, LARGEST, EACH_LINK = "each cell", "largest world size", "each link"
HOLDOUT_COLUMNS = ["held_out", "cell", "measured_s", "measured_low", "measured_high", "predicted_s", "predicted_low",
                   "predicted_high", "rel_error", "covered", "note"]  # fmt: skip


@dataclass
class Validation:
    table: pd.DataFrame  # HOLDOUT_COLUMNS, one row per held-out prediction
    summary: pd.DataFrame  # per kind of hold-out: n, median and worst absolute error, coverage
    model: StepModel  # fitted on every cell, widened by the held-out error
    notes: list[str] = field(default_factory=list)  # hold-outs that could not be made, and why


def _quantile(errors: np.ndarray) -> float:
    errors = np.abs(errors[np.isfinite(errors)])
    if len(errors) == 0:
        return np.nan
    return float(np.quantile(errors, ERROR_QUANTILE, method="higher"))


def _predict_held(m: Measured, held: np.ndarray, sweep) -> list[dict]:
    """Fit without the `held` cells and predict each of them (point and parts' interval, unwidened)."""
    try:
        model = fit(m.subset(~held), sweep)
    except ValueError as err:
        return [dict(index=int(i), note=str(err)) for i in np.flatnonzero(held)]
    rows = []
    for i in np.flatnonzero(held):
        cell = m.cells.iloc[i]
        try:
            compute, comm, exposed, notes = model.parts(cell)
        except ValueError as err:
            rows.append(dict(index=int(i), note=str(err)))
            continue
        point, lo, hi = model.interval(compute + exposed)
        rows.append(dict(index=int(i), predicted_s=point, lo=lo, hi=hi, note="; ".join(notes)))
    return rows


def validate(runs: pd.DataFrame | Measured, sweep: pd.DataFrame | None = None, max_each: int | None = None) -> Validation:
    """`max_each`: hold out at most this many cells one at a time (each is a refit), spread evenly over
    the cells that communicate; None: every one."""
    m = runs if isinstance(runs, Measured) else measure(runs)
    model = fit(m, sweep)
    cells = m.cells
    talk = ((cells["world_size"] > 1) & ~cells["schedule"].isin(["none", "stages"])).to_numpy()
    shown = [c for c in varying(cells, m.axes) if c not in ("world_size",)] or ["strategy"]
    notes = []
    each = np.flatnonzero(talk)
    if max_each is not None and len(each) > max_each:
        notes.append(f"{EACH}: {max_each} of the {len(each)} cells that communicate were held out one at a time, "
                     "spread evenly over them (each is a refit of the model)")  # fmt: skip
        each = each[(np.arange(max_each) * len(each)) // max_each]
    index = np.arange(len(cells))
    kinds: list[tuple[str, np.ndarray]] = [(EACH, index == i) for i in each]
    sizes = sorted(set(cells.loc[talk, "world_size"]))
    if len(sizes) >= 2:
        kinds.append((f"{LARGEST} (p = {sizes[-1]})", (cells["world_size"] == sizes[-1]).to_numpy() & talk))
    else:
        notes.append(f"{LARGEST}: the cells that communicate ran at {len(sizes)} world size(s); holding one out needs 2")
    links = cells.loc[talk & cells["link_bps"].notna().to_numpy(), "link_class"]
    if links.nunique() >= 2:  # each measured link held out in turn, slowest first
        rate = cells.groupby("link_class")["link_bps"].median()
        for link in sorted(set(links), key=lambda k: rate[k]):
            kinds.append((f"{EACH_LINK} ({link.rsplit('/', 1)[1]}, {rate[link] / 1e6:.0f} Mbit/s achieved)",
                          (cells["link_class"] == link).to_numpy() & talk))  # fmt: skip
    rows = []
    for kind, held in kinds:
        for r in _predict_held(m, held, sweep):
            rows.append(dict(r, held_out=kind.split(" (")[0], kind=kind, block=held))
    errors = {}
    for r in rows:
        if "predicted_s" in r:
            r["log_error"] = float(np.log(r["predicted_s"] / m.draws["step"][0, r["index"]]))
            if r["held_out"] == EACH:
                errors[r["index"]] = r["log_error"]
    out = []
    tail = 100 * (1 - LEVEL) / 2
    for r in rows:
        i = r["index"]
        step = m.draws["step"][:, i]
        row = dict(held_out=r["kind"], cell=", ".join(f"{c}={cells.iloc[i][c]}" for c in [*shown, "world_size"] if c in cells),
                   measured_s=float(step[0]), measured_low=float(np.percentile(step[1:], tail)),
                   measured_high=float(np.percentile(step[1:], 100 - tail)), note=r.get("note", ""))  # fmt: skip
        if "predicted_s" in r:
            # widened by the error on the held-out cells outside this hold-out (jackknife+)
            q = _quantile(np.array([e for j, e in errors.items() if not r["block"][j]]))
            q = 0.0 if not np.isfinite(q) else q
            point = r["predicted_s"]
            down = np.sqrt(np.log(point / min(r["lo"], point)) ** 2 + q**2)
            up = np.sqrt(np.log(max(r["hi"], point) / point) ** 2 + q**2)
            lo, hi = point * np.exp(-down), point * np.exp(up)
            row.update(predicted_s=point, predicted_low=lo, predicted_high=hi, rel_error=point / row["measured_s"] - 1,
                       covered=bool(lo <= row["measured_s"] <= hi))  # fmt: skip
        out.append(row)
    table = pd.DataFrame(out, columns=HOLDOUT_COLUMNS)
    summary = summarise(table)
    model.widen = _quantile(np.array(list(errors.values()))) if errors else 0.0
    model.widen = 0.0 if not np.isfinite(model.widen) else model.widen
    done = [k for k, h in kinds if any("predicted_s" in r and r["kind"] == k for r in rows)]
    model.validated = {"world_size": max([int(cells.loc[h, "world_size"].max()) for k, h in kinds if k in done] or [1])}
    held_rates = [float(cells.loc[h, "link_bps"].min()) for k, h in kinds if k in done and cells.loc[h, "link_bps"].notna().any()]
    if held_rates:
        model.validated["link_bps"] = min(held_rates)
    return Validation(table, summary, model, notes)


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """Per kind of hold-out: cells predicted, median and worst absolute relative error, share covered."""
    rows = []
    kinds = table["held_out"].str.split(" \\(").str[0]
    for kind, g in table.groupby(kinds, sort=False):
        got = g[g["predicted_s"].notna()]
        err = got["rel_error"].abs()
        rows.append(dict(held_out=kind, cells=len(g), predicted=len(got),
                         median_abs_error=float(err.median()) if len(got) else np.nan,
                         worst_abs_error=float(err.max()) if len(got) else np.nan,
                         coverage=float(got["covered"].astype(bool).mean()) if len(got) else np.nan))  # fmt: skip
    return pd.DataFrame(rows, columns=["held_out", "cells", "predicted", "median_abs_error", "worst_abs_error", "coverage"])
