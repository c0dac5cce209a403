"""Merge runs into two tidy tables: runs.csv (one row per run) and steps.csv (one row
per rank and step), the input of the analysis and report.

    ddpbench aggregate results/runs/.../summary.json ... --runs runs.csv --steps steps.csv
    find results/runs -name summary.json | ddpbench aggregate --summaries-from - ...

runs.csv: run_dir, repeat, world_size, nodes, every CellParams field (same name),
status, reason, every scalar top-level summary metric, extra.<k> as extra_<k>, failure.<k>
(a failed run's diagnosis: kind, rank, step, phase, signal, reason) as failure_<k>, env.<k>
as env_<k> (env.env_vars.<NAME> as env_var_<NAME>), the timeline's marks timeline.<mark> as
timeline_<mark> and its spans timeline_s.<span> as timeline_<span>_s (empty for runs from
before the timeline); lists are dropped.
steps.csv: every rank's step rows with run_dir, repeat, world_size, strategy,
batch_size, scaling, model, dataset, dataset_size, device prepended.
profile.csv (beside runs.csv, or --profile; only when some run was profiled, profile_steps
> 0): every run's profile.csv rows (rank, activity, op, comm, calls, self_s_per_step, share:
ddpbench.run.profiling) with the same columns prepended as steps.csv; a stale one is removed
when no run has a profile.

A damaged run (a summary.json that cannot be read, or one that says ok while ranks' step
files are missing) becomes a row with status "failed", failure_kind "damaged" and a reason
naming the file, its parameters taken from the name~value folders of its path, so nothing
that was scheduled silently disappears from the tables. The workflow names it when read, and
`ddpbench status --rerun` moves its folder aside and measures it again (plan.status). Both files are written atomically; a write that fails for lack of space names
the file and the free space.

A run folder is untrusted input (safe_io): a run's identity columns (LEADING_RUN_COLUMNS)
come from its path and the summary's own fields for them, never from another summary key
or a flattened extra/env key of that name (those are dropped with a warning); step files
are read only from the summary's own folder, and only regular files that stay inside it.
"""

from __future__ import annotations

import argparse
import csv
import os
import pathlib
import re
import sys
from typing import Any, Iterable, Iterator

from ddpbench.core import safe_io, storage
from ddpbench.core.run_output import STEP_COLUMNS  # one definition: the harness writes these
from ddpbench.core.run_output import PROFILE_COLUMNS
from ddpbench.core.run_record import ENV_BLOCK, ENV_VARS, env_column, env_var_column, read_summary
from ddpbench.core.params import CellParams

STEP_KEYS = (
    "run_dir",
    "repeat",
    "world_size",
    "strategy",
    "batch_size",
    "scaling",
    "model",
    "dataset",
    "dataset_size",
    "device",
)
LEADING_RUN_COLUMNS = ("run_dir", "repeat", "world_size", "nodes", *CellParams.names(), "status", "reason")
_PATH_PART = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)~(.+)$")


def path_values(run_dir: pathlib.Path) -> dict[str, str]:
    """The name~value folders of a run's path (the workflow's layout), e.g. repeat."""
    values = {}
    for part in run_dir.parts:
        match = _PATH_PART.match(part)
        if match:
            values[match.group(1)] = match.group(2)
    return values


def load_summary(path: pathlib.Path) -> dict[str, Any]:
    """The run's summary, or a failed one naming what is damaged (see `damage`)."""
    summary, what = checked_summary(path)
    if what is None:
        return summary
    failed = {"status": "failed", "failure": {"kind": "damaged", "reason": what},
              "reason": f"damaged run {path.parent}: {what}; `ddpbench status --rerun` moves it aside "
                        "and measures it again"}  # fmt: skip
    if summary is not None:  # readable: its own parameters still name the run
        failed.update(params=summary.get("params"), world_size=summary.get("world_size"), nodes=summary.get("nodes"))
    return failed


def damage(path: pathlib.Path) -> str | None:
    """What is wrong with a finished run's files, or None: a summary.json that cannot be
    read (cut short by a full disk or a crash), or one that says ok while ranks' step
    files are missing."""
    return checked_summary(path)[1]


