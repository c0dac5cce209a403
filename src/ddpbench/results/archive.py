"""One file that holds a study and regenerates its report elsewhere.

    ddpbench archive [--results results] [--out results.tar.gz]
    ddpbench report --from results.tar.gz --out elsewhere/   # rebuilds the tables

The archive (gzipped tar) holds, under the results folder's path: every run folder
(summary.json, steps_rank*.csv, train.log), the aggregate tables, the report folder (HTML,
LaTeX/PDF, tables, figures), the merged config and invocation log the workflow recorded, a
sequential design's decisions (design/round~R.json), and at its top the lock file and MANIFEST.json (the results path, each file's sha256, the
archiving code). Reading
one back (`extract`) refuses links, absolute paths and paths leaving the folder, since an
archive is untrusted input; it is read once with nothing written, each member checked as it
streams by against the limits below (a header's size, the files, the bytes and the ratio they
unpack to), and only then unpacked. The manifest's names must be regular files inside the folder.
"""

from __future__ import annotations

import argparse
import bz2
import contextlib
import dataclasses
import gzip
import io
import json
import lzma
import math
import os
import shutil
import sys
import tarfile
import time
import zlib
from pathlib import Path, PurePosixPath
from typing import IO, Iterator

from ddpbench.core import layout, safe_io, storage, sysinfo

RUN_FILES = (layout.SUMMARY, "steps_rank*.csv", "train.log", "error_rank*.txt")
STUDY_FILES = (layout.CONFIG, layout.INVOCATIONS, layout.RUNS_TABLE, layout.STEPS_TABLE)
MANIFEST = "MANIFEST.json"
#: Limits on a received archive, each checked while it is read and before anything is unpacked;
#: the environment variable beside each raises it for a study that needs more (docs/security.md).
#: What it may unpack to (GiB): a study's runs, tables and report are megabytes to a few GB.
MAX_UNPACKED_GB = 16.0
MAX_UNPACKED_ENV = "DDPBENCH_ARCHIVE_MAX_GB"
#: Files and folders: a grid at max_runs' default (20,000 runs) keeps 60,000-100,000 files.
MAX_MEMBERS = 100_000
MAX_MEMBERS_ENV = "DDPBENCH_ARCHIVE_MAX_FILES"
#: Bytes unpacked per byte read: a study's tables, logs and report compress 3-10x; gzip cannot
#: pass about 1,000, bzip2 and xz reach millions (a 3.2 kB .tar.bz2 held 4 GiB).
MAX_RATIO = 200.0
MAX_RATIO_ENV = "DDPBENCH_ARCHIVE_MAX_RATIO"
RATIO_AFTER = 32 * 2**20  # unpacked bytes before the ratio is judged: a small archive's is its headers'
#: A pax or GNU long-name header (a path is at most 4 kB; one of 512 MiB took 1.57 GiB to parse),
#: the extended headers in a row before a member, and global pax headers in all (they accumulate).
MAX_HEADER_BYTES = 64 * 2**10
MAX_HEADER_CHAIN = 8
MAX_GLOBAL_HEADERS = 16
MAX_MANIFEST_BYTES = 128 * 2**20  # MANIFEST.json: about 150 bytes a file


def study_files(results: Path) -> Iterator[Path]:
    """The files of a study worth keeping, relative to the results folder; never a link."""
    for summary in sorted(results.glob(f"{layout.RUNS}/**/{layout.SUMMARY}")):
        run = summary.parent
        for pattern in RUN_FILES:
            yield from (p.relative_to(results) for p in sorted(run.glob(pattern)) if _plain(p))
    for name in STUDY_FILES:
        if _plain(results / name):
            yield Path(name)
    yield from (p.relative_to(results) for p in sorted(results.glob(layout.ROUND_GLOB)) if _plain(p))
    report = results / layout.REPORT
    if report.is_dir() and not report.is_symlink():
        yield from (p.relative_to(results) for p in sorted(report.rglob("*")) if _plain(p))


