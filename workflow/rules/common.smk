"""Helpers of the workflow (no rules): the validated grid of cells, their paths,
launcher flags and resources, and the final targets. Rules call these by name.

At include time `config` is validated twice, each failure one line naming the key:
against workflow/schemas/config.schema.yaml (types, unknown keys, empty axes; schema
defaults are filled in), then every axis value, exclusion and baseline value against
the harness's own `CellParams`, so a value the launcher would reject fails before any
job exists.
"""

import itertools
import math
import os
import shlex
import sys
import time
from pathlib import Path

import pandas as pd
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import validate

# The package's plan-time parts (core, plan, results: no torch) work with any snakemake install.
SRC_DIR = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC_DIR)
from ddpbench.core import storage  # noqa: E402
from ddpbench.core.params import (  # noqa: E402
    NO_LINK,
    CellParams,
    ParamError,
    check_auto_batch_scaling,
    check_backend,
    check_cell,
    check_values,
    effective_params,
)
from ddpbench.core.safe_io import atomic_write_text  # noqa: E402
from ddpbench.core.sysinfo import (  # noqa: E402
    code_fingerprint,
    oversubscription,
    usable_cores,
)
from ddpbench.plan.config_schema import (  # noqa: E402
    CORE_AXES,
    LAUNCH_AXES,
    OFFLINE_DATASET,
    TIMING_KEYS,
    coerce_typed_strings,
    non_finite_key,
)
from ddpbench.plan.preflight import warnings as plan_warnings  # noqa: E402
from ddpbench.plan.status import PLAN_ENV, stale_runs, write_plan  # noqa: E402
from ddpbench.results import progress  # noqa: E402
from ddpbench.results.aggregate import damage, heal  # noqa: E402
from ddpbench.strategies import unread_settings  # noqa: E402


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

REAL_DATASETS = ("cifar10", "mnist", "imagenette")
PATH_UNSAFE = (os.sep, "~")  # axis values are folder names: name~value


def config_error(key, message):
    return WorkflowError(f"invalid config at '{key}': {message}")


def validate_config(config):
    """The schema check of snakemake.utils.validate, reported as one line naming the
    offending key instead of a dump of the whole schema."""
    schema = yaml.safe_load(
        Path(workflow.basedir, "workflow/schemas/config.schema.yaml").read_text()
    )
    config.update(coerce_typed_strings(dict(config), schema))
    bad = non_finite_key(config)
    if bad:
        raise config_error(bad, "not a finite number (NaN and infinity are refused)")
    try:
        validate(config, "../schemas/config.schema.yaml")
    except WorkflowError as err:
        cause = err.__context__  # the jsonschema ValidationError
        if not hasattr(cause, "absolute_path"):
            raise
        key = ".".join(str(part) for part in cause.absolute_path) or "(top level)"
        raise config_error(key, cause.message) from None


def check_axis_values(key, name, values):
    """Check values of cell parameter or launch axis `name`; `key` is the config path."""
    if name in LAUNCH_AXES:
        return  # integers >= 1, checked by the schema
    try:
        check_values(name, values)
    except ParamError as err:
        raise config_error(key, str(err)) from None


def fixed_cell_params(config, axes):
    """The cell parameters shared by all cells: CellParams defaults <- params <- timing.
    timing's other keys (max_rel_ci) are the workflow's, never a cell flag. Each value
    is checked; a grid axis overrides its key, so the checks across keys (batch_size
    'auto' needs scaling weak) see only the keys that apply to every cell."""
    timing = {k: v for k, v in config["timing"].items() if k in TIMING_KEYS}
    values = {**config["params"], **timing}
    try:
        for name, value in values.items():
            check_values(name, [value])
        shared = {k: v for k, v in values.items() if k not in axes}
        return CellParams.from_mapping(shared).as_dict()
    except ParamError as err:
        section = "timing" if err.name in TIMING_KEYS else "params"
        raise config_error(f"{section}.{err.name}", str(err)) from None


def base_cell_params(config):
    """Every cell parameter as it would be without any grid axis: CellParams defaults <-
    params <- timing (each value already checked by fixed_cell_params)."""
    defaults = CellParams().as_dict()
    timing = {k: v for k, v in config["timing"].items() if k in TIMING_KEYS}
    return {**defaults, **config["params"], **timing, "world_size": 1, "nodes": 1}


