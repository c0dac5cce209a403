"""The Predictions section: the step model (ddpbench.stepmodel) checked on cells held out of its fit in
every report, what it predicts beyond the measured world sizes, and, beside it, how far the scaling
laws of Fits (Amdahl, the cost model) were off at the largest world size when fitted without it.

`section(runs, comm, fits)` gives a `Predictions`: the sentences and tables the templates show, `held`
(stepmodel.HOLDOUT_COLUMNS, written as predictions.csv: only the header where nothing could be held
out) and `summary` (per kind of hold-out, what the findings read). A runs table the model cannot use,
or a hold-out the grid has no cells for, is said in a sentence that names what to run: never a failed
report.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ddpbench import stepmodel
from ddpbench import strategies as registry
from ddpbench.analysis.cost_model import fit_comm_sweep, fit_cost_model
from ddpbench.analysis.fits import Fit, fit_amdahl
from ddpbench.analysis.tables import TIME, group_axes, label, varying
from ddpbench.report.tables import Table
from ddpbench.report.text import finite, listing, num, plural, sig3, value_text
from ddpbench.stepmodel.holdout import EACH, EACH_LINK, LARGEST

ANCHOR = "predictions"
BEYOND = (2, 4)  # predictions at these multiples of the largest world size measured
# What the report refits within its time. A refit grows with the cells (2 cores: 0.03 s at 20 cells,
# 0.2 s at 200, 0.5 s at 1,000, with measuring the runs 0.03, 0.08 and 0.3 s): cells held out one at a
# time are at most MAX_EACH and at most CELL_FITS // cells, spread over the cells that communicate; above
# MAX_CELLS measured cells the model is not refitted at all, and the section says so (a report of part
# of the grid checks it).
MAX_EACH = 40
CELL_FITS = 4000
MAX_CELLS = 1000
LAW_BOOT = 20  # the cost model's resamples when refitted for its held-out error (its point is what is compared)
LAW_TEXT = {"amdahl": "Amdahl's law", "cost_model": "the cost model"}


@dataclass
class Predictions:
    """The section as the templates read it; `why` alone where no model could be built."""

    intro: str = ""
    why: str = ""  # no hold-out at all: the one sentence why (and what to run)
    table: Table | None = None  # each held-out prediction against its measurement
    sentences: list[str] = field(default_factory=list)  # one per kind of hold-out
    todo: str = ""  # a hold-out the grid has no cells for, and what to run
    notes: list[str] = field(default_factory=list)  # the model's other remarks on its hold-outs
    laws: list[str] = field(default_factory=list)  # the scaling laws' error, held out the same way
    beyond: Table | None = None  # predictions past the largest world size measured
    held: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=stepmodel.HOLDOUT_COLUMNS))
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)


def section(runs: pd.DataFrame, comm: pd.DataFrame | None = None, fits: pd.DataFrame | None = None) -> Predictions:
    """The Predictions section of a runs table (and its collective sweep, and the report's fits.csv)."""
    # Runs of a strategy this checkout does not have (an archive from another one) have no schedule or
    # volume law here: they are left out of the model, and said to be
    known = runs["strategy"].astype(str).isin(registry.names()) if "strategy" in runs else pd.Series(True, index=runs.index)
    unknown = sorted(set(runs.loc[~known, "strategy"].astype(str))) if not known.all() else []
    runs = runs[known]
    try:
        measured = stepmodel.measure(runs)
        if len(measured.cells) > MAX_CELLS:
            return Predictions(why=too_many(len(measured.cells)) + left_out(unknown))
        v = stepmodel.validate(measured, comm, max_each=min(MAX_EACH, CELL_FITS // max(len(measured.cells), 1)))
    except (ValueError, KeyError) as err:  # MissingPart is a ValueError: no part to build the model from
        what = f"runs.csv lacks the column {err}" if isinstance(err, KeyError) else str(err)
        return Predictions(why=f"No prediction was made: the step model could not be built ({what}).{left_out(unknown)}")
    cells = v.model.measured.cells
    talk = cells[(cells["world_size"] > 1) & ~cells["schedule"].isin(["none", "stages"])] if len(cells) else cells
    if v.table.empty:
        return Predictions(why="No prediction was made: no measured cell communicates (a strategy that synchronises, "
                               "at world size 2 or more), so the model has no communication to learn and no cell to "
                               f"hold out; run one at world sizes 2 and 4 too ({grid_line(cells, [2, 4])})."
                               f"{left_out(unknown)}",
                           held=v.table, summary=v.summary)  # fmt: skip
    source = " or ".join(sorted(set(v.model.links.source.values()))) or "the runs' own communication"
    intro = ("The step model predicts a step as compute plus the communication the step waits for, from parts measured "
             f"here: each setting's compute per rank and per-rank batch, each link's latency and bandwidth (from {source}), "
             "and each strategy's schedule of what overlaps what.")  # fmt: skip
    sizes = sorted({int(p) for p in talk["world_size"]})
    out = Predictions(intro=intro, table=held_table(v.table), held=v.table, summary=v.summary)
    out.sentences = [kind_sentence(v.table, r) for _, r in v.summary.iterrows()]
    out.todo = todo(cells, sizes)
    out.notes = [f"{n[0].upper()}{n[1:]}." for n in v.notes if not n.startswith(LARGEST)]  # the todo says that one
    if unknown:
        out.notes.append(left_out(unknown).strip())
    out.beyond = beyond_table(v.model, talk, sizes[-1]) if sizes else None
    largest = v.summary[v.summary["held_out"] == LARGEST]
    if len(sizes) >= 2 and fits is not None:
        out.laws = law_lines(runs, comm, fits, sizes[-1], largest.iloc[0] if len(largest) else None)
    return out


def too_many(cells: int) -> str:
    return (f"The step model was not checked in this report: its {cells} measured cells are more than the {MAX_CELLS} "
            "it refits within a report's time; a report of part of the grid "
            "(one model or batch size: ddpbench report --runs on those runs) checks it there.")  # fmt: skip


def left_out(unknown: list[str]) -> str:
    """' Left out of the model: x, a strategy this checkout does not have.' ('' for none)."""
    if not unknown:
        return ""
    return f" Left out of the model: {listing(unknown)}, {'a strategy' if len(unknown) == 1 else 'strategies'} this " \
           "checkout does not have."


# -- held-out cells ------------------------------------------------------------------------------


def ms(x) -> str:
    return num(float(x) * 1e3) if finite(x) else "–"


def ms_ci(est, lo, hi) -> str:
    return f"{ms(est)} [{ms(lo)}, {ms(hi)}]" if finite(lo) and finite(hi) else ms(est)


def signed_pct(x) -> str:
    """+3.12 % / −0.840 % (a prediction's error against the measurement); '–' without one."""
    if not finite(x):
        return "–"
    return f"{'+' if float(x) >= 0 else '−'}{sig3(abs(100 * float(x)))} %"


def held_as(kind: str) -> str:
    return "one at a time" if kind == EACH else kind


ALONE = re.compile(r"strategy (\S+) never communicated in a measured cell of this model and setting")


def reason(note: str) -> str:
    """Why a held-out cell had no prediction, as the reader of a hold-out needs it: the model's reason
    for a strategy without communication is, here, that its only such cell was the one held out."""
    got = ALONE.match(str(note))
    if got:
        return f"its strategy's only cell that communicates: without it, nothing to learn {got.group(1)}'s message from"
    return str(note)


def reasons(notes: list) -> str:
    """Why none of a hold-out's cells had a prediction, in one clause."""
    notes = [str(n) for n in notes if isinstance(n, str) and n]
    alone = [m.group(1) for m in map(ALONE.match, notes) if m]
    if notes and len(alone) == len(notes):
        return (f"each was the only cell of its strategy that communicates ({listing(sorted(set(alone)), limit=6)}), so "
                "without it the model had nothing to learn that strategy's message from")  # fmt: skip
    return reason(notes[0]) if notes else "no prediction could be made"


def held_table(table: pd.DataFrame) -> Table:
    notes = [reason(n) if isinstance(n, str) else "" for n in table["note"]]
    rows = []
    for (_, r), note in zip(table.iterrows(), notes):
        covered = "–" if pd.isna(r["covered"]) else "yes" if bool(r["covered"]) else "no"
        rows.append([held_as(r["held_out"]), r["cell"], ms_ci(r["measured_s"], r["measured_low"], r["measured_high"]),
                     ms_ci(r["predicted_s"], r["predicted_low"], r["predicted_high"]), signed_pct(r["rel_error"]),
                     covered] + ([note] if any(notes) else []))  # fmt: skip
    columns = ["held out", "held-out cell", "measured step [ms]", "predicted [ms]", "error", "covered"]
    return Table(columns + (["note"] if any(notes) else []), rows,
                 "measured: mean step time over the cell's repeats [percentile bootstrap of the mean, descriptive]; "
                 "predicted: by the model fitted without the cell (one at a time) or without its block (the largest "
                 "world size, each link in turn) [the parts' bootstrap interval over the measured repeats, widened by the "
                 "model's error on the other held-out cells (jackknife+)]; error: predicted / measured − 1; covered: the "
                 "measurement lies in the predicted interval.")  # fmt: skip


def kind_sentence(table: pd.DataFrame, r: pd.Series) -> str:
    """'Held out one at a time, the model predicted 9 cells with a median absolute error of 0.589 % (worst
    1.21 %); its intervals covered 9 of 9.' (one per kind of hold-out, the numbers validate()'s summary)."""
    kind = str(r["held_out"])
    rows = table[table["held_out"].str.split(" \\(").str[0] == kind]
    full = str(rows["held_out"].iloc[0]) if len(rows) else kind
    if kind == EACH:
        lead = "Held out one at a time, the model"
    elif kind == EACH_LINK:
        lead = f"With each of the {rows['held_out'].nunique()} links held out in turn (all its cells at once), the model"
    else:
        lead = f"Fitted without the {full}, the model"
    n, cells = int(r["predicted"]), int(r["cells"])
    if n == 0:
        return f"{lead} could predict none of its {plural(cells, 'cell', 'cells')}: {reasons(list(rows['note']))}."
    which = f"{n} of {cells}" if n < cells else str(n)
    covered = int(round(float(r["coverage"]) * n))
    return (f"{lead} predicted {which} {'cell' if cells == 1 else 'cells'} with a median absolute error of "
            f"{sig3(100 * r['median_abs_error'])} % (worst {sig3(100 * r['worst_abs_error'])} %); its intervals covered "
            f"{covered} of {n}.")  # fmt: skip


def grid_line(measured: pd.DataFrame, more: list[int]) -> str:
    """'grid: world_size: [1, 2, 4]': the world sizes measured (ok runs) with `more` added."""
    have = measured["world_size"] if "world_size" in measured else []
    return f"grid: world_size: [{', '.join(map(str, sorted({int(p) for p in have} | set(more))))}]"


def todo(measured: pd.DataFrame, sizes: list[int]) -> str:
    """What to run where the largest world size could not be held out (`sizes`: those of the cells that communicate)."""
    if len(sizes) >= 2:
        return ""
    p = sizes[0] if sizes else 1
    return (f"No world size could be held out: the cells that communicate ran at p = {p} only, and holding out the "
            f"largest leaves none to fit the communication from, so the model's predictions beyond p = {p} are "
            f"unchecked; run world size {2 * p} too ({grid_line(measured, [2 * p])}).")  # fmt: skip


# -- beyond the measured world sizes -------------------------------------------------------------


def per_rank_batch(cell: pd.Series, p: int, q: int) -> float:
    """A cell's per-rank batch at world size q: weak scaling keeps it, strong keeps the global batch
    (the largest shard, as the harness splits it: run.data.batch_sizes)."""
    if str(cell.get("scaling", "strong")) == "weak":
        return float(cell["per_rank_batch"])
    try:
        return float(math.ceil(float(cell["batch_size"]) / q))
    except (KeyError, TypeError, ValueError):  # batch_size auto: the measured per-rank batch, scaled
        return float(cell["per_rank_batch"]) * p / q


def beyond_table(model: stepmodel.StepModel, talk: pd.DataFrame, top: int) -> Table:
    """The cells measured at the largest world size, predicted at BEYOND times it."""
    axes = model.measured.axes
    at = talk[talk["world_size"] == top]
    targets = pd.DataFrame([{**{a: c[a] for a in axes if a in c}, "world_size": k * top,
                             "per_rank_batch": per_rank_batch(c, top, k * top), "link_bps": c["link_bps"]}
                            for k in BEYOND for _, c in at.iterrows()])  # fmt: skip
    got = model.predict(targets, strict=False)
    shown = [c for c in varying(talk, axes) if c != "world_size"] or ["strategy"]
    rows = []
    for _, r in got.iterrows():
        beyond = str(r["beyond_validated"]) if isinstance(r["beyond_validated"], str) else ""
        checked = f"beyond what was held out: {beyond}" if beyond else "within what was held out"
        note = [checked] if finite(r["step_time_s"]) else []
        note += [str(r["note"])] if isinstance(r["note"], str) and r["note"] else []
        rows.append([", ".join(f"{c}={value_text(r[c])}" for c in shown if c in r), value_text(r["world_size"]),
                     value_text(r["per_rank_batch"]), ms_ci(r["step_time_s"], r["step_time_s_low"], r["step_time_s_high"]),
                     f"{num(r['samples_per_s'])} [{num(r['samples_per_s_low'])}, {num(r['samples_per_s_high'])}]"
                     if finite(r["samples_per_s"]) else "–", "; ".join(note)])  # fmt: skip
    scaling = {str(c.get("scaling", "strong")) for _, c in at.iterrows()}
    kept = {"strong": "strong scaling keeps the global batch, so the per-rank batch shrinks",
            "weak": "weak scaling keeps the per-rank batch"}  # fmt: skip
    widen = (f"widened by the model's error on held-out cells (the 90th percentile of their absolute log errors, "
             f"{sig3(100 * model.widen)} %, added in quadrature)" if finite(model.widen) and model.widen > 0 else
             "not widened: no held-out cell was predicted")  # fmt: skip
    return Table(["settings", "world size", "per-rank batch", "predicted step [ms]", "throughput [samples/s]", "note"],
                 rows, f"Predicted at {' and '.join(f'{k}×' for k in BEYOND)} the largest world size measured (p = {top}), "
                 f"the other settings as its cells' ({'; '.join(kept.get(k, k) for k in sorted(scaling))}): "
                 f"predictions, not measurements. Interval: the parts' bootstrap, {widen}. Beyond what was held out: "
                 "past the largest world size or slowest link a hold-out checked, or a per-rank batch outside those "
                 "measured; no held-out cell tested the model there.", ["prediction"] * len(rows))  # fmt: skip


# -- the scaling laws, held out the same way -----------------------------------------------------


def law_errors(runs: pd.DataFrame, comm: pd.DataFrame | None, top: int) -> dict[str, tuple[list, list[str]]]:
    """law -> ([(group, error of its time at `top`)], [why it could not be refitted]): Amdahl and the cost
    model of every strong-scaling group measured at `top`, refitted on its smaller world sizes as fits.csv
    fits them (Amdahl on the epoch time, the cost model on the mean step time)."""
    if TIME not in runs or "world_size" not in runs:
        return {law: ([], ["runs.csv has no epoch times"]) for law in LAW_TEXT}
    ok = runs[(runs["status"] == "ok") & runs[TIME].notna()] if "status" in runs else runs[runs[TIME].notna()]
    gcols = group_axes(ok)
    sweep = fit_comm_sweep(comm) if comm is not None else pd.DataFrame()
    groups = ok.groupby([ok[c].astype(str) for c in gcols], sort=True, dropna=False) if gcols else [((), ok)]
    groups = [g for _, g in groups if str(g.iloc[0].get("scaling", "strong")) != "weak" and top in set(g["world_size"])]
    shown = varying(pd.DataFrame([g.iloc[0] for g in groups]), gcols) if groups else []  # what tells the groups apart
    out = {law: ([], []) for law in LAW_TEXT}
    for g in groups:
        first = g.iloc[0]
        name = str(first["strategy"]) if shown == ["strategy"] else label(first, shown) if shown else "all runs"
        train, at = g[g["world_size"] < top], g[g["world_size"] == top]
        fitted = {"amdahl": refit(fit_amdahl, train["world_size"], train[TIME]),
                  "cost_model": refit(fit_cost_model, train, sweep, predict_at=(top,), n_boot=LAW_BOOT)}  # fmt: skip
        step = at["step_time_mean_s"].mean() if "step_time_mean_s" in at else np.nan
        measured = {"amdahl": at[TIME].mean(), "cost_model": step}
        for law, fit in fitted.items():
            if isinstance(fit, Fit):
                out[law][0].append((name, float(fit.predict(top)) / float(measured[law]) - 1))
            else:
                out[law][1].append(str(fit))
    return out


def refit(law, *args, **kwargs) -> Fit | str:
    """A law refitted on fewer world sizes than fits.csv saw, or why it could not be (a least-squares
    fit that does not converge on them is a reason, not a failed report)."""
    try:
        return law(*args, **kwargs)
    except (RuntimeError, ValueError) as err:  # scipy's curve_fit: "Optimal parameters not found"
        return f"{type(err).__name__}: {err}"


def error_text(errors: list) -> str:
    values = np.array([e for _, e in errors], float)
    if len(values) == 1:
        return f"{signed_pct(values[0])} ({errors[0][0]})"
    worst = errors[int(np.nanargmax(np.abs(values)))]
    return (f"a median of {sig3(100 * np.nanmedian(np.abs(values)))} % over {len(values)} groups (worst "
            f"{signed_pct(worst[1])}, {worst[0]})")  # fmt: skip


def law_lines(runs: pd.DataFrame, comm: pd.DataFrame | None, fits: pd.DataFrame, top: int,
              step: pd.Series | None) -> list[str]:  # fmt: skip
    """One sentence: how far each law that fits.csv fitted was off at the largest world size when
    fitted without it, beside the step model's error held out the same way."""
    fitted = set(fits.loc[fits["kind"] == "fit", "law"]) if len(fits) and "kind" in fits else set()
    lines = []
    errors = law_errors(runs, comm, top) if fitted & set(LAW_TEXT) else {}
    said, erred = [], False
    for law, (errs, why) in errors.items():
        if law not in fitted:
            continue
        if errs:
            said.append(f"{LAW_TEXT[law]} {'by' if erred else 'was off there by'} {error_text(errs)}")
        else:
            said.append(f"{LAW_TEXT[law]} could not be refitted ({why[0] if why else 'no group was measured there'})")
        erred = bool(errs)
    if said:
        text = f"With world size {top} held out of the fits, {listing(said, sep='; ')}"
        if step is not None and int(step["predicted"]):
            text += (f"; the step model {'by' if erred else 'was off there by'} a median of "
                     f"{sig3(100 * step['median_abs_error'])} % (worst {sig3(100 * step['worst_abs_error'])} %)")  # fmt: skip
        lines.append(text + ".")
    if "gustafson" in fitted:
        lines.append("Gustafson's law (weak scaling) was not checked on held-out cells: its PREDICTION rows in Fits are "
                     "unchecked.")  # fmt: skip
    return lines