def checked_summary(path: pathlib.Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the summary, None), or (what could be read of it, what is damaged: see `damage`)."""
    if path.exists() and not safe_io.inside(path, path.parent):
        return None, "unreadable summary.json: not a regular file inside its run folder"
    try:
        summary = read_summary(path)  # raises ValueError on JSON that is not an object
    except (OSError, ValueError) as err:
        return None, f"unreadable summary.json: {err}"
    expected = summary.get("world_size")
    if summary.get("status") == "ok" and isinstance(expected, int):
        found = len(_step_files(path.parent))
        if found < expected:
            return summary, f"summary.json says ok but {expected - found} of {expected} ranks' step files are missing"
    return summary, None


def run_row(summary_path: pathlib.Path) -> dict[str, Any]:
    """One runs.csv row from a summary.json (flattened per the contract)."""
    run_dir = summary_path.parent
    from_path = path_values(run_dir)
    summary = load_summary(summary_path)
    row: dict[str, Any] = {"run_dir": str(run_dir), "repeat": from_path.get("repeat")}
    params = summary.get("params")
    params = params if isinstance(params, dict) else {}
    for key in ("world_size", "nodes"):
        row[key] = summary.get(key, from_path.get(key))
    if row["nodes"] is None:
        row["nodes"] = 1
    for name in CellParams.names():
        row[name] = params.get(name, from_path.get(name))
    row["status"] = summary.get("status", "failed")
    row["reason"] = summary.get("reason", "")
    identity = set(row)  # LEADING_RUN_COLUMNS: set above, never overwritten below

    def put(column: str, value: Any) -> None:
        if not _is_scalar(value):
            return
        if column in identity:
            print(f"[ddpbench] warning: {summary_path}: ignoring key {column!r}, which names an identity column",
                  file=sys.stderr)  # fmt: skip
            return
        row[column] = value

    for key, value in summary.items():
        if key in ("params", "world_size", "nodes", "status", "reason", "schema"):
            continue
        if key in ("extra", "failure") and isinstance(value, dict):
            for k, v in value.items():
                put(f"{key}_{k}", v)
        elif key == "timeline" and isinstance(value, dict):
            for k, v in value.items():
                put(f"timeline_{k}", v)
        elif key == "timeline_s" and isinstance(value, dict):
            for k, v in value.items():
                put(f"timeline_{k}_s", v)
        elif key == ENV_BLOCK and isinstance(value, dict):
            for k, v in value.items():
                if k == ENV_VARS and isinstance(v, dict):
                    for name, val in v.items():
                        put(env_var_column(name), val)
                else:
                    put(env_column(k), v)
        else:
            put(str(key), value)
    return row


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def write_runs(rows: list[dict[str, Any]], path: pathlib.Path) -> None:
    columns = list(LEADING_RUN_COLUMNS)
    seen = set(columns)
    for row in rows:
        for key in row:
            if key not in seen:
                seen.add(key)
                columns.append(key)
    with safe_io.atomic_write(path, newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, restval="")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})


def _step_files(run_dir: pathlib.Path) -> list[pathlib.Path]:
    def rank(p: pathlib.Path) -> int:
        digits = p.stem.removeprefix("steps_rank")
        return int(digits) if digits.isdigit() else 1 << 30

    return sorted(safe_io.run_files(run_dir, "steps_rank*.csv"), key=rank)


def write_steps(rows: list[dict[str, Any]], path: pathlib.Path) -> int:
    """Stream every run's per-rank step files into one table; returns the row count."""
    count = 0
    with safe_io.atomic_write(path, newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*STEP_KEYS, *STEP_COLUMNS], extrasaction="ignore", restval="")
        writer.writeheader()
        for row in rows:
            keys = {k: row.get(k) for k in STEP_KEYS}
            for step_file in _step_files(pathlib.Path(row["run_dir"])):
                with open(step_file, newline="") as f:
                    for step in csv.DictReader(f):
                        writer.writerow({**step, **keys})
                        count += 1
    return count


def write_profiles(rows: list[dict[str, Any]], path: pathlib.Path) -> int:
    """Every profiled run's profile.csv in one table (STEP_KEYS prepended); returns the row
    count. Without any profiled run no table is written and a stale one is removed."""
    found = [(row, f) for row in rows for f in safe_io.run_files(pathlib.Path(row["run_dir"]), "profile.csv")]
    if not found:
        safe_io.remove(path)  # (a linked folder never makes it remove someone else's file)
        return 0
    count = 0
    with safe_io.atomic_write(path, newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*STEP_KEYS, *PROFILE_COLUMNS], extrasaction="ignore", restval="")
        writer.writeheader()
        for row, profile in found:
            keys = {k: row.get(k) for k in STEP_KEYS}
            with open(profile, newline="") as f:
                for line in csv.DictReader(f):
                    writer.writerow({**line, **keys})
                    count += 1
    return count


def profile_path(runs_csv: str | os.PathLike) -> pathlib.Path:
    """Where the profile table goes by default: profile.csv beside runs.csv."""
    return pathlib.Path(runs_csv).with_name("profile.csv")


def aggregate(
    summaries: Iterable[str | os.PathLike],
    runs_csv: str | os.PathLike,
    steps_csv: str | os.PathLike,
    profile_csv: str | os.PathLike | None = None,
):
    """Write the tables; returns (runs, step rows, profile rows)."""
    rows = [run_row(pathlib.Path(s)) for s in summaries]
    write_runs(rows, pathlib.Path(runs_csv))
    steps = write_steps(rows, pathlib.Path(steps_csv))
    profiles = write_profiles(rows, pathlib.Path(profile_csv) if profile_csv else profile_path(runs_csv))
    return len(rows), steps, profiles


def _read_list(source: str) -> Iterator[str]:
    handle = sys.stdin if source == "-" else open(source)
    with handle:
        for line in handle:
            if line.strip():
                yield line.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ddpbench aggregate", description=__doc__.splitlines()[0])
    parser.add_argument("summaries", nargs="*", help="summary.json files of the runs")
    parser.add_argument("--summaries-from", metavar="FILE", help="read summary paths from FILE ('-': stdin), one a line")
    parser.add_argument("--runs", required=True, help="runs.csv to write")
    parser.add_argument("--steps", required=True, help="steps.csv to write")
    parser.add_argument("--profile", help="profile.csv to write when some run was profiled (default: beside --runs)")
    parser.add_argument("--log", type=pathlib.Path, help="write the output here; only the result line goes to stdout")
    parser.add_argument("--results", type=pathlib.Path,
                        help="the results folder the tables and the log lie in (the workflow's): no folder below it "
                             "is followed if it is a link, whenever it was planted")  # fmt: skip
    args = parser.parse_args(argv)
    with safe_io.anchor_writes_at(args.results), storage.output_to(args.log) as output:
        summaries = list(args.summaries)
        if args.summaries_from:
            summaries += list(_read_list(args.summaries_from))
        try:
            runs, steps, profiles = aggregate(summaries, args.runs, args.steps, args.profile)
        except OSError as err:
            if not storage.is_storage_error(err):
                raise
            return storage.fail(output, err, what="aggregate")
        line = f"[ddpbench] aggregate: {runs} runs -> {args.runs}, {steps} step rows -> {args.steps}"
        if profiles:
            line += f", {profiles} profile rows -> {args.profile or profile_path(args.runs)}"
        output.say(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
