"""The plan as one object: a `Study`, built once from the merged config, that the workflow, the
design's checkpoint, the plan's status and a report rebuilt from an archive share.

A Study holds the grid's axes and fixed parameters, its cells (cell path -> axis values), the
results folder's layout (core.layout: every path under `results:`), and in a sequential design
(`repeats: until_decided`) the design's settings and questions, with the runs each cell has so far
(its decisions on disk, plan.design.Decision). `Study.from_config` checks the config in a fixed
order, each refusal a ConfigError naming its key, before any job exists; the config is the one
Snakemake merged and validated against the schema (common.smk), or the one a results folder
recorded (`Study.recorded`: the design's checkpoint and `report --from` read that one, so a
rebuilt report flags the same cells as the workflow's).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd
import yaml

from ddpbench.analysis.sequential import Question
from ddpbench.core import bounded, study_config
from ddpbench.core.layout import Layout
from ddpbench.plan import design
from ddpbench.plan.config_schema import SCHEMA_PATH, coerce_typed_strings, non_finite_key
from ddpbench.plan.cells import (
    REAL_DATASETS,
    check_cell_combinations,
    compare_to_table,
    synthetic_stand_ins,
    warn_link_cells,
    warn_oversubscribed_cells,
    warn_unread_settings,
)
from ddpbench.plan.grid import (
    ConfigError,
    base_cell_params,
    check_baseline,
    check_exclusions,
    check_studies,
    check_grid_size,
    effective_cells,
    expand_grid,
    fixed_cell_params,
    grid_axes,
)
from ddpbench.plan.jobs import (
    cell_gpus,
    cell_threads,
    launch_flags,
    params_of_cell,
    planned_runs,
    runtime_minutes,
    topology_flags,
)
from ddpbench.plan.user_models import check_grid as check_user_models

Warn = Callable[[str], None]


def _quiet(_line: str) -> None:
    """A recorded study's warnings were said when it was planned."""


