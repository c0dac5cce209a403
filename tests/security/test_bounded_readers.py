"""Issue 69, item 3: what a received archive or results folder makes a reader do is bounded before
it is done. Archive bombs are built here, tiny on disk (the real sizes of the issue's: a 512 MiB
pax header in 0.5 MB, 100,001 files in 1 MB, 4 GiB of zeros in 5 kB of bzip2), and unpacked in a
child process whose writes are capped (RLIMIT_FSIZE), timed and measured: each is refused by the
default limits within seconds, naming the limit, with nothing written and little memory."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import pytest

from ddpbench.results import archive

CHILD = """
import json, resource, signal, sys, time
from pathlib import Path
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the cap fails (EFBIG) instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 20, 8 << 20))
start = time.monotonic()
try:
    from ddpbench.results import archive
    archive.extract(Path(sys.argv[1]), Path(sys.argv[2]))
    said = "unpacked"
except SystemExit as err:
    said = str(err.code)
except BaseException as err:
    said = f"{type(err).__name__}: {err}"
# VmHWM: this process's own peak (ru_maxrss keeps the forking parent's across exec)
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"said": said, "seconds": time.monotonic() - start, "peak_mib": peak / 1024}))
"""


def unpack_bounded(source: Path, into: Path, env: dict | None = None, timeout: float = 60) -> dict:
    """archive.extract(source, into) in a child process that may write at most 8 MiB per file: what
    it said (its SystemExit's message), its seconds and its peak memory (MiB). On the code before
    issue 69 the bombs below ran for minutes or took gigabytes: the timeout fails the test."""
    into.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(source), str(into)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def into(tmp_path: Path) -> Path:
    """Where an archive unpacks: an empty folder, as report --from's private temporary one."""
    folder = tmp_path / "into"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def written(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# -- bombs, built small -------------------------------------------------------------------------


def header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(format=tarfile.GNU_FORMAT)


def gzip_of_repeats(head: bytes, chunk: bytes, times: int, tail: bytes) -> bytes:
    """A gzip file of head + chunk * times + tail, compressed without ever holding the whole: after
    a full flush deflate refers to nothing before it, so the chunk's compressed block repeats."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflate.compress(head) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    last = deflate.compress(tail) + deflate.flush()
    crc = zlib.crc32(head)
    for _ in range(times):
        crc = zlib.crc32(chunk, crc)
    size = len(head) + len(chunk) * times + len(tail)
    trailer = struct.pack("<II", zlib.crc32(tail, crc), size & 0xFFFFFFFF)
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + first + block * times + last + trailer


def pax_header_bomb(mib: int = 512) -> bytes:
    """A .tar.gz whose pax header holds `mib` MiB of (valid) records, then one empty file: 0.5 MB."""
    record_len = 2**20
    start = f"{record_len} comment=".encode()
    record = start + b"a" * (record_len - len(start) - 1) + b"\n"
    head = header("././@PaxHeader", record_len * mib, tarfile.XHDTYPE)
    return gzip_of_repeats(head, record, mib, header("results/x", 0) + b"\0" * 1024)


def many_files_bomb(n: int) -> bytes:
    """A .tar.gz of `n` empty files (results/f0000000, ...), its headers made from one template."""
    template = header("results/f0000000", 0)
    unsummed = sum(template[:148]) + sum(template[156:]) + 8 * 32 - sum(b"results/f0000000")  # checksum: spaces
    blocks = []
    for i in range(n):
        name = b"results/f%07d" % i
        blocks.append(name + template[len(name) : 148] + b"%06o\0 " % (unsummed + sum(name)) + template[156:])
    return gzip.compress(b"".join(blocks) + b"\0" * 1024, compresslevel=1, mtime=0)


def zeros_bomb(gib: int = 4) -> bytes:
    """A .tar.bz2 of one file of `gib` GiB of zeros: bzip2 streams of 16 MiB of zeros, concatenated (5 kB)."""
    zeros = bz2.compress(b"\0" * (16 << 20), 9)
    return bz2.compress(header("results/big", gib << 30)) + zeros * (gib * 64) + bz2.compress(b"\0" * 1024)


# -- 1. archives: checked member by member while streaming, before anything is written -----------


def test_a_512_mib_pax_header_is_refused_before_it_is_read(tmp_path):
    """Issue 69: a 522 kB .tar.gz with a 512 MiB pax header was accepted at 1.57 GiB of memory."""
    bomb = tmp_path / "pax.tar.gz"
    bomb.write_bytes(pax_header_bomb())
    assert bomb.stat().st_size < 2**20
    got = unpack_bounded(bomb, tmp_path / "into")
    assert "a pax or GNU long-name header of 536,870,912 bytes, more than the 65,536 a header may have" in got["said"]
    assert str(bomb) in got["said"] and got["peak_mib"] < 200 and got["seconds"] < 10, got
    assert written(tmp_path / "into") == []


def test_an_archive_of_more_files_than_the_limit_is_refused_before_one_is_written(tmp_path):
    """Issue 69: a 1.86 MB archive unpacked 300,003 files in 217 s. The default limit (100,000 files
    and folders) stops one of 100,001 while it is read; DDPBENCH_ARCHIVE_MAX_FILES moves it."""
    bomb = tmp_path / "many.tar.gz"
    bomb.write_bytes(many_files_bomb(100_001))
    assert bomb.stat().st_size < 2 * 2**20
    got = unpack_bounded(bomb, tmp_path / "into")
    assert "it holds more than 100,000 files and folders (DDPBENCH_ARCHIVE_MAX_FILES)" in got["said"], got
    assert got["peak_mib"] < 200 and got["seconds"] < 30, got
    assert written(tmp_path / "into") == []
    small = tmp_path / "small.tar.gz"
    small.write_bytes(many_files_bomb(11))
    with pytest.raises(SystemExit, match=r"more than 10 files and folders \(DDPBENCH_ARCHIVE_MAX_FILES\)"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(archive.MAX_MEMBERS_ENV, "10")
            archive.extract(small, into(tmp_path))
    assert written(tmp_path / "into") == []


def test_a_bzip2_of_4_gib_of_zeros_stops_at_the_ratio_before_anything_is_written(tmp_path):
    """Issue 69: a 3.2 kB .tar.bz2 wrote 4 GiB, and the size cap acted only after decompressing
    (about 24 s per GiB). Its 4 GiB are within the 16 GiB allowed; what gives it away is the ratio,
    judged as it is decompressed: more than 200 bytes out per byte in, past the first 32 MiB."""
    bomb = tmp_path / "zeros.tar.bz2"
    bomb.write_bytes(zeros_bomb())
    assert bomb.stat().st_size < 16 * 2**10
    got = unpack_bounded(bomb, tmp_path / "into")
    assert "bytes per byte read" in got["said"] and "DDPBENCH_ARCHIVE_MAX_RATIO" in got["said"], got
    assert got["peak_mib"] < 200 and got["seconds"] < 10, got
    assert written(tmp_path / "into") == []


def test_the_declared_size_stops_an_archive_before_its_data_is_decompressed(tmp_path, monkeypatch):
    """A member's size is read from its header: one past the limit (here 1 GiB) is refused there,
    before its data is decompressed, naming the limit."""
    bomb = tmp_path / "zeros.tar.bz2"
    bomb.write_bytes(zeros_bomb(gib=4))
    monkeypatch.setenv(archive.MAX_UNPACKED_ENV, "1")
    with pytest.raises(SystemExit, match=r"would unpack to at least 4.00 GiB, more than the 1 GiB allowed "
                                         r"\(DDPBENCH_ARCHIVE_MAX_GB\); refused"):  # fmt: skip
        archive.extract(bomb, into(tmp_path))
    monkeypatch.setenv(archive.MAX_UNPACKED_ENV, "lots")
    with pytest.raises(SystemExit, match="DDPBENCH_ARCHIVE_MAX_GB='lots' is not a number of GiB"):
        archive.extract(bomb, into(tmp_path))


@pytest.mark.parametrize("kind", ["long names", "global headers"])
def test_a_chain_of_extended_headers_is_refused_without_a_recursion(tmp_path, kind):
    """tarfile reads the member after a pax or GNU long-name header by recursion, and global pax
    headers accumulate: 5,000 of either in a row are refused, not a RecursionError."""
    long_name = header("././@LongLink", 512, tarfile.GNUTYPE_LONGNAME) + b"results/y".ljust(512, b"\0")
    record = b"21 comment=abcdefghi\n"
    global_header = header("pax_global_header", len(record), tarfile.XGLTYPE) + record.ljust(512, b"\0")
    chain = (long_name if kind == "long names" else global_header + header("results/z", 0)) * 5000
    bomb = tmp_path / "chain.tar.gz"
    bomb.write_bytes(gzip.compress(chain + header("results/x", 0) + b"\0" * 1024))
    with pytest.raises(SystemExit, match="extended headers before a member, or 16 global ones in all; refused"):
        archive.extract(bomb, into(tmp_path))


@pytest.mark.skipif(not shutil.which("tar"), reason="GNU tar writes the pax sparse formats")
@pytest.mark.parametrize("sparse_format", ["0.0", "0.1", "1.0"])
def test_a_sparse_member_in_a_pax_archive_is_refused_before_its_map_is_read(tmp_path, sparse_format):
    """GNU tar's pax sparse formats keep the map in the pax header (0.0, 0.1) or before the data
    (1.0: a list tarfile would read to any length); each is refused where tarfile meets it."""
    (tmp_path / "src").mkdir()
    with open(tmp_path / "src" / "summary.json", "wb") as f:
        f.truncate(2**20)
    bomb = tmp_path / "sparse.tar"
    subprocess.run(["tar", "--format=pax", "--sparse", f"--sparse-version={sparse_format}", "-cf", str(bomb), "-C",
                    str(tmp_path / "src"), "summary.json"], check=True)  # fmt: skip
    with pytest.raises(SystemExit, match="is a sparse file; refused"):
        archive.extract(bomb, into(tmp_path))
    assert written(tmp_path / "into") == []


def test_a_damaged_archive_is_named_not_a_traceback(tmp_path):
    good = tmp_path / "good.tar.gz"
    with tarfile.open(good, "w:gz") as tar:
        info = tarfile.TarInfo("results/a")
        info.size = 100_000
        tar.addfile(info, io.BytesIO(os.urandom(100_000)))
    (tmp_path / "cut.tar.gz").write_bytes(good.read_bytes()[:-5000])
    (tmp_path / "noise.tar.gz").write_bytes(b"\x1f\x8b" + os.urandom(3000))
    for name in ("cut.tar.gz", "noise.tar.gz"):
        with pytest.raises(SystemExit, match=rf"{name}: not a readable tar archive \("):
            archive.extract(tmp_path / name, into(tmp_path))


# -- 2. MANIFEST.json: names resolve to regular files inside the folder -------------------------


def manifest_archive(path: Path, names: dict[str, str]) -> Path:
    """An archive whose manifest names `names` (name -> sha256), with one real file results/a."""
    data = json.dumps({"results": "results", "files": names}).encode()
    with tarfile.open(path, "w:gz") as tar:
        folder = tarfile.TarInfo("results/sub")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name, content in (("results/a", b"a\n"), ("MANIFEST.json", data)):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return path


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_manifest_naming_dev_zero_is_refused_not_hashed_forever(tmp_path):
    """Issue 69: MANIFEST.json's names were hashed as `results / name`: /dev/zero hung `report --from`."""
    bomb = manifest_archive(tmp_path / "zero.tar.gz", {"a": sha256(b"a\n"), "/dev/zero": "0" * 64})
    got = unpack_bounded(bomb, tmp_path / "into", timeout=30)
    assert "MANIFEST.json names '/dev/zero', which is not a regular file inside results/; refused" in got["said"], got
    assert got["seconds"] < 10


@pytest.mark.parametrize("name", ["../../outside.txt", "a/../../../outside.txt", "sub", ""])
def test_a_manifest_name_outside_the_folder_or_not_a_file_is_refused(tmp_path, name):
    """Issue 69: `../../../etc/hostname` was read. A name leading out (with its true checksum: the
    manifest's author can compute it) or naming a folder is refused before anything is read."""
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"secret\n")
    bomb = manifest_archive(tmp_path / "out.tar.gz", {"a": sha256(b"a\n"), name: sha256(b"secret\n")})
    real_open = open

    def no_outside_reads(file, *args, **kw):
        assert os.path.realpath(file) != str(outside), f"read {file}"
        return real_open(file, *args, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("builtins.open", no_outside_reads)
        with pytest.raises(SystemExit, match=rf"names {name!r}, which is not a regular file inside results/; refused"):
            archive.extract(bomb, into(tmp_path))


def test_an_honest_archive_still_unpacks_and_checks_its_files(tmp_path):
    ok = manifest_archive(tmp_path / "ok.tar.gz", {"a": sha256(b"a\n")})
    assert archive.extract(ok, into(tmp_path)) == tmp_path / "into" / "results"
    assert written(tmp_path / "into") == ["MANIFEST.json", "results", "results/a", "results/sub"]
    changed = manifest_archive(tmp_path / "changed.tar.gz", {"a": sha256(b"b\n")})
    with pytest.raises(SystemExit, match="a does not match its manifest checksum"):
        archive.extract(changed, into(tmp_path / "again"))


# -- 3. round files: bounded in depth, size and count ---------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
RESULTS = "results/tiny"


def design_workdir(tmp_path: Path) -> Path:
    """The tiny preset as a sequential design of 2 cells (single, seeds 0 and 1) looking at 3, 5
    and 8 runs per cell, its results at results/tiny."""
    import yaml

    config = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    config["grid"].update(world_size=[1], strategy=["single"], seed=[0, 1])
    config.update(exclude=[], repeats="until_decided",
                  until_decided={"precision": 0, "speedup": False, "compare": ["seed"], "max_per_cell": 8})  # fmt: skip
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(config))
    return tmp_path


def dry_run(work: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory",
                           str(work), "--configfile", str(work / "grid.yaml"), "-n", "--quiet", "rules"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip


def test_a_round_file_of_nested_brackets_is_named_not_a_crash(tmp_path):
    """Issue 69: a 200 kB round~0.json of nested `[` stopped `snakemake -n` with a RecursionError
    (plan.design caught OSError and ValueError only). The plan names it once and plans the first
    round; the checkpoint, which would plan the next round on it, stops the workflow naming it."""
    work = design_workdir(tmp_path / "work")
    (work / RESULTS / "design").mkdir(parents=True)
    (work / RESULTS / "design" / "round~0.json").write_text("[" * 200_000)
    proc = dry_run(work)
    out = proc.stdout + proc.stderr
    assert "RecursionError" not in out and "most recent call last" not in out, out[-3000:]
    assert out.count("round~0.json: nested deeper than the 16 levels it may have; the 0 round(s) before it are used") == 1
    assert "round~0.json: nested deeper than the 16 levels it may have. A round file this design did not write: " \
           "remove it and the round files after it (results/tiny/design)" in out, out[-3000:]  # fmt: skip


def design_runs(work: Path, cells: int = 2, runs: int = 8) -> list[str]:
    """Failed runs (summary.json only) for each cell's first `runs` repeats: what a design that
    reached its cap leaves; returns the cells' paths."""
    base = "device~cpu/world_size~1/strategy~single/batch_size~16/dataset_size~64/model~mlp/dataset~synthetic/num_workers~0"
    paths = [base] + [f"{base}/seed~{s}" for s in range(1, cells)]
    for cell in paths:
        for r in range(runs):
            run = work / RESULTS / "runs" / cell / f"repeat~{r}"
            run.mkdir(parents=True)
            (run / "summary.json").write_text(json.dumps({"status": "failed", "reason": "planted"}))
    return paths


def plant_rounds(results: Path, n: int, cells: list[str], target: int = 8) -> None:
    """`n` decisions none of which is the last, each asking every cell for `target` runs."""
    (results / "design").mkdir(parents=True, exist_ok=True)
    for r in range(n):
        record = {"round": r, "done": False, "counts": {}, "targets": {c: target for c in cells}, "stopped": {},
                  "verdicts": [], "spent": {"runs": 0, "seconds": 0}, "budget": {}, "settings": {}}  # fmt: skip
        (results / "design" / f"round~{r}.json").write_text(json.dumps(record))


def test_planted_never_finished_rounds_stop_the_dry_run_at_the_first_that_is_no_round_of_the_design(tmp_path):
    """Issue 69: N planted round files that never finish made the dry run read them all, each
    round's plan reading every round before it (9 s, 15 s, 38 s, 110 s for 0, 80, 160, 320). A
    round is read as one of this design's: after round 0 moved both cells to their cap, round 1
    asks for no run more, so the dry run stops there, naming the file and what to do."""
    work = design_workdir(tmp_path / "work")
    cells = design_runs(work)
    plant_rounds(work / RESULTS, 80, cells)
    os.utime(work / RESULTS / "runs", (0, 0))  # the runs older than the decisions, as measured before them
    proc = dry_run(work)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "most recent call last" not in out, out[-3000:]
    assert "round~1.json: is not the design's last, yet asks for no run beyond those its cells have. A round file " \
           "this design did not write: remove it and the round files after it" in out, out[-3000:]  # fmt: skip


def test_rounds_are_read_within_the_schedule_and_never_past_the_last(tmp_path, monkeypatch):
    """The rounds read are bounded by the design, not by the folder: never past its last (`done`),
    each moving a cell on along the schedule (so at most 1 + cells x steps of them), and a file
    that is no regular file (a FIFO would block the reader) or too large is named, not read."""
    from ddpbench.core.layout import Layout
    from ddpbench.plan import design

    settings, layout, cells = design.Settings(cap=8), Layout.of(tmp_path), ["a", "b"]
    assert settings.schedule == (3, 5, 8) and settings.most_rounds(2) == 5
    plant_rounds(tmp_path, 320, cells)
    warned = []
    got = design.decisions_on_disk(layout, settings, cells, warn=warned.append)
    assert [d.round for d in got] == [0] and "round~1.json: is not the design's last" in warned[0]
    last = json.loads(Path(layout.round_file(0)).read_text()) | {"done": True, "targets": {}}
    Path(layout.round_file(0)).write_text(json.dumps(last))
    assert [d.round for d in design.decisions_on_disk(layout, settings, cells, warn=warned.append)] == [0]
    assert len(warned) == 1  # the 319 files after the last are not read
    # one cell a step at a time, as a lagging design may: 4 rounds move them; the fifth cannot
    for r, targets in enumerate([{"a": 5}, {"b": 5}, {"a": 8}, {"b": 8}, {"a": 8, "b": 8}]):
        plant_rounds(tmp_path, 0, cells)
        record = json.loads(Path(layout.round_file(r + 1)).read_text()) | {"round": r, "targets": targets}
        Path(layout.round_file(r)).write_text(json.dumps(record))
    assert len(design.decisions_on_disk(layout, settings, cells, warn=warned.append)) == 4
    assert "round~4.json: is not the design's last" in warned[-1]
    # without the design's settings (an archive this checkout cannot plan), a fixed number at most
    monkeypatch.setattr(design, "MOST_ROUNDS", 3)
    with pytest.raises(design.RoundError, match=r"round~3.json: past the 3 rounds read without the design's settings"):
        list(design.rounds_on_disk(layout))
    os.unlink(layout.round_file(0))
    os.mkfifo(layout.round_file(0))
    assert design.decisions_on_disk(layout, settings, cells, warn=warned.append) == []
    assert warned[-1].endswith("round~0.json: not a regular file; the 0 round(s) before it are used")
    os.unlink(layout.round_file(0))
    with open(layout.round_file(0), "wb") as f:
        f.truncate(design.MAX_DECISION_BYTES + 1)
    assert design.decisions_on_disk(layout, settings, cells, warn=warned.append) == []
    assert "round~0.json: larger than the 67,108,864 bytes it may have" in warned[-1]


# -- 4. a received config: the schema and the local limits, before anything is expanded -----------


def received_study(tmp_path: Path, config: dict | str) -> Path:
    """An archive of a results folder with no runs and `config` as its recorded config.yaml."""
    import yaml

    results = tmp_path / "study" / "results"
    (results / "runs").mkdir(parents=True)
    (results / "config.yaml").write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    archive.write_archive(results, tmp_path / "study.tar.gz")
    return tmp_path / "study.tar.gz"


def recorded(**over) -> dict:
    """A config as the workflow records it (config.yaml's, merged and validated), with `over`."""
    import yaml

    from ddpbench.plan.config_schema import SCHEMA_PATH
    from ddpbench.plan.study import validate_config

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    validate_config(config, SCHEMA_PATH)
    return {**config, **over}


def test_a_received_config_expands_no_grid_past_this_machines_max_runs(tmp_path):
    """Issue 69: a received archive's config.yaml was planned without the schema and obeyed its own
    max_runs: a 6 kB archive made 1,000,000 cells (317 s, 629 MiB). Its grid may expand to the
    schema's max_runs (20,000) here, checked before anything is expanded; --max-runs allows more."""
    axes = {"seed": list(range(100)), "batch_size": list(range(1, 101)), "dataset_size": list(range(64, 164))}
    grid = {**recorded()["grid"], "world_size": [1], "strategy": ["single"], **axes}
    config = recorded(grid=grid, exclude=[], repeats=1, max_runs=10_000_000)
    source = received_study(tmp_path, config)
    assert (tmp_path / "study" / "results" / "config.yaml").stat().st_size < 8 * 2**10
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-m", "ddpbench", "report", "--from", str(source), "--out",
                           str(tmp_path / "out"), "--no-pdf"], capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert proc.returncode != 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "its config.yaml: invalid config at 'max_runs': the grid's axes multiply to 1,000,000 cells" in proc.stderr
    assert "more than max_runs (20,000)" in proc.stderr and "ddpbench report --from ARCHIVE --max-runs N" in proc.stderr
    assert not (tmp_path / "out" / "aggregate" / "runs.csv").exists()


def test_a_received_config_passes_the_schema_or_is_not_planned(tmp_path, capsys):
    """A config the schema refuses (a key of no schema, a wrong type) is not planned: the report is
    rebuilt from the runs, the refusal named; one that cannot be read within bounds (1 MiB, 100,000
    values counting aliases where used, 32 levels) stops the rebuild naming it."""
    from ddpbench.report import build

    source = received_study(tmp_path / "a", recorded(colour="blue"))
    build.main(["--from", str(source), "--out", str(tmp_path / "out"), "--no-pdf"])
    assert "does not plan here (invalid config at '(top level)': Additional properties are not allowed" \
           in capsys.readouterr().err  # fmt: skip
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    for name, text, problem in [("laughs", laughs, "more than the 100,000 values it may hold (aliases counted where used)"),
                                ("deep", "a: " + "[" * 5000, "nested deeper than the 32 levels it may have")]:  # fmt: skip
        source = received_study(tmp_path / name, text)
        with pytest.raises(SystemExit, match=rf"config.yaml': {re.escape(problem)}"):
            build.main(["--from", str(source), "--out", str(tmp_path / "out"), "--no-pdf"])
