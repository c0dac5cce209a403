"""The plan's time estimate: how long a grid's runs will take, said before they start.

`run_estimate` predicts each run's wall as a fixed part (launch, untimed steps, evaluation)
plus its timed steps, learned from the ok runs this host measured (their summaries' timelines
and timed walls, in this results folder, then the results folders inside and beside it): the
launch cost of the runs most like the cell, and its model's FLOPs (the committed catalog's) at
the pace measured for that model. With no such run it falls back to a documented default
(FIXED_RUN_S, the FLOPs at CPU_FORWARD_FLOPS_PER_S a thread, min_timed_s). It leaves out runs
measured on a busy machine when quiet ones exist, scales for a machine busy now (load average
confirmed by a short /proc/stat sample), and says where its figure came from. That one figure
(`RunEstimate`) is the plan's time line (`time_estimate`, put first among the plan's warnings by
ddpbench.plan.preflight), a sequential design's first-round budget check (plan.design) and the
progress line's starting point (ddpbench.results.progress).

Pure Python (no torch).
"""

from __future__ import annotations

import math
import os
import socket
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ddpbench.core import layout, run_record, sysinfo
from ddpbench.core.params import LAUNCH_COSTS, launch_costs
from ddpbench.core.params import COMPILE_RUN_S, LAB_RUN_S  # noqa: F401 (the seconds the fields declare, still read here)
from ddpbench.plan import catalog
from ddpbench.strategies import strategy_traits

# Seconds a run costs beyond its steps' FLOPs when this host has measured none: launch, imports,
# process group, data. A CPU cell on one node starts warm (run.warm: its ranks forked from a server
# that imported torch once): its fixed part was 1.3 s quiet and 1.6 s busy for the default grid's
# mlp, the workflow's first cell 2.5-3.5 s more, as a cold one (2026-11-29, benchmarks/measured/
# cpu-2026-11-29/run_length.txt and warm_start.txt); conservative, as the 6 s before it was.
FIXED_RUN_S = 3.0
# ... and a cell that starts cold (CUDA, or an axis declared `cold`, a link): ok runs' fixed cost on the
# 2-core VM was 2.3-5 s for the mlp (median 3.6 s at p = 2) and 6 s for gpt_tiny when quiet, up to 13 s
# when busy (2026-11-27, before the warm start). What an axis adds beyond (a link's LAB_RUN_S, a
# compile's COMPILE_RUN_S) is declared on its CellParams field (core.params.LaunchCost): LAUNCH_COSTS.
COLD_RUN_S = 6.0
# A cell's device and the fields (core.params.LAUNCH_COSTS) whose value adds to its launch.
Kind = tuple[str, tuple[str, ...]]
# A CPU thread's pace, in a model's forward FLOPs (the catalog's) per second of training step
# (forward, backward, update), for the estimate before anything is measured: one thread of the
# 2-core VM measured 16 G for DenseNet-121 at 160 px and 31 G for VGG-11 on 32 px, so this
# middle is within 1.5x of either.
CPU_FORWARD_FLOPS_PER_S = 24e9

# Summaries the estimate reads at most (this results folder's first, then its neighbours'), so that
# planning beside a large study stays fast (a summary is ~0.1 ms to read and parse).
HISTORY_SUMMARIES = 300
# A run measured while other processes took more than this share of the CPU was measured on a busy machine.
BUSY_CPU_FRAC = sysinfo.BUSY_CPU_FRAC
# How long the estimate samples the CPU's use when the load average says the machine is busy: the
# average lags a minute (right after a run it still counts that run's ranks), a sample does not. At
# 100 ticks a second a core, 0.05 s tells others' 50-90 % from a quiet 0-10 %; every Snakemake start
# on a busy machine waits it.
BUSY_SAMPLE_S = 0.05
# What a cell the launcher skips (its strategy refuses the world size) costs before one is measured:
# the launcher's start and a skipped summary, no rank (0.3-0.4 s on the tiny grid, 2026-11-27; a
# median 2.2 s over 51 older ones on the 2-core VM).
SKIPPED_RUN_S = 1.0
# The timed steps last at least min_timed_s: the loop adds steps to reach it with ~10 % to spare.
MIN_TIMED_OVERSHOOT = 1.2


