"""Why a cell failed: which rank, what kind of failure, at which step and phase.

When one rank dies, the others usually fail too ("Connection closed by peer", a
collective that times out), and torchrun's first-observed failure is often one of those.
The root cause is decided from what every rank leaves in the run folder:

- `heartbeat_rank{R}`: a small memory-mapped record each rank rewrites at every phase
  boundary (`Heartbeat`: step, phases done in it, pid, time; about a microsecond, so a
  SIGKILLed rank's last position survives it). It also keeps a write that failed for lack
  of space or permission (errno and path): its page was allocated when the rank started,
  so this last word survives the full disk that stopped every other file;
- `error_rank{R}.txt`: a rank's Python traceback;
- torchrun's failure report in train.log: each failed rank's exit code (negative: the
  signal that killed it);
- this cgroup's count of kernel out-of-memory kills, before and after the cell;
- whether the launcher stopped the cell at its wall-clock limit.

Kinds: `storage` (a rank, or the launcher's probe of the run folder, could not write: a
full disk, a quota, a read-only folder), `signal` (killed by a signal), `oom` (the kernel's OOM killer, or an allocation
that failed: CUDA out of memory, MemoryError, the CPU allocator), `exception`, `hang`
(a rank stopped making progress while the others waited for it in a collective) and
`timeout` (the wall-clock limit, no rank singled out). Communication errors of ranks that
lost a peer are secondary: they are listed after the cause, never blamed.
"""

from __future__ import annotations

import mmap
import os
import re
import signal
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpbench.core import safe_io, storage

# step, phases done in that step, pid, unix time, errno of a failed write (0: none), its path
HEARTBEAT = struct.Struct("<qiidi228s")
SETUP, FINISHING = -1, -2  # steps that are not training steps
# The phase a rank is in after n laps of a step (train_loop's order of laps).
LAP_PHASES = ("data", "forward", "backward", "gradient communication", "optimizer", "communication after the step")
KINDS = ("storage", "signal", "oom", "exception", "hang", "timeout")

# A rank that lost its peer says so in one of these ways: secondary, never the cause.
_SECONDARY = re.compile(
    r"Connection (closed|reset) by peer|Broken pipe|Timed out waiting|timed out|Timeout|DistNetworkError|"
    r"DistBackendError|NCCL communicator was aborted|ProcessGroupNCCL.*(abort|watchdog)|"
    r"gloo::EnforceNotMet|Socket Timeout|failed to recv|Connection refused",
    re.IGNORECASE,
)
_OOM = re.compile(r"OutOfMemoryError|out of memory|MemoryError|can't allocate memory|std::bad_alloc", re.IGNORECASE)
_TIMED_OUT = re.compile(r"Timed out|timed out|Timeout", re.IGNORECASE)
# torchrun's report of one failed rank: "rank : 1 (local_rank: 1)" then "exitcode : -9 (pid: N)".
_TORCHRUN_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


class Heartbeat:
    """This rank's progress, memory-mapped so a write costs no system call."""

    def __init__(self, path: Path):
        self._pid = os.getpid()
        self.step, self.laps = SETUP, 0
        self._errno, self._path = 0, b""
        # Opened once, a new file (a link planted at the name is removed, never written through);
        # every beat after is a store into the mapped page
        fd = safe_io.open_fd(path, "w+", perms=0o644)
        try:
            # Written, not truncated to size: on a full disk this raises ENOSPC here
            # instead of a SIGBUS at the first store into an unbacked page.
            os.write(fd, self._record())
            self._map = mmap.mmap(fd, HEARTBEAT.size)
        finally:
            os.close(fd)

    def _fields(self) -> tuple:
        return self.step, self.laps, self._pid, time.time(), self._errno, self._path

    def _record(self) -> bytes:
        return HEARTBEAT.pack(*self._fields())

    def _write(self) -> None:
        HEARTBEAT.pack_into(self._map, 0, *self._fields())

    def storage_failed(self, err: OSError) -> None:
        """Keep a write that failed for lack of space or permission (the rank's last word)."""
        self._errno = err.errno or 0
        self._path = os.fsencode(str(err.filename or ""))[: HEARTBEAT.size - 28]
        self._write()

    def start_step(self, step: int) -> None:
        self.step, self.laps = step, 0
        self._write()

    def lap(self) -> None:
        self.laps += 1
        self._write()

    def finishing(self) -> None:
        """Training is over: evaluation and the summary follow."""
        self.start_step(FINISHING)


