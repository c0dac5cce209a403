"""Findings first (issue 12): sentences from hand-made tables and from report_synth through the real analysis."""

import dataclasses
import re

import numpy as np
import pandas as pd
import pytest
from report_synth import Answers, make_runs

from ddpbench import analysis
from ddpbench.report.findings import Finding, findings, kinds
from ddpbench.report.findings.common import ANCHORS, key_text, key_texts
from ddpbench.report.findings.fits import fit_findings
from ddpbench.report.findings.phases import profile_findings
from ddpbench.report.text import pct_text, ratio_text, sig3

KINDS = tuple(kinds())  # the registered kinds, in their order

EMPTY = pd.DataFrame()


def check(items):
    """Every finding is well formed: a known kind, a non-empty sentence, an allowed anchor."""
    for f in items:
        assert isinstance(f, Finding)
        assert f.kind in KINDS
        assert f.text.strip() and f.text.endswith(".")
        assert f.anchor and (f.anchor in ANCHORS or f.anchor.startswith("fig-"))
        assert "nan" not in f.text.lower().replace("nanos", "")
    return items


def of(items, kind):
    return [f for f in items if f.kind == kind]


def cmp_row(a, b, ratio, lo, hi, p=2, **extra):
    return dict(world_size=p, strategy_a=a, strategy_b=b, n_a=3, n_b=3, ratio=ratio, ratio_ci_low=lo,
                ratio_ci_high=hi, ratio_ci_level=0.95, verdict=analysis.verdict_of(lo, hi), unstable=False,
                unstable_cause="", versions_differ=False, **extra)  # fmt: skip


def speed_row(strategy, p, s, lo, hi, **extra):
    return dict(strategy=strategy, world_size=p, nodes=1, n_repeats=3, baseline="single", speedup=s, speedup_ci_low=lo,
                speedup_ci_high=hi, speedup_ci_level=0.95, efficiency=s / p, efficiency_ci_low=lo / p,
                efficiency_ci_high=hi / p, measure="speedup", unstable=False, versions_differ=False, **extra)  # fmt: skip


# -- formatting ------------------------------------------------------------------------------


def test_numbers_have_three_significant_digits():
    assert sig3(1.5234) == "1.52"
    assert sig3(0.012345) == "0.0123"
    assert sig3(6126.3) == "6130"
    assert sig3(9.996) == "10.0"
    assert sig3(np.nan) == "–"
    assert ratio_text(1.5234, 1.311, 1.7649) == "1.52× [1.31, 1.76]"
    assert ratio_text(1.5) == "1.50× (no interval)"
    # a bound that is not 1 never reads 1.00: whether the interval holds 1 is the point
    assert ratio_text(1.09, 1.003, 1.19) == "1.09× [1.003, 1.19]"
    assert ratio_text(0.97, 0.93, 0.9996) == "0.970× [0.930, 0.9996]" and ratio_text(1.0, 1.0, 1.2) == "1.00× [1.00, 1.20]"
    assert pct_text(0.312, 0.284, 0.341) == "31.2 % [28.4, 34.1]"
    assert pct_text(0.312, 0.284, 0.341, 0.75) == "31.2 % [28.4, 34.1] (75 % interval)"


# -- winners ---------------------------------------------------------------------------------


def test_a_clear_difference_is_reported_with_its_interval():
    # allreduce/ddp = 1/1.52: ddp is 1.52x faster, its interval [1.31, 1.76] excludes 1
    comparisons = pd.DataFrame([cmp_row("allreduce", "ddp", 1 / 1.52, 1 / 1.76, 1 / 1.31, batch_size=128)])
    out = check(findings(EMPTY, EMPTY, EMPTY, comparisons, EMPTY))
    (w,) = of(out, "winner")
    assert w.text == "ddp is 1.52× [1.31, 1.76] faster than allreduce at world size 2."
    assert w.anchor == "comparisons"


def test_overlapping_intervals_give_no_winner():
    comparisons = pd.DataFrame([cmp_row("allreduce", "ddp", 1.05, 0.9, 1.2)])
    (w,) = of(check(findings(EMPTY, EMPTY, EMPTY, comparisons, EMPTY)), "winner")
    assert "faster than" not in w.text and "fastest" not in w.text
    assert w.text == ("No detectable difference between allreduce and ddp at world size 2: allreduce's throughput is "
                      "1.05× [0.900, 1.20] ddp's, an interval that holds 1.")


