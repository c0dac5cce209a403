"""The jobs of a planned grid, without Snakemake: every CellParams field a cell runs with, the launcher flags and resources of its job,
and the plan of every run that ddpbench.plan.status compares with the results folder.

The workflow's input functions (workflow/rules/common.smk) call these with the cell a
job's wildcards name; `fixed` is always the values shared by every cell
(ddpbench.plan.grid.fixed_cell_params).
"""

from __future__ import annotations

import os
import shlex
import time
from typing import Any, Iterable, Mapping

from ddpbench.core.layout import Layout
from ddpbench.core.params import CellParams, effective_params

# A cell's path below runs/: its name~value folders (a run folder adds repeat~N).
CELL_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*~[^/~]+(/[A-Za-z_][A-Za-z0-9_]*~[^/~]+)*"


def params_of_cell(cell: Mapping[str, Any], fixed: Mapping[str, Any]) -> dict[str, Any]:
    """Every CellParams field of this cell: the shared values, then its axis values; the
    strategy settings its strategy does not read at their defaults."""
    values = {name: cell.get(name, fixed[name]) for name in CellParams.names()}
    return effective_params(values, nodes=cell.get("nodes", 1))


def launch_flags(params: Mapping[str, Any]) -> str:
    """A cell's parameters as `ddpbench launch` flags (every field, so the
    command in the log reproduces the run whatever the defaults become)."""
    return " ".join(f"--{name.replace('_', '-')} {shlex.quote(str(value))}" for name, value in params.items())


def topology_flags(world_size: int, nodes: int) -> str:
    """Launcher flags for where the ranks run: ranks per node, and nodes if several."""
    flags = f"--nproc-per-node {world_size // nodes}"
    return flags + (f" --nnodes {nodes}" if nodes > 1 else "")


def cell_threads(params: Mapping[str, Any], world_size: int) -> int:
    """Cores a cell occupies: ranks x threads per rank (0 = one per rank)."""
    return world_size * max(1, params["threads_per_rank"])


def cell_gpus(params: Mapping[str, Any], world_size: int, nodes: int) -> int:
    """GPUs per node: one per local rank (none for a CPU cell)."""
    if params["device"] != "cuda":
        return 0
    return world_size // nodes


def runtime_minutes(params: Mapping[str, Any]) -> int:
    """A scheduler limit a little above the launcher's own wall-clock limit."""
    return int(params["timeout_s"] // 60) + 5


def planned_runs(
    cells: Mapping[str, Mapping[str, Any]], fixed: Mapping[str, Any], repeats: Iterable[int] | Mapping[str, int],
    results: str,
) -> dict[str, dict[str, Any]]:
    """Run folder -> the parameters it runs with (what ddpbench.plan.status compares), for
    `cells` (cell path -> its axis values) x `repeats` (or cell path -> its count of runs)."""
    layout = Layout.of(results)
    counts = repeats if isinstance(repeats, Mapping) else None
    repeats = list(repeats) if counts is None else []
    plan = {}
    for path, cell in cells.items():
        params = params_of_cell(cell, fixed)
        params.update(world_size=int(cell["world_size"]), nodes=int(cell.get("nodes", 1)))
        for repeat in repeats if counts is None else range(counts[path]):
            plan[layout.run_dir(path, repeat)] = params
    return plan


def preflight_cells(cells: Iterable[Mapping[str, Any]], fixed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The cells as ddpbench.plan.preflight.warnings reads them: every parameter and the
    world size."""
    return [{**params_of_cell(cell, fixed), "world_size": int(cell["world_size"])} for cell in cells]


def shell_prefix(src_dir: str, python_dir: str | None) -> str:
    """Bash prefix of every job: strict mode; the checkout's src/ first on PYTHONPATH (the image
    or conda env provides the pinned dependencies, the checkout the code); and `python_dir` (the
    directory of the Python running Snakemake, e.g. .venv/bin; None where a conda env or
    container provides Python) first on PATH, so `python` is the one with torch."""
    prefix = f"set -euo pipefail; export PYTHONPATH={shlex.quote(src_dir)}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; "
    return prefix + (f"export PATH={shlex.quote(python_dir)}:$PATH; " if python_dir else "")


def set_invocation_id(env_name: str) -> None:
    """One id per `snakemake` call, inherited by every job it starts (unless the caller set one):
    compare tells the runs of different invocations apart by it (docs/compare.md)."""
    os.environ.setdefault(env_name, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}")
