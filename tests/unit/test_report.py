"""The report renders (HTML + LaTeX source) for full grids, failed cells, one world size, one repeat."""

import re

import numpy as np
import pandas as pd
import pytest
from report_synth import make_comm, make_runs, make_steps

from ddpbench import report


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


def test_figures_named_stably_in_both_formats(full):
    svgs = {p.stem for p in (full / "figures").glob("*.svg")}
    pdfs = {p.stem for p in (full / "figures").glob("*.pdf")}
    assert svgs == pdfs
    assert {"speedup", "efficiency", "karp_flatt", "phases", "rank_skew", "comm_sweep"} <= svgs
    assert {"loss__ddp", "step_time__allreduce"} <= svgs
    # One batch size and one dataset size in this grid: those figures are left out, not drawn empty.
    assert not {"throughput_vs_batch", "memory_vs_batch", "dataset_size"} & svgs


def test_html_is_self_contained(full):
    html = (full / "report.html").read_text()
    n_svg = len(list((full / "figures").glob("*.svg")))
    assert html.count("<svg") == n_svg
    assert "<script" not in html and 'rel="stylesheet"' not in html
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
    assert figures and all(f.endswith(".pdf") and (full / f).exists() for f in figures)
    body = tex.split(r"\begin{document}")[1]
    # Outside commands, no raw special characters survive escaping.
    stripped = re.sub(r"\\[a-zA-Z]+(\[[^]]*\])?(\{[^}]*\})*|\\[&%$#_{}~^]|\$[^$]*\$", "", body)
    assert not re.search(r"(?<!\\)[%#]", stripped)


def test_tex_escape():
    assert report.tex_escape("a_b & 50% {x} $y #1 ~ ^ \\") == (
        r"a\_b \& 50\% \{x\} \$y \#1 \~{} \^{} $\backslash$"
    )
    assert report.tex_escape("α × 2–3 − 1") == r"$\alpha$ $\times$ 2--3 - 1"
    assert report.tex_escape(report.TexRaw("figures/a_b.pdf")) == "figures/a_b.pdf"


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
    assert "too few points" in (tmp_path / "out" / "report.html").read_text()


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
    assert html.count("gloo connect timed out") == len(runs)
    assert "<svg" not in html and "No figure" in html
