"""Every summary carries the whole provenance block (sysinfo.PROVENANCE_KEYS), whoever
wrote it: rank 0 of a run, the launcher for a cell it skips before any rank starts (a
strategy refusing the world size, an oversubscribed cell). Rank 0 of a cell the ranks
skip: tests/unit/test_train.py."""

import datetime
import json
import os
import shlex
import subprocess
import sys

import pytest

from ddpbench.core import sysinfo

pytestmark = pytest.mark.integration

TINY = [
    "--model", "mlp", "--synthetic-shape", "mnist", "--dataset-size", "32", "--test-size", "0",
    "--batch-size", "8", "--max-steps", "3", "--warmup-steps", "1", "--min-timed-steps", "1", "--min-timed-s", "0",
]  # fmt: skip
# More threads per rank than the usable cores: the launcher skips it, no rank starts.
OVER = ["--threads-per-rank", str(len(os.sched_getaffinity(0)) + 1)]


def utc(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def summaries(tmp_path_factory):
    """name -> (launcher argv, summary): the three cells launched side by side."""
    root = tmp_path_factory.mktemp("provenance")
    cells = {
        "ok": ["--strategy", "single"],
        "skipped_by_rank": ["--strategy", "ddp"],  # ddp needs >= 2 ranks: the launcher says so, as rank 0 would
        "skipped_by_launcher": ["--strategy", "single", *OVER],
    }
    env = {k: v for k, v in os.environ.items() if k != sysinfo.LAUNCH_COMMAND_ENV}
    env["MKL_DYNAMIC"] = "FALSE"
    started = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    procs = {}
    for name, flags in cells.items():
        argv = ["--nproc-per-node", "1", "--out", str(root / name), *TINY, *flags]
        cmd = [sys.executable, "-m", "ddpbench.run.launch", *argv]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        procs[name] = argv, proc
    out = {}
    for name, (argv, proc) in procs.items():
        log, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, log
        out[name] = argv, json.loads((root / name / "summary.json").read_text())
    ended = datetime.datetime.now(datetime.timezone.utc)
    return out, started, ended, root


def test_who_wrote_each_summary(summaries):
    runs, *_ = summaries
    assert runs["ok"][1]["status"] == "ok", runs["ok"][1]["reason"]
    assert runs["skipped_by_rank"][1]["status"] == "skipped"
    assert "world size >= 2" in runs["skipped_by_rank"][1]["reason"]
    assert runs["skipped_by_launcher"][1]["status"] == "skipped"
    assert runs["skipped_by_launcher"][1]["reason"].startswith("oversubscribed")


@pytest.mark.parametrize("name", ["ok", "skipped_by_rank", "skipped_by_launcher"])
def test_every_summary_carries_the_whole_provenance(summaries, name):
    runs, started, ended, _ = summaries
    argv, summary = runs[name]
    env = summary["env"]
    missing = [k for k in sysinfo.PROVENANCE_KEYS if k not in env]
    assert not missing, missing
    here = sysinfo.environment(None, 1)  # this process: same machine, code and venv
    for key in ("cpu_model", "os", "kernel", "glibc", "python", "torch", *sysinfo.VERSIONED_PACKAGES,
                "lock_hash", "off_lock", "code_fingerprint", "host"):  # fmt: skip
        assert env[key] == here[key], key
    assert env["off_lock"] == "" and env["lock_hash"] and env["code_fingerprint"]
    assert (env["git_commit"] or "").split("-")[0] == (here["git_commit"] or "").split("-")[0]
    assert env["command"] == shlex.join(["python", "-m", "ddpbench", "launch", *argv])
    assert env["env_vars"]["MKL_DYNAMIC"] == "FALSE"
    # Run start (the rank's run, or the launcher process) and end: within the test's window.
    assert started - datetime.timedelta(seconds=1) <= utc(env["started_utc"]) <= utc(env["ended_utc"]) <= ended


def test_provenance_reaches_the_runs_table(summaries):
    """aggregate.py keeps scalar env keys as env_<key> columns: every provenance key but
    env_vars (its variables become env_var_<NAME>) arrives."""
    from ddpbench.results import aggregate

    runs, *_, root = summaries
    for name in runs:
        row = aggregate.run_row(root / name / "summary.json")
        missing = [k for k in sysinfo.PROVENANCE_KEYS if k != "env_vars" and f"env_{k}" not in row]
        assert not missing, (name, missing)
        assert row["env_var_MKL_DYNAMIC"] == "FALSE"