def cell_path(cell, base):
    """A cell's run folder below runs/: name~value for every core axis, and for any other
    axis only where the cell's value differs from the base one (and, for a strategy
    setting, only if the cell's strategy reads it). So adding an axis whose values include
    the old setting keeps the runs already measured at it."""
    unread = unread_settings(cell["strategy"])
    return "/".join(
        f"{name}~{value}"
        for name, value in cell.items()
        if name in CORE_AXES or (value != base[name] and name not in unread)
    )


def effective_cells(cells, base):
    """The cells as runs: each cell's strategy-specific settings that its strategy does not
    read held at their defaults, and cells that thereby coincide run once (single is not
    repeated per bucket size); indexed by run folder."""
    records = [
        {name: effective_params({**base, **cell})[name] for name in cell}
        for cell in cells.to_dict(orient="records")
    ]
    paths = [cell_path(cell, base) for cell in records]
    unique = pd.DataFrame(records, index=paths, columns=cells.columns).astype(object)
    return unique[~unique.index.duplicated()]


def is_path_component(text):
    """Axis values become folder names `name~value` of a run's path."""
    return text not in ("", ".", "..") and not any(ch in text for ch in PATH_UNSAFE)


def axis_order():
    """Path order of the axes: the core axes (nodes after world_size), then the others in
    parameter order."""
    order = list(CORE_AXES)
    order.insert(order.index("world_size") + 1, "nodes")
    return order + [n for n in CellParams.names() if n not in order]


def grid_axes(config):
    """The axes in path order: the core axes (nodes after world_size), then the
    others in parameter order."""
    grid = config["grid"]
    axes = {name: list(grid[name]) for name in axis_order() if name in grid}
    for name, values in axes.items():
        check_axis_values(f"grid.{name}", name, values)
        unsafe = [v for v in values if not is_path_component(str(v))]
        if unsafe:
            raise config_error(
                f"grid.{name}",
                f"{unsafe[0]!r} cannot be a folder name (no slash or tilde); "
                "set it in params instead",
            )
    return axes


def value_matches(value, spec):
    """Exclusion filter syntax: value (equal), list (one of), {not:, min:, max:}."""
    if isinstance(spec, list):
        return value in spec
    if not isinstance(spec, dict):
        return value == spec
    if "not" in spec:
        banned = spec["not"] if isinstance(spec["not"], list) else [spec["not"]]
        if value in banned:
            return False
    numeric = isinstance(value, (int, float))
    if "min" in spec and not (numeric and value >= spec["min"]):
        return False
    if "max" in spec and not (numeric and value <= spec["max"]):
        return False
    return True


def filter_matches(cell, entry):
    """A cell matches an exclude entry when it matches every key of it."""
    return all(value_matches(cell[key], spec) for key, spec in entry.items())


def check_exclusions(exclusions, axes):
    for i, entry in enumerate(exclusions):
        for key, spec in entry.items():
            where = f"exclude[{i}].{key}"
            if key not in axes:
                raise config_error(
                    where, f"'{key}' is not a grid axis (axes: {', '.join(axes)})"
                )
            if isinstance(spec, dict):
                listed = spec.get("not", [])
                listed = listed if isinstance(listed, list) else [listed]
            else:
                listed = spec if isinstance(spec, list) else [spec]
            check_axis_values(where, key, listed)


def check_baseline(baseline, axes):
    for key, value in baseline.items():
        if key not in axes:
            raise config_error(
                f"baseline.{key}",
                f"'{key}' is not a grid axis (axes: {', '.join(axes)})",
            )
        check_axis_values(f"baseline.{key}", key, [value])


def check_grid_size(axes, repeats, max_runs):
    """Refuse a grid whose product of axes x repeats exceeds max_runs, before expanding it
    (a typo such as 1,000 values on four axes would otherwise exhaust memory)."""
    cells = math.prod(len(values) for values in axes.values())
    runs = cells * repeats
    if runs > max_runs:
        sizes = " x ".join(f"{len(v)} {name}" for name, v in axes.items() if len(v) > 1)
        raise config_error(
            "max_runs",
            f"the grid's axes multiply to {cells:,} cells ({sizes or '1'}; before exclusions)"
            f" x {repeats:,} repeats = "
            f"{runs:,} runs, more than max_runs ({max_runs:,}); narrow the grid or exclude "
            "cells, or raise max_runs (e.g. --config max_runs=N) for a deliberately large study",
        )


