"""Issue 68, item 3: the report answers for today's training. What compiling costs and when it pays off,
the HFU beside the MFU, what activation checkpointing saves and costs, each sentence naming its compile
and checkpointing modes; the columns they need in runs.csv and cells.csv (analysis.transforms,
report.training, report.findings.transforms). On small synthetic runs tables (tests/report_synth.py)."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from report_synth import make_token_runs

from ddpbench import analysis as A
from ddpbench.report import build
from ddpbench.report.findings import findings
from ddpbench.report.tables import cells_table
from ddpbench.report.text import sig3
from ddpbench.results import aggregate


def _tables(runs):
    runs = A.load_runs_frame(runs)
    return runs, A.cell_stats(runs), A.speedup_table(runs)


def _of(runs, cells, speed, kind):
    """The report's findings of one kind (no limit on their number)."""
    return [f for f in findings(runs, cells, speed, A.comparisons_table(runs), pd.DataFrame(), max_items=40) if f.kind == kind]


@pytest.fixture(scope="module")
def both():
    """The language-model grid eager and compiled (2x faster steps, 30-32 s to compile), each without and with
    full checkpointing (0.75x the throughput, 0.6x the peak RSS), 3 repeats, 3 % noise."""
    return _tables(make_token_runs(seed=4, compiled=(2.0, 1.6), checkpointed=(0.75, 0.6)))


# -- the columns: runs.csv from summary.json, cells.csv per cell -----------------------------------------


def test_the_compile_time_and_the_hfu_reach_runs_csv_and_cells_csv(tmp_path):
    """runs.csv carries summary.json's extra.compile_s, compiled_graphs and the HFU fields; cells.csv their medians
    with order-statistic intervals (before issue 68 no cells.csv column, no reader outside run/)."""
    summaries = []
    for repeat, compile_s in enumerate((92.8, 90.0, 95.5)):
        run = tmp_path / f"repeat~{repeat}"
        run.mkdir()
        (run / "summary.json").write_text(json.dumps({
            "status": "ok", "world_size": 1, "nodes": 1, "params": {"strategy": "single", "compile": "model", "dataset_size": 1000},
            "samples_per_s": 100.0, "step_time_median_s": 0.33,
            "extra": {"compile_s": compile_s, "compiled_graphs": 3, "mfu_measured": 0.3, "hfu_measured": 0.4,
                      "hardware_flops_per_sample": 8e6, "hfu_datasheet": None}}))  # fmt: skip
        (run / "steps_rank0.csv").write_text("step,rank,total_s\n0,0,93.1\n")  # the one rank's step file
        summaries.append(run / "summary.json")
    aggregate.aggregate(summaries, tmp_path / "runs.csv", tmp_path / "steps.csv")
    runs = A.load_runs(tmp_path / "runs.csv")
    for column in ("extra_compile_s", "extra_compiled_graphs", "extra_hfu_measured", "extra_hardware_flops_per_sample"):
        assert column in runs, column
    cell = A.cell_stats(runs).iloc[0]
    assert cell["extra_compile_s"] == 92.8 and (cell["extra_compile_s_ci_low"], cell["extra_compile_s_ci_high"]) == (90.0, 95.5)
    assert cell["extra_compile_s_ci_level"] == 0.75  # the median of 3: [min, max], 75 %
    assert cell["extra_compiled_graphs"] == 3 and cell["extra_hfu_measured"] == 0.4
    assert cell["extra_hardware_flops_per_sample"] == 8e6


def test_the_cells_table_shows_the_hfu_beside_the_mfu_and_the_compile_time(both):
    _, cells, _ = both
    table = cells_table(cells, ["strategy", "world_size", "compile", "activation_checkpointing"])
    i = table.columns.index("MFU (measured peak)")
    assert table.columns[i + 1] == "HFU (measured peak)"
    assert "compile time (first step beyond a timed one) [s]" in table.columns
    eager_only = cells[cells["compile"] == "none"]
    assert "compile time (first step beyond a timed one) [s]" not in cells_table(eager_only, ["strategy"]).columns


