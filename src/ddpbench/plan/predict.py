"""`ddpbench predict RESULTS --config GRID.yaml`: the step model's predictions for cells never run.

    ddpbench predict results --config grid.yaml [--comm comm.csv] [--out predictions.csv]

RESULTS is a results folder (its aggregate/runs.csv) or a runs.csv, read as `ddpbench compare`
reads a side (analysis.compare.read_side: runs of other code set aside, at least one ok timed run).
GRID.yaml is a config in the workflow's schema, merged over the measured study's config
(RESULTS/config.yaml, which the workflow records; else the checkout's config.yaml) the way Snakemake
merges a preset over config.yaml (mappings key by key, lists replaced): it need only name what
differs, e.g. `grid: {world_size: [8], bucket_mb: [2]}`. The merged config is validated and expanded
into cells by the plan (plan.study.Study, then the cells' combinations), as the workflow does before
running it, so it names cells exactly as a grid to run would: other world sizes, nodes, links by rate
(`link: [100mbit]`), bucket sizes, strategies, batch sizes. Each cell's per-rank batch is the
harness's (core.params.batch_sizes); batch_size auto is chosen at run time and cannot be predicted.

The step model (ddpbench.stepmodel) is fitted on the ok runs, and on the collective sweep where
`--comm` names one (the report's --comm file), then checked on cells held out of the fit
(stepmodel.validate): every interval is widened by the error it showed there, and a cell past what
those checks reached says so in beyond_validated. predictions.csv (RESULTS/predictions.csv unless
`--out`) holds the grid's axes, nodes, the per-rank and global batch and stepmodel.PREDICTION_COLUMNS;
the terminal shows its path, a table and the held-out error.

Refused before anything is written, with exit status 2 and one message: a RESULTS without runs.csv
or without an ok timed run, a config the schema or the plan refuses (naming the key), batch_size
auto, a cell one of whose parts was never measured (naming the cell and what to run).
"""

from __future__ import annotations

import argparse
import copy
import io
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ddpbench import REPO_ROOT, stepmodel
from ddpbench.analysis.compare import InputError, read_side
from ddpbench.analysis.intervals import LEVEL
from ddpbench.analysis.tables import load_runs_frame
from ddpbench.core import bounded, layout, safe_io
from ddpbench.core.params import batch_sizes
from ddpbench.plan.cells import check_cell_combinations
from ddpbench.plan.config_schema import SCHEMA_PATH
from ddpbench.plan.grid import ConfigError
from ddpbench.plan.study import MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH, MAX_CONFIG_VALUES, Study, validate_config

EXIT_REFUSED = 2
MAX_EACH = 40  # cells held out one at a time when a design predicts (each is a refit)
SHOWN = 40  # rows of the terminal's table; predictions.csv has them all
SWEEP_COLUMNS = ("collective", "device", "backend", "world_size", "bytes", "time_median_s")  # what the fit reads


class Refused(ValueError):
    """Nothing can be predicted: the message says why and what to do."""


@dataclass
class Prediction:
    table: pd.DataFrame  # the grid's axes, nodes, batches, then stepmodel.PREDICTION_COLUMNS
    validation: stepmodel.Validation
    axes: list[str]  # the grid's axes that take several values (the terminal's columns)
    source: str  # what the model was fitted on, in words


# -- inputs -----------------------------------------------------------------------------------------


def results_folder(given: Path, table: Path) -> Path:
    """The results folder of RESULTS: the folder given, or the one holding aggregate/runs.csv."""
    if given.is_dir():
        return given
    if table.parent.name == Path(layout.RUNS_TABLE).parent.name:
        return table.parent.parent
    return table.parent


def read_sweep(path: str | None) -> pd.DataFrame | None:
    """The collective sweep (ddpbench commbench's CSV, the report's --comm), checked; None when not given."""
    if not path:
        return None
    if not Path(path).is_file():
        raise Refused(f"--comm {path}: no such file (the collective sweep, docs/report.md#collective-sweep)")
    try:
        sweep = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError, ValueError) as err:
        raise Refused(f"--comm {path}: not a readable CSV ({type(err).__name__})") from None
    missing = [c for c in SWEEP_COLUMNS if c not in sweep]
    if missing:
        raise Refused(f"--comm {path}: not a collective sweep, it lacks {', '.join(missing)}")
    return sweep


def read_config(path: Path) -> dict[str, Any]:
    """A config file, read within the bounds of a recorded one (plan.study)."""
    try:
        config = bounded.read_yaml(path, MAX_CONFIG_BYTES, MAX_CONFIG_VALUES, MAX_CONFIG_DEPTH)
    except OSError as err:
        raise Refused(f"{path}: cannot read it ({err.strerror or err})") from None
    except ValueError as err:
        raise Refused(str(err)) from None
    if not isinstance(config, dict):
        raise Refused(f"{path}: not a mapping of config keys")
    return config