def _plain(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def write_archive(results: Path, out: Path) -> dict:
    """Write the archive atomically; returns its manifest."""
    results = Path(results)
    if not (results / layout.RUNS).is_dir():
        raise SystemExit(f"error: {results} holds no runs/ folder: nothing to archive")
    # Stored under the folder's path as the workflow names it (results/tiny), so tables
    # rebuilt from the archive name the same run folders.
    prefix = results.as_posix() if not results.is_absolute() and ".." not in results.parts else results.name
    files = list(study_files(results))
    lock = sysinfo.lock_path()
    manifest = {
        "results": prefix,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "code_fingerprint": sysinfo.code_fingerprint(),
        "git_commit": sysinfo.git_commit(),
        "lock_hash": sysinfo.lock_hash(),
        "files": {str(f): safe_io.sha256_file(results / f) for f in files},
    }
    with safe_io.atomic_write(out, "wb") as handle, tarfile.open(fileobj=handle, mode="w:gz") as tar:
        for f in files:
            tar.add(results / f, arcname=f"{prefix}/{f}", recursive=False)
        if lock and lock.is_file():
            tar.add(lock, arcname="uv.lock", recursive=False)
        data = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mtime = len(data), int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return manifest


class Refused(Exception):
    """An archive beyond a limit, or holding what no study archive holds; the message names it."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """What an archive may hold: bytes unpacked, files and folders, unpacked bytes per byte read."""

    bytes: int
    members: int
    ratio: float

    @classmethod
    def from_env(cls) -> Limits:
        return cls(int(_env_number(MAX_UNPACKED_ENV, MAX_UNPACKED_GB, "a number of GiB") * 2**30),
                   int(_env_number(MAX_MEMBERS_ENV, MAX_MEMBERS, "a number of files")),
                   _env_number(MAX_RATIO_ENV, MAX_RATIO, "a ratio"))  # fmt: skip

    @property
    def stream(self) -> int:
        """The most a tar stream within these limits can hold: the files, each member's header and
        padding (a long name's pax header: about 1 kB) and the end blocks."""
        return self.bytes + 4096 * self.members + 2**20


def _env_number(name: str, default: float, what: str) -> float:
    text = os.environ.get(name)
    try:
        value = float(text) if text else float(default)
    except ValueError:
        value = math.nan
    if not value > 0:
        raise SystemExit(f"error: {name}={text!r} is not {what} above 0")
    return value


class _Counted:
    """The unpacked stream of an archive, counted as tarfile reads it: one read past the limit on
    the bytes or the ratio raises Refused, so a bomb stops after at most one block more."""

    def __init__(self, raw: IO[bytes], unpacked: IO[bytes], limits: Limits) -> None:
        self.raw, self.unpacked, self.limits, self.total = raw, unpacked, limits, 0

    def read(self, size: int = -1) -> bytes:
        data = self.unpacked.read(size if size >= 0 else 2**20)  # never "all of it"
        self.total += len(data)
        if self.total > self.limits.stream:
            raise Refused(f"it unpacks to more than {self.limits.bytes / 2**30:.3g} GiB ({MAX_UNPACKED_ENV})")
        packed = max(self.raw.tell(), 1)
        if self.total > RATIO_AFTER and self.total > self.limits.ratio * packed:
            raise Refused(f"it unpacks to more than {self.limits.ratio:g} bytes per byte read ({self.total:,} "
                          f"from {packed:,}: {MAX_RATIO_ENV})")  # fmt: skip
        return data


class _CheckedInfo(tarfile.TarInfo):
    """A member header that checks the extended headers before tarfile reads them whole into memory."""

    def _proc_member(self, tar):
        if self.type not in _EXTENDED:
            if self.type == tarfile.GNUTYPE_SPARSE:
                raise Refused(f"{self.name!r} is a sparse file")
            return super()._proc_member(tar)
        if self.size > MAX_HEADER_BYTES:
            raise Refused(f"a pax or GNU long-name header of {self.size:,} bytes, more than the "
                          f"{MAX_HEADER_BYTES:,} a header may have")  # fmt: skip
        tar.globals += self.type == tarfile.XGLTYPE
        tar.chain += 1  # tarfile reads a header's member by recursion: a chain of them, deeper
        if tar.chain > MAX_HEADER_CHAIN or tar.globals > MAX_GLOBAL_HEADERS:
            raise Refused(f"more than {MAX_HEADER_CHAIN} extended headers before a member, or "
                          f"{MAX_GLOBAL_HEADERS} global ones in all")  # fmt: skip
        try:
            return super()._proc_member(tar)
        finally:
            tar.chain -= 1

    def _sparse(self, member, *_args):  # a pax header's GNU sparse map, before tarfile reads it
        raise Refused(f"{member.name!r} is a sparse file")

    _proc_gnusparse_00 = _proc_gnusparse_01 = _proc_gnusparse_10 = _sparse


_EXTENDED = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
             tarfile.GNUTYPE_LONGLINK)  # fmt: skip


class _CheckedTar(tarfile.TarFile):
    tarinfo = _CheckedInfo
    chain = globals = 0


@contextlib.contextmanager
def _members(archive: Path, limits: Limits) -> Iterator[_CheckedTar]:
    """The archive as a stream of members (gzip, bzip2, xz or none, by its first bytes), its
    unpacked bytes counted (_Counted)."""
    with open(archive, "rb") as raw:
        magic = raw.read(6)
        raw.seek(0)
        opener = next((o for m, o in _DECOMPRESSORS if magic.startswith(m)), None)
        with opener(raw) if opener else contextlib.nullcontext(raw) as unpacked:
            with _unreadable_as_refused():
                tar = _CheckedTar.open(fileobj=_Counted(raw, unpacked, limits), mode="r|")
            with tar:
                yield tar


# What tarfile and the decompressors raise on a damaged or truncated archive (bzip2's: OSError).
_UNREADABLE = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError)