# -- compile: what it costs, and when it pays off ---------------------------------------------------------


def test_compile_payoff_is_the_compile_time_over_the_seconds_a_step_saves(both):
    runs, cells, _ = both
    payoff = A.compile_payoff(runs, cells)
    assert len(payoff) == 16 and set(payoff["compile"]) == {"model"}  # every compiled cell has its eager twin
    key = ["strategy", "world_size", "seq_len", "batch_size", "activation_checkpointing"]
    c = cells.set_index([*key, "compile"])
    for _, r in payoff.iterrows():
        k = tuple(r[key])
        eager, compiled = c.loc[(*k, "none")], c.loc[(*k, "model")]
        assert r["compile_s"] == 31.0 and r["compile_s_ci_low"] == 30.0 and r["compile_s_ci_high"] == 32.0
        assert r["verdict"] == A.Verdict.FASTER and r["speedup_ci_low"] > 1
        saved = eager["step_time_median_s"] - compiled["step_time_median_s"]
        assert r["saved_s"] == pytest.approx(saved, rel=1e-9)
        assert r["payoff_steps"] == pytest.approx(31.0 / saved, rel=1e-9)
        assert r["payoff_steps_low"] <= r["payoff_steps"] <= r["payoff_steps_high"]


@pytest.mark.parametrize("speedup, faster", [(1.0, "NO_DIFFERENCE"), (0.5, "SLOWER")])
def test_a_compile_that_does_not_make_steps_faster_never_pays_off(speedup, faster):
    faster = A.Verdict[faster]
    runs, cells, _ = _tables(make_token_runs(seed=5, noise=0.05, compiled=(speedup, 1.0)))
    payoff = A.compile_payoff(runs, cells)
    assert (payoff["verdict"] == faster).all() and payoff["payoff_steps"].isna().all()
    (found,) = _of(runs, cells, A.speedup_table(runs), "compile")
    assert "pays off after" not in found.text and found.text.count("it does not pay off") == 4  # the 4 it names
    assert ("compiled steps are slower" if speedup < 1 else "not detectably faster (the interval holds 1)") in found.text


def test_the_compile_finding_names_its_modes_and_the_soonest_payoffs_first(both):
    runs, cells, speed = both
    (found,) = _of(runs, cells, speed, "compile")
    assert found.anchor == "cells"
    assert found.text.startswith("What compiling costs (compile=model against none, every other setting equal; the "
                                 "compile is in the untimed first step")  # fmt: skip
    items = found.text.split(": ", 1)[1].split("; and ")[0].split("; a step")[0]
    assert "activation_checkpointing=" in items  # each cell names the checkpointing mode it ran at
    steps = [float(x) for x in re.findall(r"pays off after ([\d.]+) steps", found.text)]
    assert len(steps) == 4 and steps == sorted(steps) and "and 12 more compiled cells (the cells table)" in found.text
    assert re.search(r"compiling takes 31\.0 s \[30\.0, 32\.0\] \(75 % interval\), 12 graphs", found.text)
    best = A.compile_payoff(runs, cells)["payoff_steps"].min()
    assert f"pays off after {sig3(best)} steps" in found.text


def test_runs_without_a_compile_time_say_so():
    runs, cells, speed = _tables(make_token_runs(seed=2, noise=0.0, compiled=(2.0, 1.6)).drop(
        columns=["extra_compile_s", "extra_compiled_graphs"]))  # fmt: skip
    (found,) = _of(runs, cells, speed, "compile")
    assert found.text.startswith("The compile=model runs here recorded no compile time (no extra_compile_s in runs.csv")


# -- checkpointing: what it saves and what it costs ------------------------------------------------------