@dataclasses.dataclass(frozen=True, eq=False)
class Study:
    config: Mapping[str, Any]
    axes: dict[str, list]
    fixed: dict[str, Any]  # every CellParams field no axis varies
    base: dict[str, Any]  # the parameters an axis value equal to them leaves out of a cell's path
    cells: pd.DataFrame  # one row per cell, indexed by its path (device~cpu/world_size~2/...)
    layout: Layout
    settings: design.Settings | None  # a sequential design's; None for fixed repeats
    questions: tuple[Question, ...]
    compare_to: str | None  # the baseline study's runs.csv (compare_to:), checked; None in a recorded study

    @classmethod
    def from_config(cls, config: Mapping[str, Any], warn: Warn = _quiet, checks: bool = True,
                    excludes_inherited: bool = False) -> Study:  # fmt: skip
        """The study of a schema-validated config. `checks` False skips what was checked when the
        study was planned (the cells' combinations, building a user's model, compare_to's table).
        `excludes_inherited`: the exclusions are the workflow's default config's, under a preset
        that wrote none (excludes_inherited()): one that matches no cell of the preset's grid is
        no mistake of the user's, and goes unsaid."""
        if checks:  # a recorded study's names this checkout lacks are left out of its report (report.build)
            check_studies(config)
        axes = grid_axes(config)
        check_exclusions(config["exclude"], axes)
        check_baseline(config["baseline"], axes)
        fixed = fixed_cell_params(config, axes)
        settings = design_settings(config, axes) if config["repeats"] == "until_decided" else None
        check_grid_size(axes, settings.cap if settings else config["repeats"], config["max_runs"])
        base = base_cell_params(config)
        cells = effective_cells(expand_grid(axes, config["exclude"], warn, not excludes_inherited), base)
        if checks:
            check_cell_combinations(cells, fixed, axes)
            check_user_models(cells, fixed, axes, warn)
        cells = synthetic_stand_ins(cells, config["dataset"], fixed, base, warn)
        warn_oversubscribed_cells(cells, fixed, config["allow_oversubscribe"], warn)
        warn_link_cells(cells, fixed, warn)
        warn_unread_settings(config["params"], axes, warn)
        layout = Layout.of(config["results"])
        # A recorded study is read, not run again: it is compared with nothing.
        compare_to = compare_to_table(config["compare_to"], layout.results) if checks else None
        by_path = dict(zip(cells.index, cells.to_dict(orient="records")))
        questions = tuple(design.grid_questions(by_path, config["baseline"], settings)) if settings else ()
        study = cls(config, axes, fixed, base, cells, layout, settings, questions, compare_to)
        problem = design.first_round_runs_problem(settings, study.first_round) if settings else None
        if problem:
            raise ConfigError("until_decided.max_runs", problem)
        return study

    @classmethod
    def recorded(cls, results: str | Path, max_runs: int | None = None) -> Study:
        """The study a results folder recorded (its config.yaml, saved when the workflow started),
        at the path given (an unpacked archive may have moved). With `max_runs` the config came
        from elsewhere (`report --from`): it passes the schema as a local one does, and its grid
        may expand to at most `max_runs` runs whatever its own max_runs says, both checked before
        anything is expanded (a 6 kB archive asking for 1,000,000 cells took 317 s and 629 MiB)."""
        config = {**recorded_config(results), "results": str(results)}
        if max_runs is not None:
            validate_config(config, SCHEMA_PATH)
            axes = grid_axes(config)
            settings = design_settings(config, axes) if config["repeats"] == "until_decided" else None
            check_grid_size(axes, settings.cap if settings else config["repeats"], min(config["max_runs"], max_runs),
                            f"let a received study expand to more ({RAISE_RECEIVED})")  # fmt: skip
        return cls.from_config(config, checks=False)

    # -- the grid
    @functools.cached_property
    def cell_by_path(self) -> dict[str, dict[str, Any]]:
        return dict(zip(self.cells.index, self.cells.to_dict(orient="records")))

    def cell(self, path: str) -> dict[str, Any]:
        """A cell's axis values; KeyError naming a path that is no cell of the grid."""
        try:
            return self.cell_by_path[path]
        except KeyError:
            raise KeyError(f"{path} is not a cell of the configured grid") from None

    def params(self, path: str) -> dict[str, Any]:
        """Every CellParams field of the cell (plan.jobs.params_of_cell)."""
        return params_of_cell(self.cell(path), self.fixed)

    # -- a cell's job: what the workflow's input functions ask, by the cell's path
    def world_size(self, path: str) -> int:
        return int(self.cell(path)["world_size"])

    def nodes(self, path: str) -> int:
        return int(self.cell(path).get("nodes", 1))

    def launcher_flags(self, path: str) -> str:
        """The cell's parameters as the launcher's flags, every field."""
        return launch_flags(self.params(path))

    def topology(self, path: str) -> str:
        """Launcher flags for where the ranks run: ranks per node, and nodes if several."""
        return topology_flags(self.world_size(path), self.nodes(path))

    def threads(self, path: str) -> int:
        """Cores a cell occupies: ranks x threads per rank (0 = one per rank)."""
        return cell_threads(self.params(path), self.world_size(path))

    def gpus(self, path: str) -> int:
        """GPUs per node: one per local rank."""
        return cell_gpus(self.params(path), self.world_size(path), self.nodes(path))

    def runtime_minutes(self, path: str) -> int:
        """A scheduler limit a little above the launcher's own wall-clock limit."""
        return runtime_minutes(self.params(path))

    def image(self, path: str) -> str:
        return self.config["images"][self.params(path)["device"]]

    def prepared_data(self, path: str) -> list[str]:
        """The prepare_data marker a cell on a real dataset waits for (none if synthetic)."""
        dataset = self.params(path)["dataset"]
        return [self.layout.data_marker(dataset)] if dataset in REAL_DATASETS else []

    # -- runs
    @property
    def sequential(self) -> bool:
        return self.settings is not None

    @property
    def most_repeats(self) -> int:
        """The most runs a cell can have (a sequential design's cap)."""
        return self.settings.cap if self.settings else int(self.config["repeats"])

    def run_counts(self) -> dict[str, int]:
        """Cell -> its runs planned so far: `repeats` each; in a sequential design, as many as the
        decisions already on disk ask for (the first round's before any)."""
        if not self.settings:
            return {cell: self.most_repeats for cell in self.cells.index}
        return self.counts_of_round(self.decisions())

    def summaries(self, counts: Mapping[str, int] | None = None) -> list[str]:
        """summary.json of every run planned so far (`counts`: cell -> runs; run_counts())."""
        return self.layout.summaries(dict(self.run_counts() if counts is None else counts))

    def planned_runs(self) -> dict[str, dict[str, Any]]:
        """Run folder -> the parameters it runs with (what the plan's status compares)."""
        return planned_runs(self.cell_by_path, self.fixed, self.run_counts(), self.layout.results)

    # -- a sequential design's rounds
    @functools.cached_property
    def first_round(self) -> dict[str, int]:
        """Cell -> its runs in the first round: `first` each; predicting first, the step model's parts
        only (stepmodel.anchors), 0 for the other cells."""
        if not self.settings.predict:
            return design.first_counts(list(self.cells.index), self.settings)
        from ddpbench.stepmodel.anchors import anchors  # pandas work only a predicting design needs

        table = pd.DataFrame([{**self.params(c), "world_size": self.world_size(c), "nodes": self.nodes(c)}
                              for c in self.cells.index], index=self.cells.index)  # fmt: skip
        first = set(anchors(table, list(self.axes), self.config["baseline"]))
        return {c: self.settings.first if c in first else 0 for c in self.cells.index}

    def decisions(self, upto: int | None = None) -> list[design.Decision]:
        """The decisions on disk, round 0 to `upto` - 1 at most, checked as this design's
        (design.rounds_on_disk); one refused is named on stderr and ends them."""
        return design.decisions_on_disk(self.layout, self.settings, self.first_round, upto)

    def decision(self, round_: int) -> design.Decision:
        """Round `round_`'s decision, as the workflow's checkpoint plans on it: a RoundError (a
        ValueError naming the file) where it or a round before it is refused, never passed over."""
        for decision in design.rounds_on_disk(self.layout, self.settings, self.first_round, round_ + 1):
            if decision.round == round_:
                return decision
        raise design.RoundError(self.layout.round_file(round_), "no decision of this design: an earlier round was its last")

    def counts_of_round(self, decisions: list[design.Decision]) -> dict[str, int]:
        """Repeat counts of the round after `decisions` (round 0's, then each moving them on)."""
        return design.counts_of_rounds(self.first_round, decisions, self.settings)

    def decide(self, round_: int, summaries: list[str], predicted: Mapping | None = None) -> design.Decision:
        """The decision after round `round_` from its runs' summary.json paths (`predicted`: design.decide)."""
        runs: dict[str, list[str]] = {cell: [] for cell in self.cells.index}
        for path in summaries:
            runs[self.layout.cell_of_summary(path)].append(path)
        earlier = self.decisions(upto=round_)
        return design.decide(round_, self.questions, runs, self.settings, earlier, predicted)

    def plan_line(self, per_run_s: float | None = None) -> str:
        return design.plan_line(self.questions, self.settings, self.first_round, per_run_s)

    def check_first_round(self, per_run_s: float, learned: bool = True) -> None:
        """Refuse a sequential design whose time budget cannot pay its first round at `per_run_s` a
        run (the plan's estimate; not `learned`: its default, nothing of this host to learn from), a ConfigError
        naming until_decided.budget; once the first round is decided, every later round is cut to the
        budget left (analysis.sequential.plan_round)."""
        if not self.sequential or self.decisions(upto=1):
            return
        paths = [Path(s) for s in self.summaries()]
        measured = [p for p in paths if p.exists()]
        spent = sum(design.read_run(p)[1] for p in measured)
        left = len(paths) - len(measured)
        problem = design.first_round_problem(self.settings, self.first_round, left, spent, per_run_s, learned)
        if problem:
            raise ConfigError("until_decided.budget", problem)

    # -- what the report reads
    @property
    def stability_threshold(self) -> float:
        return study_config.stability_threshold(self.config)

    @property
    def study_names(self) -> list[str]:
        return study_config.study_names(self.config)