def grid_study(grid_path: Path, folder: Path) -> Study:
    """The study GRID.yaml plans, merged over the measured study's config (or the checkout's), validated
    and expanded by the plan as the workflow does; a refusal names the file and the key."""
    from snakemake.utils import update_config  # what merges a --configfile over config.yaml

    grid = read_config(grid_path)
    recorded = Path(layout.Layout.of(folder).config)
    base_path = recorded if recorded.is_file() else REPO_ROOT / "config.yaml"
    config = copy.deepcopy(read_config(base_path))
    update_config(config, grid)
    where = f"{grid_path} (merged over {base_path})"
    try:
        validate_config(config, SCHEMA_PATH)
        config["repeats"] = 1  # predictions are not runs: a design's repeats and rounds do not apply
        study = Study.from_config(config, checks=False, excludes_inherited="exclude" not in grid)
        check_cell_combinations(study.cells, study.fixed, study.axes)
    except ConfigError as err:
        raise Refused(f"{where}: {err}") from None
    return study


# -- the cells as the model reads them --------------------------------------------------------------


def target_cells(study: Study) -> pd.DataFrame:
    """One row per cell of the study: every cell parameter, world size, nodes, the per-rank and global
    batch as the harness derives them, the backend the process group uses."""
    rows = []
    for path in study.cells.index:
        params, world = study.params(path), study.world_size(path)
        if params["batch_size"] == "auto":
            raise Refused(f"cannot predict the cell {path}: batch_size auto is chosen at run time (the largest "
                          "batch that fits the device); name the batch sizes to predict in grid.batch_size")  # fmt: skip
        global_batch, per_rank = batch_sizes(int(params["batch_size"]), params["scaling"], world)
        rows.append({**params, "world_size": world, "nodes": study.nodes(path), "per_rank_batch": per_rank,
                     "global_batch": global_batch})  # fmt: skip
    return pd.DataFrame(rows)


# -- the model --------------------------------------------------------------------------------------


def predict(results: str, grid_path: Path, comm: str | None) -> tuple[Prediction, Path]:
    """The predictions of the grid's cells and the results folder; Refused, InputError or MissingPart
    (each naming what to do) before anything is fitted where the inputs or the grid are refused."""
    runs, csv = read_side(results)
    folder = results_folder(Path(results), csv)
    sweep = read_sweep(comm)
    study = grid_study(grid_path, folder)
    targets = target_cells(study)
    measured = stepmodel.measure(runs)
    # A part never measured is refused by the model fitted once, before the held-out checks refit it per cell
    stepmodel.fit(measured, sweep).predict(targets, strict=True)
    validation = stepmodel.validate(measured, sweep)
    if not (validation.summary["predicted"] > 0).any():
        why = f" ({'; '.join(validation.notes)})" if validation.notes else ""
        raise Refused("the step model could not be checked on a single measured cell held out of its fit" + why
                      + ": a law never checked is not a prediction; measure cells it can hold out (a second world "
                      "size >= 2, or a second strategy that communicates), then predict")  # fmt: skip
    predicted = validation.model.predict(targets, strict=True)
    cells = study.cells.reset_index(drop=True)
    extra = [c for c in ("world_size", "nodes", "per_rank_batch", "global_batch") if c not in cells]
    table = pd.concat([cells, targets[extra], predicted[stepmodel.PREDICTION_COLUMNS]], axis=1)
    shown = [c for c in cells if c not in ("strategy", "world_size") and cells[c].astype(str).nunique() > 1]
    n_runs = int(measured.cells["n_runs"].sum())
    source = (f"{len(measured.cells)} measured cells ({n_runs} ok runs) of {csv}"
              + (f" and the collective sweep {comm}" if sweep is not None else ""))  # fmt: skip
    return Prediction(table, validation, shown, source), folder


# -- predict, then measure (until_decided.predict) ---------------------------------------------------

# The least error a design's prediction is taken to carry, as a log half-width: the step model's median
# held-out error on the link grid (docs/report.md, "The step model's measured error": 10-16 %), for a
# model whose own hold-outs, over the few cells a first round measures, may show less.
LEAST_ERROR = math.log1p(0.15)


def runs_of_summaries(summaries: list[str]) -> pd.DataFrame:
    """The runs table of summary.json files as runs.csv holds it (results.aggregate's rows, read back)."""
    from ddpbench.results.aggregate import run_row

    rows = [run_row(Path(p)) for p in summaries if Path(p).is_file()]
    return load_runs_frame(pd.read_csv(io.StringIO(pd.DataFrame(rows).to_csv(index=False)))) if rows else pd.DataFrame()


def cell_throughputs(study: Study, runs: pd.DataFrame) -> dict[str, tuple[float, float, float]]:
    """Cell path -> (samples/s, low, high) the step model fitted on `runs` predicts, for every cell of
    `study` it can predict (none where it can predict nothing): the interval widened by its held-out
    error on those runs, and by at least LEAST_ERROR."""
    if runs.empty:
        return {}
    try:
        targets = target_cells(study)
        validation = stepmodel.validate(stepmodel.measure(runs), max_each=MAX_EACH)
    except (Refused, ValueError) as err:  # batch_size auto, or nothing to fit: every cell is measured
        print(f"ddpbench: predicting first: no prediction ({err}); every question is measured", file=sys.stderr)
        return {}
    model = validation.model
    model.widen = max(model.widen, LEAST_ERROR)
    with np.errstate(divide="ignore", invalid="ignore"):
        table = model.predict(targets, strict=False)
    out = {}
    for cell, (_, r) in zip(study.cells.index, table.iterrows()):
        values = pd.to_numeric(pd.Series([r["samples_per_s"], r["samples_per_s_low"], r["samples_per_s_high"]]),
                               errors="coerce").to_numpy(float)  # fmt: skip
        if np.isfinite(values).all() and (values > 0).all():
            out[cell] = tuple(float(v) for v in values)
    return out


