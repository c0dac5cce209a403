"""The one way this package writes a file (issue 22: people exchange result folders; issue 69:
someone else may share the folder while a run writes it).

Every write below a results folder, a log, a temporary goes through this module, and a structure
test (tests/unit/test_structure_writes.py) refuses a bare open(..., "w"), write_text, os.open
with O_CREAT or O_TRUNC, shutil's copies and moves, and path-taking writers elsewhere in src/.
What it rules out:

- A link followed at any folder: the folder a file goes into is reached from its anchor one
  component at a time (openat with O_NOFOLLOW|O_DIRECTORY), so a symlinked folder below the
  anchor, planted before or after any check, raises UnsafePathError naming it. The anchor is
  the highest folder holding the path of: the `root` a caller names, the results folder its
  command was told (anchor_writes_at: `--results`), the results folder of a path in a run folder
  (RESULTS/runs/<cell>/repeat~N/..., see layout.results_of_run); else the folder holding the
  file: a link in the path the user typed down to the anchor is the user's choice.
- A link or a hard link written through at the file's own name: an output is written to a
  fresh, unpredictably named temporary (O_CREAT|O_EXCL|O_NOFOLLOW) and moved over the name
  (atomic_write: a symlink or hard link planted there is replaced, its target untouched; a
  reader never sees half a file). A file that streams while its process runs (a log, the
  heartbeat) is opened by open_log/open_fd: whatever is at the name (a symlink, a hard link,
  a FIFO, an old file) is removed and a file is created exclusively; appending keeps an
  existing file only when it is a regular file with no other link (st_nlink 1), checked on
  the open descriptor.
- A results folder holding a symlinked folder, or one the check cannot list: refused as a
  whole before the workflow touches it (refuse_linked_folders).

Reading: run_files() lists a run folder's files (steps_rank*.csv, summary.json) only when
they are regular files that resolve inside that folder; a symlink leading out of the
folder, a FIFO (which would block the reader) or a directory is skipped with a warning
on stderr.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import pathlib
import re
import secrets
import shutil
import stat
import sys
from typing import IO, Iterator

from ddpbench.core import layout

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC
# open_fd's modes: a fresh file (created by this open), or the end of one of our own
_OPEN_MODES = {
    "w": os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC,
    "w+": os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC,
    # O_NONBLOCK: a FIFO planted between the check and the open must not block it (ENXIO instead)
    "a": os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK,
}
_TRIES = 100  # a name someone keeps replacing is refused after this many attempts


class UnsafePathError(OSError):
    """A path in an output folder that is not what it must be (e.g. a symlink where a folder belongs)."""


# -- folders reached without following a link ------------------------------------------------------


def _absolute(path: str | os.PathLike) -> pathlib.Path:
    # Lexical: "a/link/../b" is a/b, never where link/.. leads.
    return pathlib.Path(os.path.abspath(path))


# The results folders this process was told it writes under (anchor_writes_at), innermost last.
_DECLARED: list[pathlib.Path] = []


@contextlib.contextmanager
def anchor_writes_at(results: str | os.PathLike | None) -> Iterator[None]:
    """Within: every write of this process (and of the workers it forks) to a path below `results`
    anchors at `results`, as with root=results. A command told its results folder (`--results`)
    says so once: the report alone writes from a dozen functions, some in forked workers, and none
    of them, nor the next one added, follows a folder of the results folder (aggregate/, report/,
    logs/, design/, ...) replaced by a link while it runs. None declares nothing."""
    if results is None:
        yield
        return
    _DECLARED.append(_absolute(results))
    try:
        yield
    finally:
        _DECLARED.pop()


def _anchor(path: pathlib.Path, root: str | os.PathLike | None) -> pathlib.Path:
    """The folder below which nothing is followed when `path` (absolute) is written: the highest
    of `root`, the declared results folders and a run path's results folder that holds it (the
    most checked), else the file's own folder."""
    candidates = [_absolute(r) for r in (root, *_DECLARED) if r is not None]
    results = layout.results_of_run(path)
    candidates += [results] if results is not None else []
    holding = [c for c in candidates if path == c or path.is_relative_to(c)]
    return min(holding, key=lambda c: len(c.parts)) if holding else path.parent


def _named(err: OSError, where: str | os.PathLike) -> OSError:
    """`err` naming the whole path (a call relative to a folder names only the last part)."""
    return OSError(err.errno, err.strerror, str(where)) if err.errno else err


