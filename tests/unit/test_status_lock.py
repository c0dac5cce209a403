"""ddpbench.plan.status --unlock-stale (scripts/main.sh runs it first): a lock left by a killed
snakemake is found and removed; a lock held by a live snakemake in the same directory is
not. Locks are written as Snakemake's file persistence writes them
(.snakemake/locks/N.input.lock, N.output.lock: one path a line); the processes come from
a fake /proc (cmdline, cwd link) or this machine's real one."""

import os
import subprocess
import sys
import time

import pytest

from ddpbench.plan import status


def write_lock(workdir):
    locks = workdir / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text("config.yaml\n")
    (locks / "0.output.lock").write_text("results/runs/a/summary.json\nresults/aggregate/runs.csv\n")


def fake_process(proc, pid, argv, cwd, parent=1):
    entry = proc / str(pid)
    entry.mkdir(parents=True)
    (entry / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (entry / "cwd").symlink_to(cwd)
    (entry / "stat").write_text(f"{pid} (python3 -m x) S {parent} {pid} {pid} 0 -1\n")  # a name with spaces


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["/repo/.venv/bin/python", "/repo/.venv/bin/snakemake", "--cores", "2"], True),
        (["/repo/.venv/bin/snakemake", "-n"], True),
        (["python3", "-m", "snakemake", "--directory", "x"], True),
        (["python3.11", "-u", "-msnakemake"], True),
        (["python", "-m", "pytest", "-k", "snakemake"], False),
        (["python", "-c", "pass", "-m", "snakemake"], False),  # -m after -c is the code's argument
        (["python", "script.py", "-m", "snakemake"], False),
        (["bash", "scripts/main.sh"], False),
        (["vim", "snakemake"], False),
        ([], False),
    ],
)
def test_is_snakemake(argv, expected):
    assert status.is_snakemake(argv) == expected


def test_snakemake_directory_follows_the_directory_flag(tmp_path):
    assert status.snakemake_directory(["--cores", "1"], tmp_path) == tmp_path
    assert status.snakemake_directory(["--directory", "w"], tmp_path) == tmp_path / "w"
    assert status.snakemake_directory(["-d", "/abs"], tmp_path) == tmp_path / "/abs"
    assert status.snakemake_directory(["--directory=w"], tmp_path) == tmp_path / "w"


def test_no_lock_does_nothing(tmp_path, capsys):
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)  # what every snakemake start leaves
    assert status.unlock_stale([], tmp_path, proc=tmp_path / "proc") == 0
    assert capsys.readouterr().out == ""


def test_live_snakemake_in_the_directory_keeps_its_lock(tmp_path, capsys):
    work, other, proc = tmp_path / "work", tmp_path / "other", tmp_path / "proc"
    other.mkdir()
    write_lock(work)
    fake_process(proc, 4242, ["python", "-m", "snakemake", "--cores", "2"], work)
    fake_process(proc, 4343, ["python", "-m", "snakemake"], other)  # another study
    assert status.live_snakemakes(work, proc) == [4242]
    assert status.unlock_stale([], work, proc=proc) == 1
    assert "PID 4242" in capsys.readouterr().err
    assert status.lock_files(work)


def test_a_snakemakes_child_between_fork_and_exec_is_not_another_snakemake(tmp_path):
    """A job's process shows its parent's command line and directory until it execs (seen once
    in CI: two PIDs for one snakemake)."""
    work, proc = tmp_path / "work", tmp_path / "proc"
    work.mkdir()
    fake_process(proc, 500, ["python", "-m", "snakemake", "--cores", "1"], work)
    fake_process(proc, 501, ["python", "-m", "snakemake", "--cores", "1"], work, parent=500)
    fake_process(proc, 600, ["python", "-m", "snakemake"], work, parent=42)  # a second, separate run
    assert status.live_snakemakes(work, proc) == [500, 600]


def test_live_snakemake_found_through_its_directory_flag(tmp_path):
    work, proc = tmp_path / "work", tmp_path / "proc"
    write_lock(work)
    fake_process(proc, 77, ["/x/bin/snakemake", "--directory", str(work)], tmp_path)
    fake_process(proc, 78, ["python", "-m", "pytest", str(work)], work)  # not snakemake
    assert status.live_snakemakes(work, proc) == [77]


def test_stale_lock_is_removed_with_one_line(tmp_path, capsys):
    """Only other directories' snakemakes alive: the lock is stale; `snakemake --unlock`
    (on a Snakefile of no rules, in that directory) removes it."""
    work, proc = tmp_path / "work", tmp_path / "proc"
    write_lock(work)
    (work / "Snakefile").write_text("rule all:\n    input: []\n")
    fake_process(proc, 4343, ["python", "-m", "snakemake"], tmp_path)
    assert status.unlock_stale([], work, proc=proc) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "stale lock" in out and "snakemake --unlock" in out
    assert not status.lock_files(work)


def test_the_real_proc_sees_a_live_snakemake(tmp_path):
    """On this machine's /proc: a process running a script named snakemake in the
    directory counts as alive (its lock is never removed), and not once it is gone."""
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here")
    write_lock(tmp_path)
    script = tmp_path / "bin" / "snakemake"
    script.parent.mkdir()
    script.write_text("import time\ntime.sleep(60)\n")
    alive = subprocess.Popen([sys.executable, str(script), "--cores", "1"], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 10  # until the child has exec'd its command line
        while alive.pid not in status.live_snakemakes(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alive.pid in status.live_snakemakes(tmp_path)
        assert status.unlock_stale([], tmp_path) == 1
        assert status.lock_files(tmp_path)
    finally:
        alive.kill()
        alive.wait()
    assert alive.pid not in status.live_snakemakes(tmp_path)


def test_main_takes_unlock_stale_and_leaves_snakemake_flags_alone(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(status, "unlock_stale", lambda args, cwd: seen.update(args=args) or 0)
    monkeypatch.chdir(tmp_path)
    assert status.main(["--unlock-stale", "--profile", "profiles/default", "--unlock"]) == 0
    assert seen["args"] == ["--profile", "profiles/default", "--unlock"]