def expand_grid(axes, exclusions):
    """Every combination of axis values that no exclusion drops, as a data frame."""
    names = list(axes)
    cells = [dict(zip(names, combo)) for combo in itertools.product(*axes.values())]
    used = [False] * len(exclusions)
    kept, uneven = [], 0
    for cell in cells:
        hits = [i for i, entry in enumerate(exclusions) if filter_matches(cell, entry)]
        for i in hits:
            used[i] = True
        if hits:
            continue
        if cell["world_size"] % cell.get("nodes", 1):
            uneven += 1
            continue
        kept.append(cell)
    for i in (i for i, hit in enumerate(used) if not hit):
        logger.warning(f"ddpbench: exclude[{i}] matches no cell of the grid")
    if uneven:
        logger.warning(
            f"ddpbench: {uneven} cell(s) left out: world_size is not a multiple of nodes"
        )
    if not kept:
        raise config_error("exclude", "the exclusions drop every cell of the grid")
    return pd.DataFrame(kept, columns=names).astype(object)


def key_of(name):
    """Where a cell parameter is set in the config: its grid axis, else timing/params."""
    if name in AXES:
        return f"grid.{name}"
    return f"{'timing' if name in TIMING_KEYS else 'params'}.{name}"


def check_cell_combinations(cells):
    """Values valid alone but not together: batch_size 'auto' fixes the per-rank batch,
    refused with strong scaling (the global batch would grow with world size yet be
    labelled speedup); backend nccl needs device cuda; and every cell the harness would
    refuse before or at its first step (params.check_cell: a global batch larger than
    dataset_size, ...), so no such cell pays a launch to fail."""
    for cell in cells.to_dict(orient="records"):
        value = {
            k: cell.get(k, FIXED_PARAMS[k])
            for k in ("batch_size", "scaling", "backend", "device")
        }
        try:
            check_auto_batch_scaling(value["batch_size"], value["scaling"])
        except ParamError as err:
            where = f"{key_of('batch_size')} + {key_of('scaling')}"
            raise config_error(
                where, f"{err} (exclude these cells or set scaling: weak)"
            ) from None
        try:
            check_backend(value["backend"], value["device"])
        except ParamError as err:
            where = f"{key_of('backend')} + {key_of('device')}"
            raise config_error(where, f"{err} (exclude these cells)") from None
        try:
            check_cell({**FIXED_PARAMS, **cell})
        except ParamError as err:
            where = " + ".join(key_of(name) for name in err.names)
            raise config_error(where, f"{err} (exclude these cells)") from None


# Values per sample of the synthetic stand-ins (imagenette: 3 x image_size^2).
SAMPLE_VALUES = {"cifar10": 3 * 32 * 32, "mnist": 28 * 28, "imagenette": 3}


def synthetic_stand_ins(cells, base):
    """`--config dataset=synthetic` (top-level `dataset`): every cell on a real dataset
    runs on dataset synthetic with synthetic_shape that dataset (its inputs' shape and
    classes; imagenette's side is the cell's image_size), so no prepare_data job is
    planned and nothing is fetched. Called after the exclusions and the cell checks, so
    the grid is the one written, the real datasets' sample limits included. The cells
    on synthetic data already keep their own synthetic_shape; a stand-in identical to
    one of them runs once. Run folders say dataset~synthetic (and synthetic_shape~X
    where X is not the shared synthetic_shape), never beside a real-data run's."""
    if config["dataset"] != OFFLINE_DATASET:
        return cells
    frame = cells.reset_index(drop=True)
    real = frame["dataset"].isin(REAL_DATASETS)
    if not real.any():
        return cells
    if "synthetic_shape" not in frame.columns:
        frame["synthetic_shape"] = FIXED_PARAMS["synthetic_shape"]
    frame.loc[real, "synthetic_shape"] = frame.loc[real, "dataset"]
    frame.loc[real, "dataset"] = OFFLINE_DATASET
    frame = frame[[name for name in axis_order() if name in frame.columns]]
    stand_ins = effective_cells(frame, base)
    warn_synthetic_memory(stand_ins)
    return stand_ins


