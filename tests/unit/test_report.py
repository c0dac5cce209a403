"""The report renders (HTML + LaTeX source) for full grids, failed cells, one world size, one repeat."""

import re

import numpy as np
import pandas as pd
import pytest
from report_synth import make_comm, make_profile, make_runs, make_steps

from ddpbench.report import build as report
from ddpbench.report import render, tables


def _write(tmp, runs, steps=None, comm=None):
    paths = {"runs": tmp / "runs.csv"}
    runs.to_csv(paths["runs"], index=False)
    argv = ["--runs", str(paths["runs"]), "--out", str(tmp / "out"), "--no-pdf", "--bootstrap", "500"]
    for name, df in (("steps", steps), ("comm", comm)):
        if df is not None:
            paths[name] = tmp / f"{name}.csv"
            df.to_csv(paths[name], index=False)
            argv += [f"--{name}", str(paths[name])]
    return argv


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """Three strategies, p = 1..8, three repeats, failed/timeout/skipped cells, steps and a comm sweep."""
    tmp = tmp_path_factory.mktemp("full")
    runs = make_runs()
    argv = _write(tmp, runs, make_steps(runs[runs["repeat"] == 0], n_steps=8), make_comm())
    assert report.main(argv) == 0
    return tmp / "out"


def test_outputs_exist(full, capsys):
    for name in ("cells.csv", "speedup.csv", "fits.csv", "report.html", "report.tex"):
        assert (full / name).stat().st_size > 0, name
    fits = pd.read_csv(full / "fits.csv")
    assert {"group", "law", "parameter", "estimate", "ci_low", "ci_high", "n_points", "r2"} <= set(fits.columns)


def test_figures_named_stably_and_without_pdf_only_as_svg(full):
    svgs = {p.stem for p in (full / "figures").glob("*.svg")}
    assert not list((full / "figures").glob("*.pdf"))  # --no-pdf: LaTeX's figures are not drawn either
    assert {"speedup", "efficiency", "karp_flatt", "phases", "rank_skew", "comm_sweep"} <= svgs
    assert {"loss__ddp", "step_time__allreduce"} <= svgs
    # One batch size and one dataset size in this grid: those figures are left out, not drawn empty.
    assert not {"throughput_vs_batch", "memory_vs_batch", "dataset_size"} & svgs


def test_html_is_self_contained(full):
    html = (full / "report.html").read_text()
    n_svg = len(list((full / "figures").glob("*.svg")))
    assert html.count("<svg") == n_svg
    assert "<script src" not in html and 'rel="stylesheet"' not in html  # the one script is inline
    assert html.count("<script>") == 1
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing fetched from the network
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), "inline SVG ids must not collide"


def test_html_lists_failed_cells_with_reasons_and_labels_predictions(full):
    html = (full / "report.html").read_text()
    assert "RuntimeError: Connection closed by peer" not in html  # only the last line of a traceback tail
    assert "&lt;tail&gt;" in html
    for reason in ("exceeded timeout_s=600", "batch_size auto found no batch"):
        assert reason in html
    assert "PREDICTION" in html and "prediction" in html
    assert "warm-up" in html and "bootstrap" in html and "500 resamples" in html


def test_tex_is_escaped_and_uses_booktabs_and_pdf_figures(full):
    tex = (full / "report.tex").read_text()
    assert r"\usepackage{booktabs}" in tex and r"\toprule" in tex and r"\midrule" in tex
    assert r"batch\_size" in tex and "timeout\\_s=600" in tex
    figures = re.findall(r"\\includegraphics\[[^]]*\]\{([^}]+)\}", tex)
    svgs = {str(p.relative_to(full).with_suffix(".pdf")) for p in (full / "figures").glob("*.svg")}
    assert figures and set(figures) == svgs  # each figure's PDF beside its SVG, when drawn ...
    guarded = re.findall(r"\\IfFileExists\{([^}]+)\}\{\\includegraphics", tex)
    assert guarded == figures and tex.count("built with") == len(figures)  # ... and said so when not
    body = tex.split(r"\begin{document}")[1]
    # Outside commands, no raw special characters survive escaping.
    stripped = re.sub(r"\\[a-zA-Z]+(\[[^]]*\])?(\{[^}]*\})*|\\[&%$#_{}~^]|\$[^$]*\$", "", body)
    assert not re.search(r"(?<!\\)[%#]", stripped)


