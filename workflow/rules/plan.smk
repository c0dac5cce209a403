"""The checks and handlers around a whole workflow run (no rules), on the grid that
common.smk planned: runs made by other code (ddpbench.plan.status), damaged runs named,
the plan's warnings (ddpbench.plan.preflight) at include time, and again last in a dry
run; and the onstart/onerror handlers the Snakefile calls: the results folder's space, the
invocation record, the saved plan and the progress counter.
"""

import atexit
import logging
import os
import shlex
import sys
import time
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

from ddpbench.core import storage
from ddpbench.core.safe_io import (
    UnsafePathError,
    atomic_write_text,
    open_log,
    refuse_linked_folders,
)
from ddpbench.core.sysinfo import code_fingerprint
from ddpbench.plan.design import status_line
from ddpbench.plan.estimate import run_estimate
from ddpbench.plan.grid import ConfigError
from ddpbench.plan.jobs import preflight_cells
from ddpbench.plan.preflight import PREFIX as PLAN_PREFIX
from ddpbench.plan.preflight import warnings as plan_warnings
from ddpbench.plan.status import PLAN_ENV, stale_runs, write_plan
from ddpbench.results import progress
from ddpbench.results.aggregate import damage
from ddpbench.run import faults


def runs_to_measure():
    """How many of the grid's runs have no summary yet (the plan, the space check, progress)."""
    return sum(not Path(s).exists() for s in STUDY.summaries())


def check_stale_runs():
    """Write the plan where ddpbench.plan.status asks for it; otherwise warn (one line) when runs
    already in the results folder were made by other code, settings or environment."""
    plan = {"results": RESULTS, "runs": STUDY.planned_runs()}
    if os.environ.get(PLAN_ENV):
        rounds = status_line(STUDY.decisions()) if STUDY.sequential else ""
        write_plan(os.environ[PLAN_ENV], plan["results"], plan["runs"], rounds)
        return
    stale = stale_runs(plan)
    if stale:
        logger.warning(
            f"ddpbench: {len(stale)} run(s) in {RESULTS}/runs were made by other code, "
            "settings or environment than the current ones (their statistics are kept "
            "apart): `ddpbench status` lists them, `--rerun` redoes them"
        )


# Bytes of one run before any is measured: the default grid's runs take 60-104 KiB
# (median 88) with their logs; a report folder about 1.6 MiB.
RUN_BYTES_ESTIMATE = 128 * 1024
REPORT_BYTES_ESTIMATE = 4 * 1024 * 1024


def check_results_space():
    """Before the first job (onstart, real runs only): refuse a results folder that cannot
    be written, or whose filesystem cannot hold what is left to measure (both numbers
    named; allow_low_space: true goes on anyway)."""
    problem = storage.plan_check(
        RESULTS,
        runs_to_measure(),
        len(STUDY.summaries()),
        RUN_BYTES_ESTIMATE,
        REPORT_BYTES_ESTIMATE,
    )
    if problem is None:
        return
    if storage.read_only(RESULTS):
        raise WorkflowError(f"ddpbench: {problem}: nothing was started")
    if config["allow_low_space"]:
        logger.warning(f"ddpbench: {problem}; going on (allow_low_space: true)")
        return
    raise WorkflowError(
        f"ddpbench: {problem}: nothing was started. Free space, set `results:` to a "
        "larger filesystem, or pass --config allow_low_space=true to start anyway"
    )


def explain_failure():
    """onerror: when the results filesystem cannot take the rest of the grid (full, or not
    writable: the likely cause of the failed jobs), say so in one line with the runs kept.
    """
    planned = len(STUDY.summaries())
    line = storage.full_line(
        RESULTS,
        planned - runs_to_measure(),
        planned,
        RUN_BYTES_ESTIMATE,
        REPORT_BYTES_ESTIMATE,
    )
    if line:
        logger.error(line)


def start_progress():
    """onstart: each launcher's result line then tells how far the grid is (ddpbench.results.progress),
    from the plan's own estimate of a run (print_plan's) at first."""
    round_ = len(STUDY.decisions()) + 1 if STUDY.sequential else None
    per_run = PLAN_ESTIMATE[0].per_run_s if PLAN_ESTIMATE else None
    progress.start(
        Path(LAYOUT.progress), runs_to_measure(), round_, per_run, root=RESULTS
    )


