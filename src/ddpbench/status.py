"""Which runs of a study no longer match the current code, settings or lock, and a rerun of
exactly those. It works from what the results folder holds (each run's summary.json), not
from Snakemake's private metadata, so it holds in a fresh checkout too.

    python -m ddpbench.status [SNAKEMAKE ARGS]          # e.g. --configfile configs/tiny.yaml
    python -m ddpbench.status --rerun [SNAKEMAKE ARGS]  # move the stale runs aside, run them again

The current plan (every run the config asks for, with the cell parameters it would run
with) comes from a Snakemake dry run with the same arguments. A run is stale when its
summary.json records
- another code fingerprint (the package's run-time source and the lock; see
  sysinfo.code_fingerprint) than the checkout's: "code";
- other cell parameters than the plan gives its folder: "settings" (a strategy setting the
  strategy does not read is never compared: changing it reruns nothing);
- another lock hash, or other off-lock packages than this environment has: "environment".
`--rerun` moves each stale run folder under RESULTS/superseded/<UTC time>/ (nothing measured
is lost), then runs Snakemake with the same arguments, which redoes exactly those runs and
the tables and report after them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpbench import sysinfo

PLAN_ENV = "DDPBENCH_PLAN_OUT"  # where the workflow writes its plan when asked (a dry run)


@dataclass(frozen=True)
class RunState:
    run_dir: str
    state: str  # current | stale | missing | failed
    reasons: tuple[str, ...] = ()


def write_plan(path: str | os.PathLike, results: str, runs: dict[str, dict[str, Any]]) -> None:
    """The workflow's plan: results folder and, per run folder, the parameters it runs with."""
    Path(path).write_text(json.dumps({"results": results, "runs": runs}, sort_keys=True, default=str))


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
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        return RunState(run_dir, "failed", ("unreadable summary.json",))
    env = summary.get("env") or {}
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
    """Move each stale run folder under RESULTS/superseded/<UTC time>/, keeping its path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = cwd / results / "superseded" / stamp
    for s in stale:
        src = cwd / s.run_dir
        dst = root / Path(s.run_dir).relative_to(results)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(src), str(dst))
    return root


def report(all_states: list[RunState], results: str) -> str:
    counts = {k: sum(s.state == k for s in all_states) for k in ("current", "stale", "missing", "failed")}
    lines = [
        f"[ddpbench] {results}: {len(all_states)} planned runs: {counts['current']} current, {counts['stale']} stale, "
        f"{counts['missing']} not yet run, {counts['failed']} failed or timed out"
    ]
    for s in all_states:
        if s.state in ("stale", "failed"):
            lines.append(f"{s.state:<6} {s.run_dir}  ({'; '.join(s.reasons)})")
    if counts["stale"]:
        lines.append("rerun exactly the stale runs: python -m ddpbench.status --rerun [the same snakemake arguments]")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ddpbench.status",
        description=__doc__.splitlines()[0],
        epilog="Any other argument goes to snakemake (the plan's dry run, and the rerun).",
    )
    parser.add_argument("--rerun", action="store_true", help="move the stale runs aside and run snakemake")
    args, snakemake_args = parser.parse_known_args(argv)
    cwd = Path.cwd()
    plan = plan_of(snakemake_args, cwd)
    all_states = states(plan)
    print(report(all_states, plan["results"]), flush=True)
    stale = [s for s in all_states if s.state == "stale"]
    if not args.rerun:
        return 0
    if stale:
        where = supersede(stale, plan["results"], cwd)
        print(f"[ddpbench] moved {len(stale)} stale run(s) to {where}; rerunning them", flush=True)
    return subprocess.run([sys.executable, "-m", "snakemake", *snakemake_args], cwd=cwd).returncode


if __name__ == "__main__":
    sys.exit(main())
