"""The study presets' own report sections (issue 13): what a study asks, and its answer. A preset
names its study (`study: sync-dp` in configs/studies/sync-dp.yaml; the report gets `--study
sync-dp`); the report then opens, right after its findings, the section `section(name, ...)`
returns: the study's question, a table computed for exactly that question, links to the figures
that answer it and a paragraph of findings computed from the data. A study whose data are not in
the runs (another grid under the same name) says so instead of guessing.

This __init__ is the registry of the studies: one module per study, named after it (sync-dp ->
`sync_dp.py`), defines `STUDY`, a `common.Study` of that name whose `build(StudyData)` gives the
table and the findings; `STUDIES` maps each study's name to it, discovered (`discover`), so adding a
study is adding a module (and its preset). The config schema lists the same names from this folder
without importing it (`names`). Modules here import only `ddpbench.analysis`, `ddpbench.report.text`
and `ddpbench.report.training` (the words for compiling and checkpointing the findings share), each
other and (this registry) `ddpbench.core.registry`.
"""

from __future__ import annotations

import importlib

import pandas as pd

from ddpbench.core import registry
from ddpbench.report.studies.common import Section, Study, StudyData


def names(path=None) -> tuple[str, ...]:
    """The registered studies' names: the modules (on `path`, else this package's) that define
    STUDY, with hyphens for underscores (sync_dp.py -> sync-dp), read without importing them."""
    return tuple(sorted(m.replace("_", "-") for m in registry.entries(__path__ if path is None else path, "STUDY")))


def discover(path=None) -> dict[str, Study]:
    """name -> Study of every registered study, imported (a module whose STUDY bears another name than
    its own is an error naming both)."""
    found = {}
    for name in names(path):
        study = importlib.import_module(f"{__name__}.{name.replace('-', '_')}").STUDY
        if not isinstance(study, Study) or study.name != name:
            raise ValueError(f"{__name__}.{name.replace('-', '_')}: STUDY must be a common.Study named {name!r}")
        found[name] = study
    return found


STUDIES: dict[str, Study] = discover()


def section(name: str, runs: pd.DataFrame, cells: pd.DataFrame, speed: pd.DataFrame,
            steps: pd.DataFrame | None = None, profile: pd.DataFrame | None = None,
            design=None) -> Section:  # fmt: skip
    """The report section of study `name` (a KeyError names the studies there are); `design`: a
    sequential design's answers (StudyData.design)."""
    if name not in STUDIES:
        raise KeyError(f"unknown study {name!r}: one of {', '.join(sorted(STUDIES))}")
    study = STUDIES[name]
    columns, rows, note, found = study.build(StudyData(runs, cells, speed, steps, profile, design))
    return Section(name, study.title, study.question, columns, rows, note, study.figures, found)
