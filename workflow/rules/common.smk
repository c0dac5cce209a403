"""Helpers of the workflow (no rules): the config, validated; the grid of cells and their
paths; and the input functions that give each job its launcher flags and resources.
Rules call these by name. The grid logic itself is plain Python in ddpbench.plan.grid,
ddpbench.plan.cells and ddpbench.plan.jobs; the checks and handlers around a whole
workflow run are in plan.smk.

At include time `config` is validated twice, each failure one line naming the key:
against workflow/schemas/config.schema.yaml (types, unknown keys, empty axes; schema
defaults are filled in), then every axis value, exclusion and baseline value against
the harness's own `CellParams`, so a value the launcher would reject fails before any
job exists; a model given as module.path:function is built once in a subprocess
(ddpbench.plan.user_models) and refused, named, if it cannot be imported or built.
"""

import os
import shlex
import sys
import time
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import validate

# The package's plan-time parts (core, plan, results: no torch) work with any snakemake install.
SRC_DIR = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC_DIR)
from ddpbench.plan.cells import (  # noqa: E402
    REAL_DATASETS,
    check_cell_combinations,
    compare_to_table,
    synthetic_stand_ins,
    warn_link_cells,
    warn_oversubscribed_cells,
    warn_unread_settings,
)
from ddpbench.plan.config_schema import (  # noqa: E402
    coerce_typed_strings,
    non_finite_key,
)
from ddpbench.core.study_config import stability_threshold, study_names  # noqa: E402
from ddpbench.plan.grid import (  # noqa: E402
    ConfigError,
    base_cell_params,
    check_baseline,
    check_exclusions,
    check_grid_size,
    effective_cells,
    expand_grid,
    fixed_cell_params,
    grid_axes,
)
from ddpbench.plan.jobs import (  # noqa: E402
    CELL_PATTERN,
    cell_gpus,
    cell_threads,
    launch_flags,
    params_of_cell,
    run_folder,
    runtime_minutes,
    summary_paths,
    topology_flags,
)
from ddpbench.plan.user_models import check_grid as check_user_models  # noqa: E402
from ddpbench.core.sysinfo import JOB_ID_ENV  # noqa: E402
from ddpbench.analysis import design  # noqa: E402  (repeats: until_decided)

# One id per `snakemake` call, inherited by every job it starts (unless the caller set one):
# compare tells the runs of different invocations apart by it (docs/compare.md).
os.environ.setdefault(
    JOB_ID_ENV, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
)


def job_shell_prefix():
    """Bash prefix of every job: strict mode; the checkout's src/ first on PYTHONPATH
    (the image or conda env provides the pinned dependencies, the checkout the code);
    and, unless a conda env or container provides Python, the directory of the Python
    running Snakemake (e.g. .venv/bin) first on PATH, so `python` is the one with torch.
    """
    prefix = "set -euo pipefail; "
    prefix += (
        f"export PYTHONPATH={shlex.quote(SRC_DIR)}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; "
    )
    if not workflow.deployment_settings.deployment_method:
        prefix += f"export PATH={shlex.quote(os.path.dirname(sys.executable))}:$PATH; "
    return prefix


shell.prefix(job_shell_prefix())


def validate_config(config):
    """The schema check of snakemake.utils.validate, reported as one line naming the
    offending key instead of a dump of the whole schema."""
    schema = yaml.safe_load(
        Path(workflow.basedir, "workflow/schemas/config.schema.yaml").read_text()
    )
    config.update(coerce_typed_strings(dict(config), schema))
    bad = non_finite_key(config)
    if bad:
        raise ConfigError(bad, "not a finite number (NaN and infinity are refused)")
    try:
        validate(config, "../schemas/config.schema.yaml")
    except WorkflowError as err:
        cause = err.__context__  # the jsonschema ValidationError
        if not hasattr(cause, "absolute_path"):
            raise
        key = ".".join(str(part) for part in cause.absolute_path) or "(top level)"
        raise ConfigError(key, cause.message) from None


def design_settings(config, axes):
    """The sequential design's settings, each refusal naming its key."""
    section = config["until_decided"]
    try:
        settings = design.Settings.from_config(section)
    except ValueError as err:
        raise ConfigError("until_decided", str(err)) from None
    unknown = [a for a in settings.compare if a not in axes]
    if unknown:
        raise ConfigError(
            "until_decided.compare",
            f"{', '.join(unknown)} is not a grid axis (axes: {', '.join(axes)})",
        )
    return settings


# The config and the grid, checked in this order; a refused value is one line naming its key.
try:
    validate_config(config)
    AXES = grid_axes(config)
    check_exclusions(config["exclude"], AXES)
    check_baseline(config["baseline"], AXES)
    FIXED_PARAMS = fixed_cell_params(config, AXES)
    SEQUENTIAL = config["repeats"] == "until_decided"
    DESIGN = design_settings(config, AXES) if SEQUENTIAL else None
    check_grid_size(
        AXES, DESIGN.cap if SEQUENTIAL else config["repeats"], config["max_runs"]
    )
    BASE_PARAMS = base_cell_params(config)
    CELLS = effective_cells(
        expand_grid(AXES, config["exclude"], logger.warning), BASE_PARAMS
    )
    check_cell_combinations(CELLS, FIXED_PARAMS, AXES)
    check_user_models(CELLS, FIXED_PARAMS, AXES, logger.warning)
    CELLS = synthetic_stand_ins(
        CELLS, config["dataset"], FIXED_PARAMS, BASE_PARAMS, logger.warning
    )
    warn_oversubscribed_cells(
        CELLS, FIXED_PARAMS, config["allow_oversubscribe"], logger.warning
    )
    warn_link_cells(CELLS, FIXED_PARAMS, logger.warning)
    warn_unread_settings(config["params"], AXES, logger.warning)
    RESULTS = config["results"].rstrip("/")
    COMPARE_TO = compare_to_table(config["compare_to"], RESULTS)