def test_tex_escape():
    assert render.tex_escape("a_b & 50% {x} $y #1 ~ ^ \\") == (
        r"a\_b \& 50\% \{x\} \$y \#1 \~{} \^{} $\backslash$"
    )
    assert render.tex_escape("α × 2–3 − 1") == r"$\alpha$ $\times$ 2--3 - 1"
    assert render.tex_escape("auto → 256") == r"auto $\rightarrow$ 256"  # the study tables' arrows
    assert render.tex_escape(render.TexRaw("figures/a_b.pdf")) == "figures/a_b.pdf"
    # Brackets and stars braced (never an optional argument), control characters dropped, the rest of
    # Unicode in ASCII where it decomposes, else '?'.
    assert render.tex_escape("[a] *b") == "{[}a{]} {*}b"
    assert render.tex_escape("«x» ő 日 \x1b＄") == r"$\ll$x$\gg$ o ? \$"
    assert render.tex_cell("x" * 45 + " y", limit=30) == "x" * 20 + r"\allowbreak{}" + "x" * 7 + "..."


def test_report_single_world_size(tmp_path):
    runs = make_runs(world_sizes=(4,), strategies=("ddp",), failures=False)
    assert report.main(_write(tmp_path, runs)) == 0
    out = tmp_path / "out"
    svgs = {p.stem for p in (out / "figures").glob("*.svg")}
    assert "speedup" not in svgs and "efficiency" not in svgs  # nothing to scale against
    assert pd.read_csv(out / "speedup.csv").empty  # header only
    html = (out / "report.html").read_text()
    assert "no speedup" in html


def test_report_single_world_size_with_baseline_says_too_few_points(tmp_path):
    runs = make_runs(world_sizes=(1, 2), strategies=("single", "ddp"), failures=False)
    assert report.main(_write(tmp_path, runs)) == 0
    fits = pd.read_csv(tmp_path / "out" / "fits.csv")
    amdahl = fits[fits["law"] == "amdahl"]
    assert (amdahl["kind"] == "too few points").all() and amdahl["estimate"].isna().all()
    html = (tmp_path / "out" / "report.html").read_text()
    assert "too few points" in html
    # Nothing was extrapolated, so the report does not explain prediction rows it lacks.
    assert "prediction" not in set(fits["kind"]) and "PREDICTION" not in html
    assert "PREDICTION" not in (tmp_path / "out" / "report.tex").read_text()


def test_report_single_repeat_has_no_intervals(tmp_path):
    runs = make_runs(repeats=1, world_sizes=(1, 2, 4), strategies=("single", "ddp"))
    assert report.main(_write(tmp_path, runs)) == 0
    out = tmp_path / "out"
    cells = pd.read_csv(out / "cells.csv")
    assert cells.filter(like="_ci_").isna().all().all()
    speed = pd.read_csv(out / "speedup.csv")
    assert speed[["speedup_ci_low", "speedup_ci_high"]].isna().all().all()
    assert np.isfinite(speed["speedup"]).all()
    html = (out / "report.html").read_text()
    table = html.split('id="cells"')[1].split("<tbody>")[1].split("</table>")[0]
    assert "[" not in table  # medians only, no made-up interval


def test_a_diagnosed_failure_shows_its_kind_and_cause_not_the_lost_peer(tmp_path):
    runs = make_runs(repeats=1, world_sizes=(1, 2), strategies=("single", "ddp"), failures=False)
    bad = runs["strategy"] == "ddp"
    runs.loc[bad, "status"] = "failed"
    runs.loc[bad, "reason"] = "rank 1 killed by SIGKILL at step 212 (backward)\nthen: rank 0 ...\nConnection closed by peer"
    runs.loc[bad, "failure_kind"] = "signal"
    runs.loc[bad, "failure_reason"] = "rank 1 killed by SIGKILL at step 212 (backward)"
    runs.loc[bad, "epoch_time_s"] = np.nan
    assert report.main(_write(tmp_path, runs)) == 0
    html = (tmp_path / "out" / "report.html").read_text()
    problems = _table_rows(html, "problems-table")
    assert problems and all("signal" in r and "killed by SIGKILL at step 212" in r for r in problems)
    assert not any("Connection closed" in r for r in problems)
    findings = html.split('<section id="findings">')[1].split("</section>")[0]
    assert "killed by SIGKILL at step 212" in findings