def warn_synthetic_memory(cells):
    """Synthetic data lives in each rank's memory (train + test samples as float32, and
    as much again while it is generated): warn when a cell's ranks on one node would need
    more than this machine's memory (a full-size imagenette stand-in: 2.9 GB a rank)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    heavy = []
    for cell in cells.to_dict(orient="records"):
        p = {**FIXED_PARAMS, **cell}
        if p["dataset"] != OFFLINE_DATASET:
            continue
        values = SAMPLE_VALUES[p["synthetic_shape"]]
        if p["synthetic_shape"] == "imagenette":
            values *= p["image_size"] ** 2
        per_rank = 2 * 4 * values * (p["dataset_size"] + p["test_size"])
        ranks = int(cell["world_size"]) // int(cell.get("nodes", 1))
        if ranks * per_rank > total:
            heavy.append(
                f"{p['synthetic_shape']} x {p['dataset_size']} on {ranks} ranks: "
                f"{ranks * per_rank / 2**30:.1f} GiB"
            )
    if heavy:
        logger.warning(
            f"ddpbench: dataset=synthetic: {len(heavy)} cell(s) would hold more synthetic data "
            f"in memory than this machine's {total / 2**30:.0f} GiB (train + test samples as "
            "float32, twice while generated), e.g. "
            + "; ".join(heavy[:3])
            + ": lower their dataset_size (or test_size)"
        )


def warn_oversubscribed_cells(cells):
    """CPU cells whose ranks per node x threads exceed this machine's cores: the launcher
    records them as skipped (they stay rows), unless allow_oversubscribe is true."""
    cores = usable_cores()
    count = 0
    for cell in cells.to_dict(orient="records"):
        nodes = cell.get("nodes", 1)
        # A link's two nodes are namespaces sharing this machine's cores.
        on_lab = cell.get("link", FIXED_PARAMS["link"]) != NO_LINK
        if oversubscription(
            cell.get("device", FIXED_PARAMS["device"]),
            cell.get("threads_per_rank", FIXED_PARAMS["threads_per_rank"]),
            cell["world_size"] // nodes,
            nodes,
            cores // nodes or 1 if on_lab else cores,
        ):
            count += 1
    if count and config["allow_oversubscribe"]:
        logger.warning(
            f"ddpbench: {count} cell(s) will run oversubscribed on this machine "
            f"({cores} usable cores; allow_oversubscribe: true), flagged in their summaries"
        )
    elif count:
        logger.warning(
            f"ddpbench: {count} cell(s) will be skipped as oversubscribed on this machine "
            f"(ranks per node x threads per rank > {cores} usable cores; "
            "set allow_oversubscribe: true to run them)"
        )


def compare_to_table(path, results):
    """compare_to: the baseline's runs.csv (a results folder or the file itself), checked
    before any job runs; None when not set. Not this study's own results."""
    if not path:
        return None
    given = Path(path)
    table = given / "aggregate" / "runs.csv" if given.is_dir() else given
    if not table.is_file():
        raise config_error(
            "compare_to",
            f"{path}: "
            + (
                "no aggregate/runs.csv in this folder (a results folder of a finished study?)"
                if given.is_dir()
                else "no such file or folder"
            ),
        )
    if table.resolve() == Path(results, "aggregate", "runs.csv").resolve():
        raise config_error(
            "compare_to", f"{path} is this study's own results; name a stored copy"
        )
    return str(table)


def warn_link_cells(cells):
    """Cells over a link need two network namespaces on this machine (root, iproute2): where
    none can be made the launcher records them as skipped with the reason; say so now.
    """
    from ddpbench.cluster import netlab

    records = cells.to_dict(orient="records")
    count = sum(cell.get("link", FIXED_PARAMS["link"]) != NO_LINK for cell in records)
    reason = netlab.available() if count else None
    if reason:
        logger.warning(
            f"ddpbench: {count} cell(s) over a link will be recorded as skipped on this machine: "
            f"two network namespaces {reason}"
        )