@contextlib.contextmanager
def _unreadable_as_refused() -> Iterator[None]:
    try:
        yield
    except _UNREADABLE as err:
        if isinstance(err, OSError) and err.filename:  # a write's (a full disk): in the OS's words
            raise
        raise Refused(f"not a readable tar archive ({type(err).__name__}: {err})") from None


_DECOMPRESSORS = ((b"\x1f\x8b", lambda f: gzip.GzipFile(fileobj=f, mode="rb")), (b"BZh", bz2.BZ2File),
                  (b"\xfd7zXZ\x00", lzma.LZMAFile))  # fmt: skip


def _walk(tar: _CheckedTar, limits: Limits) -> Iterator[tarfile.TarInfo]:
    """Each member, checked before the caller sees it: a regular file or a folder inside the folder
    it unpacks into, within the limits on files and bytes. tarfile's list of members
    read so far is emptied as it goes (200,000 of them would take tens of MB)."""
    count, size = 0, 0
    while True:
        with _unreadable_as_refused():
            member = tar.next()
        if member is None:
            return
        tar.members.clear()
        count += 1
        if count > limits.members:
            raise Refused(f"it holds more than {limits.members:,} files and folders ({MAX_MEMBERS_ENV})")
        if not (member.isfile() or member.isdir()) or member.issparse():
            what = "a sparse file" if member.issparse() else "not a regular file or folder"
            raise Refused(f"{member.name!r} is {what}")
        name = PurePosixPath(member.name)
        if name.is_absolute() or ".." in name.parts:  # the unpacking's `data` filter checks it again
            raise Refused(f"{member.name!r} leads outside the folder it unpacks into")
        size += member.size if member.isfile() else 0
        if size > limits.bytes:
            raise Refused(f"it would unpack to at least {size / 2**30:.2f} GiB, more than the "
                          f"{limits.bytes / 2**30:g} GiB allowed ({MAX_UNPACKED_ENV})")  # fmt: skip
        yield member