def _open_folder(folder: pathlib.Path, anchor: pathlib.Path, create: bool, target: str | os.PathLike) -> int:
    """A descriptor of `folder` (absolute, at or below `anchor`), reached from the anchor one
    component at a time without following a link; missing folders made when `create`."""
    if create:
        try:
            os.makedirs(anchor, exist_ok=True)  # the path the user named: its links are theirs
        except OSError as err:
            raise _named(err, anchor) from err
    fd = os.open(anchor, _DIR_FLAGS)
    where = anchor
    try:
        for part in folder.relative_to(anchor).parts:
            where = where / part
            try:
                step = _open_child(fd, part, create)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePathError(
                        f"refusing to write {target}: {where} is a symlink or not a folder, through which the write "
                        "would land elsewhere; replace it with a real folder (or remove it) and run again"
                    ) from None
                raise _named(err, where) from err
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_child(fd: int, name: str, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):  # made meanwhile by another process: fine if a folder
        os.mkdir(name, 0o777, dir_fd=fd)
    return os.open(name, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)


@contextlib.contextmanager
def _parent(path: pathlib.Path, root, target, create: bool = True) -> Iterator[int]:
    """A descriptor of the folder holding `path` (absolute), made if missing and `create`, closed afterwards."""
    fd = _open_folder(path.parent, _anchor(path, root), create, target)
    try:
        yield fd
    finally:
        os.close(fd)


def make_dir(path: str | os.PathLike, *, root: str | os.PathLike | None = None) -> pathlib.Path:
    """Create the folder `path` (and its parents) and make sure it, and every folder between it
    and its anchor (see the module's note), is a real folder, not a symlink to one."""
    full = _absolute(path)
    os.close(_open_folder(full, _anchor(full, root), True, path))
    return pathlib.Path(path)


real_dir = make_dir  # its earlier name


def private_dir(path: str | os.PathLike) -> pathlib.Path:
    """The folder `path`, made mode 0700 if missing, for what only this user may reach (sockets,
    servers' logs); refused (UnsafePathError) unless it is a real folder, this user's, that no one
    else can enter."""
    full = _absolute(path)
    try:
        os.mkdir(full, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(full)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise UnsafePathError(f"{path} is not a private folder of this user's (a real folder, mode 0700)")
    return pathlib.Path(path)


# -- files ------------------------------------------------------------------------------------------


def _temporary(folder: int, path: pathlib.Path, perms: int = 0o666) -> tuple[int, str]:
    for _ in range(_TRIES):
        name = _temporary_name(path).name
        try:
            return os.open(name, _FLAGS, perms, dir_fd=folder), name
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name next to {path}")


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, newline: str | None = None,
                 encoding: str | None = "utf-8", root: str | os.PathLike | None = None) -> Iterator[IO]:  # fmt: skip
    """Open a temporary file next to `path` for writing; on success it replaces `path` (the name, never
    a symlink's target or a hard link's other name); on error it is removed and `path` is unchanged.
    No folder below the anchor is followed if a link. Permissions follow the umask."""
    full = _absolute(path)
    with _parent(full, root, path) as folder:
        fd, tmp = _temporary(folder, full)
        try:
            binary = "b" in mode
            with os.fdopen(fd, mode, newline=None if binary else newline, encoding=None if binary else encoding) as handle:
                yield handle
            os.replace(tmp, full.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException as err:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            if isinstance(err, OSError) and err.errno and err.filename in (None, tmp, full.name):  # name the output
                raise OSError(err.errno, err.strerror, str(path)) from err
            raise


def atomic_write_text(path: str | os.PathLike, text: str, *, root: str | os.PathLike | None = None) -> None:
    with atomic_write(path, root=root) as handle:
        handle.write(text)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, root: str | os.PathLike | None = None) -> None:
    with atomic_write(path, "wb", root=root) as handle:
        handle.write(data)


def atomic_copy(src: str | os.PathLike, dst: str | os.PathLike, *, root: str | os.PathLike | None = None) -> None:
    """Copy the contents of `src` to `dst` atomically (dst as in atomic_write)."""
    with open(src, "rb") as source, atomic_write(dst, "wb", root=root) as target:
        shutil.copyfileobj(source, target)


