"""The study presets' own report sections (issue 13): what a study asks, and its answer. A preset
names its study (`study: sync-dp` in configs/studies/sync-dp.yaml; the report gets `--study
sync-dp`); the report then opens, right after its findings, the section `section(name, ...)`
returns: the study's question, a table computed for exactly that question, links to the figures
that answer it and a paragraph of findings computed from the data. One module per study, named
after it (sync-dp -> `sync_dp.py`), defines `STUDY`, a `common.Study` whose `build(StudyData)`
gives the table and the findings; `STUDIES` maps each study's name to it. A study whose data are
not in the runs (another grid under the same name) says so instead of guessing. Modules here
import only `ddpbench.analysis`, `ddpbench.report.text` and each other.
"""

from __future__ import annotations

import pandas as pd

from ddpbench.report.studies import (accelerators, cores_and_gpus, dataset_size, language_model, sharding, sync_dp,
                                     sync_strategies)  # fmt: skip
from ddpbench.report.studies.common import Section, Study, StudyData

_MODULES = (sync_dp, dataset_size, cores_and_gpus, accelerators, sync_strategies, sharding, language_model)
STUDIES: dict[str, Study] = {m.STUDY.name: m.STUDY for m in _MODULES}


def section(name: str, runs: pd.DataFrame, cells: pd.DataFrame, speed: pd.DataFrame,
            steps: pd.DataFrame | None = None, profile: pd.DataFrame | None = None) -> Section:  # fmt: skip
    """The report section of study `name` (a KeyError names the studies there are)."""
    if name not in STUDIES:
        raise KeyError(f"unknown study {name!r}: one of {', '.join(sorted(STUDIES))}")
    study = STUDIES[name]
    columns, rows, note, found = study.build(StudyData(runs, cells, speed, steps, profile))
    return Section(name, study.title, study.question, columns, rows, note, study.figures, found)