def test_no_interval_gives_no_winner():
    comparisons = pd.DataFrame([cmp_row("allreduce", "ddp", 2.0, np.nan, np.nan)])
    (w,) = of(check(findings(EMPTY, EMPTY, EMPTY, comparisons, EMPTY)), "winner")
    assert "faster" not in w.text and "no winner" in w.text


def test_one_strategy_winning_everywhere_is_one_sentence():
    comparisons = pd.DataFrame([cmp_row("allreduce", "ddp", 1 / m, 1 / (m + 0.1), 1 / (m - 0.1), p=p)
                                for p, m in ((2, 1.2), (4, 1.35), (8, 1.5))])  # fmt: skip
    (w,) = of(check(findings(EMPTY, EMPTY, EMPTY, comparisons, EMPTY)), "winner")
    assert w.text.startswith("ddp is the fastest at every world size measured, by 1.20× [1.10, 1.30] to 1.50×")
    assert "allreduce" in w.text


def test_mixed_outcomes_name_only_the_settings_with_a_winner():
    comparisons = pd.DataFrame([cmp_row("allreduce", "ddp", 1 / 1.5, 1 / 1.6, 1 / 1.4, p=4),
                                cmp_row("allreduce", "ddp", 1 / 1.4, 1 / 1.5, 1 / 1.3, p=8),
                                cmp_row("allreduce", "ddp", 0.98, 0.9, 1.07, p=2)])  # fmt: skip
    out = of(check(findings(EMPTY, EMPTY, EMPTY, comparisons, EMPTY)), "winner")
    assert len(out) == 2
    assert out[0].text.startswith("ddp is the fastest at world sizes 4 and 8")
    assert out[1].text == ("No detectable difference between ddp and allreduce at world size 2: ddp's throughput is "
                           "1.02× [0.935, 1.11] allreduce's, an interval that holds 1.")


def test_winner_is_the_fastest_of_three_and_margin_is_over_the_runner_up():
    # throughputs: a 100, b 150, c 120 -> b fastest, c runner-up, b/c = 1.25
    comparisons = pd.DataFrame([cmp_row("a", "b", 100 / 150, 0.6, 0.7), cmp_row("a", "c", 100 / 120, 0.8, 0.87),
                                cmp_row("b", "c", 1.25, 1.1, 1.4)])  # fmt: skip
    (w,) = of(check(findings(EMPTY, EMPTY, EMPTY, comparisons, EMPTY)), "winner")
    assert w.text == "b is the fastest at world size 2: 1.25× [1.10, 1.40] faster than the runner-up, c."


# -- scaling ---------------------------------------------------------------------------------


def test_speedup_below_one_is_worded_slower():
    speed = pd.DataFrame([speed_row("single", 1, 1.0, 1.0, 1.0), speed_row("ddp", 2, 1.6, 1.5, 1.7),
                          speed_row("allreduce", 2, 0.8, 0.7, 0.9)])  # fmt: skip
    out = of(check(findings(EMPTY, EMPTY, speed, EMPTY, EMPTY)), "scaling")
    assert out[0].text.startswith("At world size 2, ddp is 1.60× [1.50, 1.70] faster than one process")
    assert "efficiency 80.0 % [75.0, 85.0]" in out[0].text
    assert "allreduce is slower than one process: speedup 0.800× [0.700, 0.900]" in out[1].text
    assert all(f.anchor == "speedup-table" for f in out)


def test_speedup_interval_holding_one_is_not_called_slower_or_faster():
    speed = pd.DataFrame([speed_row("ddp", 2, 0.95, 0.85, 1.06)])
    (f,) = of(check(findings(EMPTY, EMPTY, speed, EMPTY, EMPTY)), "scaling")
    assert "not detectably faster than one process" in f.text and "slower" not in f.text


def test_scaling_without_baseline_says_why():
    runs = pd.DataFrame([dict(strategy="ddp", world_size=2, status="ok", epoch_time_s=1.0)])
    (f,) = of(check(findings(runs, EMPTY, EMPTY, EMPTY, EMPTY)), "scaling")
    assert "no run at world size 1" in f.text