# -- what is written and said -----------------------------------------------------------------------


def write(table: pd.DataFrame, out: Path, folder: Path) -> None:
    """predictions.csv, atomically, no folder below the results folder followed if a link."""
    safe_io.make_dir(out.parent, root=folder)
    with safe_io.atomic_write(out, newline="", root=folder) as handle:
        table.to_csv(handle, index=False)


def seconds(value: float) -> str:
    """A time in the unit that keeps three significant digits readable."""
    if not np.isfinite(value):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(value) >= scale or unit == "us":
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} s"


def table_text(p: Prediction) -> list[str]:
    """The terminal's table: strategy, world size, the axes that vary, step time with its interval,
    throughput, exposed communication, and * where a cell lies beyond the held-out checks."""
    t = p.table
    head = ["strategy", "p", *p.axes, f"step time [{LEVEL:.0%} interval]", "samples/s", "exposed comm", ""]
    rows = []
    for _, r in t.head(SHOWN).iterrows():
        step = f"{seconds(r['step_time_s'])} [{seconds(r['step_time_s_low'])}, {seconds(r['step_time_s_high'])}]"
        rows.append([str(r["strategy"]), str(r["world_size"]), *(str(r[a]) for a in p.axes), step,
                     f"{r['samples_per_s']:,.0f}", seconds(r["exposed_comm_s"]), "*" if r["beyond_validated"] else ""])  # fmt: skip
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip() for line in (head, *rows)]
    if len(t) > SHOWN:
        lines.append(f"... {len(t) - SHOWN} more cells in the file")
    reasons = sorted({why for text in t["beyond_validated"].fillna("") for why in text.split("; ") if why})
    if reasons:
        lines.append(f"* beyond what the held-out checks reached: {'; '.join(reasons)}")
    return lines


def held_out_text(v: stepmodel.Validation) -> str:
    """One line: the error the model showed on cells held out of its fit (validation.summary)."""
    got = v.summary[v.summary["predicted"] > 0]
    if got.empty:
        why = f" ({'; '.join(v.notes)})" if v.notes else ""
        return ("held-out error: none - no measured cell could be predicted from the others" + why
                + ": these predictions are unchecked, measure more cells (another world size, a second strategy)")  # fmt: skip
    parts = [f"{r.held_out}: median {r.median_abs_error:.1%}, worst {r.worst_abs_error:.1%} over {r.predicted} cells, "
             f"{r.coverage:.0%} inside their intervals" for r in got.itertuples()]  # fmt: skip
    return "held-out error (cells left out of the fit, predicted by the others): " + "; ".join(parts)


def say(p: Prediction, out: Path) -> None:
    print(f"predictions: {out} ({len(p.table)} cells; model fitted on {p.source})")
    for line in table_text(p):
        print(line)
    print(held_out_text(p.validation))


# -- command line -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="ddpbench predict",
        description="Step time, throughput and their intervals for cells never run (other world sizes, links, "
                    "bucket sizes, batches), from the step model fitted on RESULTS' runs and checked on cells held "
                    "out of its fit. A refusal (exit status 2) says what to run or change.",
        epilog="Details: docs/report.md, \"Predictions: cells never run\".",
    )  # fmt: skip
    ap.add_argument("results", metavar="RESULTS", help="a results folder (with aggregate/runs.csv) or a runs.csv")
    ap.add_argument("--config", required=True, type=Path, metavar="GRID.yaml",
                    help="the cells to predict, in the config's schema, merged over RESULTS/config.yaml (else the "
                         "checkout's config.yaml) as a preset is")  # fmt: skip
    ap.add_argument("--comm", "--sweep", dest="comm", metavar="COMM.csv",
                    help="the collective sweep (as the report's --comm): the links' latency and bandwidth")
    ap.add_argument("--out", type=Path, metavar="CSV", help="the CSV to write (default: RESULTS/predictions.csv)")
    args = ap.parse_args(argv)
    try:
        prediction, folder = predict(args.results, args.config, args.comm)
    except (Refused, InputError, stepmodel.MissingPart) as err:
        print(f"ddpbench predict: {err}", file=sys.stderr)
        return EXIT_REFUSED
    out = args.out or Path(layout.Layout.of(folder).predictions)
    try:
        with safe_io.anchor_writes_at(folder):
            write(prediction.table, out, folder)
    except OSError as err:  # safe_io.UnsafePathError too
        print(f"ddpbench predict: cannot write {out}: {err}", file=sys.stderr)
        return 1
    say(prediction, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
