"""The grid's own models (`model: "package.module:function"`), checked before any job starts.

The planning process has no torch, so the check runs `ddpbench check-model
--check-many` in a subprocess (this Python, the checkout's src/ first on PYTHONPATH, the
working directory the jobs get, so a relative model_path means the same folder). It builds
each distinct (model, model_path, input) of the grid once, on a zero batch of one sample,
and checks the output's shape (run/user_model.py has the contract). A model that cannot be
imported, fails when called, returns no module or gives the wrong output shape is refused
with ConfigError naming the model, its model_path and the reason. A grid without user
models starts no subprocess.

Where this Python has no torch (a Snakemake install apart from the training environment,
with the jobs in a container), the check cannot run here: it is a warning, and the first
job fails instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Callable, Mapping

import pandas as pd

from ddpbench import PACKAGE_DIR
from ddpbench.core.params import data_kind, is_user_model
from ddpbench.plan import catalog
from ddpbench.plan.cells import key_of
from ddpbench.plan.grid import ConfigError, Warn

CHECK_TIMEOUT_S = 600.0  # importing torch and building every distinct model once
MODULE = "ddpbench.run.user_model"
NO_TORCH = "No module named 'torch'"


def model_input(p: Mapping[str, Any]) -> dict[str, Any]:
    """What a cell (every parameter) feeds its model: kind and the contract's arguments.
    Images: the dataset's (or the synthetic stand-in's) shape and classes, from the committed
    catalog; imagenette's side is the cell's image_size."""
    if data_kind(p["dataset"]) == "tokens":
        return {"kind": "tokens", "vocab_size": int(p["vocab_size"]), "seq_len": int(p["seq_len"])}
    name = p["synthetic_shape"] if p["dataset"] == "synthetic" else p["dataset"]
    row = next(d for d in catalog.load()["datasets"] if d["dataset"] == name)
    c, h, w = row["shape"]
    if name == "imagenette":
        h = w = int(p["image_size"])
    return {"kind": "image", "shape": [c, h, w], "classes": int(row["classes"])}


def grid_checks(cells: pd.DataFrame, fixed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The distinct checks of the grid's user models (none for built-in models)."""
    seen: dict[str, dict[str, Any]] = {}
    for cell in cells.to_dict(orient="records"):
        p = {**fixed, **cell}
        if not is_user_model(str(p["model"])):
            continue
        one = {"model": p["model"], "model_path": p["model_path"], **model_input(p)}
        seen.setdefault(json.dumps(one, sort_keys=True), one)
    return list(seen.values())


def _subprocess_env() -> dict[str, str]:
    src = str(PACKAGE_DIR.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}


def run_checks(checks: list[dict[str, Any]], python: str | None = None, timeout: float = CHECK_TIMEOUT_S) -> subprocess.CompletedProcess:
    """`ddpbench check-model --check-many` on `checks` (one process for all)."""
    return subprocess.run(
        [python or sys.executable, "-m", MODULE, "--check-many"],
        input=json.dumps(checks), capture_output=True, text=True, timeout=timeout, env=_subprocess_env(),
    )  # fmt: skip


def _where(axes: Mapping[str, list]) -> str:
    """The config keys of a refusal: the model and where it is looked for."""
    return " + ".join(key_of(name, axes) for name in ("model", "model_path"))


def _named(one: Mapping[str, Any]) -> str:
    return f"model {one['model']} (model_path {one['model_path']!r})"


def check_grid(
    cells: pd.DataFrame,
    fixed: Mapping[str, Any],
    axes: Mapping[str, list],
    warn: Warn | None = None,
    run: Callable[[list[dict[str, Any]]], subprocess.CompletedProcess] = run_checks,
) -> None:
    """Refuse a grid whose own model cannot be built or does not fit its data: ConfigError at
    the model's config keys, naming the model, its model_path and why. `fixed` holds the values
    shared by every cell (plan.grid.fixed_cell_params); `warn` gets the line said when this
    Python cannot run the check (no torch); `run` runs the checks (tests pass their own)."""
    checks = grid_checks(cells, fixed)
    if not checks:
        return
    where = _where(axes)
    try:
        proc = run(checks)
    except subprocess.TimeoutExpired:
        raise ConfigError(where, f"checking {', '.join(map(_named, checks))} took over {CHECK_TIMEOUT_S:.0f} s") from None
    results = []
    for line in proc.stdout.splitlines():
        try:
            results.append(json.loads(line))
        except ValueError:
            continue  # not a result line
    for result in results:
        if isinstance(result, dict) and result.get("ok") is False:
            raise ConfigError(where, f"{result['error']} (model_path {result['model_path']!r}; nothing was started)")
    if proc.returncode == 0 and len(results) == len(checks):
        return
    if NO_TORCH in proc.stderr and not results:
        if warn is not None:
            warn(
                f"ddpbench: {', '.join(map(_named, checks))} not checked before the jobs: this Python "
                f"({sys.executable}) has no torch to build it"
            )
        return
    unchecked = checks[len(results) :]
    raise ConfigError(
        where,
        f"checking {', '.join(map(_named, unchecked))} ended with exit status {proc.returncode} before a result: "
        + (proc.stderr.strip().splitlines() or ["(no output)"])[-1],
    )