# -- time, batch -----------------------------------------------------------------------------


def test_time_names_the_dominant_phase_and_exposed_comm_and_large_imbalance():
    cells = pd.DataFrame([dict(strategy="ddp", world_size=4, samples_per_s=100.0, frac_data=0.05, frac_forward=0.2,
                               frac_backward=0.35, frac_exposed_comm=0.31, frac_exposed_comm_ci_low=0.28,
                               frac_exposed_comm_ci_high=0.34, frac_exposed_comm_ci_level=0.95, frac_comm=0.5,
                               frac_optimizer=0.05, frac_other=0.04, frac_imbalance=0.15,
                               frac_imbalance_ci_low=0.12, frac_imbalance_ci_high=0.2)])  # fmt: skip
    out = of(check(findings(EMPTY, cells, EMPTY, EMPTY, EMPTY)), "time")
    assert "backward takes the largest share" in out[0].text
    assert "exposed communication takes 31.0 % [28.0, 34.0] of the step" in out[0].text
    assert "imbalance" in out[1].text and "15.0 % [12.0, 20.0]" in out[1].text


def test_batch_ratio_from_cells_is_labelled_without_interval():
    cells = pd.DataFrame([dict(strategy="ddp", world_size=2, batch_size=b, samples_per_s=t) for b, t in ((32, 100.0), (128, 150.0))])
    (f,) = of(check(findings(EMPTY, cells, EMPTY, EMPTY, EMPTY)), "batch")
    assert f.text == ("For ddp at world size 2, throughput at batch 128 is 1.50× (ratio of the two cells' estimates, "
                      "no interval) that at batch 32: no interval to judge the change by.")
    assert f.anchor == "fig-throughput_vs_batch"


# -- fits --------------------------------------------------------------------------------------


def test_unfitted_amdahl_says_why_once():
    fits = pd.DataFrame([dict(group=f"strategy={s}", strategy=s, law="amdahl", parameter="-", p=np.nan,
                              kind="too few points", estimate=np.nan, ci_low=np.nan, ci_high=np.nan, n_points=6,
                              r2=np.nan, note="too few points: 2 distinct worker counts, Amdahl needs 3")
                         for s in ("ddp", "allreduce")])  # fmt: skip
    speed = pd.DataFrame([speed_row("ddp", 2, 1.0, 0.9, 1.1), speed_row("ddp", 4, 1.8, 1.7, 1.9)])
    # Three world sizes in the grid (1, 2, 4), but no strategy at three: the sentence used to say
    # "this grid has 3" beside a fits table saying 2 (the dataset-size preset).
    runs = pd.DataFrame({"status": ["ok"] * 3, "strategy": ["single", "ddp", "ddp"], "world_size": [1, 2, 4]})
    (f,) = of(check(fit_findings(fits, speed, runs)), "fit")
    assert f.text == ("Amdahl's law was not fitted: it needs one strategy measured at 3 or more world sizes, and no "
                      "strategy here ran at more than 2 world sizes (ddp at p = 2, 4; single at p = 1).")


def test_unfitted_amdahl_on_the_main_jobs_grid_names_its_world_sizes():
    """Issue 68: on world sizes 1 and 2 (single at 1, the others at 2) it said "the most any strategy
    here was measured at is 1", which reads as a world size: it names them now."""
    fits = pd.DataFrame([dict(group="strategy=ddp", strategy="ddp", law="amdahl", parameter="-", p=np.nan,
                              kind="too few points", estimate=np.nan, ci_low=np.nan, ci_high=np.nan, n_points=3,
                              r2=np.nan, note="too few points: this strategy ran at 1 worker count(s), Amdahl needs 3")])  # fmt: skip
    speed = pd.DataFrame([speed_row("ddp", 2, 1.0, 0.9, 1.1)])
    strategies = ["single", "allreduce", "ddp"]
    runs = pd.DataFrame({"status": "ok", "strategy": strategies * 3, "world_size": [1, 2, 2] * 3})
    (f,) = of(check(fit_findings(fits, speed, runs)), "fit")
    assert f.text.endswith("no strategy here ran at more than 1 world size (allreduce and ddp at p = 2; single at p = 1).")
    gustafson = fits.assign(law="gustafson", note="too few points: this strategy ran at 1 worker count(s) above 1, "
                                                  "Gustafson needs 2")  # fmt: skip
    (f,) = of(check(fit_findings(gustafson, speed, runs)), "fit")
    assert f.text == ("Gustafson's law was not fitted: it needs one strategy measured at 2 or more world sizes above 1, "
                      "and no strategy here ran at more than 1 world size above 1 (allreduce and ddp at p = 2).")