def test_no_pdf_says_so_plainly(full):
    assert "No PDF was made" in (full / "report.html").read_text()


def test_prints_html_path_last(tmp_path, capsys):
    runs = make_runs(world_sizes=(1, 2), strategies=("single", "ddp"), repeats=1, failures=False)
    report.main(_write(tmp_path, runs))
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(tmp_path / "out" / "report.html")


def test_report_with_no_successful_run(tmp_path):
    runs = make_runs(repeats=1, world_sizes=(1, 2), strategies=("single", "ddp"), failures=False)
    runs["status"], runs["reason"] = "failed", "RuntimeError: gloo connect timed out"
    runs["epoch_time_s"] = np.nan
    assert report.main(_write(tmp_path, runs)) == 0
    html = (tmp_path / "out" / "report.html").read_text()
    problems = _table_rows(html, "problems-table")
    assert len(problems) == len(runs) and all("gloo connect timed out" in r for r in problems)
    findings = html.split('<section id="findings">')[1].split("</section>")[0]
    assert "failed" in findings and "gloo connect timed out" in findings  # a warning, first thing on the page
    assert "<svg" not in html and "No figure" in html


# -- honest intervals, stability flags, comparisons ------------------------------------------


def _quiet_runs(**kw):
    return make_runs(world_sizes=(1, 2), strategies=("single", "ddp", "allreduce"), repeats=5, noise=0.003,
                     failures=False, **kw)  # fmt: skip


def _table_rows(html: str, table_id: str) -> list[str]:
    body = html.split(f'id="{table_id}"')[1].split("<tbody>")[1].split("</tbody>")[0]
    return re.findall(r"<tr[^>]*>.*?</tr>", body, re.S)


def test_comparisons_csv_and_table_put_differences_first(tmp_path):
    runs = _quiet_runs()
    fast = runs["strategy"] == "ddp"
    runs.loc[fast, "samples_per_s"] *= 1.5
    runs.loc[fast, "epoch_time_s"] /= 1.5
    assert report.main(_write(tmp_path, runs)) == 0
    cmp = pd.read_csv(tmp_path / "out" / "comparisons.csv")
    assert {"strategy_a", "strategy_b", "ratio", "ratio_ci_low", "ratio_ci_high", "verdict", "n_a", "n_b"} <= set(cmp)
    ddp = cmp[(cmp["strategy_a"] == "allreduce") & (cmp["strategy_b"] == "ddp") & (cmp["world_size"] == 2)].iloc[0]
    assert ddp["verdict"] == "slower" and ddp["ratio"] == pytest.approx(1 / 1.5, rel=0.02)
    rows = _table_rows((tmp_path / "out" / "report.html").read_text(), "comparisons")
    verdicts = [("faster" in r) for r in rows]
    assert verdicts[0] and verdicts == sorted(verdicts, reverse=True)  # every difference before any non-difference
    assert "ddp faster" in rows[0]


def test_unstable_busy_and_oversubscribed_are_marked_next_to_the_numbers(tmp_path):
    runs = _quiet_runs()
    noisy = runs.index[(runs["strategy"] == "ddp") & (runs["world_size"] == 2)]
    runs.loc[noisy[0], ["samples_per_s", "epoch_time_s"]] = runs.loc[noisy[0], ["samples_per_s", "epoch_time_s"]] * [0.6, 1 / 0.6]
    runs.loc[noisy[0], "env_other_cpu_frac"] = 0.35
    over = runs.index[(runs["strategy"] == "allreduce") & (runs["world_size"] == 2)]
    runs.loc[over, "extra_oversubscribed"] = True
    assert report.main(_write(tmp_path, runs)) == 0
    out = tmp_path / "out"
    cells = pd.read_csv(out / "cells.csv").set_index(["strategy", "world_size"])
    assert cells.loc[("ddp", 2), "unstable"] and cells.loc[("ddp", 2), "unstable_cause"] == "busy machine"
    assert not cells.loc[("allreduce", 2), "unstable"] and cells.loc[("allreduce", 2), "n_oversubscribed"] == 5
    speed = pd.read_csv(out / "speedup.csv").set_index(["strategy", "world_size"])
    assert speed.loc[("ddp", 2), "unstable"] and not speed.loc[("allreduce", 2), "unstable"]
    html = (out / "report.html").read_text()
    rows = _table_rows(html, "cells")
    ddp2 = next(r for r in rows if "<td>ddp</td><td>2</td>" in r)
    assert 'class="unstable"' in ddp2 and "UNSTABLE: busy machine" in ddp2 and "busy machine: 1/5 runs" in ddp2
    assert "oversubscribed: 5/5 runs" in next(r for r in rows if "<td>allreduce</td><td>2</td>" in r)
    warn = html.split('id="results"')[1].split('id="cells"')[0]
    assert "1 cell(s) are UNSTABLE" in warn and "1 run(s) were measured on a busy machine" in warn
    assert "5 run(s) were oversubscribed" in warn
    assert "UNSTABLE" in (out / "report.tex").read_text()
    # The threshold is the caller's: at 50 % nothing is unstable.
    assert report.main(_write(tmp_path, runs) + ["--max-rel-ci", "0.5"]) == 0
    assert not pd.read_csv(out / "cells.csv")["unstable"].any()