def extract(archive: Path, into: Path) -> Path:
    """Unpack an archive into `into` (regular files and folders only, nothing outside it);
    returns the study's results folder inside it. The archive is read twice: first each member
    is checked as it streams by (its headers, the files, bytes and ratio: Limits) with nothing
    written, then it is unpacked within what that pass counted. Every file named in the manifest
    must be a regular file inside the folder with the manifest's checksum."""
    archive, into = Path(archive), Path(into)
    into.mkdir(parents=True, exist_ok=True)
    try:
        scanned = _scan(archive, into, Limits.from_env())
        check_free_space(scanned.bytes, into)
        _unpack(archive, into, scanned)
    except Refused as err:
        raise SystemExit(f"error: {archive}: {err}; refused") from None
    manifest = read_manifest(archive, into)
    results = into / manifest["results"]
    for name, digest in manifest["files"].items():
        if safe_io.sha256_file(manifest_file(archive, results, name)) != digest:
            raise SystemExit(f"error: {archive}: {name} does not match its manifest checksum")
    return results


def _scan(archive: Path, into: Path, limits: Limits) -> Limits:
    """Read the whole archive, writing nothing: what it unpacks to (bytes, members), within `limits`."""
    with _members(archive, limits) as tar:
        count, size = 0, 0
        for member in _walk(tar, limits):
            count, size = count + 1, size + (member.size if member.isfile() else 0)
    return Limits(size, count, limits.ratio)


def _unpack(archive: Path, into: Path, scanned: Limits) -> None:
    """Unpack what _scan counted; an archive changed since is stopped at what was counted."""
    with _members(archive, scanned) as tar:
        try:
            for member in _walk(tar, scanned):
                with _unreadable_as_refused():
                    tar.extract(member, into, filter="data")
        except Refused as err:
            raise Refused(f"it changed while it was unpacked: {err}") from None


def check_free_space(size: int, into: Path) -> None:
    """Refuse, before anything is written, an archive that would unpack to more than the free space there."""
    free = shutil.disk_usage(into).free
    if size > free:
        raise Refused(f"it would unpack to {size / 2**30:.2f} GiB, more than the {free / 2**30:.2f} GiB free in {into}")


def read_manifest(archive: Path, into: Path) -> dict:
    """MANIFEST.json of an unpacked archive: a results folder inside it and a mapping of file names to checksums."""
    path = into / MANIFEST
    if not safe_io.inside(path, into):
        raise SystemExit(f"error: {archive}: no {MANIFEST}; not a ddpbench archive")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise SystemExit(f"error: {archive}: {MANIFEST} is {path.stat().st_size:,} bytes, more than the "
                         f"{MAX_MANIFEST_BYTES:,} a manifest may have")  # fmt: skip
    try:
        manifest = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as err:
        raise SystemExit(f"error: {archive}: {MANIFEST} is not JSON ({type(err).__name__})") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    prefix = manifest.get("results") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not isinstance(prefix, str) or not all(isinstance(v, str) for v in files.values()):
        raise SystemExit(f"error: {archive}: {MANIFEST} is not a ddpbench manifest (results: a folder, "
                         "files: name -> sha256)")  # fmt: skip
    if not prefix or Path(prefix).is_absolute() or ".." in Path(prefix).parts:
        raise SystemExit(f"error: {archive}: results folder {prefix!r} leaves the archive; refused")
    return manifest


def manifest_file(archive: Path, results: Path, name: str) -> Path:
    """A file the manifest names: a relative path without `..` that is a regular file inside the
    results folder (not a link out of it, a FIFO or a device, which would hang the checksum)."""
    parts = Path(name).parts
    path = results / name
    if not name or Path(name).is_absolute() or ".." in parts or not safe_io.inside(path, results):
        raise SystemExit(f"error: {archive}: {MANIFEST} names {name!r}, which is not a regular file inside "
                         f"{results.name}/; refused")  # fmt: skip
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ddpbench archive", description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results"), help="the study's results folder")
    parser.add_argument("--out", type=Path, help="archive to write (default: RESULTS.tar.gz beside the folder)")
    parser.add_argument("--log", type=Path, help="write the output here (a log below RESULTS follows no link there)")
    args = parser.parse_args(argv)
    out = args.out or args.results.resolve().with_name(args.results.resolve().name + ".tar.gz")
    with safe_io.anchor_writes_at(args.results), storage.output_to(args.log) as output:
        manifest = write_archive(args.results, out)
        size = out.stat().st_size / 2**20
        output.say(f"[ddpbench] archive: {len(manifest['files'])} files of {args.results} -> {out} ({size:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