def test_checkpointing_effects_carry_both_peaks_and_the_ratios_with_their_intervals(both):
    runs, cells, _ = both
    effects = A.checkpointing_effects(runs, cells)
    assert len(effects) == 16 and set(effects["activation_checkpointing"]) == {"full"}
    assert set(effects["reference_value"]) == {"none"}
    ok = runs[runs["status"] == "ok"]
    for _, r in effects.iterrows():
        twin = {c: r[c] for c in ("strategy", "world_size", "seq_len", "compile")}
        mine = ok[np.logical_and.reduce([ok[c] == v for c, v in twin.items()])]
        a = mine.loc[mine["activation_checkpointing"] == "full", "peak_rss_mb"]
        b = mine.loc[mine["activation_checkpointing"] == "none", "peak_rss_mb"]
        iv = A.welch_log_ratio(a, b)  # the peak ratio: Welch's over the repeats, never ±1.96σ
        assert (r["peak_ratio"], r["peak_ratio_ci_low"], r["peak_ratio_ci_high"]) == pytest.approx((iv.estimate, iv.low, iv.high))
        assert r["peak_ratio"] == pytest.approx(0.6)
        assert r["peak_mib"] == pytest.approx(np.median(a)) and r["reference_peak_mib"] == pytest.approx(np.median(b))
        assert (r["peak_ci_low"], r["peak_ci_high"], r["peak_ci_level"]) == (a.min(), a.max(), 0.75)
        assert r["ratio_ci_high"] < 1  # 0.75x the throughput, 3 % noise: lower by its interval


def test_the_checkpointing_finding_states_memory_saved_and_throughput_paid_per_compile_mode(both):
    runs, cells, speed = both
    found = _of(runs, cells, speed, "checkpointing")
    assert [f.text.split(" (every")[0] for f in found] == [
        "With activation_checkpointing=full instead of none at compile=none",
        "With activation_checkpointing=full instead of none at compile=model"]  # fmt: skip
    assert {f.anchor for f in found} == {"fig-checkpointing"}
    effects = A.checkpointing_effects(runs, cells)
    for f in found:
        items = f.text.split("): ", 1)[1].split("; ")
        peaks = [i for i in items if "peak RSS" in i]
        assert len(peaks) == 8  # every cell with its twin
        for text in peaks:
            m = re.search(r"peak RSS (\d+) MiB \[(\d+), (\d+)\] \(75 % interval\) against its twin's (\d+) MiB \[\d+, \d+\] "
                          r"\(75 % interval\): (\d+) MiB saved, 0\.600× \[([\d.]+), ([\d.]+)\] its twin's \(lower\)", text)  # fmt: skip
            assert m, text
            assert int(m[4]) - int(m[1]) == pytest.approx(int(m[5]), abs=1)
        throughput = re.findall(r"throughput ([\d.]+)× \[([\d.]+), ([\d.]+)\] its twin's \((\w+)", f.text)
        assert len(throughput) == 8
        for est, lo, hi, word in throughput:
            assert float(hi) < 1 and word == "lower", (est, lo, hi, word)
    assert len(effects) == 16


# -- HFU beside MFU, each cell named with its modes ------------------------------------------------------


def test_the_mfu_finding_states_the_hfu_and_names_the_modes(both):
    runs, cells, speed = both
    (mfu,) = _of(runs, cells, speed, "mfu")
    best, worst = mfu.text.split("; lowest: ")
    for part in (best, worst):
        assert "HFU " in part and re.search(r"compile=\w+", part) and re.search(r"activation_checkpointing=\w+", part)
    # the lowest MFU is a checkpointed cell: its HFU counts the recompute, 4/3 of its MFU
    low = cells.loc[pd.to_numeric(cells["extra_mfu_measured"]).idxmin()]
    assert low["activation_checkpointing"] == "full" and "activation_checkpointing=full" in worst
    assert f"MFU {sig3(100 * low['extra_mfu_measured'])} %" in worst
    assert f"HFU {sig3(100 * low['extra_hfu_measured'])} %" in worst
    assert low["extra_hfu_measured"] == pytest.approx(4 / 3 * low["extra_mfu_measured"])
    # one mode held by the grid is named too: a sentence about MFU says which compile mode it speaks of
    runs1, cells1, speed1 = _tables(make_token_runs(seed=1))
    (one,) = _of(runs1, cells1, speed1, "mfu")
    assert one.text.count("(compile=none, activation_checkpointing=none)") == 2


def test_the_checkpointing_figure_has_a_caption():
    assert "checkpointing" in build.captions()