def test_fitted_serial_fraction_and_prediction_labelled_extrapolation():
    base = dict(group="strategy=ddp", strategy="ddp", n_points=12, note="")
    fits = pd.DataFrame([dict(base, law="amdahl", parameter="f", p=np.nan, kind="fit", estimate=0.1, ci_low=0.09,
                              ci_high=0.12, r2=0.99),
                         dict(base, law="amdahl", parameter="speedup", p=16, kind="prediction", estimate=6.1,
                              ci_low=5.8, ci_high=6.5, r2=np.nan),
                         dict(base, law="amdahl", parameter="speedup", p=32, kind="prediction", estimate=7.4,
                              ci_low=6.8, ci_high=8.0, r2=np.nan)])  # fmt: skip
    out = of(check(findings(EMPTY, EMPTY, EMPTY, EMPTY, fits)), "fit")
    assert "serial fraction f = 10.0 % [9.00, 12.0]" in out[0].text
    assert out[1].text.startswith("Extrapolation, not a measurement: at world size 32")
    assert "7.40× [6.80, 8.00]" in out[1].text


# -- warnings ----------------------------------------------------------------------------------


def test_failed_cell_is_a_warning_naming_the_cell_and_reason():
    runs = pd.DataFrame([dict(strategy="ddp", world_size=2, status="ok", reason="", samples_per_s=10.0),
                         dict(strategy="ddp", world_size=16, status="failed", reason="Traceback (most recent call last):\n  ...\nRuntimeError: boom",
                              samples_per_s=np.nan)])  # fmt: skip
    cells = pd.DataFrame([dict(strategy="ddp", world_size=2, n_failed=0, n_timeout=0, n_skipped=0),
                          dict(strategy="ddp", world_size=16, n_failed=1, n_timeout=0, n_skipped=0)])  # fmt: skip
    for c in (cells, EMPTY):  # from cells.csv's counts, and from the runs alone
        (w,) = of(check(findings(runs, c, EMPTY, EMPTY, EMPTY)), "warning")
        assert w.text == "1 run failed in 1 cell: ddp at world size 16 (RuntimeError: boom)."
        assert w.anchor == "problems"


def test_many_unstable_cells_name_three_then_and_more():
    cells = pd.DataFrame([dict(strategy="ddp", world_size=p, unstable=True, unstable_cause="busy machine", n_busy=1)
                          for p in (1, 2, 4, 8, 16)])  # fmt: skip
    out = of(check(findings(EMPTY, cells, EMPTY, EMPTY, EMPTY)), "warning")
    unstable = next(f for f in out if "unstable" in f.text)
    assert unstable.text.startswith("5 cells are flagged unstable")
    assert unstable.text.endswith("ddp at world size 4 (busy machine) and 2 more.")
    assert any(f.text.startswith("5 runs were measured on a busy machine") for f in out)


def test_empty_inputs_give_sensible_output():
    assert findings(EMPTY, EMPTY, EMPTY, EMPTY, EMPTY) == []
    assert findings(None, None, None, None, None) == []
    runs = pd.DataFrame([dict(strategy="ddp", world_size=2, status="failed", reason="x")])
    out = check(findings(runs, EMPTY, EMPTY, EMPTY, EMPTY))
    assert any("No run finished ok" in f.text for f in out)
    assert of(out, "scaling") and "no run finished ok" in of(out, "scaling")[0].text


def test_max_items_keeps_one_of_each_kind():
    comparisons = pd.DataFrame([cmp_row("allreduce", "ddp", 0.98, 0.9, 1.07, p=p) for p in (2, 4)])
    speed = pd.DataFrame([speed_row(s, 4, 3.0 - i / 10, 2.8 - i / 10, 3.2 - i / 10) for i, s in enumerate("abcdef")])
    cells = pd.DataFrame([dict(strategy="a", world_size=4, samples_per_s=1.0, frac_exposed_comm=0.2, n_failed=1,
                               unstable=True, unstable_cause="x")])  # fmt: skip
    full = check(findings(EMPTY, cells, speed, comparisons, EMPTY))
    short = check(findings(EMPTY, cells, speed, comparisons, EMPTY, max_items=4))
    assert len(short) == 4 and {f.kind for f in short} == {f.kind for f in full}
    assert len(check(findings(EMPTY, cells, speed, comparisons, EMPTY, max_items=2))) == 2