def open_fd(path: str | os.PathLike, mode: str = "w", *, root: str | os.PathLike | None = None,
            perms: int = 0o666) -> int:  # fmt: skip
    """A descriptor of a file of our own at `path`, for a file that streams while its process runs
    (so cannot be written aside and moved in): "w" and "w+" (read too) a file this call creates
    (O_EXCL), after removing whatever held the name; "a" the end of the file there when it is a
    regular file with no other link, else (a symlink, a hard link, a FIFO) of a new one. What a
    removed link pointed to is left untouched; a link planted meanwhile is refused by the open."""
    if mode not in _OPEN_MODES:
        raise ValueError(f"open_fd: mode {mode!r}; one of {', '.join(_OPEN_MODES)}")
    full = _absolute(path)
    with _parent(full, root, path) as folder:
        for _ in range(_TRIES):
            _clear_name(folder, full.name, path, keep_own=mode == "a")
            try:
                fd = os.open(full.name, _OPEN_MODES[mode], perms, dir_fd=folder)
            except OSError as err:
                if err.errno in (errno.EEXIST, errno.ELOOP, errno.ENXIO):  # planted meanwhile: clear it again
                    continue
                raise _named(err, path) from err
            st = os.fstat(fd)
            if mode != "a" or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
                os.set_blocking(fd, True)
                return fd
            os.close(fd)  # a hard link or a FIFO made between the check and the open
    raise UnsafePathError(f"refusing to write {path}: something keeps putting a link or a special file at that name")


def _clear_name(folder: int, name: str, path, keep_own: bool) -> None:
    """Remove what holds `name` in `folder`, unless `keep_own` and it is a regular file of one link."""
    try:
        st = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return
    if keep_own and stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
        return
    if stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"refusing to write {path}: it is a folder; remove it and run again")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder)  # a symlink or a hard link: only this name goes


def open_log(path: str | os.PathLike, mode: str = "w", *, root: str | os.PathLike | None = None) -> IO:
    """A log opened for writing ("w": a new file) or appending ("a") at `path`, as a file of
    its own (open_fd): what a link planted at its name pointed to is never written."""
    if mode not in ("w", "a"):
        raise ValueError(f"open_log: mode {mode!r}; 'w' or 'a'")
    return os.fdopen(open_fd(path, mode, root=root), mode, encoding="utf-8")


def move(src: str | os.PathLike, dst: str | os.PathLike, *, root: str | os.PathLike | None = None) -> None:
    """Rename `src` (a file or a folder) to `dst`, replacing a file there; neither's folders are
    followed if links below the anchor, and a link at `dst` is replaced, not followed."""
    full_src, full_dst = _absolute(src), _absolute(dst)
    with _parent(full_src, root, src, create=False) as source, _parent(full_dst, root, dst) as target:
        try:
            os.replace(full_src.name, full_dst.name, src_dir_fd=source, dst_dir_fd=target)
        except OSError as err:
            raise _named(err, src) from err


def remove(path: str | os.PathLike, *, root: str | os.PathLike | None = None) -> bool:
    """Remove the file at `path` (only that name: a link there goes, never its target), its folder
    reached from the anchor as for a write, so a linked folder never makes it remove someone else's
    file; False when there was nothing to remove."""
    full = _absolute(path)
    try:
        with _parent(full, root, path, create=False) as folder:
            try:
                os.unlink(full.name, dir_fd=folder)
            except OSError as err:
                raise _named(err, path) from err
    except FileNotFoundError:
        return False
    return True


def publish_once(path: str | os.PathLike, data: bytes, *, perms: int = 0o600) -> bool:
    """Write `path` whole, unless it exists: a temporary is written and linked to the name (never
    over it). True if this call made it, False if another process had."""
    full = _absolute(path)
    with _parent(full, None, path) as folder:
        fd, tmp = _temporary(folder, full, perms)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.link(tmp, full.name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
            return True
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)


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


# -- a results folder checked as a whole -----------------------------------------------------------


def linked_folders(root: str | os.PathLike) -> list[pathlib.Path]:
    """The symlinks below `root` that lead to a folder, sorted (`root` itself may be one: the
    user named it). Each would let a write, move or delete under `root` land outside it. A
    folder that cannot be listed raises UnsafePathError: it could hide one."""

    def unlistable(err: OSError) -> None:
        if isinstance(err, FileNotFoundError):  # no results yet, or removed meanwhile
            return
        raise UnsafePathError(
            f"refusing to use the results folder {root}: cannot list {err.filename} ({err.strerror}), so a symlinked "
            "folder in it would go unseen; make it readable and searchable (chmod u+rx) or remove it, and run again"
        )

    found = []
    for folder, dirs, _files in os.walk(root, onerror=unlistable):  # followlinks=False: a link is listed, never entered
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