def test_methodology_states_methods_levels_and_tested_coverage(full):
    cells = pd.read_csv(full / "cells.csv")
    assert (cells.loc[cells["n_repeats"] == 3, "frac_comm_ci_level"] == 0.75).all()
    assert (cells.loc[cells["n_repeats"] == 3, "samples_per_s_ci_level"] == 0.95).all()
    html, tex = (full / "report.html").read_text(), (full / "report.tex").read_text()
    sections = (html.split('<h2 id="methodology">')[1].split('<h2 id="results">')[0],
                tex.split(r"\section{Methodology}")[1].split(r"\section{Results per cell}")[0])  # fmt: skip
    for method in sections:
        assert "Student-t" in method and "Welch" in method and "order-statistic" in method
        assert "75% at n = 3" in method.replace("\\%", "%")  # the level that exists for 3 repeats
        assert "95.3% at n = 3" in method.replace("\\%", "%")  # the simulated coverage, quoted
        assert "UNSTABLE" in method and "5%" in method.replace("\\%", "%")
    assert "bootstrap 95%" not in html and "95% CI" not in html
    assert "median interval level" in html


def test_methodology_states_what_a_launch_costs_and_the_figure_shows_it(full, tmp_path):
    runs = make_runs(world_sizes=(1, 2), strategies=("single", "ddp"), repeats=2, failures=False)
    runs["fixed_cost_s"], runs["timed_wall_s"] = 9.0, 1.0
    assert report.main(_write(tmp_path, runs)) == 0
    html = (tmp_path / "out" / "report.html").read_text()
    assert "median launch cost 9 s besides its 1 s of timed steps; the timed steps are 10% of all 6 runs" in html
    assert "timed steps (the measurement)" in (tmp_path / "out" / "figures" / "fixed_cost.svg").read_text()
    # runs from before the timeline: no sentence, no figure
    old = runs.drop(columns=["fixed_cost_s", *[c for c in runs if c.startswith("timeline_")]])
    (tmp_path / "old").mkdir()
    assert report.main(_write(tmp_path / "old", old)) == 0
    assert "Cost of a launch" not in (tmp_path / "old" / "out" / "report.html").read_text()
    assert not (tmp_path / "old" / "out" / "figures" / "fixed_cost.svg").exists()


def test_phase_figure_draws_other_when_runs_carry_it(full, tmp_path):
    assert ">other<" in (full / "figures" / "phases.svg").read_text()
    runs = make_runs(world_sizes=(1, 2), strategies=("single", "ddp"), repeats=1, failures=False)
    assert report.main(_write(tmp_path, runs.drop(columns=["phase_other_s", "frac_other"]))) == 0
    assert ">other<" not in (tmp_path / "out" / "figures" / "phases.svg").read_text()