# -- the synthetic report data through the real analysis -----------------------------------------


def _tables(**kw):
    runs = analysis.load_runs_frame(make_runs(**kw))
    speed = analysis.speedup_table(runs)
    return runs, analysis.cell_stats(runs), speed, analysis.comparisons_table(runs), analysis.fits_table(runs, speed, n_boot=20)


@pytest.mark.parametrize("kw, kinds", [
    ({}, {"winner", "scaling", "time", "fit", "warning"}),
    # zero beside ddp: the memory it saves (link: test_links.py; compile and checkpointing, which need a cell's
    # compiled or checkpointed twin: test_report_training.py; prediction, the step model's held-out errors the
    # report's Predictions section passes: test_report_predictions.py)
    (dict(strategies=("single", "ddp", "zero"), batch_sizes=(64, 128), dataset_sizes=(4096, 8192), world_sizes=(1, 2)),
     set(KINDS) - {"link", "compile", "checkpointing", "prediction"}),
    (dict(scaling="weak", failures=False), {"winner", "scaling", "time", "fit"}),
])  # fmt: skip
def test_report_synth_through_the_analysis(kw, kinds):
    runs, cells, speed, comparisons, fits = _tables(**kw)
    out = check(findings(runs, cells, speed, comparisons, fits))
    assert len(out) <= 12
    assert kinds <= {f.kind for f in out}
    decided = comparisons["verdict"].isin([analysis.Verdict.FASTER, analysis.Verdict.SLOWER]).any()
    if not decided:  # never a winner where no interval excludes 1
        assert not any("faster than" in f.text or "fastest" in f.text for f in of(out, "winner"))
    if kw.get("failures", True):
        assert any("failed" in f.text and f.anchor == "problems" for f in out)


def test_report_synth_clear_winner():
    # allreduce made 30 % slower: ddp must win wherever the interval excludes 1
    runs = make_runs(failures=False, noise=0.01)
    slow = (runs["strategy"] == "allreduce") & (runs["world_size"] > 1)
    runs.loc[slow, "epoch_time_s"] *= 1.3
    runs.loc[slow, "samples_per_s"] /= 1.3
    runs = analysis.load_runs_frame(runs)
    speed = analysis.speedup_table(runs)
    out = check(findings(runs, analysis.cell_stats(runs), speed, analysis.comparisons_table(runs),
                         analysis.fits_table(runs, speed, n_boot=20)))  # fmt: skip
    assert of(out, "winner")[0].text.startswith("ddp is the fastest at world sizes 2, 4 and 8, by 1.")


def test_a_verdict_without_an_interval_is_no_winner():
    # a hand-made row claiming "faster" with no interval: the interval decides, not the column
    comparisons = pd.DataFrame([dict(strategy_a="a", strategy_b="b", ratio=1.2, verdict="faster")])
    (w,) = of(check(findings(EMPTY, EMPTY, EMPTY, comparisons, EMPTY)), "winner")
    assert "faster" not in w.text and w.text.startswith("a and b cannot be compared:")


def test_tables_missing_columns_do_not_raise():
    out = check(findings(None, pd.DataFrame([dict(world_size=2)]), pd.DataFrame([dict(speedup=2.0, world_size=2)]),
                         pd.DataFrame([dict(strategy_a="a")]), pd.DataFrame([dict(law="amdahl")])))  # fmt: skip
    assert [f.kind for f in out] == ["scaling"]
    assert "efficiency 100 % (no interval)" in out[0].text


def test_tables_read_back_from_csv_give_the_same_findings():
    import io

    tables = _tables(batch_sizes=(64, 128))
    back = [pd.read_csv(io.StringIO(t.to_csv(index=False))) for t in tables]
    assert findings(*tables) == findings(*back)


