"""Which runs of a study no longer match the current code, settings or lock, and a rerun of
exactly those. It works from what the results folder holds (each run's summary.json), not
from Snakemake's private metadata, so it holds in a fresh checkout too.

    ddpbench status [SNAKEMAKE ARGS]          # e.g. --configfile configs/tiny.yaml
    ddpbench status --rerun [SNAKEMAKE ARGS]  # move the stale and damaged runs aside, run them again
    ddpbench status --rerun-failed [SNAKEMAKE ARGS]  # the failed and timed-out ones too

The current plan (every run the config asks for, with the cell parameters it would run
with; in a sequential design the runs its rounds have asked for so far, and a line on where
the rounds stand) comes from a Snakemake dry run with the same arguments. A run is stale when its
summary.json records
- another code fingerprint (the package's run-time source and the lock; see
  sysinfo.code_fingerprint) than the checkout's: "code";
- other cell parameters than the plan gives its folder: "settings" (a strategy setting the
  strategy does not read is never compared: changing it reruns nothing);
- another lock hash, or other off-lock packages than this environment has: "environment".
A run is damaged when its files are (results.aggregate.damage): a summary.json that cannot be
read (cut short by a full disk or a crash), or one that says ok while ranks' step files are
missing. The workflow names damaged runs when it is read and changes nothing (Snakemake would
take their summary for a finished run); the report lists them as failed.
`--rerun` moves each stale and damaged run folder under RESULTS/superseded/<UTC time>/ (nothing
measured is lost), then runs Snakemake with the same arguments, which redoes exactly those runs
and the tables and report after them. A failed or timed-out run is a measurement too (Snakemake
never redoes it by itself: the grid goes on past it); `--rerun-failed` also moves those aside
and redoes them, e.g. after a hang whose cause is gone. The moved run keeps its reason.

    ddpbench status --unlock-stale [SNAKEMAKE ARGS]  # what scripts/main.sh runs first

`--unlock-stale` clears a lock that a killed Snakemake left behind (.snakemake/locks/ not
empty while no snakemake process on this machine works in that directory): it says so in
one line and runs `snakemake --unlock`. If a snakemake process is working there, it stops
(exit 1) naming its PID instead; with no lock it does nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpbench.core import run_record, safe_io, sysinfo
from ddpbench.results.aggregate import checked_summary

PLAN_ENV = "DDPBENCH_PLAN_OUT"  # where the workflow writes its plan when asked (a dry run)


@dataclass(frozen=True)
class RunState:
    run_dir: str
    state: str  # current | stale | damaged | missing | failed
    reasons: tuple[str, ...] = ()


def write_plan(path: str | os.PathLike, results: str, runs: dict[str, dict[str, Any]], design: str = "") -> None:
    """The workflow's plan: results folder and, per run folder, the parameters it runs with;
    for a sequential design, where its rounds stand (one line)."""
    plan = {"results": results, "runs": runs, **({"design": design} if design else {})}
    safe_io.atomic_write_text(path, json.dumps(plan, sort_keys=True, default=str))


def current_environment() -> dict[str, Any]:
    """What a run made now would record: code fingerprint, lock hash, off-lock packages."""
    return {
        "code_fingerprint": sysinfo.code_fingerprint(),
        "lock_hash": sysinfo.lock_hash(),
        "off_lock": sysinfo.off_lock() or "",
    }


def _differs(recorded: Any, planned: Any) -> bool:
    if isinstance(recorded, (int, float)) and isinstance(planned, (int, float)) and not isinstance(recorded, bool):
        return float(recorded) != float(planned)
    return str(recorded) != str(planned)


def run_state(run_dir: str, planned: dict[str, Any], now: dict[str, Any]) -> RunState:
    """Compare one planned run's summary.json (if any) with the plan and the current code."""
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        return RunState(run_dir, "missing")
    summary, what = checked_summary(path)
    if what:
        return RunState(run_dir, "damaged", (what,))
    env = summary.get(run_record.ENV_BLOCK) or {}
    params = {**(summary.get("params") or {}), "world_size": summary.get("world_size"), "nodes": summary.get("nodes", 1)}
    reasons = []
    if env.get("code_fingerprint") != now["code_fingerprint"]:
        reasons.append(f"code {env.get('code_fingerprint') or 'unrecorded'} -> {now['code_fingerprint']}")
    changed = [f"{k} {params.get(k)} -> {v}" for k, v in sorted(planned.items()) if _differs(params.get(k), v)]
    if changed:
        reasons.append("settings " + ", ".join(changed))
    if env.get("lock_hash") != now["lock_hash"]:
        reasons.append(f"lock {env.get('lock_hash') or 'unrecorded'} -> {now['lock_hash']}")
    if (env.get("off_lock") or "") != now["off_lock"]:
        reasons.append(f"off-lock packages '{env.get('off_lock') or ''}' -> '{now['off_lock']}'")
    if reasons:
        return RunState(run_dir, "stale", tuple(reasons))
    if summary.get("status") in ("failed", "timeout"):
        last_line = (str(summary.get("reason") or "").strip().splitlines() or [summary["status"]])[-1]
        return RunState(run_dir, "failed", (last_line,))
    return RunState(run_dir, "current")