def timed_steps(p: dict[str, Any]) -> int | None:
    """Timed steps a run gets before `min_timed_s` adds any (None: batch size auto)."""
    try:
        batch, world = int(p["batch_size"]), int(p["world_size"])
    except (TypeError, ValueError):
        return None
    global_batch = batch * world if p.get("scaling") == "weak" else batch
    per_epoch = int(p["dataset_size"]) // global_batch
    first_timed = 1 + int(p["warmup_steps"])
    steps = max(int(p["epochs"]) * per_epoch, first_timed + int(p["min_timed_steps"]))
    if int(p.get("max_steps") or 0):
        steps = min(steps, int(p["max_steps"]))
    return max(0, steps - first_timed)


def compute_s(p: dict[str, Any], cores: int) -> float:
    """Seconds a CPU run's steps and evaluation should take at CPU_FORWARD_FLOPS_PER_S a thread
    (0 on a GPU, for batch auto, or for a model the catalog lacks)."""
    timed = timed_steps(p)
    if timed is None:
        return 0.0
    return _work_s(p, cores, timed * _per_rank(p) + _untimed_samples(p))


def _shape(p: dict[str, Any]) -> str:
    return p["dataset"] if p["dataset"] != "synthetic" else p.get("synthetic_shape", "cifar10")


def _per_rank(p: dict[str, Any]) -> float:
    return int(p["batch_size"]) if p.get("scaling") == "weak" else int(p["batch_size"]) / int(p["world_size"])


def _untimed_samples(p: dict[str, Any]) -> float:
    """Samples a rank computes besides its timed steps: the first, warm-up and profiled steps, and
    the evaluation (a forward pass only: a third of a training sample)."""
    steps = 1 + int(p["warmup_steps"]) + int(p.get("profile_steps") or 0)
    return steps * _per_rank(p) + int(p.get("test_size") or 0) / 3


