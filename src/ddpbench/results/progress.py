"""Progress a person can follow: each finished run's line says how far the grid is and
about how long the rest will take.

The workflow's onstart calls `start(RESULTS/progress.json, runs to measure)` and exports
its path in DDPBENCH_PROGRESS; each launcher, when its run is done, calls `advance()`,
which appends one line to progress.log beside it (O_APPEND: one write per run) and returns
"7/36 runs, 1 min 40 s elapsed, about 6 min left". The estimate is elapsed time per
finished run times the runs left (runs are timed one at a time). Without the variable
(a cell run by hand) there is no progress text.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

ENV = "DDPBENCH_PROGRESS"


def start(path: Path, total: int, round_: int | None = None) -> None:
    """A new workflow run: `total` runs to measure (a sequential design's: in its round `round_`)."""
    from ddpbench.core import safe_io

    state = {"started": time.time(), "total": total, **({"round": round_} if round_ else {})}
    safe_io.atomic_write_text(path, json.dumps(state) + "\n")
    path.with_suffix(".log").unlink(missing_ok=True)
    os.environ[ENV] = str(path)


def add_round(number: int, runs: int) -> None:
    """A sequential design decided its next round (`number`, 1 the first): `runs` more to measure."""
    path = os.environ.get(ENV)
    if not path:
        return
    try:
        state = json.loads(Path(path).read_text())
        log = Path(path).with_suffix(".log")
        state.update(total=(_finished(log) if log.exists() else 0) + runs, round=number)
        from ddpbench.core import safe_io

        safe_io.atomic_write_text(Path(path), json.dumps(state) + "\n")
    except (OSError, ValueError, KeyError):
        return  # progress is a courtesy


def _finished(log: Path) -> int:
    """Runs finished so far in this workflow run: one line each in progress.log."""
    with open(log) as f:
        return sum(1 for _ in f)


def duration(s: float) -> str:
    s = max(0.0, s)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s // 60:.0f} min {s % 60:.0f} s" if s < 600 else f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def advance(line: str = "") -> str:
    """Record one finished run; the progress text, or '' without a progress file."""
    from ddpbench.core import safe_io

    path = os.environ.get(ENV)
    if not path:
        return ""
    try:
        state = json.loads(Path(path).read_text())
        log = Path(path).with_suffix(".log")
        with safe_io.open_log(log, "a") as f:
            f.write(f"{time.time():.3f}\t{line}\n")
        done = _finished(log)
    except (OSError, ValueError):
        return ""  # progress is a courtesy: never a reason for a run to fail
    elapsed = time.time() - state["started"]
    total = max(int(state["total"]), done)
    left = elapsed / done * (total - done)
    head = f"round {state['round']}: " if state.get("round") else ""
    return f"{head}{done}/{total} runs, {duration(elapsed)} elapsed" + (f", about {duration(left)} left" if total > done else ", done")
