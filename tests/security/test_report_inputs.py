"""A results folder is untrusted input (issue 22): people exchange them. Nothing planted in it may
run code, redirect writes or reads, or break the report.

- a latexmkrc in the report folder is never executed (latexmk runs -norc in a private folder);
- outputs are replaced atomically, so a symlink planted at an output's name is swapped for the
  new file and its target is left untouched; a planted symlink in place of figures/ is refused;
- a crafted summary.json cannot rename its run (run_dir, repeat, ...) to make aggregate read
  another folder's step files, and step files that link out of their run folder are skipped;
- odd strings (TeX and mathtext specials, brackets, unicode, markup, very long names) render in
  the HTML, the LaTeX/PDF and the figures.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess

import pytest
import yaml
from report_synth import make_runs, make_steps

from ddpbench.results import aggregate
from ddpbench.report import build as report
from ddpbench.report import render
from ddpbench.core.params import CellParams

LATEXMK = shutil.which("latexmk")
needs_latexmk = pytest.mark.skipif(not LATEXMK, reason="latexmk is not installed (Debian: texlive-latex-recommended latexmk)")


def _small_runs(**kw):
    return make_runs(world_sizes=(1, 2), strategies=("single", "ddp"), repeats=1, failures=False, **kw)


def _argv(tmp, runs, steps=None, pdf=False):
    runs.to_csv(tmp / "runs.csv", index=False)
    argv = ["--runs", str(tmp / "runs.csv"), "--out", str(tmp / "out"), "--bootstrap", "200"]
    if steps is not None:
        steps.to_csv(tmp / "steps.csv", index=False)
        argv += ["--steps", str(tmp / "steps.csv")]
    return argv + ([] if pdf else ["--no-pdf"])


# -- 1. no code runs from the results folder -------------------------------------------------


@needs_latexmk
def test_planted_latexmkrc_does_not_run(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    sentinels = [tmp_path / f"SENTINEL{i}" for i in range(3)]
    (out / "latexmkrc").write_text(f'system("touch {sentinels[0]}");\n$pdflatex = "touch {sentinels[1]}; pdflatex %O %S";\n')
    (out / ".latexmkrc").write_text(f'system("touch {sentinels[2]}");\n')
    assert report.main(_argv(tmp_path, _small_runs(), pdf=True)) == 0
    assert not [s.name for s in sentinels if s.exists()], "a latexmkrc from the results folder was executed"
    assert (out / "report.pdf").read_bytes()[:5] == b"%PDF-"
    # LaTeX's by-products stay in the private build folder.
    assert not [p.name for p in out.iterdir() if p.suffix in (".aux", ".fls", ".fdb_latexmk", ".out", ".toc")]


@needs_latexmk
def test_failed_pdf_leaves_its_log_in_the_out_folder_and_runs_no_shell(tmp_path):
    tex = tmp_path / "out" / "report.tex"
    tex.parent.mkdir()
    tex.write_text("\\documentclass{article}\\begin{document}\\undefinedmacro\\end{document}\n")
    made, msg = render.compile_pdf(tex, timeout=120)
    assert not made and str(tex.with_suffix(".log")) in msg
    log = tex.with_suffix(".log").read_text(errors="replace")
    assert "undefinedmacro" in log
    assert "write18 enabled" not in log  # -no-shell-escape: not even the restricted list of commands
    assert sorted(p.name for p in tex.parent.iterdir()) == ["report.log", "report.tex"]


# -- 2. outputs are not written through planted symlinks -------------------------------------


def test_symlinked_outputs_are_replaced_not_written_through(tmp_path):
    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    victims = {}
    for name in ("report.tex", "report.html", "cells.csv", "fits.csv", "figures/speedup.svg", "figures/speedup.pdf"):
        victim = tmp_path / f"victim-{name.replace('/', '-')}"
        victim.write_text("precious\n")
        (out / name).symlink_to(victim)
        victims[name] = victim
    assert report.main(_argv(tmp_path, _small_runs(), pdf=True)) == 0  # the figures' PDFs drawn too
    for name, victim in victims.items():
        assert victim.read_text() == "precious\n", f"{name} was written through a symlink"
        assert not (out / name).is_symlink() and (out / name).stat().st_size > 0, name
    assert "<html" in (out / "report.html").read_text()
    assert not [p.name for p in out.rglob(".*.tmp")], "temporary files left behind"


def test_symlinked_figures_folder_is_refused(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "figures").symlink_to(elsewhere, target_is_directory=True)
    assert report.main(_argv(tmp_path, _small_runs())) != 0
    assert list(elsewhere.iterdir()) == []
    assert "figures" in capsys.readouterr().err


def test_aggregate_outputs_replace_planted_symlinks(tmp_path):
    run = _run(tmp_path / "runs", "a", marker=1.0)
    victim = tmp_path / "victim.csv"
    victim.write_text("precious\n")
    (tmp_path / "runs.csv").symlink_to(victim)
    (tmp_path / "steps.csv").symlink_to(victim)
    aggregate.aggregate([run], tmp_path / "runs.csv", tmp_path / "steps.csv")
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "runs.csv").is_symlink() and len(_read(tmp_path / "steps.csv")) == 2


@pytest.mark.parametrize("plant", ["symlink", "hardlink", "fifo"])
@pytest.mark.parametrize("mode", ["w", "a"])
def test_a_log_opened_over_a_planted_link_writes_a_file_of_its_own(tmp_path, plant, mode):
    """train.log (the launcher), invocations.log (the workflow's onstart), the progress log: a
    link planted at the log's name is removed, never written through."""
    from ddpbench.core import safe_io

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    log = tmp_path / "run" / "train.log"
    log.parent.mkdir()
    if plant == "symlink":
        log.symlink_to(victim)
    elif plant == "hardlink":
        os.link(victim, log)
    else:
        os.mkfifo(log)  # would block a reader or writer forever
    with safe_io.open_log(log, mode) as f:
        f.write("ours\n")
    assert victim.read_text() == "precious\n"
    assert not log.is_symlink() and log.is_file() and log.read_text() == "ours\n"
    with safe_io.open_log(log, "a") as f:  # a log of its own is appended to as usual
        f.write("more\n")
    assert log.read_text() == "ours\nmore\n"


def test_the_launcher_does_not_write_through_a_planted_train_log(tmp_path):
    """A run folder without summary.json is rerun; its train.log linked to another file must not
    get torchrun's output."""
    import sys

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / "train.log").symlink_to(victim)
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", "1", "--out", str(out),
           "--strategy", "single", "--dataset-size", "64", "--test-size", "16", "--max-steps", "2",
           "--warmup-steps", "0", "--min-timed-steps", "1", "--min-timed-s", "0"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert victim.read_text() == "precious\n"
    assert not (out / "train.log").is_symlink() and (out / "train.log").stat().st_size > 0
    assert json.loads((out / "summary.json").read_text())["status"] == "ok"