def _work_s(p: dict[str, Any], cores: int, samples: float) -> float:
    """Seconds a rank of CPU cell `p` takes to train `samples` samples at CPU_FORWARD_FLOPS_PER_S a
    thread (0 on a GPU or for a model the catalog lacks)."""
    flops = catalog.forward_flops(p["model"], _shape(p), p.get("image_size"), p.get("seq_len"))
    if p.get("device", "cpu") != "cpu" or not flops:
        return 0.0
    world = int(p["world_size"])
    threads = int(p.get("threads_per_rank") or 0) or max(1, cores // world)
    slower = max(1.0, world * threads / cores)  # ranks x threads beyond the cores share them
    return samples * flops / (CPU_FORWARD_FLOPS_PER_S * threads) * slower


@dataclass(frozen=True)
class MeasuredRun:
    """One earlier ok run of this host, as the estimate uses it."""

    kind: Kind  # what the fixed cost depends on most (_kind)
    model: tuple[str, str]  # the model and its input
    world: int
    batch: float  # per rank
    fixed_s: float  # the launcher's wall minus the timed steps' wall
    launch_s: float  # fixed_s less its untimed steps and evaluation at its pace: what any model pays
    timed_s: float
    pace: float | None  # timed seconds per second that compute_s's FLOPs model gives (None: no FLOPs)
    other_frac: float | None  # the share of the CPU other processes took during its timed steps
    folder: str
    skipped: bool = False  # recorded as skipped by the launcher: fixed_s is its whole wall

    @property
    def busy(self) -> bool:
        return (self.other_frac or 0.0) > BUSY_CPU_FRAC


def _measured_run(summary: dict[str, Any], host: str, folder: str) -> MeasuredRun | None:
    """An ok or skipped run of `host` with its timeline (None otherwise, and for a run slowed on purpose)."""
    try:
        env, marks = summary.get(run_record.ENV_BLOCK) or {}, summary.get("timeline") or {}
        injected = "DDPBENCH_INJECT" in (env.get(run_record.ENV_VARS) or {})  # slowed on purpose
        if summary.get("status") not in ("ok", "skipped") or env.get("host") != host or injected:
            return None
        wall = float(marks["launcher_exit"]) - float(marks["launcher_start"])
        if summary["status"] == "skipped":
            return MeasuredRun(("", ()), ("", ""), 0, 0.0, wall, wall, 0.0, None, None, folder, True)
        timed, per_rank = float(summary.get("timed_wall_s") or 0.0), float(summary["per_rank_batch"])
        steps, world = int(summary["timed_steps"]), int(summary["world_size"])
        p = {**summary["params"], "world_size": world, "threads_per_rank": env.get("threads_per_rank")}
        cores = int(env.get("cores") or os.cpu_count() or 1)
        timed_work = _work_s(p, cores, steps * per_rank)
        untimed = (int(summary["total_steps"]) - steps) * per_rank + int(p.get("test_size") or 0) / 3
        other = env.get("other_cpu_frac")
        other = float(other) if other is not None else None
        kind, model = _kind(p), (str(p["model"]), _shape(p))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    pace = timed / timed_work if timed > 0 and timed_work > 0 else None
    launch = max(0.0, wall - timed - (pace or 0.0) * _work_s(p, cores, untimed))
    return MeasuredRun(kind, model, world, per_rank, wall - timed, launch, timed, pace, other, folder)


def history_folders(results: Path) -> list[Path]:
    """The results folders whose runs the estimate learns from: `results` first, then those inside
    and beside it that hold runs (results/tiny inside the default `results`, results/lm beside
    results/tiny), the most recently changed first."""
    found = []
    for parent in (results, results.parent):
        try:
            found += [d for d in parent.iterdir() if d.is_dir() and (d / layout.RUNS).is_dir()]
        except OSError:  # no such folder yet
            continue
    mine = results.resolve()
    others = {d.resolve(): d for d in found if d.resolve() != mine}
    return [results, *sorted(others.values(), key=_changed, reverse=True)]


def _changed(folder: Path) -> float:
    try:
        return (folder / layout.RUNS).stat().st_mtime
    except OSError:
        return 0.0


def measured_runs(folders: Iterable[Path], host: str, limit: int = HISTORY_SUMMARIES) -> list[MeasuredRun]:
    """The ok runs of `host` in the folders' runs/ (timelines: not Snakemake's `benchmark:` files,
    whose timer samples the job's memory through /proc/PID/smaps, 8-15 % of a core), reading at
    most `limit` summaries in all."""
    runs: list[MeasuredRun] = []
    read = 0
    for folder in folders:
        if not (folder / layout.RUNS).is_dir():
            continue
        for path in (folder / layout.RUNS).rglob(layout.SUMMARY):
            if read >= limit:
                return runs
            read += 1
            try:
                summary = run_record.read_summary(path)
            except (OSError, ValueError):
                continue
            run = _measured_run(summary, host, str(folder))
            if run is not None:
                runs.append(run)
    return runs


# The machine's busy time when the plan was imported (the workflow's include time): the sample of
# `busy_now` spans the plan's own work since then (its CPU subtracted), with no sleep of its own
# unless that took less than the sample.
def snapshot() -> tuple[float | None, float, float]:
    """(the machine's busy CPU seconds, this process's CPU seconds, the monotonic clock) now."""
    return sysinfo.machine_busy_s(), time.process_time(), time.monotonic()


_SNAPSHOT = snapshot()


def busy_now(sample_s: float = BUSY_SAMPLE_S) -> tuple[float, str]:
    """(share of the CPU other processes take now, how it was read); (0, "") on a quiet machine. A
    run is assumed 1 + that share slower: at most 2x, though a saturated machine can do worse (the
    tiny grid's runs took 2.3-2.9x their quiet wall at a 1-min load of 7.4 on 2 cores)."""
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0, ""
    if load / cores <= BUSY_CPU_FRAC:
        return 0.0, ""
    before, own, start = _SNAPSHOT
    time.sleep(max(0.0, sample_s - (time.monotonic() - start)))  # the plan's own reading since its import, mostly
    after = sysinfo.machine_busy_s()
    if before is None or after is None:
        return 0.0, ""
    sampled = max(0.0, after - before - (time.process_time() - own)) / ((time.monotonic() - start) * cores)
    frac = min(1.0, sampled, load / cores)  # both must say busy: a lagging average, a burst
    if frac <= BUSY_CPU_FRAC:
        return 0.0, ""
    return frac, f"other processes take {frac * 100:.0f} % of the CPU, 1-min load {load:.1f} on {cores} cores"


def _kind(p: dict[str, Any]) -> Kind:
    """The cell's device and the fields whose value adds to its launch (core.params.launch_costs)."""
    return str(p.get("device", "cpu")), tuple(launch_costs(p))


def _extra_s(p: dict[str, Any]) -> float:
    """What the cell's axes add to its fixed seconds (the LaunchCost declared on their fields)."""
    return sum(c.seconds for c in launch_costs(p).values())


def _fixed_default(p: dict[str, Any]) -> float:
    """A run's fixed seconds before any is measured: a CPU cell starts warm (run.warm) unless an axis
    declares it cold (a link: a launcher per node)."""
    cold = p.get("device", "cpu") != "cpu" or any(c.cold for c in launch_costs(p).values())
    return COLD_RUN_S if cold else FIXED_RUN_S


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _skipped(p: dict[str, Any]) -> bool:
    """A cell the launcher records as skipped without starting a rank (its strategy refuses the world size)."""
    try:
        return strategy_traits(str(p["strategy"])).unsupported(int(p["world_size"]))
    except (OSError, ValueError, KeyError):
        return False


def learned_run_s(p: dict[str, Any], runs: list[MeasuredRun], cores: int) -> tuple[float, float, bool] | None:
    """(fixed, timed steps, paced) seconds of a run of cell `p` from the measured runs (None: none of
    its device). The fixed part is the launch cost of the runs most like it (same kind, model and
    world size, else same kind, else plain runs of its device plus what its axes declare they add)
    plus its own untimed steps; the steps are its FLOPs at the pace measured for its model (paced)
    or else at CPU_FORWARD_FLOPS_PER_S: another model's pace is mostly its per-step overhead (an mlp
    at batch 8 ran 27x slower than its FLOPs, gpt_tiny 1.3-2.2x)."""
    kind, model, world = _kind(p), (str(p["model"]), _shape(p)), int(p["world_size"])
    same_kind = [r for r in runs if r.kind == kind]
    same = [r for r in same_kind if r.model == model and r.world == world]
    near = same or same_kind or [r for r in runs if r.kind == (kind[0], ())]
    if not near:
        return None
    timed = timed_steps(p)
    pace = _model_pace(p, [r for r in runs if r.kind[0] == kind[0]]) if timed is not None else None
    untimed = _work_s(p, cores, _untimed_samples(p)) if timed is not None else 0.0
    fixed = _median(r.launch_s for r in near) + (pace or 1.0) * untimed
    if not same_kind:
        fixed += _extra_s(p)
    steps = (pace or 1.0) * _work_s(p, cores, timed * _per_rank(p)) if timed is not None else 0.0
    if not steps and same:  # no FLOPs (a GPU, a model off the catalog, batch auto): their timed wall
        steps = _median(r.timed_s for r in same) or 0.0
    return fixed, max(MIN_TIMED_OVERSHOOT * float(p["min_timed_s"]), steps), pace is not None


def _model_pace(p: dict[str, Any], runs: list[MeasuredRun]) -> float | None:
    """The median pace of the runs of `p`'s model and input (its kind and world size when some are)
    at the per-rank batch nearest its own, None without any."""
    mine = [r for r in runs if r.model == (str(p["model"]), _shape(p)) and r.pace and r.batch > 0]
    mine = [r for r in mine if r.kind == _kind(p)] or mine
    mine = [r for r in mine if r.world == int(p["world_size"])] or mine
    if not mine:
        return None
    gap = {r: abs(math.log(r.batch / _per_rank(p))) for r in mine}
    return _median(r.pace for r in mine if gap[r] <= min(gap.values()) + 1e-9)


def default_run_s(p: dict[str, Any], cores: int) -> tuple[float, float]:
    """(fixed, steps) seconds of a run of cell `p` with nothing measured: FIXED_RUN_S, or COLD_RUN_S
    for a cell that cannot start warm (+ what its axes declare, LAUNCH_COSTS), and compute_s's FLOPs at
    CPU_FORWARD_FLOPS_PER_S, min_timed_s at least."""
    fixed = _fixed_default(p) + _extra_s(p)
    return fixed, max(MIN_TIMED_OVERSHOOT * float(p["min_timed_s"]), compute_s(p, cores))


@dataclass(frozen=True)
class RunEstimate:
    """The plan's estimate of a run's wall (seconds, the mean over the grid's cells) and where it
    came from: the one figure the plan's time line, a sequential design's budget check and the
    progress line (ddpbench.results.progress) all use, so they cannot disagree."""

    per_run_s: float
    source: str  # "learned from ...", "a default, ...", with the load notes
    learned: bool = True  # False: no run of this host to learn from, the defaults (FIXED_RUN_S, ...)

    def total_s(self, runs: int) -> float:
        return runs * self.per_run_s


def run_estimate(
    cells: list[dict[str, Any]],
    results: Path,
    *,
    host: str | None = None,
    now: tuple[float, str] | None = None,
    folders: Iterable[Path] | None = None,
) -> RunEstimate:
    """A run's wall time, learned from the runs this host measured in `folders`
    (history_folders(results)) or a default, with the load it assumes. `host` (this machine's
    name) and `now` (busy_now()) are arguments for the tests."""
    host = socket.gethostname() if host is None else host
    frac, load = busy_now() if now is None else now
    runs = measured_runs(history_folders(results) if folders is None else folders, host)
    skips = [r.fixed_s for r in runs if r.skipped]
    runs = [r for r in runs if not r.skipped]
    skip_s = statistics.median(skips) if skips else SKIPPED_RUN_S
    pool = [r for r in runs if not r.busy] or runs  # quiet runs when there are some
    scale = 1.0 + frac if frac > BUSY_CPU_FRAC and not (pool and pool[0].busy) else 1.0
    cores = os.cpu_count() or 1
    parts, learned, paced, skipped = [], 0, 0, 0
    for p in cells:
        if _skipped(p):
            skipped += 1
            parts.append((skip_s, 0.0))
            continue
        got = learned_run_s(p, pool, cores)
        learned, paced = learned + (got is not None), paced + bool(got and got[2])
        parts.append(got[:2] if got else default_run_s(p, cores))
    fixed = scale * statistics.mean([f for f, _ in parts] or [0.0])
    steps = scale * statistics.mean([s for _, s in parts] or [0.0])
    if learned:
        source = _learned_source(pool, results, (fixed, steps), (learned, paced), len(cells) - learned - skipped)
    else:
        source = _default_source(cells, results)
    if skipped:
        how = f"the median of {len(skips)} measured" if skips else "a default"
        source += f"; {skipped} cell(s) the launcher skips at their world size, {skip_s:.1f} s each ({how})"
    return RunEstimate(fixed + steps, source + _load_notes(runs, pool, frac, load), learned=bool(learned))


def time_estimate(
    cells: list[dict[str, Any]],
    repeats: int | str,
    runs_to_do: int,
    results: Path,
    *,
    estimate: RunEstimate | None = None,
    **learn: Any,
) -> str:
    """The plan's first line: the grid's wall time at `estimate` a run (run_estimate(cells,
    results, **learn) when None)."""
    estimate = run_estimate(cells, results, **learn) if estimate is None else estimate
    return (
        f"{len(cells)} cells x {repeats} repeats; {runs_to_do} run(s) to measure, about "
        f"{_duration(estimate.total_s(runs_to_do))} ({estimate.per_run_s:.0f} s a run, {estimate.source}; "
        "runs are timed one at a time)"
    )


def _learned_source(pool: list[MeasuredRun], results: Path, run_s: tuple, counts: tuple, unlike: int) -> str:
    """Where a learned estimate came from: run_s = (fixed, steps) seconds a run, counts = (cells
    learned, of which paced by their model's runs)."""
    here = sum(r.folder == str(results) for r in pool)
    elsewhere = sorted({r.folder for r in pool} - {str(results)})
    where = [f"{here} in this results folder"] if here else []
    if elsewhere:
        names = ", ".join(elsewhere[:2]) + (f" and {len(elsewhere) - 2} more" if len(elsewhere) > 2 else "")
        where.append(f"{len(pool) - here} in {len(elsewhere)} other results folder(s): {names}")
    (learned, paced), default = counts, f"{CPU_FORWARD_FLOPS_PER_S / 1e9:g} GFLOP/s a CPU thread"
    pace = "the pace measured for their model"
    if paced < learned:
        pace = f"{pace} ({paced} of {learned} cells; the others {default})" if paced else f"the FLOPs default, {default}"
    text = (f"learned from {len(pool)} run(s) of this host ({'; '.join(where)}): {run_s[0]:.1f} s fixed (their "
            f"launch cost + the untimed steps) + {run_s[1]:.1f} s of timed steps, at {pace}")
    if unlike:
        text += (f"; {unlike} cell(s) of another device from the default, {FIXED_RUN_S:g} s fixed on a CPU "
                 f"({COLD_RUN_S:g} s elsewhere) + FLOPs at {default}")  # fmt: skip
    return text


def _default_source(cells: list[dict[str, Any]], results: Path) -> str:
    added = {name for p in cells for name in launch_costs(p)}
    lab = "".join(f" (+ {c.seconds:g} s {c.what})" for name, c in LAUNCH_COSTS.items() if name in added)
    fixed = sorted({_fixed_default(p) for p in cells}) or [FIXED_RUN_S]
    fixed_text = f"{fixed[0]:g} s" if len(fixed) == 1 else f"{fixed[0]:g} s (warm CPU cells) to {fixed[-1]:g} s"
    return (f"a default, no run of this host in {results} or the results folders beside it yet: {fixed_text} "
            f"fixed{lab} + the steps, the longer of {MIN_TIMED_OVERSHOOT:g} x min_timed_s and the model's FLOPs at "
            f"{CPU_FORWARD_FLOPS_PER_S / 1e9:g} GFLOP/s a CPU thread")  # fmt: skip


def _load_notes(runs: list[MeasuredRun], pool: list[MeasuredRun], frac: float, load: str) -> str:
    """What the estimate assumed or observed of the machine's load, each note after a '; '."""
    notes = []
    busy = [r for r in runs if r.busy]
    other = f"other processes took a median {(_median(r.other_frac for r in busy) or 0) * 100:.0f} % of the CPU"
    if busy and pool[0].busy:  # no quiet run: the pool is the busy ones
        slower = 1 + (_median(r.other_frac for r in busy) or 0)
        notes.append(f"all {len(busy)} run(s) learned from were measured on a busy machine ({other}): the estimate "
                     f"assumes that load, about {slower:.1f}x slower than a quiet machine")  # fmt: skip
    elif busy:
        seen = _observed_slowdown(busy, pool)
        seen_text = f"; they took {seen:.1f}x the wall of the quiet runs of their cells" if seen else ""
        notes.append(f"{len(busy)} run(s) measured on a busy machine left out ({other}{seen_text})")
    if frac > BUSY_CPU_FRAC and pool and pool[0].busy:
        notes.append(f"the machine is busy now ({load}), as when they were measured")
    elif frac > BUSY_CPU_FRAC:
        base = "the quiet runs" if pool else "the default"
        notes.append(f"the machine is busy now ({load}): assumed {1 + frac:.1f}x slower than {base}")
    return "".join(f"; {n}" for n in notes)


def _observed_slowdown(busy: list[MeasuredRun], quiet: list[MeasuredRun]) -> float | None:
    """The median over cells measured both ways of busy runs' wall over quiet runs' (None: none)."""
    ratios = []
    for key in {(r.kind, r.model, r.world) for r in busy}:
        slow = _median(r.fixed_s + r.timed_s for r in busy if (r.kind, r.model, r.world) == key)
        fast = _median(r.fixed_s + r.timed_s for r in quiet if (r.kind, r.model, r.world) == key)
        if slow and fast:
            ratios.append(slow / fast)
    return _median(ratios)


def _duration(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"