def test_fits_lead_with_estimates_and_summarise_what_could_not_be_fitted():
    nan = float("nan")
    fits = pd.DataFrame(
        [
            dict(group=f"strategy={s}", law="amdahl", parameter="-", p=nan, kind="too few points", estimate=nan,
                 ci_low=nan, ci_high=nan, n_points=6, r2=nan,
                 note="too few points: 2 distinct worker counts, Amdahl needs 3")
            for s in ("ddp", "allreduce", "ring_allreduce")
        ]
        + [
            dict(group="strategy=ddp", law="karp_flatt", parameter="e", p=2, kind="measured", estimate=2.8,
                 ci_low=2.1, ci_high=3.6, n_points=6, r2=nan, note="experimentally determined serial fraction"),
            dict(group="strategy=allreduce", law="karp_flatt", parameter="e", p=2, kind="measured", estimate=0.2,
                 ci_low=0.1, ci_high=0.3, n_points=6, r2=nan, note=""),
        ]
    )  # fmt: skip
    table = tables.fits_table(fits)
    assert len(table.rows) == 2  # the three unfitted groups are one sentence, not three rows
    assert table.note.count("Amdahl not fitted in 3 groups: too few points: 2 distinct worker counts, Amdahl needs 3") == 1
    assert table.columns[:3] == ["law", "parameter", "estimate [interval]"]
    notes = {r[4]: r[-1] for r in table.rows}
    assert "slower than one process" in notes["strategy=ddp"]
    assert "slower" not in notes["strategy=allreduce"] and "serial fraction" in notes["strategy=allreduce"]


def test_large_grid_report_has_a_group_index_linked_figures_and_paged_tables(tmp_path, monkeypatch):
    """A grid past INLINE_FIGURES figures: groups indexed right after the findings, figures as files under
    figures/ (the folder stays self-contained: nothing from the network), long tables paged."""
    monkeypatch.setattr(report, "INLINE_FIGURES", 5)
    monkeypatch.setattr(report, "PAGE_SIZE", 8)
    runs = make_runs(strategies=("single", "ddp", "allreduce"), world_sizes=(1, 2, 4), batch_sizes=(32, 64),
                     models=("mlp", "simple_cnn"), repeats=2, others_at_1=False, failures=False)  # fmt: skip
    assert report.main(_write(tmp_path, runs)) == 0
    out = tmp_path / "out"
    html = (out / "report.html").read_text()
    assert html.index('id="findings"') < html.index('id="groups"') < html.index('id="speedup"')
    index = html[html.index('id="groups"') : html.index("</nav>", html.index('id="groups"'))]
    assert 'href="#group-1"' in index and "model=mlp" in index and "model=simple_cnn" in index
    assert html.count("<svg") == 0  # linked, not inlined
    srcs = re.findall(r'<img src="([^"]+)"', html)
    assert srcs and all(s.startswith("figures/") and (out / s).is_file() for s in srcs)
    assert len(srcs) == len(list((out / "figures").glob("*.svg")))
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert 'data-page-size="8"' in html and 'class="pager" data-table="cells"' in html


def test_figures_past_inline_bytes_are_linked_however_few(tmp_path, monkeypatch):
    """Few figures but many bytes of them (30 figures were 7 MB at 8,100 runs): linked, not inlined."""
    monkeypatch.setattr(report, "INLINE_BYTES", 1000)
    runs = make_runs(strategies=("single", "ddp"), world_sizes=(1, 2), repeats=2, failures=False)
    assert report.main(_write(tmp_path, runs)) == 0
    html = (tmp_path / "out" / "report.html").read_text()
    srcs = re.findall(r'<img src="([^"]+)"', html)
    assert html.count("<svg") == 0 and 0 < len(srcs) <= report.INLINE_FIGURES


def test_small_grid_has_no_group_index_and_inline_figures(full):
    html = (full / "report.html").read_text()
    assert 'id="groups"' not in html and "figure-group" not in html and "<img" not in html
    assert 'data-page-size="' not in html  # no table of this grid is longer than a page


def test_a_run_that_did_not_learn_is_marked_next_to_its_throughput(tmp_path):
    runs = _quiet_runs()
    diverged = runs.index[(runs["strategy"] == "ddp") & (runs["world_size"] == 2)][:2]
    runs["extra_training_health"] = "ok"
    runs.loc[diverged, "extra_training_health"] = "diverged"
    assert report.main(_write(tmp_path, runs)) == 0
    cells = pd.read_csv(tmp_path / "out" / "cells.csv").set_index(["strategy", "world_size"])
    assert cells.loc[("ddp", 2), "n_diverged"] == 2 and cells.loc[("allreduce", 2), "n_diverged"] == 0
    rows = _table_rows((tmp_path / "out" / "report.html").read_text(), "cells")
    assert "loss diverged or spiked: 2/5 runs" in next(r for r in rows if "<td>ddp</td><td>2</td>" in r)
    assert "loss diverged" not in next(r for r in rows if "<td>allreduce</td><td>2</td>" in r)


