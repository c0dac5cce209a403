"""What a run records: the columns of steps_rank<R>.csv, the keys of summary.json, the
statistics that turn per-rank step records into a summary (pure functions, unit-tested), the
launcher's timeline, and the writing of a summary (the ranks' and the launcher's own). The
timers that produce the step records are in core.timers; the fields of a summary's extra and
env blocks, as the runs.csv columns they become, and its reader are in core.run_record.

Definitions follow docs/metrics.md: a step's time is the maximum over ranks; the first step and
the warm-up steps are excluded from every timed figure. Phases partition a step: they are
read from one rank's timeline, the pacing rank (the one with the most computation, the
rank the others wait for), never as a per-phase maximum over ranks (which would take the
slow rank's compute and the fast rank's waiting, and add up to more than the step).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Sequence

from ddpbench.core import safe_io, sysinfo
from ddpbench.core.params import CellParams
from ddpbench.core.run_record import ENV_BLOCK, EXTRA_BLOCK

PHASES = ("data", "forward", "backward", "comm", "optimizer")
STEP_COLUMNS = (
    "step", "epoch", "rank", "timed", "data_s", "forward_s", "backward_s", "comm_s", "exposed_comm_s",
    "optimizer_s", "other_s", "total_s", "loss", "samples", "comm_calls", "comm_bytes",
)  # fmt: skip
# A rank's own work in a step (what a slower rank makes the others wait for).
COMPUTE_PHASES = ("data", "forward", "backward", "optimizer")

#: Columns of a run's profile.csv (run.profiling writes it; aggregate prepends the run's identity columns).
PROFILE_COLUMNS = ("rank", "activity", "op", "comm", "calls", "self_s_per_step", "share")


# -- summary statistics -------------------------------------------------------------------------

METRIC_KEYS = (
    "global_batch", "per_rank_batch", "total_steps", "timed_steps",
    "step_time_median_s", "step_time_mean_s", "step_time_p95_s", "samples_per_s", "tokens_per_s", "epoch_time_s",
    "timed_wall_s", "wall_time_s",
    "phase_data_s", "phase_forward_s", "phase_backward_s", "phase_comm_s", "phase_exposed_comm_s",
    "phase_optimizer_s", "phase_other_s", "phase_total_s", "phase_imbalance_s",
    "frac_data", "frac_forward", "frac_backward", "frac_comm", "frac_exposed_comm", "frac_optimizer",
    "frac_other", "frac_imbalance",
    "compute_comm_ratio", "comm_calls_per_step", "comm_bytes_per_step", "rank_skew",
    "peak_rss_mb", "peak_rss_mb_per_rank", "cuda_max_allocated_mb",
    # train_*_final: the last step's; train_*_last10_mean: over the last 10 (run.loop.TAIL_STEPS).
    "train_loss_final", "train_acc_final", "train_loss_last10_mean", "train_acc_last10_mean",
    "test_loss", "test_acc", "param_norm",
    "profiled_step_s", "profile_overhead", "profile_wall_s",
)  # fmt: skip
SUMMARY_PHASES = ("data", "forward", "backward", "comm", "exposed_comm", "optimizer", "other")


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def compute_s(record: dict) -> float:
    """A rank's own work in one step: everything but communication and bookkeeping."""
    return sum(record[f"{phase}_s"] for phase in COMPUTE_PHASES)