validate_config(config)
AXES = grid_axes(config)
check_exclusions(config["exclude"], AXES)
check_baseline(config["baseline"], AXES)
FIXED_PARAMS = fixed_cell_params(config, AXES)
check_grid_size(AXES, config["repeats"], config["max_runs"])
BASE_PARAMS = base_cell_params(config)
CELLS = effective_cells(expand_grid(AXES, config["exclude"]), BASE_PARAMS)
check_cell_combinations(CELLS)
CELLS = synthetic_stand_ins(CELLS, BASE_PARAMS)
warn_oversubscribed_cells(CELLS)
warn_link_cells(CELLS)
RESULTS = config["results"].rstrip("/")
COMPARE_TO = compare_to_table(config["compare_to"], RESULTS)
REPEATS = list(range(config["repeats"]))
# cell path (device~cpu/world_size~2/...) -> the cell's axis values
CELL_BY_PATH = dict(zip(CELLS.index, CELLS.to_dict(orient="records")))
# A run folder: the cell's name~value folders, then repeat~N.
CELL_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*~[^/~]+(/[A-Za-z_][A-Za-z0-9_]*~[^/~]+)*"
RUN_DIR = f"{RESULTS}/runs/{{cell}}/repeat~{{repeat}}"


# -- per-job helpers (rules refer to these by name) ----------------------------------
def cell_of(wildcards):
    try:
        return CELL_BY_PATH[wildcards.cell]
    except KeyError:
        raise WorkflowError(
            f"{wildcards.cell} is not a cell of the configured grid"
        ) from None


def cell_params(wildcards):
    return params_of_cell(cell_of(wildcards))


def params_of_cell(cell):
    """Every CellParams field of this cell: the shared values, then its axis values; the
    strategy settings its strategy does not read at their defaults."""
    values = {name: cell.get(name, FIXED_PARAMS[name]) for name in CellParams.names()}
    return effective_params(values, nodes=cell.get("nodes", 1))


def launcher_flags(wildcards):
    """The cell's parameters as `python -m ddpbench.run.launch` flags (every field, so the
    command in the log reproduces the run whatever the defaults become)."""
    return " ".join(
        f"--{name.replace('_', '-')} {shlex.quote(str(value))}"
        for name, value in cell_params(wildcards).items()
    )


def oversubscribe_flag(wildcards):
    """The launcher runs oversubscribed CPU cells only when the config allows it."""
    return "--allow-oversubscribe" if config["allow_oversubscribe"] else ""


def world_size_of(wildcards):
    return int(cell_of(wildcards)["world_size"])


def nodes_of(wildcards):
    return int(cell_of(wildcards).get("nodes", 1))


def launch_topology(wildcards):
    """Launcher flags for where the ranks run: ranks per node, and nodes if several."""
    nodes = nodes_of(wildcards)
    flags = f"--nproc-per-node {world_size_of(wildcards) // nodes}"
    return flags + (f" --nnodes {nodes}" if nodes > 1 else "")


def threads_for_cell(wildcards):
    """Cores a cell occupies: ranks x threads per rank (0 = one per rank)."""
    return world_size_of(wildcards) * max(1, cell_params(wildcards)["threads_per_rank"])


def gpus_for_cell(wildcards):
    """GPUs per node: one per local rank."""
    if cell_params(wildcards)["device"] != "cuda":
        return 0
    return world_size_of(wildcards) // nodes_of(wildcards)


def repeat_priority(wildcards):
    """Repeat 0 of every cell, then repeat 1, ...: each cell's repeats are spread over the
    whole job, so its interval sees the machine's drift over the job (a cell whose repeats
    ran back to back in one quiet minute looked tighter than a rerun of the job could
    confirm), and every cell meets the same machine states."""
    return len(REPEATS) - int(wildcards.repeat)