def record_invocation():
    """Save the merged config as RESULTS/config.yaml and append the command line, time and
    code fingerprint to RESULTS/invocations.log (onstart: real runs only, never dry runs).
    """
    atomic_write_text(
        Path(LAYOUT.config), yaml.safe_dump(dict(config), sort_keys=False), root=RESULTS
    )
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open_log(Path(LAYOUT.invocations), "a", root=RESULTS) as log:
        log.write(f"{stamp}\t{code_fingerprint()}\t{shlex.join(sys.argv)}\n")


def name_damaged_runs():
    """Before Snakemake decides what to run: a finished run whose files are damaged (an
    unreadable summary.json, an ok one whose step files are missing) is named, with the verb
    that measures it again. Reading the workflow changes nothing on disk (Snakemake takes such
    a summary for a finished run; the report lists the run as failed).
    """
    damaged = [
        f"{s.parent}: {what}"
        for s in map(Path, STUDY.summaries())
        if s.exists() and (what := damage(s))
    ]
    if damaged:
        logger.warning(
            f"ddpbench: {len(damaged)} damaged run(s), listed as failed: `ddpbench status "
            "--rerun` (with this command's snakemake arguments) moves them aside and measures "
            "them again: " + "; ".join(damaged[:5])
        )


def print_plan():
    """What the grid will measure, and the traps in it, before any run (ddpbench.plan.preflight);
    a sequential design whose time budget cannot pay its first round is refused here, at the
    same estimate of a run that the plan's lines and the progress line use."""
    cells = preflight_cells(STUDY.cell_by_path.values(), STUDY.fixed)
    PLAN_ESTIMATE[:] = [run_estimate(cells, Path(RESULTS))]
    try:
        STUDY.check_first_round(PLAN_ESTIMATE[0].per_run_s, PLAN_ESTIMATE[0].learned)
    except ConfigError as err:
        raise WorkflowError(str(err)) from None
    repeats = (
        f"{STUDY.settings.first} first" if STUDY.sequential else STUDY.most_repeats
    )
    PLAN_LINES[:] = plan_warnings(
        cells, repeats, runs_to_measure(), Path(RESULTS), estimate=PLAN_ESTIMATE[0]
    )
    if STUDY.sequential:
        PLAN_LINES.append(PLAN_PREFIX + STUDY.plan_line(PLAN_ESTIMATE[0].per_run_s))
    for line in PLAN_LINES:
        logger.warning(line)


PLAN_LINES = []  # print_plan's lines; onstart saves them for the report (save_plan)
# print_plan's estimate of a run (plan.estimate.RunEstimate), for start_progress
PLAN_ESTIMATE = []
PLAN_FILE = LAYOUT.plan_file


def save_plan():
    """onstart: the plan the report repeats after its findings (its folders made from the
    results folder down, none followed if a link planted since the start's check)."""
    atomic_write_text(
        Path(PLAN_FILE), "".join(f"{line}\n" for line in PLAN_LINES), root=RESULTS
    )


class ErrorRecords(logging.Handler):
    """Counts the errors Snakemake logs, so that a failed dry run ends on its error."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.count = 0

    def emit(self, record):
        self.count += 1


def repeat_plan_after_dry_run(errors):
    """atexit: `snakemake -n` prints the plan at include time, then every job below it, and
    runs no onstart/onsuccess handler; so a dry run that planned its jobs and did not fail
    says the plan's lines again, last (not `-n --dag`, whose output is a graph; real runs save
    them: save_plan)."""
    if PLAN_LINES and workflow.dryrun and not errors.count:
        print("".join(f"{line}\n" for line in PLAN_LINES), end="", flush=True)


# Once per workflow, not again in every job a cluster executor starts (each re-reads the
# Snakefile; reading every summary there would cost a grid's worth of I/O per job).
if workflow.is_main_process:
    try:  # before anything reads, writes, moves or deletes under it (docs/security.md)
        refuse_linked_folders(RESULTS)
    except UnsafePathError as err:
        raise WorkflowError(f"ddpbench: {err}") from None
    if faults.refusal():
        raise WorkflowError(f"ddpbench: {faults.refusal()}")
    check_stale_runs()
    if not os.environ.get(PLAN_ENV):  # ddpbench.plan.status only reads
        name_damaged_runs()
        print_plan()
        # The command line's -n is known now, whether jobs were planned only at exit.
        if getattr(workflow.output_settings, "dryrun", False):
            DRY_RUN_ERRORS = ErrorRecords()
            logger.addHandler(DRY_RUN_ERRORS)
            atexit.register(repeat_plan_after_dry_run, DRY_RUN_ERRORS)