def test_the_image_digest_cache_is_written_through_no_guessable_name(tmp_path):
    """The digest cache beside an image was written through NAME.sha256.<pid>.tmp: a link
    planted at that name in a shared image folder was written through."""
    from ddpbench.core import container

    image = tmp_path / "ddpbench-cpu.sif"
    image.write_bytes(b"an image")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / f"ddpbench-cpu.sif.sha256.{os.getpid()}.tmp").symlink_to(victim)
    digest = container.sif_sha256(image)
    assert digest and digest.startswith("sha256:")
    assert victim.read_text() == "precious\n"
    assert (tmp_path / "ddpbench-cpu.sif.sha256").read_text().split()[-1] == digest


def _archived_study(tmp_path, run_dir_of, config=None):
    """A results folder with one run, its tables listing that run as `run_dir_of(real run folder)`,
    packed as an archive (the manifest covers the crafted table: its author wrote both); `config`:
    the study's recorded config.yaml."""
    from ddpbench.results import archive

    results = tmp_path / "study" / "results"
    summary = _run(results / "runs", "a", marker=1.0, extra_summary={"env": {"host": "archived-host"}})
    if config is not None:
        (results / "config.yaml").write_text(yaml.safe_dump(config))
    (results / "aggregate").mkdir()
    aggregate.aggregate([summary], results / "aggregate" / "runs.csv", results / "aggregate" / "steps.csv")
    rows = _read(results / "aggregate" / "runs.csv")
    rows[0]["run_dir"] = run_dir_of(summary.parent)
    with open(results / "aggregate" / "runs.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    archive.write_archive(results, tmp_path / "study.tar.gz")
    return tmp_path / "study.tar.gz", summary.parent


def test_report_from_an_archive_never_reads_a_run_folder_outside_it(tmp_path):
    """A run_dir in the archive's runs.csv pointing at another folder on this machine put that
    folder's host name in the report: now the rebuild refuses, naming the run."""
    elsewhere = _run(tmp_path / "private" / "runs", "b", marker=9.0, extra_summary={"env": {"host": "private-host"}})
    for i, run_dir in enumerate([str(elsewhere.parent), "/etc", "results/runs/../../private/runs"]):
        archived, _ = _archived_study(tmp_path / str(i), lambda real: run_dir)
        with pytest.raises(SystemExit, match="not in it"):
            report.main(["--from", str(archived), "--out", str(tmp_path / f"out{i}"), "--no-pdf"])
        assert not (tmp_path / f"out{i}" / "aggregate" / "runs.csv").exists()


def test_report_from_an_archive_of_an_absolute_results_folder_reads_the_archived_runs(tmp_path):
    """A genuine study whose results: was an absolute path lists absolute run folders; where the
    same path exists here (another study, another host), the archive's runs are the ones read."""
    archived, real = _archived_study(tmp_path, lambda real: str(real.resolve()))
    (real / "summary.json").write_text((real / "summary.json").read_text().replace("archived-host", "local-host"))
    assert report.main(["--from", str(archived), "--out", str(tmp_path / "out"), "--no-pdf"]) == 0
    (row,) = _read(tmp_path / "out" / "aggregate" / "runs.csv")
    assert row["env_host"] == "archived-host"


def test_report_from_an_archive_flags_unstable_cells_at_the_workflows_threshold(tmp_path, monkeypatch):
    """report --from took timing.max_rel_ci (0.05) where the workflow's report had taken a
    sequential design's precision (0.10): a rebuilt report flagged other cells (issue 56). Both now
    read core.study_config.stability_threshold, whose three cases are checked first."""
    from ddpbench.core import study_config

    design = {"repeats": "until_decided", "until_decided": {"precision": 0.10}, "timing": {"max_rel_ci": 0.05}}
    assert study_config.stability_threshold(design) == 0.10
    assert study_config.stability_threshold({**design, "until_decided": {"precision": 0}}) == 0.05  # not asked
    assert study_config.stability_threshold({**design, "repeats": 3}) == 0.05  # fixed repeats
    archived, _ = _archived_study(tmp_path, lambda real: str(real), config=design)
    used = []
    monkeypatch.setattr(report, "build_from_args", lambda args: used.append(args.max_rel_ci) or 0)
    assert report.main(["--from", str(archived), "--out", str(tmp_path / "out"), "--no-pdf"]) == 0
    assert used == [0.10]


def test_an_archive_bomb_is_refused_before_anything_is_unpacked(tmp_path, monkeypatch):
    """A 251-byte archive holding a 1 TiB sparse member hashed for hours; a 1 MB gzip put 988 MB
    on disk before any check. A sparse member is refused, and so is an archive whose members
    add up to more than the limit (here 0.03 GiB) or the free space, before anything is written."""
    from ddpbench.results import archive

    tar = shutil.which("tar")
    sparse = tmp_path / "sparse"
    sparse.mkdir()
    with open(sparse / "summary.json", "wb") as f:
        f.truncate(64 * 2**20)  # 64 MiB of holes
    into = tmp_path / "into"
    into.mkdir()
    if tar:
        subprocess.run([tar, "-cSzf", str(tmp_path / "sparse.tar.gz"), "-C", str(sparse), "summary.json"], check=True)
        with pytest.raises(SystemExit, match="sparse file"):
            archive.extract(tmp_path / "sparse.tar.gz", into)
    import tarfile

    with tarfile.open(tmp_path / "big.tar.gz", "w:gz") as t:
        t.add(sparse / "summary.json", arcname="results/runs/summary.json")  # 64 MiB of zeros, 64 kB packed
    monkeypatch.setenv(archive.MAX_UNPACKED_ENV, "0.03")
    with pytest.raises(SystemExit, match="would unpack to at least 0.06 GiB, more than the 0.03 GiB allowed"):
        archive.extract(tmp_path / "big.tar.gz", into)
    assert not any(into.iterdir())


# -- 3. a crafted summary.json cannot redirect reads -----------------------------------------


def _run(root, name, marker, extra_summary=None):
    run_dir = root / f"strategy~ddp/world_size~1/name~{name}/repeat~0"
    run_dir.mkdir(parents=True)
    summary = {"schema": 1, "status": "ok", "reason": "", "params": CellParams(strategy="ddp").as_dict(),
               "world_size": 1, "nodes": 1, "samples_per_s": 1.0, **(extra_summary or {})}  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary))
    with open(run_dir / "steps_rank0.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=aggregate.STEP_COLUMNS)
        writer.writeheader()
        for step in range(2):
            writer.writerow({c: 0 for c in aggregate.STEP_COLUMNS} | {"step": step, "loss": marker})
    return run_dir / "summary.json"


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_crafted_summary_cannot_rename_its_run(tmp_path):
    secret = _run(tmp_path / "private", "secret", marker=666.0).parent
    identity = {name: "forged" for name in aggregate.LEADING_RUN_COLUMNS}
    crafted = _run(tmp_path / "runs", "crafted", marker=1.0,
                   extra_summary={**identity, "run_dir": str(secret), "repeat": 99, "world_size": 1, "nodes": 1,
                                  "status": "ok", "reason": "", "extra": {"run_dir": "x"}, "env": {"repeat": "x"}})  # fmt: skip
    aggregate.aggregate([crafted], tmp_path / "runs.csv", tmp_path / "steps.csv")
    (row,) = _read(tmp_path / "runs.csv")
    assert row["run_dir"] == str(crafted.parent) and row["repeat"] == "0"
    assert row["strategy"] == "ddp" and "forged" not in row.values()
    steps = _read(tmp_path / "steps.csv")
    assert {s["loss"] for s in steps} == {"1.0"}, "step files read from a folder the summary named"
    assert {s["run_dir"] for s in steps} == {str(crafted.parent)} and {s["repeat"] for s in steps} == {"0"}


def test_step_files_linking_out_of_the_run_folder_are_skipped(tmp_path, capsys):
    secret = _run(tmp_path / "private", "secret", marker=666.0).parent / "steps_rank0.csv"
    summary = _run(tmp_path / "runs", "linked", marker=1.0)
    (summary.parent / "steps_rank1.csv").symlink_to(secret)
    inside = summary.parent / "copy.csv"
    shutil.copy(summary.parent / "steps_rank0.csv", inside)
    (summary.parent / "steps_rank2.csv").symlink_to("copy.csv")  # a link inside the folder is fine
    aggregate.aggregate([summary], tmp_path / "runs.csv", tmp_path / "steps.csv")
    losses = [s["loss"] for s in _read(tmp_path / "steps.csv")]
    assert "666.0" not in losses and losses == ["1.0"] * 4
    assert "steps_rank1.csv" in capsys.readouterr().err


def test_summary_linking_out_of_its_run_folder_is_a_failed_row(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"status": "ok", "token": "s3cret"}))
    run_dir = tmp_path / "runs/strategy~ddp/repeat~0"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").symlink_to(secret)
    aggregate.aggregate([run_dir / "summary.json"], tmp_path / "runs.csv", tmp_path / "steps.csv")
    (row,) = _read(tmp_path / "runs.csv")
    assert row["status"] == "failed" and "s3cret" not in row.values() and "summary.json" in row["reason"]


