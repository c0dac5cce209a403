"""One file that holds a study and regenerates its report elsewhere.

    ddpbench archive [--results results] [--out results.tar.gz]
    ddpbench report --from results.tar.gz --out elsewhere/   # rebuilds the tables

The archive (gzipped tar) holds, under the results folder's path: every run folder
(summary.json, steps_rank*.csv, train.log), the aggregate tables, the report folder (HTML,
LaTeX/PDF, tables, figures), the merged config and invocation log the workflow recorded, a
sequential design's decisions (design/round~R.json), and at its top the lock file and MANIFEST.json (the results path, each file's sha256, the
archiving code). Reading
one back (`extract`) refuses links, absolute paths and paths leaving the folder, since an
archive is untrusted input.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path
from typing import Iterator

from ddpbench.core import layout, safe_io, storage, sysinfo

RUN_FILES = (layout.SUMMARY, "steps_rank*.csv", "train.log", "error_rank*.txt")
STUDY_FILES = (layout.CONFIG, layout.INVOCATIONS, layout.RUNS_TABLE, layout.STEPS_TABLE)
MANIFEST = "MANIFEST.json"
#: The most an archive may unpack to (GiB; DDPBENCH_ARCHIVE_MAX_GB overrides): a study's runs,
#: tables and report are megabytes to a few GB; a bomb asks for terabytes.
MAX_UNPACKED_GB = 16.0
MAX_UNPACKED_ENV = "DDPBENCH_ARCHIVE_MAX_GB"


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


def extract(archive: Path, into: Path) -> Path:
    """Unpack an archive into `into` (regular files and folders only, nothing outside it);
    returns the study's results folder inside it. Every file is checked against the manifest."""
    into = Path(into)
    with tarfile.open(archive, "r:*") as tar:
        members = tar.getmembers()
        for m in members:
            if not (m.isfile() or m.isdir()) or m.issparse():
                what = "a sparse file" if m.issparse() else "not a regular file or folder"
                raise SystemExit(f"error: {archive}: {m.name!r} is {what}; refused")
        check_unpacked_size(archive, sum(m.size for m in members if m.isfile()), into)
        tar.extractall(into, members=members, filter="data")  # no absolute or escaping paths
    if not (into / MANIFEST).is_file():
        raise SystemExit(f"error: {archive}: no {MANIFEST}; not a ddpbench archive")
    manifest = json.loads((into / MANIFEST).read_text())
    prefix = Path(manifest["results"])
    if prefix.is_absolute() or ".." in prefix.parts:
        raise SystemExit(f"error: {archive}: results folder {prefix} leaves the archive; refused")
    results = into / prefix
    for name, digest in manifest["files"].items():
        if safe_io.sha256_file(results / name) != digest:
            raise SystemExit(f"error: {archive}: {name} does not match its manifest checksum")
    return results


def check_unpacked_size(archive: Path, size: int, into: Path) -> None:
    """Refuse, before anything is written, an archive that would unpack to more than
    MAX_UNPACKED_GB (or DDPBENCH_ARCHIVE_MAX_GB) or than the free space where it unpacks."""
    try:
        limit_gb = float(os.environ.get(MAX_UNPACKED_ENV) or MAX_UNPACKED_GB)
    except ValueError:
        raise SystemExit(f"error: {MAX_UNPACKED_ENV}={os.environ[MAX_UNPACKED_ENV]!r} is not a number of GiB") from None
    free = shutil.disk_usage(into).free
    if size > limit_gb * 2**30:
        bound = f"the {limit_gb:g} GiB allowed ({MAX_UNPACKED_ENV})"
    elif size > free:
        bound = f"the {free / 2**30:.2f} GiB free in {into}"
    else:
        return
    raise SystemExit(f"error: {archive}: it would unpack to {size / 2**30:.2f} GiB, more than {bound}; refused")


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