def test_a_tie_follows_the_scaling_verdicts_and_a_win_precedes_them():
    # The main job's shape: two strategies at p = 2 that the intervals cannot tell apart, both slower
    # than one process. "Which is fastest" has no answer; "do two processes beat one" has: it leads.
    tie = pd.DataFrame([cmp_row("ring_allreduce", "gather_scatter", 1.02, 0.97, 1.08)])
    speed = pd.DataFrame([speed_row("ring_allreduce", 2, 0.6, 0.55, 0.65), speed_row("gather_scatter", 2, 0.59, 0.54, 0.64)])
    out = check(findings(EMPTY, EMPTY, speed, tie, EMPTY))
    kinds = [f.kind for f in out]
    assert kinds.index("scaling") < kinds.index("winner") and not of(out, "winner")[0].decided
    win = pd.DataFrame([cmp_row("ring_allreduce", "gather_scatter", 1.3, 1.2, 1.4)])
    assert check(findings(EMPTY, EMPTY, speed, win, EMPTY))[0].kind == "winner"


def test_none_beats_one_process_is_one_sentence_with_the_range():
    rows = [speed_row("allreduce", 2, 0.49, 0.45, 0.53), speed_row("ring_allreduce", 2, 0.67, 0.62, 0.72),
            {**speed_row("ddp", 2, 0.655, 0.6, 0.71), "unstable": True}]  # fmt: skip
    (f,) = of(check(findings(EMPTY, EMPTY, pd.DataFrame(rows), EMPTY, EMPTY)), "scaling")
    assert f.text.startswith("At world size 2, none of the 3 strategies beats one process: every speedup's interval lies below 1, from 0.49")
    assert "(allreduce) to 0.67" in f.text and "(ring_allreduce)" in f.text and "(1 of them unstable)." in f.text
    # one interval reaching 1: each strategy stated on its own again
    rows[1] = speed_row("ring_allreduce", 2, 0.95, 0.85, 1.05)
    out = of(check(findings(EMPTY, EMPTY, pd.DataFrame(rows), EMPTY, EMPTY)), "scaling")
    assert len(out) == 3 and not any("none of the" in f.text for f in out)


def test_exposed_communication_as_the_largest_share_is_said_once():
    def cell(exposed, backward):
        return pd.DataFrame([dict(strategy="ring_allreduce", world_size=2, frac_data=0.01, frac_forward=0.1,
                                  frac_backward=backward, frac_exposed_comm=exposed, frac_exposed_comm_ci_low=exposed - 0.02,
                                  frac_exposed_comm_ci_high=exposed + 0.02, frac_exposed_comm_ci_level=0.95,
                                  frac_comm=exposed, frac_optimizer=0.05)])  # fmt: skip

    speed = pd.DataFrame([speed_row("ring_allreduce", 2, 0.67, 0.62, 0.72)])
    (t,) = of(check(findings(EMPTY, cell(0.43, 0.3), speed, EMPTY, EMPTY)), "time")
    assert t.text == ("For ring_allreduce at world size 2, exposed communication takes the largest share of a step: "
                      "43.0 % [41.0, 45.0].")  # fmt: skip
    (t,) = of(check(findings(EMPTY, cell(0.2, 0.5), speed, EMPTY, EMPTY)), "time")
    assert t.text.startswith("For ring_allreduce at world size 2, backward takes the largest share of a step (50.0 %")
    assert "exposed communication takes 20.0 % [18.0, 22.0] of the step." in t.text


def test_column_keys_equal_the_per_value_key():
    """_keys (vectorised, what _match compares) gives _key of every value, column type by column type."""
    columns = [
        pd.Series([1.0, 2.5, np.nan, 16.0, np.inf, -np.inf, -3.0, 1e20, 0.1 + 0.2, -0.0, 128.0, 1e-7]),
        pd.Series([1, 2, 300], dtype="int64"),
        pd.Series(["a", np.nan, 3.0, "auto", 16]),
        pd.Series([True, False]),
        pd.Series([], dtype=float),
        pd.Series(["ddp", np.nan, "single", None]),  # text only (the fast path), missing as "nan"
        pd.Series(["ddp", "allreduce"], dtype="string"),
        pd.Series([np.nan, None], dtype=object),
    ]
    for s in columns:
        assert list(key_texts(s)) == [key_text(v) for v in s], s.tolist()


