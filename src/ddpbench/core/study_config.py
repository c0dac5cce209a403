"""What a study's config says that the workflow, the plan and a report rebuilt from an archive
(`report --from`, which has only the study's recorded config.yaml) must read alike: its study
sections and the threshold of the report's unstable flag. Defaults are the schema's
(ddpbench.plan.config_schema takes them from here, as do the design's Settings and the
sequential analysis: `until_decided`'s are written here only)."""

from __future__ import annotations

from typing import Any, Mapping

MAX_REL_CI = 0.05  # timing.max_rel_ci's default
# until_decided's defaults, key by key as the config writes them (budgets of 0: none)
UNTIL_DECIDED = {
    "budget": 0,
    "max_runs": 0,
    "first": 3,
    "max_per_cell": 40,
    "precision": 0.05,
    "margin": 0.05,
    "speedup": True,
    "compare": ("strategy",),
    "predict": False,
}
PRECISION = UNTIL_DECIDED["precision"]


def study_names(config: Mapping[str, Any]) -> list[str]:
    """The config's `study`: none, one name or a list of names, as a list."""
    study = config.get("study")
    return [] if not study else [study] if isinstance(study, str) else list(study)


def stability_threshold(config: Mapping[str, Any]) -> float:
    """The relative half-width above which the report flags a cell unstable: in a sequential design
    that asks each cell's precision, that precision; else timing.max_rel_ci."""
    if config.get("repeats") == "until_decided":
        asked = float((config.get("until_decided") or {}).get("precision", PRECISION))
        if asked > 0:
            return asked
    return float((config.get("timing") or {}).get("max_rel_ci", MAX_REL_CI))
