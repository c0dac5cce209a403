"""Statistics and scaling-law fits over the aggregated runs table, pure pandas/numpy/scipy on result
tables (no torch; never run/ or report/: modules here import only ddpbench.core,
ddpbench.comm.commfit, the torch-free registry of ddpbench.strategies and each other, by submodule
path). Definitions follow docs/metrics.md: over repeats (separate launches), timing metrics are geometric
means with Student-t intervals on the log scale, other metrics medians with order-statistic
intervals of their exact level, ratios Welch t-intervals on log differences (`intervals`); `tables`
loads runs.csv, names a cell's axes and the throughput to quote (tokens/s for token data), `health`
judges runs and the stability of cells, `comparison` holds the one record every comparison of two cells is (its Verdict, its
source, the design's answers), `cells` makes cells.csv and comparisons.csv, `scaling`
speedup.csv (S(p) = T_baseline / T_p for one epoch, E = S/p) and fits.csv from the laws of `fits`
(Amdahl, Gustafson, Karp–Flatt) and `cost_model` (each strategy's volume law, bootstrap intervals),
`links` links.csv (the latency-bandwidth fit per measured network link and the bandwidth below
which a strategy loses to one process) and `breakdowns` the profiler's, per-epoch, per-round and
auto-batch tables, `memory` the memory held per rank by the sharded strategies against ddp and what
one setting changes, `transforms` what compiling and activation checkpointing cost and buy; `compare` (with `compare_cells` and `provenance`) compares two result sets.
This package re-exports the names the report uses as `analysis.<name>`.
"""

from __future__ import annotations

import importlib

# Each name's submodule: imported on first use (PEP 562), so `from ddpbench.analysis import design`
# at plan time (every Snakemake start) does not load pandas and scipy.optimize for the report's names.
_EXPORTS = {
    "breakdowns": ("auto_batch", "epoch_throughput", "profile_cells", "profile_comm_shares", "round_time"),
    "cells": ("COMPARISON_COLUMNS", "METRICS", "cell_stats", "comparisons_table"),
    "comparison": ("Comparison", "DesignAnswers", "Source", "Verdict", "compare_pair", "verdict_of"),
    "cost_model": ("N_BOOT", "SEED"),
    "fits": ("amdahl_time", "gustafson_speedup"),
    "health": ("MAX_REL_CI", "THROUGHPUT", "busy_runs", "likely_causes", "oversubscribed_runs", "stability", "timed_runs", "truthy"),
    "intervals": ("LEVEL", "TESTED_COVERAGE", "TIMING_METRICS", "Interval", "log_t_interval", "numeric_values", "order_stat_rank", "rel_halfwidth", "welch_log_ratio"),
    "links": ("ACHIEVED", "ALWAYS_LOSES", "LINK_TABLE_COLUMNS", "LOSES_BELOW", "NEVER_LOSES", "link_group_axes", "link_runs", "links_table"),
    "memory": ("EFFECT_COLUMNS", "HELD", "HELD_PARTS", "MIB", "PEAKS", "SAVING_COLUMNS", "SHARDED", "axis_effects", "cell_key", "has_held", "memory_savings", "peaks", "runs_by_cell"),
    "scaling": ("FIT_COLUMNS", "SPEEDUP_COLUMNS", "fits_table", "speedup_table"),
    "transforms": ("MODE_AXES", "NO_CHECKPOINTING", "PAYOFF_COLUMNS", "checkpointing_effects",
                   "compile_payoff"),
    "tables": ("BASELINE_STRATEGY", "IRRELEVANT_AT_BASELINE", "LAUNCH_AXES", "SUPERSEDED", "TIME", "axes", "group_axes", "label", "load_runs", "load_runs_frame", "matching", "run_version", "text_column", "throughput_metric", "varying"),
}  # fmt: skip
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'ddpbench.analysis' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"ddpbench.analysis.{module}"), name)
    globals()[name] = value
    return value


__all__ = list(_MODULE_OF)