def test_special_step_files_are_skipped(tmp_path):
    from ddpbench.core import safe_io

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "steps_rank0.csv").write_text("step\n0\n")
    os.mkfifo(run_dir / "steps_rank1.csv")  # opening it would block aggregate forever
    (run_dir / "steps_rank2.csv").mkdir()
    assert [p.name for p in safe_io.run_files(run_dir, "steps_rank*.csv")] == ["steps_rank0.csv"]


def test_malformed_params_do_not_crash_aggregate(tmp_path):
    run_dir = tmp_path / "strategy~ddp/repeat~0"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({"status": "ok", "params": "not a dict", "world_size": 1}))
    aggregate.aggregate([run_dir / "summary.json"], tmp_path / "runs.csv", tmp_path / "steps.csv")
    (row,) = _read(tmp_path / "runs.csv")
    assert row["strategy"] == "ddp"


# -- 4. odd strings render -------------------------------------------------------------------

@needs_latexmk
def test_cells_starting_with_a_bracket_do_not_break_the_pdf(tmp_path):
    runs = _small_runs().replace({"strategy": {"ddp": "[rank 1] ddp"}})  # first cell of a table row
    runs["env_[key]"] = "[value]"  # first cell after \toprule
    runs.loc[len(runs)] = dict(runs.iloc[-1], status="failed", reason="[rank 1] RuntimeError: NCCL error", repeat=1)
    assert report.main(_argv(tmp_path, runs, pdf=True)) == 0
    assert (tmp_path / "out" / "report.pdf").exists(), "no PDF"  # was: '! Missing number' (\\[rank 1] ...)


