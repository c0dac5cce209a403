"""Files in folders that may come from someone else (issue 22: people exchange result folders).

Writing: every output is written to a fresh, unpredictably named file in its own folder
(created with O_EXCL|O_NOFOLLOW, so a planted name is never opened) and then moved over the
output's name with os.replace. A reader never sees half a file, and a symlink planted at
the output's name is itself replaced by the new file: its target is left untouched. (The
choice is replace, not refuse: a folder someone handed over still gets its report.) A
folder made inside an output folder, e.g. figures/, must be a real folder; a symlink
there is refused with UnsafePathError naming it. A whole results folder is checked once
before a workflow touches it (refuse_linked_folders): no folder below it may be a symlink. A log that streams while its process runs
(train.log, invocations.log) is opened by open_log: a link at its name is removed, never
followed.

Reading: run_files() lists a run folder's files (steps_rank*.csv, summary.json) only when
they are regular files that resolve inside that folder; a symlink leading out of the
folder, a FIFO (which would block the reader) or a directory is skipped with a warning
on stderr.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import re
import secrets
import shutil
import stat
import sys
from typing import IO, Iterator

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class UnsafePathError(OSError):
    """A path in an output folder that is not what it must be (e.g. a symlink where a folder belongs)."""


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, newline: str | None = None,
                 encoding: str | None = "utf-8") -> Iterator[IO]:  # fmt: skip
    """Open a temporary file next to `path` for writing; on success it replaces `path` (the name, never
    a symlink's target); on error it is removed and `path` is unchanged. Permissions follow the umask."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        tmp = _temporary_name(path)
        try:
            fd = os.open(tmp, _FLAGS, 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name next to {path}")
    try:
        binary = "b" in mode
        with os.fdopen(fd, mode, newline=None if binary else newline, encoding=None if binary else encoding) as handle:
            yield handle
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.errno and not err.filename:  # a write(): name the output
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise


def open_log(path: str | os.PathLike, mode: str = "w") -> IO:
    """A log opened for writing ("w") or appending ("a") at `path`, as a file of its own: a
    symlink, a hard link or anything but a regular file at that name is removed first (what
    it pointed to is left untouched), and the open refuses a link planted meanwhile
    (O_NOFOLLOW). A log streams while its process runs, so it cannot be written aside and
    moved in as atomic_write does."""
    if mode not in ("w", "a"):
        raise ValueError(f"open_log: mode {mode!r}; 'w' or 'a'")
    path = pathlib.Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.unlink(path)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    return os.fdopen(os.open(path, flags, 0o666), mode, encoding="utf-8")


def _temporary_name(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(f".{path.name[:200]}.{secrets.token_hex(6)}.tmp")


_TEMPORARY = re.compile(r"^\..+\.[0-9a-f]{12}\.tmp$")


def remove_temporaries(folder: str | os.PathLike) -> list[pathlib.Path]:
    """Remove the temporaries atomic_write left in `folder` (not in its subfolders) when its
    process was killed between writing and renaming; returns what was removed."""
    removed = []
    for path in pathlib.Path(folder).glob(".*.tmp"):
        if _TEMPORARY.match(path.name) and not path.is_symlink() and path.is_file():
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed


def sha256_file(path: str | os.PathLike) -> str:
    """The hex sha256 of a file's contents, read in blocks (archives, images, the lock)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path) as handle:
        handle.write(text)


def atomic_copy(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Copy the contents of `src` to `dst` atomically (dst as in atomic_write)."""
    with open(src, "rb") as source, atomic_write(dst, "wb") as target:
        shutil.copyfileobj(source, target)


def real_dir(path: str | os.PathLike) -> pathlib.Path:
    """Create the folder `path` (and its parents) and make sure it is a folder, not a symlink to one."""
    path = pathlib.Path(path)
    if not path.is_symlink():
        path.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or not path.is_dir():
        raise UnsafePathError(f"refusing to write into {path}: it is a symlink or not a folder; remove it and run again")
    return path


def linked_folders(root: str | os.PathLike) -> list[pathlib.Path]:
    """The symlinks below `root` that lead to a folder, sorted (`root` itself may be one: the
    user named it). Each would let a write, move or delete under `root` land outside it."""
    found = []
    for folder, dirs, _files in os.walk(root):  # followlinks=False: a link is listed, never entered
        found += [pathlib.Path(folder, d) for d in dirs if os.path.islink(os.path.join(folder, d))]
    return sorted(found)


def refuse_linked_folders(root: str | os.PathLike) -> None:
    """The results folder's one rule, checked before anything is written, moved or deleted under
    it: every folder below `root` is a real one. A symlinked folder (aggregate/, superseded/, a
    run folder, at any depth, to an absolute or relative target) raises UnsafePathError naming it."""
    links = linked_folders(root)
    if links:
        named = ", ".join(f"{p} -> {os.readlink(p)}" for p in links[:5]) + (f" and {len(links) - 5} more" if len(links) > 5 else "")
        raise UnsafePathError(
            f"refusing to use the results folder {root}: {len(links)} folder(s) in it are symlinks, through which "
            f"the workflow would write, move or delete outside it: {named}. Replace each with a real folder "
            "(or remove it) and run again"
        )


def inside(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether `path` is a regular file whose real location is inside the real `folder`."""
    real = pathlib.Path(os.path.realpath(path))
    if not real.is_relative_to(os.path.realpath(folder)):
        return False
    try:
        return stat.S_ISREG(os.stat(real).st_mode)
    except OSError:
        return False


def run_files(run_dir: str | os.PathLike, pattern: str) -> list[pathlib.Path]:
    """The files of a run folder matching `pattern` that may be read (see the module's note), sorted by name;
    each one skipped is named on stderr."""
    run_dir = pathlib.Path(run_dir)
    keep = []
    for path in sorted(run_dir.glob(pattern)):
        if inside(path, run_dir):
            keep.append(path)
        else:
            print(f"[ddpbench] warning: skipping {path}: not a regular file inside its run folder", file=sys.stderr)
    return keep