def test_the_profiler_finding_gives_each_cells_communication_share_and_the_profilers_cost():
    from report_synth import make_profile

    runs = make_runs(strategies=("single", "allreduce", "ddp"), world_sizes=(1, 2), repeats=2, failures=False,
                     others_at_1=False)  # fmt: skip
    runs["profile_overhead"] = np.linspace(-0.01, 0.05, len(runs))
    (found,) = profile_findings(make_profile(runs), runs, ["strategy", "world_size"])
    assert found.kind == "time" and found.anchor == "fig-profile"
    # rank 0: 0.25 + 0.05 of the step communicating, rank 1 10 % more: 31.5 % on average
    assert "31.5 % for allreduce at world size 2" in found.text and "31.5 % for ddp at world size 2" in found.text
    assert found.text.index("allreduce") < found.text.index("single")  # the most communicating first
    assert "0 % for single at world size 1" in found.text
    over = runs["profile_overhead"]
    assert f"median {sig3(100 * over.median())} % over {len(runs)} runs" in found.text
    assert profile_findings(None, runs, ["strategy"]) == [] and profile_findings(pd.DataFrame(), runs, []) == []


# -- memory: what sharding saves and costs ---------------------------------------------------------


def _sharding_tables(**kw):
    from report_synth import make_sharding_runs

    runs = analysis.load_runs_frame(make_sharding_runs(**kw))
    speed = analysis.speedup_table(runs)
    return runs, analysis.cell_stats(runs), speed, analysis.comparisons_table(runs), analysis.fits_table(runs, speed, n_boot=20)


def test_memory_saved_by_sharding_leads_with_the_time_it_costs():
    from report_synth import PARAM_BYTES

    out = check(findings(*_sharding_tables(noise=0.0, precisions=("fp32",), grad_accums=(1, 4))))
    memory = of(out, "memory")
    assert out[: len(memory)] == memory and [f.text.split(" ")[0] for f in memory] == ["zero", "fsdp_grad_op", "fsdp"]
    assert all(f.anchor == "fig-memory_held" for f in memory)
    mib = lambda n: sig3(n / analysis.MIB) + " MiB"  # noqa: E731
    fsdp = memory[-1].text
    assert fsdp.startswith(f"fsdp shards its parameters, gradients and optimizer state: it holds {mib(2 * PARAM_BYTES)} per "
                           f"rank against ddp's {mib(4 * PARAM_BYTES)} (0.500×, {mib(2 * PARAM_BYTES)} less) at every "
                           "setting measured; the time it costs: ")  # fmt: skip
    # fsdp's epoch takes 1.5x ddp's: exactly 0.667x the throughput, an interval that excludes 1
    assert fsdp.endswith("it is slower at every setting measured: throughput 0.667× [0.667, 0.667] ddp's at each.")
    assert "shards its optimizer state: it holds" in memory[0].text and "no detectable difference in throughput" in memory[0].text


def test_memory_claims_no_difference_the_interval_does_not_support():
    out = check(findings(*_sharding_tables(slowdown={"fsdp": 1.0, "fsdp_grad_op": 1.0}, noise=0.2, precisions=("fp32",),
                                           grad_accums=(1,), seed=1)))  # fmt: skip
    for f in of(out, "memory"):
        m = re.search(r"([\d.]+)× \[([\d.]+), ([\d.]+)\] ddp's", f.text)
        lo, hi = float(m.group(2)), float(m.group(3))
        if lo <= 1 <= hi:
            assert "no detectable difference in throughput" in f.text and "slower" not in f.text, f.text
        else:
            assert ("slower" if hi < 1 else "faster") in f.text, f.text
    assert any("no detectable difference in throughput" in f.text for f in of(out, "memory"))
    one = check(findings(*_sharding_tables(repeats=1, precisions=("fp32",), grad_accums=(1,))))
    assert all("no interval, no verdict" in f.text and "slower" not in f.text for f in of(one, "memory"))


def test_no_memory_finding_without_a_sharded_strategy_beside_ddp():
    runs, cells, speed, comparisons, fits = _sharding_tables(precisions=("fp32",), grad_accums=(1,))
    for keep in (["single", "ddp"], ["single", "zero", "fsdp"]):
        r = runs[runs["strategy"].isin(keep)]
        c = cells[cells["strategy"].isin(keep)]
        assert not of(check(findings(r, c, speed, comparisons, fits)), "memory"), keep
    held = [c for c in cells if c.startswith("extra_") and "bytes" in c]
    assert not of(findings(runs, cells.drop(columns=held), speed, comparisons, fits), "memory")