def test_mathtext_in_a_strategy_name_is_drawn_literally(tmp_path):
    runs = _small_runs().replace({"strategy": {"ddp": "$a_b_c$ \\frac{"}})
    assert report.main(_argv(tmp_path, runs, make_steps(runs, n_steps=4))) == 0  # was: ValueError from mathtext
    assert "strategy=$a_b_c$ \\frac{" in (tmp_path / "out" / "figures" / "speedup.svg").read_text()


ODD = ["$x^2$", "$a_b_c$", "[a]*", "back\\slash 50% a&b #1", "a_b{}~^", "*star", "a b", "a-b", "ünïcødé «»ðÞ 日本 \u202e",
       "<script>alert(1)</script>", "_hidden", "ctl\x01\x1b\x7f\x85", "L" * 300]  # fmt: skip


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("odd")
    runs = make_runs(world_sizes=(1, 2), strategies=("single", *ODD), repeats=1, failures=True)
    runs.loc[runs["status"] != "ok", "reason"] = "[rank 1] RuntimeError: $x$ & 100% {bad} \\ ~ # _ ^"
    runs["env_host"] = "[host] $h$ \\ % & # _ { } ~ ^"
    runs["model"] = "[m]"
    runs["env_[weird] $key$"] = "[v]"
    steps = make_steps(runs[runs["status"] == "ok"], n_steps=4)
    code = report.main(_argv(tmp, runs, steps, pdf=bool(LATEXMK)))
    return tmp / "out", code