def states(plan: dict[str, Any], now: dict[str, Any] | None = None) -> list[RunState]:
    now = current_environment() if now is None else now
    return [run_state(run_dir, planned, now) for run_dir, planned in sorted(plan["runs"].items())]


def stale_runs(plan: dict[str, Any], now: dict[str, Any] | None = None) -> list[RunState]:
    return [s for s in states(plan, now) if s.state == "stale"]


def plan_of(snakemake_args: list[str], cwd: str | os.PathLike = ".") -> dict[str, Any]:
    """The workflow's plan for these arguments, from a dry run (nothing is run or written)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan.json"
        cmd = [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", *snakemake_args]
        proc = subprocess.run(cmd, cwd=cwd, env={**os.environ, PLAN_ENV: str(out)}, capture_output=True, text=True)
        if proc.returncode != 0 or not out.is_file():
            raise SystemExit(f"error: could not plan the workflow ({' '.join(cmd)}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def supersede(stale: list[RunState], results: str, cwd: Path) -> Path:
    """Move each run folder of `stale` under RESULTS/superseded/<UTC time>/, keeping its path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = cwd / results / "superseded" / stamp
    for s in stale:
        src = cwd / s.run_dir
        dst = root / Path(s.run_dir).relative_to(results)
        safe_io.move(src, dst, root=cwd / results)  # no link followed below the results folder
    return root


REDONE = ("stale", "damaged")  # what --rerun moves aside and measures again


def report(all_states: list[RunState], results: str) -> str:
    counts = {k: sum(s.state == k for s in all_states) for k in ("current", *REDONE, "missing", "failed")}
    lines = [
        f"[ddpbench] {results}: {len(all_states)} planned runs: {counts['current']} current, {counts['stale']} stale, "
        + (f"{counts['damaged']} damaged, " if counts["damaged"] else "")
        + f"{counts['missing']} not yet run, {counts['failed']} failed or timed out"
    ]
    for s in all_states:
        if s.state in (*REDONE, "failed"):
            lines.append(f"{s.state:<7} {s.run_dir}  ({'; '.join(s.reasons)})")
    if counts["stale"] or counts["damaged"]:
        redo = " and ".join(k for k in REDONE if counts[k])
        lines.append(f"rerun exactly the {redo} runs: ddpbench status --rerun [the same snakemake arguments]")
    if counts["failed"]:
        lines.append("rerun the failed ones too: ddpbench status --rerun-failed [the same snakemake arguments]")
    return "\n".join(lines)


# -- a lock left by a killed Snakemake -----------------------------------------------------
LOCK_DIR = Path(".snakemake", "locks")  # Snakemake's file persistence: N.input.lock, N.output.lock


def snakemake_directory(args: list[str], cwd: str | os.PathLike) -> Path:
    """The working directory snakemake runs in with these arguments: --directory/-d, else cwd."""
    where = None
    for i, arg in enumerate(args):
        if arg in ("--directory", "-d") and i + 1 < len(args):
            where = args[i + 1]
        elif arg.startswith("--directory="):
            where = arg.split("=", 1)[1]
        elif arg.startswith("-d") and len(arg) > 2 and not arg.startswith("--"):
            where = arg[2:]
    return Path(cwd, where) if where else Path(cwd)


def lock_files(workdir: str | os.PathLike) -> list[Path]:
    """The lock files of the Snakemake working directory `workdir` (empty: not locked)."""
    locks = Path(workdir, LOCK_DIR)
    return sorted(p for p in locks.glob("*.lock") if p.is_file()) if locks.is_dir() else []