# A recorded config.yaml is the merged config: a few kB, some hundreds of values.
MAX_CONFIG_BYTES = 2**20
MAX_CONFIG_VALUES = 100_000
MAX_CONFIG_DEPTH = 32
RAISE_RECEIVED = "`ddpbench report --from ARCHIVE --max-runs N`"


def recorded_config(results: str | Path) -> dict[str, Any]:
    """A results folder's config.yaml, read within bounds (core.bounded: a regular file of at most
    1 MiB, 100,000 values, 32 levels); a ConfigError naming the file otherwise."""
    path = Path(results, "config.yaml")
    try:
        config = bounded.read_yaml(path, MAX_CONFIG_BYTES, MAX_CONFIG_VALUES, MAX_CONFIG_DEPTH)
    except ValueError as err:
        raise ConfigError(str(path), str(err).removeprefix(f"{path}: ")) from None
    if not isinstance(config, dict):
        raise ConfigError(str(path), "not a mapping of config keys")
    return config


def excludes_inherited(config_files: list, overrides: Mapping[str, Any]) -> bool:
    """Whether the config's `exclude` came from the workflow's own config.yaml under presets that
    wrote none: Snakemake merges the --configfile files (`config_files`) and --config over it
    (`overrides`: what those set), and a list is replaced whole, so `exclude` is config.yaml's
    exactly when some file was given and none of them (nor --config) set it. Without a
    --configfile config.yaml is the user's own file, and its excludes are theirs."""
    return bool(config_files) and "exclude" not in overrides


def design_settings(config: Mapping[str, Any], axes: Mapping[str, list]) -> design.Settings:
    """The sequential design's settings, each refusal naming its key."""
    try:
        settings = design.Settings.from_config(config["until_decided"])
    except ValueError as err:
        raise ConfigError("until_decided", str(err)) from None
    unknown = [a for a in settings.compare if a not in axes]
    if unknown:
        raise ConfigError("until_decided.compare", f"{', '.join(unknown)} is not a grid axis (axes: {', '.join(axes)})")
    return settings


def validate_config(config: dict[str, Any], schema_path: Path) -> None:
    """The schema check of snakemake.utils.validate (types, unknown keys, empty axes; the schema's
    defaults filled into `config`), each refusal one ConfigError naming the offending key
    instead of a dump of the whole schema. Numbers given as strings on the command line are
    coerced first; NaN and infinity are refused."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    schema = yaml.safe_load(schema_path.read_text())
    config.update(coerce_typed_strings(dict(config), schema))
    bad = non_finite_key(config)
    if bad:
        raise ConfigError(bad, "not a finite number (NaN and infinity are refused)")
    try:
        validate(config, str(schema_path))
    except WorkflowError as err:
        cause = err.__context__  # the jsonschema ValidationError
        if not hasattr(cause, "absolute_path"):
            raise
        key = ".".join(str(part) for part in cause.absolute_path) or "(top level)"
        raise ConfigError(key, cause.message) from None
