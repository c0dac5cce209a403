"""A results folder's layout: every path that the workflow, the plan, the report and the archive
write or read under `results:`, named in one place.

    RESULTS/config.yaml, invocations.log       the merged config and each invocation (onstart)
    RESULTS/runs/<cell>/repeat~N/summary.json  a run (<cell>: its name~value folders)
    RESULTS/design/round~R.json                a sequential design's decision after round R
    RESULTS/aggregate/runs.csv, steps.csv      the tidy tables
    RESULTS/report/report.html, *.csv, figures the report
    RESULTS/predictions.csv                    `ddpbench predict`: cells never run, from the step model
    RESULTS/logs/...                           the jobs' logs, progress.json, plan.txt
    RESULTS/data/<dataset>.txt                 a real dataset's prepared marker
    RESULTS.tar.gz                             `snakemake archive`

A `Layout` gives these paths as strings (Snakemake's inputs and outputs are strings, and a
wildcard such as "{cell}" passes through); the relative names below are what a reader of a
folder that moved (an unpacked archive) globs for.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

CONFIG = "config.yaml"
INVOCATIONS = "invocations.log"
RUNS = "runs"
SUMMARY = "summary.json"
DESIGN = "design"
ROUND_GLOB = f"{DESIGN}/round~*.json"
RUNS_TABLE = "aggregate/runs.csv"
STEPS_TABLE = "aggregate/steps.csv"
REPORT = "report"
PREDICTIONS = "predictions.csv"
LOGS = "logs"


def cell_of_run(run_dir: str | Path) -> str | None:
    """The cell of a run folder wherever the results folder now lies (runs.csv's run_dir, an
    unpacked archive): its name~value folders between a `runs` folder and repeat~N; None for a
    path of another shape."""
    parts = Path(run_dir).parts
    if len(parts) < 3 or not parts[-1].startswith("repeat~"):
        return None
    i = len(parts) - 2
    while i >= 0 and "~" in parts[i]:
        i -= 1
    return "/".join(parts[i + 1 : -1]) if i >= 0 and parts[i] == RUNS and i < len(parts) - 2 else None


def results_of_run(path: str | Path) -> Path | None:
    """The results folder of a path in or below a run folder (RESULTS/runs/<cell>/repeat~N/...):
    where the safe writes anchor (core.safe_io), so no folder of the run tree is followed if a
    link. None for a path of another shape."""
    parts = Path(path).parts
    for end in range(len(parts), 0, -1):
        if parts[end - 1].startswith("repeat~") and (cell := cell_of_run(Path(*parts[:end]))) is not None:
            return Path(*parts[: end - len(Path(cell).parts) - 2])
    return None


@dataclasses.dataclass(frozen=True)
class Layout:
    """The paths under one results folder (`results`, as configured, without a trailing slash)."""

    results: str

    @classmethod
    def of(cls, results: str | Path) -> Layout:
        return cls(str(results).rstrip("/") or "/")

    def path(self, *parts: str) -> str:
        return "/".join((self.results, *parts))

    # -- runs
    def run_dir(self, cell: str, repeat: int | str) -> str:
        """A run's folder: the cell's name~value folders below runs/, then repeat~N."""
        return self.path(RUNS, cell, f"repeat~{repeat}")

    def summary(self, cell: str, repeat: int | str) -> str:
        return f"{self.run_dir(cell, repeat)}/{SUMMARY}"

    def summaries(self, counts: dict[str, int]) -> list[str]:
        """summary.json of each cell's first `counts[cell]` runs, cell by cell."""
        return [self.summary(cell, r) for cell, n in counts.items() for r in range(n)]

    def cell_of_summary(self, summary: str | Path) -> str:
        """The cell path of a run's summary.json (RESULTS/runs/<cell>/repeat~N/summary.json)."""
        return str(Path(summary).parent.parent.relative_to(Path(self.results, RUNS)))

    # -- a sequential design
    @property
    def design_dir(self) -> str:
        return self.path(DESIGN)

    def round_file(self, round_: int | str) -> str:
        return self.path(DESIGN, f"round~{round_}.json")

    # -- tables, report, archive
    @property
    def runs_table(self) -> str:
        return self.path(RUNS_TABLE)

    @property
    def steps_table(self) -> str:
        return self.path(STEPS_TABLE)

    @property
    def report_dir(self) -> str:
        return self.path(REPORT)

    @property
    def report_html(self) -> str:
        return self.path(REPORT, "report.html")

    def report_file(self, name: str) -> str:
        return self.path(REPORT, name)

    @property
    def predictions(self) -> str:
        return self.path(PREDICTIONS)

    @property
    def archive(self) -> str:
        return f"{self.results}.tar.gz"

    # -- the workflow's own records
    @property
    def config(self) -> str:
        return self.path(CONFIG)

    @property
    def invocations(self) -> str:
        return self.path(INVOCATIONS)

    def log(self, *parts: str) -> str:
        return self.path(LOGS, *parts)

    @property
    def progress(self) -> str:
        return self.log("progress.json")

    @property
    def plan_file(self) -> str:
        return self.log("plan.txt")

    def data_marker(self, dataset: str) -> str:
        return self.path("data", f"{dataset}.txt")
