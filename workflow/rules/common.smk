"""Helpers of the workflow (no rules): the config, validated, and the plan built from it once,
`STUDY` (ddpbench.plan.study.Study: the grid's cells, the results folder's layout `LAYOUT`,
a sequential design's settings and questions); the input functions that give each job its
launcher flags and resources are one line each over it. Rules call these by name; plan.smk
holds the checks and handlers around a whole workflow run.

At include time `config` is validated twice, each failure one line naming the key: against
workflow/schemas/config.schema.yaml (types, unknown keys; defaults filled in), then by
Study.from_config against the harness's own `CellParams` (and a model given as
module.path:function, built once in a subprocess), before any job exists.
"""

import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

# The package's plan-time parts (core, plan, results: no torch) work with any snakemake install.
SRC_DIR = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC_DIR)
from ddpbench.core.sysinfo import JOB_ID_ENV  # noqa: E402
from ddpbench.plan.cells import REAL_DATASETS  # noqa: E402
from ddpbench.plan.grid import ConfigError  # noqa: E402
from ddpbench.plan.jobs import (
    CELL_PATTERN,
    set_invocation_id,
    shell_prefix,
)  # noqa: E402
from ddpbench.plan.study import (
    Study,
    excludes_inherited,
    validate_config,
)  # noqa: E402

set_invocation_id(JOB_ID_ENV)
# Unless a conda env or container provides Python, the one running Snakemake runs the jobs.
local = not workflow.deployment_settings.deployment_method
shell.prefix(shell_prefix(SRC_DIR, os.path.dirname(sys.executable) if local else None))

# The config, then the plan built from it; a refused value is one line naming its key.
try:
    validate_config(
        config, Path(workflow.basedir, "workflow/schemas/config.schema.yaml")
    )
    # A preset that writes no `exclude` inherits config.yaml's, whose rules need not match its
    # grid: the plan names only the unmatched excludes the user wrote.
    STUDY = Study.from_config(
        config,
        logger.warning,
        excludes_inherited=excludes_inherited(
            workflow.config_settings.configfiles,
            workflow.config_settings.overwrite_config,
        ),
    )
except ConfigError as err:
    raise WorkflowError(str(err)) from None
LAYOUT = STUDY.layout
RESULTS = LAYOUT.results
RUN_DIR = LAYOUT.run_dir("{cell}", "{repeat}")  # CELL_PATTERN's folders, then repeat~N
COMPARE_TO = STUDY.compare_to


# -- per-job helpers (rules refer to these by name) ----------------------------------
def per_cell(method):
    """An input function: the Study's answer for the job's cell (a path that is no cell of
    the grid: one line naming it)."""

    def answer(wildcards):
        try:
            return method(wildcards.cell)
        except KeyError as err:
            raise WorkflowError(err.args[0]) from None

    return answer


launcher_flags = per_cell(STUDY.launcher_flags)
launch_topology = per_cell(STUDY.topology)
threads_for_cell = per_cell(STUDY.threads)
gpus_for_cell = per_cell(STUDY.gpus)
runtime_minutes_for_cell = per_cell(STUDY.runtime_minutes)
image_for_cell = per_cell(STUDY.image)
prepared_data_for_cell = per_cell(STUDY.prepared_data)


def oversubscribe_flag(wildcards):
    """The launcher runs oversubscribed CPU cells only when the config allows it."""
    return "--allow-oversubscribe" if config["allow_oversubscribe"] else ""


def repeat_priority(wildcards):
    """Repeat 0 of every cell, then repeat 1, ...: each cell's repeats are spread over the
    whole job, so its interval sees the machine's drift over the job (a cell whose repeats
    ran back to back in one quiet minute looked tighter than a rerun of the job could
    confirm), and every cell meets the same machine states."""
    return STUDY.most_repeats - int(wildcards.repeat)


def image_for_host():
    """Image of the non-timed rules (aggregate, report): the CPU one."""
    return config["images"]["cpu"]


def prepared_data_marker(dataset):
    return LAYOUT.data_marker(dataset)


def data_root():
    return STUDY.fixed["data_root"]


def largest_image_size():
    """imagenette is fetched once, in the smallest variant that serves every cell."""
    return max(STUDY.axes.get("image_size", [STUDY.fixed["image_size"]]))


def all_run_summaries(wildcards):
    """Every run the tables hold: the grid's; in a sequential design those of its last round,
    found by following the decisions (the decide_round checkpoints, design.smk)."""
    return STUDY.summaries(design_counts(final_round()) if STUDY.sequential else None)


def get_final_output(wildcards):
    """What `snakemake` with no target builds: every run, the tables and the report.
    The runs are listed themselves so that deleting one run's folder reruns that cell
    (and what depends on it) even though the tables exist."""
    return all_run_summaries(wildcards) + [
        LAYOUT.runs_table,
        LAYOUT.steps_table,
        LAYOUT.report_html,
    ]