def test_the_plan_s_warnings_are_repeated_after_the_findings_and_escaped(tmp_path):
    plan = tmp_path / "plan.txt"
    plan.write_text("ddpbench plan: 1 ddp cell(s) have bucket_mb 25 >= the whole gradient <b>x</b>\n")
    assert report.main(_write(tmp_path, _quiet_runs()) + ["--plan", str(plan)]) == 0
    html = (tmp_path / "out" / "report.html").read_text()
    section = html.split('id="findings"')[1].split("</section>")[0]
    assert 'id="plan"' in section and "1 ddp cell(s) have bucket_mb 25" in section
    assert "&lt;b&gt;x&lt;/b&gt;" in section and "ddpbench plan:" not in section
    assert report.main(_write(tmp_path, _quiet_runs()) + ["--plan", str(tmp_path / "absent.txt")]) == 0
    assert 'id="plan"' not in (tmp_path / "out" / "report.html").read_text()


def test_compare_to_adds_the_comparison_first_and_writes_its_page(tmp_path):
    base = _quiet_runs()
    new = _quiet_runs(seed=7)
    slow = (new["strategy"] == "ddp") & (new["world_size"] == 2)
    new.loc[slow, "samples_per_s"] /= 1.3
    new.loc[slow, ["epoch_time_s", "step_time_median_s"]] *= 1.3
    new["env_torch"] = "9.9.9"
    (tmp_path / "base" / "aggregate").mkdir(parents=True)
    base.to_csv(tmp_path / "base" / "aggregate" / "runs.csv", index=False)
    assert report.main(_write(tmp_path, new) + ["--compare-to", str(tmp_path / "base")]) == 0
    out = tmp_path / "out"
    assert (out / "comparison.html").is_file() and (out / "comparison.csv").is_file()
    html = (out / "report.html").read_text()
    first = html.split('<ul class="findings">')[1].split("</li>")[0]
    assert "Against the baseline" in first and "slower in 1," in first and "torch" in first
    section = html.split('id="comparison-section"')[1].split("</section>")[0]
    assert "9.9.9" in section and 'href="comparison.html"' in section
    changed = _table_rows(html, "comparison-changed")
    assert len(changed) == 1 and "strategy=ddp" in changed[0] and "slower" in changed[0]
    assert "a between-job noise of 3 % per side" in section  # how the intervals were made
    tex = (out / "report.tex").read_text()
    assert "Against the baseline" in tex and "decides it, from the repeats and a between-job noise of 3" in tex
    # no comparison asked: no section, no comparison files written anew
    (out / "comparison.html").unlink()
    assert report.main(_write(tmp_path, new)) == 0
    assert 'id="comparison-section"' not in (out / "report.html").read_text()
    assert not (out / "comparison.html").exists()


def test_a_baseline_that_cannot_be_compared_is_named_and_the_report_still_made(tmp_path):
    (tmp_path / "empty").mkdir()
    assert report.main(_write(tmp_path, _quiet_runs()) + ["--compare-to", str(tmp_path / "empty")]) == 0
    html = (tmp_path / "out" / "report.html").read_text()
    section = html.split('id="comparison-section"')[1].split("</section>")[0]
    assert "not compared" in section and "no aggregate/runs.csv" in section
    assert not (tmp_path / "out" / "comparison.html").exists()


def test_a_profile_beside_the_runs_is_drawn_and_answered(tmp_path):
    """aggregate writes profile.csv beside runs.csv when runs were profiled: the report finds it there
    (no flag), draws the operator breakdown and states the communication share per cell."""
    runs = make_runs(strategies=("single", "allreduce"), world_sizes=(1, 2), repeats=2, failures=False, others_at_1=False)
    argv = _write(tmp_path, runs)
    make_profile(runs).to_csv(tmp_path / "profile.csv", index=False)
    assert report.main(argv) == 0
    out = tmp_path / "out"
    html = (out / "report.html").read_text()
    assert (out / "figures" / "profile.svg").is_file() and 'id="fig-profile"' in html
    assert "Communication operators take 31.5 % for allreduce at world size 2" in html
    assert f"profile = <code>{tmp_path / 'profile.csv'}</code>" in html
    (tmp_path / "profile.csv").unlink()  # no profile, no figure and no finding
    assert report.main(argv) == 0
    html = (out / "report.html").read_text()
    assert 'id="fig-profile"' not in html and "Communication operators" not in html
