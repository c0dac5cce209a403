"""Where results are written: a full disk, a quota or a read-only folder, named where the user looks.

On clusters results live on quota'd or shared filesystems, and a full disk is among the
most common reasons a long grid dies. Every entry point that writes (launcher, aggregate,
report) reports a failed write the same way: the path, the cause and the filesystem's
free space, in one line (`explain`), on the terminal even when its log cannot be written
(`output_to`). The launcher probes its run folder before starting any rank (`probe`), and
the workflow checks the results filesystem before the first job (`plan_check`) and after
a failure (`full_line`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import sys
from pathlib import Path
from typing import Iterator, TextIO

from ddpbench.core import safe_io

# A write that failed because of where it writes, not what it writes: no space, a quota,
# a read-only filesystem, no permission, a file-size limit (ulimit -f, some quotas).
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG})
PROBE_BYTES = 4096
PREFIX = "[ddpbench] "


class StorageError(OSError):
    """A write that failed for lack of space or permission; str() is the one-line explanation."""


def is_storage_error(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in STORAGE_ERRNOS


def size_text(n: float) -> str:
    """Bytes in binary units: '0 B', '512 KiB', '1.5 GiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" or n == int(n) or n >= 100 else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable


def existing(path: str | os.PathLike) -> Path:
    """`path` or its nearest existing ancestor (a results folder may not exist yet)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def mount_point(path: str | os.PathLike) -> Path:
    path = existing(path)
    while path != path.parent and os.stat(path.parent).st_dev == os.stat(path).st_dev:
        path = path.parent
    return path


def free_bytes(path: str | os.PathLike) -> tuple[int, int]:
    """(bytes this user may still write, filesystem size) where `path` is or would be."""
    st = os.statvfs(existing(path))
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def free_text(path: str | os.PathLike) -> str:
    """'0 B free of 256 KiB on /scratch'."""
    try:
        free, total = free_bytes(path)
        return f"{size_text(free)} free of {size_text(total)} on {mount_point(path)}"
    except OSError as err:
        return f"free space unknown: {err.strerror}"


def read_only(path: str | os.PathLike) -> bool:
    """Whether nothing can be created at `path` (a read-only mount, or no write permission)."""
    where = existing(path)
    try:
        if os.statvfs(where).f_flag & os.ST_RDONLY:
            return True
    except OSError:
        return False
    return not os.access(where, os.W_OK | os.X_OK)


def explain(err: OSError, path: str | os.PathLike | None = None) -> str:
    """One line: what could not be written, why, and how much space is left there."""
    path = path or err.filename or "?"
    cause = err.strerror or str(err)
    hint = {
        errno.ENOSPC: "free space and rerun",
        errno.EDQUOT: "the quota is used up: free space or raise it, then rerun",
        errno.EROFS: "the filesystem is read-only: set `results:` elsewhere or remount it",
        errno.EACCES: "no permission to write there",
        errno.EPERM: "no permission to write there",
        errno.EFBIG: "a file-size limit (ulimit -f or a quota) stopped the write",
    }.get(err.errno, "")
    return f"cannot write {path}: {cause} ({free_text(path)})" + (f"; {hint}" if hint else "")


def probe(folder: str | os.PathLike) -> str | None:
    """Try what a run does first: create `folder` and write a small file in it. None when
    that works, else the explanation (only storage causes; anything else is raised)."""
    folder = Path(folder)
    test = folder / f".ddpbench-probe-{secrets.token_hex(4)}"
    try:
        safe_io.make_dir(folder)
        fd = safe_io.open_fd(test, "w", perms=0o600)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)  # no fsync: a run's fixed cost matters (close reports NFS errors)
        finally:
            os.close(fd)
    except OSError as err:
        if not is_storage_error(err):
            raise
        return explain(err, folder)
    finally:
        with contextlib.suppress(OSError):
            test.unlink()
    return None


class _Tolerant:
    """A text stream whose writes never raise: a log on a full disk must not take the
    program down with it. The first failure is kept (`lost`) to be reported elsewhere."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self.lost: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as err:
            self.lost = self.lost or err
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as err:
            self.lost = self.lost or err

    def __getattr__(self, name):
        return getattr(self._stream, name)


class Output:
    """What `output_to` yields: `say(line)` for result lines, which reach the terminal
    whether or not the log can be written."""

    def __init__(self, terminal: TextIO | None, log: Path | None):
        self.terminal, self.log, self.said = terminal, log, []

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.said.append(line)

    def to_terminal(self, line: str) -> None:
        """Also on the terminal now (a storage failure; the log may be where it failed)."""
        if self.terminal is not None:
            self.terminal.write(line + "\n")
            self.terminal.flush()