def step_statistics(
    rank_records: Sequence[Sequence[dict]], timed_wall_s: float | None, dataset_size: int
) -> dict[str, Any]:
    """Timed-step statistics over all ranks' step records (rank_records[r][i] = rank r, step i).

    Per step: the step time is the slowest rank's total; the phases are the pacing rank's
    (most computation), and `other` is the rest of the step time (its bookkeeping, plus
    the gap to the slowest total), so data + forward + backward + exposed_comm + optimizer
    + other = step time. `imbalance` is the spread of computation over ranks (max − min):
    the time the fastest rank waits for the slowest, which blocking collectives hide inside
    the fast rank's communication. Epoch time is fixed work: dataset_size / throughput.
    """
    steps = list(zip(*rank_records))
    timed = [ranks for ranks in steps if all(r["timed"] for r in ranks)]
    out: dict[str, Any] = {"total_steps": len(steps), "timed_steps": len(timed)}
    if not timed:
        return out
    step_time = [max(r["total_s"] for r in ranks) for ranks in timed]
    pacing = [max(ranks, key=compute_s) for ranks in timed]
    out["step_time_median_s"] = statistics.median(step_time)
    out["step_time_mean_s"] = statistics.fmean(step_time)
    out["step_time_p95_s"] = percentile(step_time, 95)
    for phase in SUMMARY_PHASES[:-1]:
        out[f"phase_{phase}_s"] = sum(r[f"{phase}_s"] for r in pacing)
    out["phase_other_s"] = sum(r.get("other_s", 0.0) + t - r["total_s"] for r, t in zip(pacing, step_time))
    out["phase_total_s"] = total = sum(step_time)
    spread = [(max(map(compute_s, ranks)) - min(map(compute_s, ranks)), compute_s(p)) for ranks, p in zip(timed, pacing)]
    out["phase_imbalance_s"] = sum(gap for gap, _ in spread)
    for phase in (*SUMMARY_PHASES, "imbalance"):
        out[f"frac_{phase}"] = out[f"phase_{phase}_s"] / total if total > 0 else None
    compute = out["phase_forward_s"] + out["phase_backward_s"] + out["phase_optimizer_s"]
    exposed = out["phase_exposed_comm_s"]
    calls = sum(r["comm_calls"] for ranks in timed for r in ranks)
    out["compute_comm_ratio"] = compute / exposed if exposed > 0 and calls else None
    # Per step, the busiest rank (gather_scatter's root sends p-1 times a worker's bytes).
    out["comm_calls_per_step"] = statistics.fmean(max(r["comm_calls"] for r in ranks) for ranks in timed)
    out["comm_bytes_per_step"] = statistics.fmean(max(r["comm_bytes"] for r in ranks) for ranks in timed)
    # Compute imbalance relative to the slowest rank's computation (0: perfectly balanced).
    out["rank_skew"] = statistics.median(gap / work if work > 0 else 0.0 for gap, work in spread)
    if timed_wall_s:
        samples = sum(r["samples"] for ranks in timed for r in ranks)
        out["timed_wall_s"] = timed_wall_s
        out["samples_per_s"] = samples / timed_wall_s
        out["epoch_time_s"] = dataset_size / out["samples_per_s"]
    return out


# A run that does not learn answers nothing, however fast it is (issue 24): its loss
# became non-finite, or ended well above where it started (DIVERGED), or spiked far above
# its start before coming back (UNSTABLE). Cross-entropy starts near ln(classes) and falls.
DIVERGED_FACTOR = 1.5
UNSTABLE_FACTOR = 3.0