@dataclass(frozen=True)
class Beat:
    step: int
    laps: int
    pid: int
    time: float
    errno: int = 0
    path: bytes = b""

    @property
    def storage_error(self) -> OSError | None:
        """The write this rank could not do, or None."""
        if not self.errno:
            return None
        return OSError(self.errno, os.strerror(self.errno), os.fsdecode(self.path.rstrip(b"\0")) or None)

    @property
    def where(self) -> str:
        if self.step == SETUP:
            return "during setup (before the first step)"
        if self.step == FINISHING:
            return "after training (evaluation, summary)"
        phase = LAP_PHASES[self.laps] if self.laps < len(LAP_PHASES) else "bookkeeping"
        return f"at step {self.step} ({phase})"

    def progress(self) -> tuple[int, int]:
        return (10**18 if self.step == FINISHING else self.step, self.laps)


def read_heartbeats(out: Path) -> dict[int, Beat]:
    beats = {}
    for path in out.glob("heartbeat_rank*"):
        try:
            rank = int(path.name.removeprefix("heartbeat_rank"))
            data = path.read_bytes()
        except (ValueError, OSError):
            continue
        if len(data) == HEARTBEAT.size and not path.is_symlink():
            beats[rank] = Beat(*HEARTBEAT.unpack(data))
    return beats


def clear(out: Path) -> None:
    for path in out.glob("heartbeat_rank*"):
        path.unlink(missing_ok=True)


def _memory_cgroups(root: Path) -> list[tuple[Path, int]]:
    """Candidate folders of this process's memory cgroup, with the cgroup version: inside a
    container the mount's root is some ancestor of /proc/self/cgroup's path, so each
    suffix of the path is tried."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        parts = [p for p in path.split("/") if p]
        suffixes = [Path(*parts[i:]) if parts[i:] else Path() for i in range(len(parts) + 1)]
        if controllers == "":
            found += [(root / s, 2) for s in suffixes]
        elif "memory" in controllers.split(","):
            found += [(root / "memory" / s, 1) for s in suffixes]
    return [(d, v) for d, v in found if (d / ("memory.events" if v == 2 else "memory.oom_control")).exists()]


def oom_kills(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Kernel OOM kills in this process's memory cgroup so far (v2 memory.events, v1
    memory.oom_control), None where it cannot be read."""
    for folder, version in _memory_cgroups(root):
        try:
            text = (folder / ("memory.events" if version == 2 else "memory.oom_control")).read_text()
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


def cgroup_memory(root: Path = Path("/sys/fs/cgroup")) -> dict[str, int | None]:
    """The memory cgroup's limit and peak usage in bytes (null where unknown or unlimited)."""
    names = {1: ("memory.limit_in_bytes", "memory.max_usage_in_bytes"), 2: ("memory.max", "memory.peak")}
    for folder, version in _memory_cgroups(root):
        values = []
        for name in names[version]:
            try:
                text = (folder / name).read_text().strip()
                values.append(None if text == "max" or int(text) >= 2**62 else int(text))
            except (OSError, ValueError):
                values.append(None)
        return {"memory_limit_bytes": values[0], "memory_peak_bytes": values[1]}
    return {"memory_limit_bytes": None, "memory_peak_bytes": None}


def torchrun_exit_codes(log_text: str) -> dict[int, int]:
    """rank -> exit code from torchrun's failure report (a negative code: killed by that signal)."""
    return {int(r): int(code) for r, code in _TORCHRUN_FAILURE.findall(log_text)}


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")


