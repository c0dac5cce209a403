"""Progress a person can follow: each finished run's line says how far the grid is and
about how long the rest will take.

The workflow's onstart calls `start(RESULTS/progress.json, runs to measure)` and exports
its path in DDPBENCH_PROGRESS; each launcher, when its run is done, calls `advance()`,
which appends one line to progress.log beside it (O_APPEND: one write per run) and returns
"7/36 runs, 1 min 40 s elapsed, about 6 min left". The time left is the runs left times a
run's time (runs are timed one at a time): the plan's own estimate of a run
(plan.estimate.RunEstimate, the figure its time line multiplied out), moved towards the time
between the runs finished here as they come, PRIOR_RUNS runs' worth of weight on the plan's.
So the first lines agree with the plan, and the later ones with this machine as it is now.
The span before the first run finished is left out: it holds the workflow's start, not a run.
Without the variable (a cell run by hand) there is no progress text.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

ENV = "DDPBENCH_PROGRESS"
# How many runs' worth of weight the plan's estimate of a run keeps against the spans measured:
# two, so that one slow span (a round's decision, a busy spell) does not swing the line.
PRIOR_RUNS = 2


def start(path: Path, total: int, round_: int | None = None, per_run_s: float | None = None,
          root: str | os.PathLike | None = None) -> None:  # fmt: skip
    """A new workflow run: `total` runs to measure (a sequential design's: in its round `round_`),
    each about `per_run_s` by the plan's estimate (None: none; the spans measured alone). `root`:
    the results folder (no folder below it followed if a link; the launchers and `decide` that
    update the files later say theirs with safe_io.anchor_writes_at)."""
    from ddpbench.core import safe_io

    state = {"started": time.time(), "total": total, **({"round": round_} if round_ else {})}
    if per_run_s is not None and per_run_s > 0:
        state["per_run_s"] = float(per_run_s)
    safe_io.atomic_write_text(path, json.dumps(state) + "\n", root=root)
    safe_io.remove(path.with_suffix(".log"), root=root)
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
    return len(_finish_times(log))


def _finish_times(log: Path) -> list[float]:
    """When each run of this workflow run finished (progress.log's first field; nan if unreadable)."""
    with open(log) as f:
        return [_number(line.split("\t", 1)[0]) for line in f]


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def run_seconds(planned: float | None, finished: list[float], started: float) -> float:
    """A run's time for what is left: the plan's estimate (`planned`) with PRIOR_RUNS runs' weight,
    and the spans between the runs `finished` (their end times); without a plan's estimate, the
    time since `started` per run finished."""
    spans = [b - a for a, b in zip(finished, finished[1:]) if b >= a]  # nan pairs drop out
    if planned is None:
        return (finished[-1] - started) / len(finished) if finished and finished[-1] >= started else 0.0
    return (PRIOR_RUNS * planned + sum(spans)) / (PRIOR_RUNS + len(spans))


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
        finished = _finish_times(log)
        planned = state.get("per_run_s")
        planned = float(planned) if planned is not None else None
        elapsed, total = time.time() - float(state["started"]), int(state["total"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""  # progress is a courtesy: never a reason for a run to fail
    done = len(finished)
    total = max(total, done)
    left = run_seconds(planned, finished, float(state["started"])) * (total - done)
    head = f"round {state['round']}: " if state.get("round") else ""
    return f"{head}{done}/{total} runs, {duration(elapsed)} elapsed" + (f", about {duration(left)} left" if total > done else ", done")
