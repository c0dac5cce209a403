"""Storage faults named in one line: the path, the cause and the free space; the plan's
space estimate; no temporaries left behind (tests/faults/test_storage_faults.py makes the
same faults for real on a tiny filesystem)."""

import errno
import os
import shutil
import tempfile
import traceback
from pathlib import Path

import pytest

from ddpbench.core import safe_io, storage


def test_sizes_read_as_people_write_them():
    assert [storage.size_text(n) for n in (0, 1023, 1024, 1536, 160 * 1024, 5 * 2**30)] == [
        "0 B", "1023 B", "1 KiB", "1.5 KiB", "160 KiB", "5 GiB",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("code", "hint"),
    [(errno.ENOSPC, "free space"), (errno.EDQUOT, "quota"), (errno.EROFS, "read-only"), (errno.EACCES, "permission"),
     (errno.EFBIG, "file-size limit")],
)  # fmt: skip
def test_explain_names_the_path_the_cause_the_free_space_and_what_to_do(tmp_path, code, hint):
    line = storage.explain(OSError(code, os.strerror(code), str(tmp_path / "run" / "summary.json")))
    assert str(tmp_path / "run" / "summary.json") in line and os.strerror(code) in line
    assert " free of " in line and hint in line
    assert "\n" not in line


def test_a_failed_write_through_atomic_write_names_the_output_and_leaves_no_temporary(tmp_path, monkeypatch):
    real_replace = os.replace

    def full(src, dst, **dir_fds):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safe_io.os, "replace", full)
    with pytest.raises(OSError) as caught:
        safe_io.atomic_write_text(tmp_path / "summary.json", "{}")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(tmp_path / "summary.json")
    monkeypatch.setattr(safe_io.os, "replace", real_replace)
    assert list(tmp_path.iterdir()) == []


def test_temporaries_of_a_killed_writer_are_removed_and_nothing_else(tmp_path):
    stray = tmp_path / ".summary.json.0123456789ab.tmp"
    stray.write_text("{")
    keep = [tmp_path / "summary.json", tmp_path / ".hidden.tmp", tmp_path / "notes.0123456789ab.tmp"]
    for path in keep:
        path.write_text("x")
    assert safe_io.remove_temporaries(tmp_path) == [stray]
    assert all(p.exists() for p in keep) and not stray.exists()


def test_probe_is_silent_where_it_can_write_and_leaves_nothing(tmp_path):
    assert storage.probe(tmp_path / "a" / "b") is None
    assert list((tmp_path / "a" / "b").iterdir()) == []


NOBODY = 65534


def unprivileged(check) -> None:
    """Run `check()` in a forked child that dropped root's privileges (user nobody): root
    writes through permissions, so as root only such a child can meet them."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            check()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the check failed in the unprivileged child (its traceback above)"


def test_probe_explains_a_folder_it_may_not_write(tmp_path):
    root = os.geteuid() == 0
    folder = Path(tempfile.mkdtemp(dir="/tmp")) if root else tmp_path  # pytest's tmp_path: root's, 0700
    if root:
        os.chown(folder, NOBODY, NOBODY)
    folder.chmod(0o500)

    def check():
        assert "Permission denied" in storage.probe(folder / "run") and storage.read_only(folder)

    try:
        unprivileged(check) if root else check()
    finally:
        folder.chmod(0o700)
        if root:
            shutil.rmtree(folder)


def test_plan_check_names_free_and_needed_bytes_and_counts_measured_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "free_bytes", lambda path: (1_000_000, 2_000_000))
    # no run yet: the estimate per run; 10 to do of 10, the tables of 10, the report
    problem = storage.plan_check(tmp_path, 10, 10, 100_000, 500_000)
    assert problem and "977 KiB free" in problem and "needs about 2.9 MiB" in problem and "10 run(s)" in problem
    assert storage.plan_check(tmp_path, 1, 1, 100_000, 500_000) is None
    # a measured run folder replaces the estimate
    run = tmp_path / "runs" / "a" / "repeat~0"
    run.mkdir(parents=True)
    (run / "summary.json").write_bytes(b"x" * 8192)
    assert storage.run_bytes(tmp_path, 100_000) == storage.folder_bytes(run) < 100_000
    assert storage.plan_check(tmp_path, 10, 10, 100_000, 500_000) is None


def test_after_a_failure_the_line_says_full_with_the_kept_runs_only_when_space_ran_out(tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "free_bytes", lambda path: (0, 2**20))
    line = storage.full_line(tmp_path, 41, 72, 100_000, 500_000)
    assert line.startswith(f"ddpbench: {tmp_path}/ is full (0 B free of 1 MiB on ")
    assert line.endswith("free space and rerun; 41 of 72 runs are kept")
    monkeypatch.setattr(storage, "free_bytes", lambda path: (2**40, 2**41))
    assert storage.full_line(tmp_path, 41, 72, 100_000, 500_000) is None