def _last_line(text: str) -> str:
    """A traceback's exception line: the last line naming an exception (a callback's
    error is followed by an "At:" location), else the last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    named = [line for line in lines if _EXCEPTION_LINE.match(line)]
    return named[-1] if named else (lines[-1] if lines else "")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _oom_text(oom_kills_during: int) -> str:
    text = f"the kernel's out-of-memory killer fired (oom_kill +{oom_kills_during} in this cgroup"
    memory = cgroup_memory()
    if memory["memory_limit_bytes"]:
        peak = memory["memory_peak_bytes"]
        text += f", limit {memory['memory_limit_bytes'] / 2**30:.2f} GiB" + (f", peak {peak / 2**30:.2f} GiB" if peak else "")
    return text + ")"


@dataclass
class _Evidence:
    """What the ranks left in the run folder and the launcher saw, read once: the cause and the
    secondary failures are both decided from it."""

    out: Path
    world: int
    timed_out: bool
    limit_s: float | None
    oom_kills_during: int
    storage_problem: str | None
    beats: dict
    codes: dict[int, int]  # torchrun's exit code per rank
    errors: dict[int, str]  # error_rank{R}.txt per rank

    @property
    def ranks(self) -> list[int]:
        return sorted(set(range(self.world)) | set(self.codes) | set(self.errors))

    @property
    def signalled(self) -> dict[int, int]:
        return {r: -c for r, c in self.codes.items() if c < 0}

    @property
    def wrote(self) -> dict:
        """The ranks whose write failed (their heartbeat kept the OSError)."""
        return {r: b.storage_error for r, b in self.beats.items() if b.storage_error is not None}

    def where(self, rank: int | None) -> str:
        return self.beats[rank].where if rank in self.beats else "(no progress recorded)"


def _read_errors(out: Path) -> dict[int, str]:
    """Each rank's error_rank{R}.txt (a traceback), by rank."""
    errors = {}
    for path in out.glob("error_rank*.txt"):
        try:
            errors[int(path.stem.removeprefix("error_rank"))] = path.read_text(errors="replace")
        except (ValueError, OSError):
            continue
    return errors


def diagnose(
    out: Path,
    world: int,
    timed_out: bool = False,
    limit_s: float | None = None,
    oom_kills_during: int = 0,
    log_text: str = "",
    storage_problem: str | None = None,
) -> dict[str, Any]:
    """The failure block of summary.json: rank, kind, signal, step, phase, reason (one
    line), secondary (the other ranks' failures, one line each). `storage_problem`: the
    launcher's probe of the run folder after the ranks ended (None: it could write)."""
    ev = _Evidence(
        out, world, timed_out, limit_s, oom_kills_during, storage_problem,
        read_heartbeats(out), torchrun_exit_codes(log_text), _read_errors(out),
    )  # fmt: skip
    rank, kind, sig, text = _cause(ev)
    beat = ev.beats.get(rank) if rank is not None else None
    memory = cgroup_memory() if kind == "oom" else {}
    return {
        "rank": rank,
        "kind": kind,
        "signal": _signal_name(sig) if sig else None,
        "step": beat.step if beat and beat.step >= 0 else None,
        "phase": beat.where if beat else None,
        "reason": text,
        "secondary": _secondary(ev, rank),
        **memory,  # oom: the memory cgroup's limit and peak (an allocation failure's size is in the reason)
    }


_Cause = tuple[int | None, str, int | None, str]  # rank, kind, signal, reason


def _cause(ev: _Evidence) -> _Cause:
    """The root cause, from the most telling evidence down: a failed write, a killing signal, an
    unwritable folder, a rank's own error, a hang or timeout, a silent death, any error, an exit code."""
    errors, where = ev.errors, ev.where
    primary_errors = {r: t for r, t in errors.items() if not _SECONDARY.search(_last_line(t))}
    comm_timeouts = [r for r, t in errors.items() if _TIMED_OUT.search(_last_line(t))]
    killed = {r: s for r, s in ev.signalled.items() if s != signal.SIGTERM}  # torchrun stops the rest with SIGTERM
    wrote = ev.wrote
    if wrote:  # a full disk stops every rank that writes; the first one is the cause
        rank = min(wrote, key=lambda r: ev.beats[r].time)
        return rank, "storage", None, f"rank {rank} could not write its files {where(rank)}: {storage.explain(wrote[rank])}"
    if killed:
        return _killed(ev, killed)
    if ev.storage_problem:  # no rank could say why (not even in its heartbeat): the folder can
        # not be written, which explains missing summaries and error files
        return None, "storage", None, f"the run folder cannot be written: {ev.storage_problem}"
    if primary_errors:
        rank = min(primary_errors, key=lambda r: (ev.out / f"error_rank{r}.txt").stat().st_mtime)
        last = _last_line(primary_errors[rank])
        kind = "oom" if _OOM.search(last) else "exception"
        return rank, kind, None, f"rank {rank} {'ran out of memory' if kind == 'oom' else 'raised'} {where(rank)}: {last[:300]}"
    if ev.timed_out or comm_timeouts:
        return _hang_or_timeout(ev)
    if errors and (silent := [r for r in range(ev.world) if r not in errors and r not in ev.codes]):
        return _silent_death(ev, silent)
    if errors:
        rank = min(errors, key=lambda r: (ev.out / f"error_rank{r}.txt").stat().st_mtime)
        return rank, "exception", None, f"rank {rank} raised {where(rank)}: {_last_line(errors[rank])[:300]}"
    failed = [r for r, c in ev.codes.items() if c != 0]
    rank = failed[0] if failed else None
    kind = "signal" if rank in ev.signalled else "exception"
    text = (
        f"rank {rank} exited with code {ev.codes[rank]} {where(rank)}" if rank is not None
        else "the ranks exited without a summary and without an error report"
    )  # fmt: skip
    return rank, kind, ev.signalled.get(rank), text