except ConfigError as err:
    raise WorkflowError(str(err)) from None
# The most repeats a cell can have (a sequential design's cap).
REPEATS = list(range(DESIGN.cap if SEQUENTIAL else config["repeats"]))
# cell path (device~cpu/world_size~2/...) -> the cell's axis values
CELL_BY_PATH = dict(zip(CELLS.index, CELLS.to_dict(orient="records")))
# A run folder: the cell's name~value folders (CELL_PATTERN), then repeat~N.
RUN_DIR = run_folder(RESULTS, "{cell}", "{repeat}")
# The sequential design's questions and the folder of its decisions (design.smk).
QUESTIONS = (
    design.grid_questions(CELL_BY_PATH, config["baseline"], DESIGN)
    if SEQUENTIAL
    else []
)
DESIGN_DIR = f"{RESULTS}/design"


# -- per-job helpers (rules refer to these by name) ----------------------------------
def cell_of(wildcards):
    try:
        return CELL_BY_PATH[wildcards.cell]
    except KeyError:
        raise WorkflowError(
            f"{wildcards.cell} is not a cell of the configured grid"
        ) from None


def cell_params(wildcards):
    """Every CellParams field of the job's cell (ddpbench.plan.jobs.params_of_cell)."""
    return params_of_cell(cell_of(wildcards), FIXED_PARAMS)


def launcher_flags(wildcards):
    """The cell's parameters as `python -m ddpbench.run.launch` flags, every field."""
    return launch_flags(cell_params(wildcards))


def oversubscribe_flag(wildcards):
    """The launcher runs oversubscribed CPU cells only when the config allows it."""
    return "--allow-oversubscribe" if config["allow_oversubscribe"] else ""


def world_size_of(wildcards):
    return int(cell_of(wildcards)["world_size"])


def nodes_of(wildcards):
    return int(cell_of(wildcards).get("nodes", 1))


def launch_topology(wildcards):
    """Launcher flags for where the ranks run: ranks per node, and nodes if several."""
    return topology_flags(world_size_of(wildcards), nodes_of(wildcards))


def threads_for_cell(wildcards):
    """Cores a cell occupies: ranks x threads per rank (0 = one per rank)."""
    return cell_threads(cell_params(wildcards), world_size_of(wildcards))


def gpus_for_cell(wildcards):
    """GPUs per node: one per local rank."""
    return cell_gpus(
        cell_params(wildcards), world_size_of(wildcards), nodes_of(wildcards)
    )


def repeat_priority(wildcards):
    """Repeat 0 of every cell, then repeat 1, ...: each cell's repeats are spread over the
    whole job, so its interval sees the machine's drift over the job (a cell whose repeats
    ran back to back in one quiet minute looked tighter than a rerun of the job could
    confirm), and every cell meets the same machine states."""
    return len(REPEATS) - int(wildcards.repeat)


def runtime_minutes_for_cell(wildcards):
    """A scheduler limit a little above the launcher's own wall-clock limit."""
    return runtime_minutes(cell_params(wildcards))


def image_for_cell(wildcards):
    return config["images"][cell_params(wildcards)["device"]]


def image_for_host():
    """Image of the non-timed rules (aggregate, report): the CPU one."""
    return config["images"]["cpu"]


def prepared_data_for_cell(wildcards):
    """The prepare_data marker a cell on a real dataset waits for (none if synthetic)."""
    dataset = cell_params(wildcards)["dataset"]
    return [prepared_data_marker(dataset)] if dataset in REAL_DATASETS else []


def prepared_data_marker(dataset):
    return f"{RESULTS}/data/{dataset}.txt"


def data_root():
    return FIXED_PARAMS["data_root"]


def largest_image_size():
    """imagenette is fetched once, in the smallest variant that serves every cell."""
    return max(AXES.get("image_size", [FIXED_PARAMS["image_size"]]))


def run_counts():
    """Cell -> its runs planned so far: `repeats` each; in a sequential design, as many as the
    decisions already on disk ask for (the first round's before any)."""
    if not SEQUENTIAL:
        return {cell: len(REPEATS) for cell in CELL_BY_PATH}
    return design.counts_on_disk(DESIGN_DIR, list(CELL_BY_PATH), DESIGN)


def run_summaries(counts=None):
    """summary.json of every run planned so far (`counts`: cell -> runs; run_counts())."""
    counts = run_counts() if counts is None else counts
    return [
        path
        for cell, n in counts.items()
        for path in summary_paths(RESULTS, [cell], range(n))
    ]


def all_run_summaries(wildcards):
    """Every run the tables hold: the grid's; in a sequential design those of its last round,
    found by following the decisions (the decide_round checkpoints, design.smk)."""
    if not SEQUENTIAL:
        return run_summaries()
    return run_summaries(design_counts(final_round()))


def get_final_output(wildcards):
    """What `snakemake` with no target builds: every run, the tables and the report.
    The runs are listed themselves so that deleting one run's folder reruns that cell
    (and what depends on it) even though the tables exist."""
    return all_run_summaries(wildcards) + [
        f"{RESULTS}/aggregate/runs.csv",
        f"{RESULTS}/aggregate/steps.csv",
        f"{RESULTS}/report/report.html",
    ]