def test_no_winner_while_a_third_strategy_is_undecided_against_the_fastest():
    """Issue 46, point 1: ddp ~100 samples/s (14 runs), zero ~90 (14 runs), local_sgd 3 runs of 40, 200
    and 70: ddp beats the runner-up zero, but ddp/local_sgd is undecided, so ddp is not 'the fastest'."""
    rng = np.random.default_rng(0)
    runs = {"ddp": 100 * np.exp(rng.normal(0, 0.03, 14)), "zero": 90 * np.exp(rng.normal(0, 0.03, 14)),
            "local_sgd": np.array([40.0, 200.0, 70.0])}  # fmt: skip
    rows = []
    for p in (2, 4):
        for a, b in (("ddp", "zero"), ("ddp", "local_sgd"), ("zero", "local_sgd")):
            iv = analysis.welch_log_ratio(runs[a], runs[b])
            rows.append(cmp_row(a, b, iv.estimate, iv.low, iv.high, p=p))
    comparisons = pd.DataFrame(rows)
    assert comparisons.loc[comparisons["strategy_b"] == "local_sgd", "verdict"].eq(analysis.Verdict.NO_DIFFERENCE).all()
    out = of(check(findings(EMPTY, EMPTY, EMPTY, comparisons, EMPTY)), "winner")
    assert not any("is the fastest" in w.text or "the runner-up" in w.text for w in out)
    ddp = [w for w in out if w.text.startswith("ddp has the highest throughput")]
    assert len(ddp) == 2 and all("faster than zero" in w.text and "no winner" in w.text for w in ddp)
    assert all("local_sgd" in w.text and "holds 1" in w.text and not w.decided for w in ddp)


# -- one voice: where a sequential design ran, a finding's own pairs read its verdicts ----------


def test_where_a_design_ran_the_memory_and_batch_findings_read_its_verdict_or_say_descriptive():
    """issue 55: the memory finding (a sharded strategy against ddp) and the batch finding (the
    largest batch against the smallest) pair cells themselves; a pair the design asked reads its
    verdict and interval, the others are labelled descriptive."""
    asked = analysis.Comparison("", "", 1.02, 0.95, 1.09, 0.95, analysis.Verdict.EQUIVALENT, analysis.Source.DESIGN, 0.15)
    tables = _sharding_tables(noise=0.0, precisions=("fp32",), grad_accums=(1,))
    fsdp_only = Answers(lambda a, b: asked if a["strategy"] == "fsdp" and b["strategy"] == "ddp" else None)
    memory = {f.text.split(" ")[0]: f.text for f in of(check(findings(*tables, design=fsdp_only)), "memory")}
    assert "its throughput is equivalent within the design's margin (1.02× [0.950, 1.09] ddp's)" in memory["fsdp"]
    assert "(descriptive)" in memory["zero"] or "descriptive)" in memory["zero"], memory["zero"]
    plain = {f.text.split(" ")[0]: f.text for f in of(check(findings(*tables)), "memory")}
    assert "descriptive" not in plain["zero"] and "design" not in plain["fsdp"]

    runs = make_runs(strategies=("ddp",), world_sizes=(2,), batch_sizes=(32, 128), repeats=3, failures=False)
    cells = analysis.cell_stats(runs)
    big = Answers(lambda a, b: dataclasses.replace(asked, verdict=analysis.Verdict.FASTER, ratio=1.4, low=1.3, high=1.5)
                  if str(a["batch_size"]) == "128" and str(b["batch_size"]) == "32" else None)  # fmt: skip
    (f,) = of(check(findings(runs, cells, EMPTY, EMPTY, EMPTY, design=big)), "batch")
    assert "is 1.40× [1.30, 1.50] that at batch 32: higher (the design's)." in f.text, f.text
    (f,) = of(check(findings(runs, cells, EMPTY, EMPTY, EMPTY, design=Answers(lambda a, b: None))), "batch")
    assert f.text.endswith("(descriptive)."), f.text