@contextlib.contextmanager
def output_to(log: Path | None) -> Iterator[Output]:
    """Send this process's output (fds 1 and 2, tracebacks included) to `log`, keeping the
    terminal for the lines given to `say`. Without a log, nothing is redirected. If the log
    cannot be opened or written, the terminal gets the explanation and the output instead."""
    if log is None:
        yield Output(None, None)
        return
    sys.stdout.flush(), sys.stderr.flush()
    terminal = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    saved_err = os.dup(sys.stderr.fileno())
    try:
        fd = safe_io.open_fd(log, "w", perms=0o644)  # a new file: a planted link or hard link is not written
    except OSError as err:
        if not is_storage_error(err):
            raise
        terminal.write(f"{PREFIX}warning: {explain(err, log)}; this output goes to the terminal instead\n")
        terminal.flush()
        os.close(saved_err)
        with terminal:
            yield Output(None, None)
        return
    os.dup2(fd, sys.stdout.fileno()), os.dup2(fd, sys.stderr.fileno())
    os.close(fd)
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Tolerant(sys.stdout), _Tolerant(sys.stderr)
    out = Output(terminal, log)
    try:
        yield out
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        lost = sys.stdout.lost or sys.stderr.lost
        sys.stdout, sys.stderr = streams
        os.dup2(saved_err, sys.stderr.fileno())  # later output (interpreter exit) to the terminal
        os.close(saved_err)
        lines = list(out.said)
        if lost is not None:
            lines.append(f"{PREFIX}warning: {explain(lost, log)}; the log is incomplete")
        terminal.write("".join(line + "\n" for line in lines))
        terminal.close()


def report(out: Output, line: str) -> int:
    """A storage failure on stderr (the log, if it can still be written) and on the
    terminal; returns the exit code of a program that could not keep its results."""
    print(line, file=sys.stderr, flush=True)
    out.to_terminal(line)
    return 1


def fail(out: Output, err: OSError, path: str | os.PathLike | None = None, what: str = "") -> int:
    """`report` the explanation of a failed write."""
    return report(out, f"{PREFIX}{what + ': ' if what else ''}{explain(err, path)}")


# -- the workflow's checks --------------------------------------------------------------------


def folder_bytes(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def run_bytes(results: Path, fallback: int) -> int:
    """Bytes one run takes: the median of this results folder's finished runs (at most 50
    looked at), or `fallback` before any exists."""
    sizes = []
    for summary in (results / "runs").rglob("summary.json"):
        sizes.append(folder_bytes(summary.parent))
        if len(sizes) >= 50:
            break
    return sorted(sizes)[len(sizes) // 2] if sizes else fallback


def plan_check(results: str | os.PathLike, runs_to_do: int, runs_planned: int, run_estimate: int,
               report_estimate: int) -> str | None:  # fmt: skip
    """Why the grid should not start (a read-only results folder, or too little space for
    what is left to measure), or None. Space needed: the runs still to measure, the
    aggregate tables of every run (each step row gains its run's keys: about 1.5 times the
    run folders, written beside the old tables before they are replaced) and the report."""
    results = Path(results)
    if read_only(results):
        return f"{results}/ cannot be written ({mount_point(results)} is read-only or not writable by this user)"
    per_run = run_bytes(results, run_estimate)
    report_bytes = max(report_estimate, folder_bytes(results / "report"))
    need = int(runs_to_do * per_run + 1.5 * runs_planned * per_run + report_bytes)
    free, _ = free_bytes(results)
    if free >= need:
        return None
    return (
        f"{results}/ has {size_text(free)} free on {mount_point(results)}, the grid needs about {size_text(need)} "
        f"({runs_to_do} run(s) to measure x {size_text(per_run)}, the tables of all {runs_planned}, "
        f"the report ~{size_text(report_bytes)})"
    )


def full_line(results: str | os.PathLike, kept: int, planned: int, run_estimate: int, report_estimate: int) -> str | None:
    """After a failed workflow: one line when the results filesystem cannot take the rest
    of the grid (full by plan_check's estimate, or not writable), else None."""
    results = Path(results)
    unwritable = read_only(results) or (results.is_dir() and probe(results) is not None)
    if not unwritable and plan_check(results, planned - kept, planned, run_estimate, report_estimate) is None:
        return None
    if unwritable and read_only(results):
        state, todo = "cannot be written", "make it writable (or set `results:` elsewhere) and rerun"
    else:
        state, todo = "is full", "free space and rerun"
    return f"ddpbench: {results}/ {state} ({free_text(results)}): {todo}; {kept} of {planned} runs are kept"