def is_snakemake(argv: list[str]) -> bool:
    """A command line that runs Snakemake: the snakemake script, possibly through its
    interpreter (`python .../bin/snakemake`), or `python -m snakemake`."""
    if not argv:
        return False
    if os.path.basename(argv[0]) == "snakemake":
        return True
    if not os.path.basename(argv[0]).startswith("python"):
        return False
    args = argv[1:]
    i = 0
    while i < len(args):  # the interpreter's options, up to the module or script
        arg = args[i]
        if arg == "-m":
            return args[i + 1 : i + 2] == ["snakemake"]
        if arg.startswith("-m"):
            return arg[2:] == "snakemake"
        if arg == "-c" or arg == "-" or not arg.startswith("-"):
            return os.path.basename(arg) == "snakemake"
        i += 2 if arg in ("-W", "-X") else 1
    return False


def live_snakemakes(workdir: str | os.PathLike, proc: str | os.PathLike = "/proc") -> list[int]:
    """PIDs of the snakemake processes on this machine whose working directory (their
    --directory, else their cwd) is `workdir`. Processes whose cwd cannot be read (another
    user's) are not counted, nor a snakemake's own child: between fork and exec a job's process
    still shows its parent's command line and directory."""
    target = os.path.realpath(workdir)
    found: dict[int, int | None] = {}  # pid -> parent pid
    for entry in Path(proc).iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
            if not is_snakemake(argv):
                continue
            cwd = os.readlink(entry / "cwd")
        except OSError:  # gone meanwhile, or not ours
            continue
        if os.path.realpath(snakemake_directory(argv[1:], cwd)) == target:
            found[int(entry.name)] = _parent(entry)
    return sorted(pid for pid, parent in found.items() if parent not in found)


def _parent(entry: Path) -> int | None:
    """The parent PID from /proc/PID/stat (after the command's name, which may hold spaces)."""
    try:
        return int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def unlock_stale(snakemake_args: list[str], cwd: str | os.PathLike = ".", proc: str | os.PathLike = "/proc") -> int:
    """Unlock the working directory of `snakemake_args` if a killed run left its lock
    (see the module docstring); returns 0 when snakemake may start, else non-zero."""
    workdir = snakemake_directory(snakemake_args, cwd)
    locks = lock_files(workdir)
    if not locks:
        return 0
    live = live_snakemakes(workdir, proc)
    if live:
        pids = ", ".join(map(str, live))
        print(
            f"[ddpbench] snakemake is already running in {os.path.realpath(workdir)} (PID {pids}) and holds its "
            f"lock: wait for it to finish, or stop it (kill {live[0]}), before starting another run",
            file=sys.stderr,
            flush=True,
        )
        return 1
    print(
        f"[ddpbench] stale lock: {workdir / LOCK_DIR} was left by a snakemake that was killed (no snakemake "
        "process runs in this directory); unlocking with `snakemake --unlock` and going on",
        flush=True,
    )
    cmd = [sys.executable, "-m", "snakemake", "--unlock", *snakemake_args]
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0 or lock_files(workdir):
        print(f"[ddpbench] could not unlock ({' '.join(cmd)}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}", file=sys.stderr)
        return done.returncode or 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ddpbench status",
        description=__doc__.splitlines()[0],
        epilog="Any other argument goes to snakemake (the plan's dry run, and the rerun).",
        allow_abbrev=False,  # a snakemake flag such as --unlock must not be taken for ours
    )
    parser.add_argument("--rerun", action="store_true", help="move the stale and damaged runs aside and run snakemake")
    parser.add_argument(
        "--rerun-failed", action="store_true", help="--rerun, moving the failed and timed-out runs aside as well"
    )
    parser.add_argument(
        "--unlock-stale",
        action="store_true",
        help="only unlock the directory if a killed snakemake left its lock (exit 1 if one is running there)",
    )
    args, snakemake_args = parser.parse_known_args(argv)
    cwd = Path.cwd()
    if args.unlock_stale:
        return unlock_stale(snakemake_args, cwd)
    plan = plan_of(snakemake_args, cwd)
    all_states = states(plan)
    print(report(all_states, plan["results"]), flush=True)
    if plan.get("design"):
        print(f"[ddpbench] {plan['design']}", flush=True)
    redo = (*REDONE, "failed") if args.rerun_failed else REDONE
    moved = [s for s in all_states if s.state in redo]
    if not (args.rerun or args.rerun_failed):
        return 0
    if moved:
        where = supersede(moved, plan["results"], cwd)
        what = " and ".join(f"{n} {k}" for k in redo if (n := sum(s.state == k for s in moved)))
        print(f"[ddpbench] moved {what} run(s) to {where}; rerunning them", flush=True)
    return subprocess.run([sys.executable, "-m", "snakemake", *snakemake_args], cwd=cwd).returncode


if __name__ == "__main__":
    sys.exit(main())