def _killed(ev: _Evidence, killed: dict[int, int]) -> _Cause:
    """A rank killed by a signal other than torchrun's SIGTERM: the first to stop beating."""
    rank = min(killed, key=lambda r: ev.beats[r].time if r in ev.beats else 0.0)
    sig = killed[rank]
    kind = "oom" if sig == signal.SIGKILL and ev.oom_kills_during > 0 else "signal"
    text = f"rank {rank} killed by {_signal_name(sig)} {ev.where(rank)}"
    if kind == "oom":
        text += "; " + _oom_text(ev.oom_kills_during)
    elif sig == signal.SIGKILL:
        text += "; SIGKILL is what the kernel's out-of-memory killer sends (no OOM kill counted in this cgroup)"
    return rank, kind, sig, text


def _hang_or_timeout(ev: _Evidence) -> _Cause:
    """The ranks waited for one that stopped making progress: it is the one behind (a hang);
    with no rank behind, the wall-clock limit or a collective's timeout (no rank singled out)."""
    beats = ev.beats
    alive = [r for r in ev.ranks if r in beats]
    stuck = min(alive, key=lambda r: (beats[r].progress(), beats[r].time)) if alive else None
    others = [beats[r] for r in alive if r != stuck]
    behind = stuck is not None and others and any(b.progress() > beats[stuck].progress() for b in others)
    if behind or (stuck is not None and not others and ev.timed_out):
        idle = time.time() - beats[stuck].time
        text = f"rank {stuck} stopped making progress {ev.where(stuck)}: no heartbeat for {idle:.0f} s while the others waited"
        return stuck, "hang", None, text
    text = (
        f"wall-clock limit of {ev.limit_s:g} s exceeded" if ev.timed_out and ev.limit_s is not None
        else "a collective timed out"
    ) + "; " + ", ".join(f"rank {r} {ev.where(r)}" for r in alive)  # fmt: skip
    return None, "timeout", None, text


def _silent_death(ev: _Evidence, silent: list[int]) -> _Cause:
    """The others only lost their peer, and one rank left no word: no error report, no exit status
    in torchrun's report (which names the first rank to exit: with forked ranks often the
    survivor that raised "connection closed"). It died of a signal no handler sees: SIGKILL,
    as the kernel's out-of-memory killer sends."""
    rank, sig = min(silent, key=lambda r: ev.beats[r].time if r in ev.beats else 0.0), signal.SIGKILL
    kind = "oom" if ev.oom_kills_during > 0 else "signal"
    text = f"rank {rank} killed by SIGKILL {ev.where(rank)} (inferred: no error report, no exit status); " + (
        _oom_text(ev.oom_kills_during) if kind == "oom" else "no OOM kill counted in this cgroup")
    return rank, kind, sig, text


def _secondary(ev: _Evidence, rank: int | None) -> list[str]:
    """The other ranks' failures, one line each: a failed write, an error, a signal."""
    wrote, signalled, secondary = ev.wrote, ev.signalled, []
    for r in ev.ranks:
        if r == rank:
            continue
        if r in wrote:
            secondary.append(f"rank {r} {ev.where(r)}: could not write {wrote[r].filename}: {wrote[r].strerror}")
        elif r in ev.errors:
            secondary.append(f"rank {r} {ev.where(r)}: {_last_line(ev.errors[r])[:200]}")
        elif r in signalled:
            secondary.append(f"rank {r} {ev.where(r)}: stopped by {_signal_name(signalled[r])}")
    return secondary


def summary_reason(failure: dict[str, Any], details: str = "") -> str:
    """summary.json's reason: the one-line cause first, then the other ranks, then details."""
    lines = [failure["reason"], *(f"then: {s}" for s in failure["secondary"])]
    return "\n".join(lines) + (f"\n{details}" if details else "")


__all__ = ["Heartbeat", "diagnose", "read_heartbeats", "oom_kills", "torchrun_exit_codes", "summary_reason", "clear"]