def runtime_minutes_for_cell(wildcards):
    """A scheduler limit a little above the launcher's own wall-clock limit."""
    return int(cell_params(wildcards)["timeout_s"] // 60) + 5


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


def run_summaries():
    """summary.json of every run of the grid (cells x repeats)."""
    return [
        f"{RESULTS}/runs/{path}/repeat~{repeat}/summary.json"
        for path in CELL_BY_PATH
        for repeat in REPEATS
    ]


def runs_to_measure():
    """How many of the grid's runs have no summary yet (the plan, the space check, progress)."""
    return sum(not Path(s).exists() for s in run_summaries())


def planned_runs():
    """Run folder -> the parameters it runs with (what ddpbench.plan.status compares)."""
    plan = {}
    for path, cell in CELL_BY_PATH.items():
        params = params_of_cell(cell)
        params.update(
            world_size=int(cell["world_size"]), nodes=int(cell.get("nodes", 1))
        )
        for repeat in REPEATS:
            plan[f"{RESULTS}/runs/{path}/repeat~{repeat}"] = params
    return plan


def check_stale_runs():
    """Write the plan where ddpbench.plan.status asks for it; otherwise warn (one line) when runs
    already in the results folder were made by other code, settings or environment."""
    plan = {"results": RESULTS, "runs": planned_runs()}
    if os.environ.get(PLAN_ENV):
        write_plan(os.environ[PLAN_ENV], plan["results"], plan["runs"])
        return
    stale = stale_runs(plan)
    if stale:
        logger.warning(
            f"ddpbench: {len(stale)} run(s) in {RESULTS}/runs were made by other code, "
            "settings or environment than the current ones (their statistics are kept "
            "apart): `python -m ddpbench.plan.status` lists them, `--rerun` redoes them"
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
        len(run_summaries()),
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
    planned = len(run_summaries())
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
    """onstart: each launcher's result line then tells how far the grid is (ddpbench.results.progress)."""
    progress.start(Path(RESULTS, "logs", "progress.json"), runs_to_measure())


def record_invocation():
    """Save the merged config as RESULTS/config.yaml and append the command line, time and
    code fingerprint to RESULTS/invocations.log (onstart: real runs only, never dry runs).
    """
    Path(RESULTS).mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        Path(RESULTS, "config.yaml"), yaml.safe_dump(dict(config), sort_keys=False)
    )
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(Path(RESULTS, "invocations.log"), "a") as log:
        log.write(f"{stamp}\t{code_fingerprint()}\t{shlex.join(sys.argv)}\n")


def get_final_output():
    """What `snakemake` with no target builds: every run, the tables and the report.
    The runs are listed themselves so that deleting one run's folder reruns that cell
    (and what depends on it) even though the tables exist."""
    return run_summaries() + [
        f"{RESULTS}/aggregate/runs.csv",
        f"{RESULTS}/aggregate/steps.csv",
        f"{RESULTS}/report/report.html",
    ]


def heal_damaged_runs():
    """Before Snakemake decides what to run: a finished run whose files are damaged (an
    unreadable summary.json, an ok one whose step files are missing) has its summary moved
    aside (summary.json.damaged), so this workflow run measures it again; each is named.
    """
    healed, stuck = [], []
    for summary in map(Path, run_summaries()):
        what = damage(summary) if summary.exists() else None
        if what:
            (healed if heal(summary) else stuck).append(f"{summary.parent}: {what}")
    if healed:
        logger.warning(
            f"ddpbench: {len(healed)} damaged run(s) will be measured again "
            f"(summary moved aside to summary.json.damaged): " + "; ".join(healed[:5])
        )
    if stuck:
        logger.warning(
            f"ddpbench: {len(stuck)} damaged run(s) could not be moved aside; delete their "
            "summary.json to measure them again: " + "; ".join(stuck[:5])
        )


def print_plan():
    """What the grid will measure, and the traps in it, before any run (ddpbench.plan.preflight)."""
    cells = [
        {**params_of_cell(cell), "world_size": int(cell["world_size"])}
        for cell in CELL_BY_PATH.values()
    ]
    PLAN_LINES[:] = plan_warnings(cells, len(REPEATS), runs_to_measure(), Path(RESULTS))
    for line in PLAN_LINES:
        logger.warning(line)


PLAN_LINES = []  # print_plan's lines; onstart saves them for the report (save_plan)
PLAN_FILE = f"{RESULTS}/logs/plan.txt"


def save_plan():
    """onstart: the plan the report repeats after its findings."""
    Path(PLAN_FILE).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(PLAN_FILE), "".join(line + "\n" for line in PLAN_LINES))


# Once per workflow, not again in every job a cluster executor starts (each re-reads the
# Snakefile; reading every summary there would cost a grid's worth of I/O per job).
if workflow.is_main_process:
    check_stale_runs()
    if not os.environ.get(PLAN_ENV):  # ddpbench.plan.status only reads
        heal_damaged_runs()
        print_plan()
