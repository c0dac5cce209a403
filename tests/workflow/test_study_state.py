"""A study knows where its runs came from (issue 23): stale runs are listed from what the
results folder holds, `--rerun` redoes exactly those (`--rerun-failed` the failed ones too),
a setting a strategy does not read reruns nothing of it, and an archive rebuilds the same
tables elsewhere."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pandas as pd
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
RESULTS = "results/tiny"
SNAKEMAKE_ARGS = ["--snakefile", str(ROOT / "Snakefile"), "--configfile", str(TINY), "--cores", "2"]


def run(workdir, *args, module="snakemake", check=True):
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=workdir, capture_output=True, text=True,
                          env=env, timeout=900)  # fmt: skip
    if check and proc.returncode != 0:
        pytest.fail(f"{module} {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def status(workdir, *args):
    return run(workdir, "status", *SNAKEMAKE_ARGS, *args, module="ddpbench")


def summaries(workdir):
    return {p.parent.relative_to(workdir).as_posix(): p for p in (workdir / RESULTS / "runs").rglob("summary.json")}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The tiny grid run to its report, once for this module."""
    workdir = tmp_path_factory.mktemp("study")
    shutil.copy(ROOT / "config.yaml", workdir / "config.yaml")
    run(workdir, *SNAKEMAKE_ARGS)
    return workdir


def test_the_study_records_its_config_and_invocation(study):
    saved = (study / RESULTS / "config.yaml").read_text()
    assert "results: results/tiny" in saved and "repeats:" in saved and "baseline:" in saved
    line = (study / RESULTS / "invocations.log").read_text().splitlines()[-1]
    stamp, fingerprint, command = line.split("\t")
    assert stamp.endswith("Z") and len(fingerprint) == 16 and "snakemake" in command


