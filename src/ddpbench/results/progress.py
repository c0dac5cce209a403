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


def start(path: Path, total: int) -> None:
    from ddpbench.core import safe_io

    safe_io.atomic_write_text(path, json.dumps({"started": time.time(), "total": total}) + "\n")
    path.with_suffix(".log").unlink(missing_ok=True)
    os.environ[ENV] = str(path)


def duration(s: float) -> str:
    s = max(0.0, s)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s // 60:.0f} min {s % 60:.0f} s" if s < 600 else f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def advance(line: str = "") -> str:
    """Record one finished run; the progress text, or '' without a progress file."""
    path = os.environ.get(ENV)
    if not path:
        return ""
    try:
        state = json.loads(Path(path).read_text())
        log = Path(path).with_suffix(".log")
        with open(log, "a") as f:
            f.write(f"{time.time():.3f}\t{line}\n")
        done = sum(1 for _ in open(log))
    except (OSError, ValueError):
        return ""  # progress is a courtesy: never a reason for a run to fail
    elapsed = time.time() - state["started"]
    total = max(int(state["total"]), done)
    left = elapsed / done * (total - done)
    return f"{done}/{total} runs, {duration(elapsed)} elapsed" + (f", about {duration(left)} left" if total > done else ", done")