def test_odd_strings_report_succeeds(odd):
    out, code = odd
    assert code == 0
    for name in ("report.html", "report.tex", "cells.csv"):
        assert (out / name).stat().st_size > 0


@needs_latexmk
def test_odd_strings_pdf_compiles(odd):
    out, code = odd
    assert code == 0 and (out / "report.pdf").read_bytes()[:5] == b"%PDF-", "no PDF"
    if shutil.which("pdftotext"):
        text = subprocess.run(["pdftotext", str(out / "report.pdf"), "-"], capture_output=True, text=True).stdout
        for s in ("[rank 1] RuntimeError", "$x^2$", "[a]*", "a&b", "50%", "#1", "*star"):
            assert s in text, s


def test_odd_strings_html_is_escaped(odd):
    out, _ = odd
    html = (out / "report.html").read_text()
    # The report's own inline script is the only one; the planted one is text.
    assert html.count("<script") == 1 and "alert(1)" not in html.split("<script>")[1]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "[rank 1] RuntimeError: $x$ &amp; 100% {bad}" in html
    assert "$x^2$" in html and "a&amp;b" in html and "\x1b" not in html.split("<svg")[0]


def test_odd_strings_figures_are_drawn_as_text(odd):
    out, _ = odd
    figures = out / "figures"
    svgs = {p.stem for p in figures.glob("*.svg")}
    assert svgs == {p.stem for p in figures.glob("*.pdf")}
    assert {"speedup", "efficiency", "phases"} <= svgs
    # One loss figure per strategy: names that differ only in special characters never share a file.
    assert len([s for s in svgs if s.startswith("loss__")]) == 1 + len(ODD)
    assert all(len(p.name) < 120 and p.name.isascii() for p in figures.iterdir())
    speedup = (figures / "speedup.svg").read_text()
    assert "strategy=$x^2$" in speedup  # drawn literally, not parsed as mathtext
    assert "strategy=_hidden" in speedup  # not dropped from the legend as a '_'-label
    assert "\x1b" not in speedup and "&lt;script&gt;" in speedup


def test_report_from_an_archive_stopped_by_sigterm_leaves_no_unpacked_folder(tmp_path):
    """Issue 54, deliver 3: a SIGTERM while the archive is unpacked or checked (here: extract
    sleeps) removes the private temporary folder on the way out."""
    import signal
    import sys
    import time

    (tmp_path / "study.tar.gz").write_bytes(b"")
    temp = tmp_path / "temp"
    temp.mkdir()
    code = ("import time; from ddpbench.results import archive\n"
            "def slow(source, into):\n    print(into, flush=True)\n    time.sleep(60)\n"
            "archive.extract = slow\n"
            "from ddpbench.report import build\n"
            f"build.main(['--from', {str(tmp_path / 'study.tar.gz')!r}, '--out', {str(tmp_path / 'out')!r}])\n")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "TMPDIR": str(temp)}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    unpacked = proc.stdout.readline().strip()
    assert unpacked.startswith(str(temp)) and os.path.isdir(unpacked), proc.stderr.read()
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert not os.path.exists(unpacked) and list(temp.iterdir()) == []