def test_status_lists_stale_runs_and_rerun_redoes_exactly_those(study):
    out = status(study).stdout
    assert "3 planned runs: 3 current, 0 stale" in out, out

    runs = summaries(study)
    single = next(p for d, p in runs.items() if "strategy~single" in d)
    ddp2 = next(p for d, p in runs.items() if "strategy~ddp" in d and "world_size~2" in d)
    ddp1 = next(p for d, p in runs.items() if "strategy~ddp" in d and "world_size~1" in d)
    # A run made by other code: its recorded fingerprint differs from the checkout's.
    summary = json.loads(single.read_text())
    summary["env"]["code_fingerprint"] = "0123456789abcdef"
    single.write_text(json.dumps(summary))
    before = {p: p.stat().st_mtime_ns for p in (single, ddp1, ddp2)}

    # A changed setting that only ddp reads: single is not stale for it, both ddp runs are.
    bucket = ['--config', 'params={"bucket_mb": 10.0}']
    out = status(study, *bucket).stdout
    assert "3 planned runs: 0 current, 3 stale" in out, out
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith("stale")}
    assert "code 0123456789abcdef" in lines[single.parent.relative_to(study).as_posix()]
    assert "bucket_mb" not in lines[single.parent.relative_to(study).as_posix()]
    assert "settings bucket_mb 25.0 -> 10.0" in lines[ddp2.parent.relative_to(study).as_posix()]

    # Without the setting change only the run made by other code is stale; the workflow
    # itself warns about it when it plans.
    out = status(study).stdout
    assert "3 planned runs: 2 current, 1 stale" in out, out
    dry = run(study, *SNAKEMAKE_ARGS, "-n")
    assert "were made by other code" in dry.stdout + dry.stderr

    rerun = status(study, "--rerun")
    assert "moved 1 stale run(s)" in rerun.stdout, rerun.stdout
    assert single.stat().st_mtime_ns != before[single]  # redone
    assert ddp1.stat().st_mtime_ns == before[ddp1] and ddp2.stat().st_mtime_ns == before[ddp2]  # untouched
    kept = list((study / RESULTS / "superseded").rglob("summary.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["env"]["code_fingerprint"] == "0123456789abcdef"
    assert "3 planned runs: 3 current, 0 stale" in status(study).stdout


def test_a_failed_run_is_listed_and_rerun_failed_redoes_it_keeping_the_failure(study):
    runs = summaries(study)
    hung = next(p for d, p in runs.items() if "strategy~ddp" in d and "world_size~2" in d)
    others = {p: p.stat().st_mtime_ns for p in runs.values() if p != hung}
    summary = json.loads(hung.read_text())
    summary.update(status="timeout", reason="timed out after 1800 s (rank 1 in init_process_group)")
    hung.write_text(json.dumps(summary))

    out = status(study).stdout
    assert "3 planned runs: 2 current, 0 stale, 0 not yet run, 1 failed or timed out" in out, out
    assert f"failed  {hung.parent.relative_to(study).as_posix()}  (timed out after 1800 s" in out
    assert "--rerun-failed" in out
    # --rerun redoes stale runs only: the failure stays as measured
    assert "moved" not in status(study, "--rerun").stdout and json.loads(hung.read_text())["status"] == "timeout"

    rerun = status(study, "--rerun-failed")
    assert "moved 1 failed run(s)" in rerun.stdout, rerun.stdout  # only the kinds it moved (none stale here)
    assert json.loads(hung.read_text())["status"] == "ok"
    assert all(p.stat().st_mtime_ns == t for p, t in others.items())  # nothing else redone
    kept = [json.loads(p.read_text()) for p in (study / RESULTS / "superseded").rglob("summary.json")]
    assert any(k["status"] == "timeout" and "rank 1 in init_process_group" in k["reason"] for k in kept)
    assert "3 planned runs: 3 current, 0 stale, 0 not yet run, 0 failed" in status(study).stdout


def test_a_setting_a_strategy_does_not_read_does_not_rerun_it(study):
    """Snakemake's own trigger agrees: a bucket_mb change plans ddp's runs again, never single's."""
    out = run(study, *SNAKEMAKE_ARGS, "-n", "-p", "--config", 'params={"bucket_mb": 10.0}').stdout
    planned = [line for line in out.splitlines() if "ddpbench launch" in line]
    assert planned and all("strategy~ddp" in line for line in planned), planned
    assert not any("strategy~single" in line for line in planned)


def test_adding_an_axis_keeps_the_runs_measured_at_the_old_value(study):
    """bucket_mb: [25, 0.5] where 25 was the setting: only the new value's ddp runs are planned."""
    out = run(study, *SNAKEMAKE_ARGS, "-n", "-p", "--config", 'grid={"bucket_mb": [25.0, 0.5]}').stdout
    planned = sorted(line.split("--out ")[1].split()[0] for line in out.splitlines() if "ddpbench launch" in line)
    assert planned and all("bucket_mb~0.5" in p and "strategy~ddp" in p for p in planned), planned


def test_an_archive_rebuilds_the_same_tables_elsewhere(study, tmp_path):
    run(study, *SNAKEMAKE_ARGS, "archive")  # the workflow's target: RESULTS.tar.gz
    archive = study / f"{RESULTS}.tar.gz"
    assert "archive:" in (study / RESULTS / "logs" / "archive.log").read_text() and archive.is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(elsewhere, "report", "--from", str(archive), "--out", "rebuilt", "--no-pdf", module="ddpbench")
    original, rebuilt = study / RESULTS, elsewhere / "rebuilt"
    for table in ("aggregate/runs.csv", "aggregate/steps.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(rebuilt / table), pd.read_csv(original / table))
    for table in ("cells.csv", "speedup.csv", "comparisons.csv", "fits.csv"):
        assert (rebuilt / table).read_text() == (original / "report" / table).read_text(), table
    html = (rebuilt / "report.html").read_text()
    assert "Provenance" in html and "code fingerprint" in html and "measured (UTC)" in html


def test_a_tampered_archive_is_refused(study, tmp_path):
    """An archive is untrusted input: a file changed after archiving, or a link, is refused."""
    import io
    import tarfile

    archive = tmp_path / "tiny.tar.gz"
    run(study, "archive", "--results", RESULTS, "--out", str(archive), module="ddpbench")

    def rewrite(name, edit=None, extra=None):
        bad = tmp_path / name
        with tarfile.open(archive) as src, tarfile.open(bad, "w:gz") as dst:
            for member in src.getmembers():
                data = src.extractfile(member).read() if member.isfile() else None
                if edit and member.name.endswith("aggregate/runs.csv"):
                    data = edit(data)
                    member.size = len(data)
                dst.addfile(member, io.BytesIO(data) if data is not None else None)
            if extra:
                dst.addfile(extra)
        return run(tmp_path, "report", "--from", str(bad), "--out", name + ".out", "--no-pdf", module="ddpbench", check=False)

    changed = rewrite("changed.tar.gz", edit=lambda data: data.replace(b",ok,", b",failed,"))
    assert changed.returncode != 0 and "does not match its manifest checksum" in changed.stderr, changed.stderr[-2000:]
    link = tarfile.TarInfo(f"{RESULTS}/runs/evil")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    linked = rewrite("linked.tar.gz", extra=link)
    assert linked.returncode != 0 and "not a regular file or folder; refused" in linked.stderr, linked.stderr[-2000:]
    assert not list(tmp_path.glob("*.out/report.html"))