def training_health(losses: Sequence[float]) -> tuple[str, str]:
    """('ok' | 'unstable' | 'diverged' | 'unknown', reason) from one rank's per-step losses."""
    values = [float(v) for v in losses if v is not None and v != ""]  # NaN and inf kept: they are the point
    if not values:
        return "unknown", "no losses recorded"
    bad = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
    if bad is not None:
        return "diverged", f"loss became {values[bad]} at step {bad}"
    k = max(1, min(5, len(values) // 4))
    # The untrained model's loss is the start (one step: averaging more would take in a spike).
    start, end = values[0], statistics.fmean(values[-k:])
    peak = max(range(len(values)), key=values.__getitem__)
    if start > 0 and end > DIVERGED_FACTOR * start:
        return "diverged", f"loss rose from {start:.3g} to {end:.3g} (x{end / start:.1f}); lower lr or raise the batch size"
    if start > 0 and values[peak] > UNSTABLE_FACTOR * start:
        return "unstable", (f"loss spiked to {values[peak]:.3g} at step {peak} (x{values[peak] / start:.1f} its start "
                            f"{start:.3g}) before ending at {end:.3g}; lower lr")  # fmt: skip
    return "ok", ""


def make_summary(
    status: str,
    reason: str,
    params: dict[str, Any],
    world_size: int,
    nodes: int,
    env: dict[str, Any],
    metrics: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """summary.json with every key of the contract present (metrics null where unknown)."""
    summary: dict[str, Any] = {
        "schema": 1,
        "status": status,
        "reason": reason,
        "params": params,
        "world_size": world_size,
        "nodes": nodes,
    }
    metrics = metrics or {}
    for key in METRIC_KEYS:
        summary[key] = _finite(metrics.get(key))
    summary[EXTRA_BLOCK] = {k: _finite(v) for k, v in (extra or {}).items()}  # runs.csv: run_record.Extra
    summary[ENV_BLOCK] = env  # runs.csv: run_record.Env
    return summary


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: store them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: Path, obj: Any) -> None:
    """Atomically, never through a planted link (safe_io): readers never see half a file."""
    safe_io.atomic_write_text(path, json.dumps(obj, indent=1) + "\n")


# -- a run's timeline: where the wall time of one launch goes ---------------------------------

#: The marks of a run's timeline (summary.json `timeline`), in the order they happen: wall-clock
#: epoch seconds (time.time()) on the machine of the launcher and rank 0, so the launcher's and
#: the ranks' marks share one clock. Marks a run did not reach are absent (a failed run) or null.
TIMELINE_MARKS = (
    "launcher_start",  # the launcher's module is loaded (before its own imports)
    "torchrun_started",  # the launcher has checked the cell and starts torchrun
    "ranks_started",  # train's module is loaded, before it imports torch, or the rank forked (the last rank's)
    "imports_done",  # torch and the harness imported, train.run begins (the last rank's)
    "process_group_ready",  # init_process_group returned (rank 0)
    "model_data_ready",  # dataset, model, strategy, optimizer and loader built (rank 0)
    "warmup_done",  # the first timed step starts (rank 0)
    "timed_steps_done",  # the training loop ended (rank 0)
    "evaluation_done",  # rank 0's share of the test set evaluated
    "summary_written",  # rank 0 gathered the ranks' results and hands the complete summary to the write
    "torchrun_exited",  # torchrun returned to the launcher (every rank exited)
    "launcher_exit",  # the launcher's last act: this timeline added to summary.json
)
#: The spans between consecutive marks (summary.json `timeline_s`, seconds; runs.csv
#: `timeline_<span>_s`), named for what happens in them. They add up to the launcher's wall.
TIMELINE_SPANS = {
    "launcher": ("launcher_start", "torchrun_started"),  # argument checks, storage probe, clearing an old attempt
    "torchrun": ("torchrun_started", "ranks_started"),  # torchrun's start (it imports torch), rendezvous, spawning
    "imports": ("ranks_started", "imports_done"),  # each rank imports torch and ddpbench (0: forked)
    "process_group": ("imports_done", "process_group_ready"),  # threads, skip checks, init_process_group
    "setup": ("process_group_ready", "model_data_ready"),  # dataset, model, wrap, optimizer, loader
    "warmup": ("model_data_ready", "warmup_done"),  # untimed steps: the first and warmup_steps
    "timed_steps": ("warmup_done", "timed_steps_done"),  # the timed steps (and the timing agreement pauses)
    "evaluation": ("timed_steps_done", "evaluation_done"),  # the test set
    "results": ("evaluation_done", "summary_written"),  # MFU count and peak, step files, gather, replay of single, provenance
    "teardown": ("summary_written", "torchrun_exited"),  # destroy_process_group, exits, torchrun noticing
    "launcher_finish": ("torchrun_exited", "launcher_exit"),  # the launcher reads, diagnoses, rewrites the summary
}


def timeline_spans(marks: dict[str, Any]) -> dict[str, float | None]:
    """The seconds of every span whose two marks are known (else null)."""
    spans: dict[str, float | None] = {}
    for name, (start, end) in TIMELINE_SPANS.items():
        a, b = marks.get(start), marks.get(end)
        spans[name] = b - a if isinstance(a, (int, float)) and isinstance(b, (int, float)) else None
    return spans


def fixed_cost_s(marks: dict[str, Any], timed_wall_s: float | None) -> float | None:
    """The launcher's wall (launcher_start to launcher_exit) minus the timed wall (what
    throughput divides by): what one run costs beyond its measurement. Null without both."""
    start, end = marks.get("launcher_start"), marks.get("launcher_exit")
    if not isinstance(start, (int, float)) or not isinstance(end, (int, float)):
        return None
    return (end - start) - (timed_wall_s or 0.0)


def with_timeline(summary: dict[str, Any], marks: dict[str, Any]) -> dict[str, Any]:
    """The summary with `timeline` (marks merged over those it has, in TIMELINE_MARKS
    order), `timeline_s` (the spans) and `fixed_cost_s` set."""
    merged = {**(summary.get("timeline") or {}), **{k: v for k, v in marks.items() if v is not None}}
    timeline = {name: merged[name] for name in TIMELINE_MARKS if name in merged}
    return {
        **summary,
        "timeline": timeline,
        "timeline_s": timeline_spans(timeline),
        "fixed_cost_s": fixed_cost_s(timeline, summary.get("timed_wall_s")),
    }


#: A launched run's rank 0 writes its summary here; the launcher completes it (a diagnosed
#: failure, its timeline) and publishes it as summary.json in one atomic write, so that
#: summary.json, once it exists, is the run's complete record: a reader (the workflow's status,
#: a rerun after a stop) never sees a summary still to be rewritten.
RANKS_SUMMARY = "summary.ranks.json"


def failure_summary(
    params: CellParams,
    world: int,
    nodes: int,
    status: str,
    reason: str,
    threads_per_rank: int | None = None,
    command: str | None = None,
    failure: dict | None = None,
) -> dict[str, Any]:
    """The launcher's own summary (no rank wrote one). Its provenance is the launcher
    process's: started when the launcher did, ended now, with the launcher's command."""
    env = sysinfo.environment(params.process_group_backend, threads_per_rank or params.threads_per_rank or None, command=command)
    summary = make_summary(status, reason, params.as_dict(), world, nodes, env)
    if failure is not None:
        summary["failure"] = failure
    return summary


def write_failure(out: Path, *args: Any, **kwargs: Any) -> None:
    """failure_summary(*args, **kwargs) written as the run's summary.json."""
    write_json(out / "summary.json", failure_summary(*args, **kwargs))
