"""`ddpbench train`: run one grid cell under torchrun and write its measurements.

    torchrun --standalone --nproc-per-node P -m ddpbench.run.train --out DIR [--dump-params FILE] [cell flags]

Every rank writes DIR/steps_rank{R}.csv; rank 0 gathers all ranks' step records (one
collective at the end) and writes DIR/summary.json atomically (its keys: core.run_output, docs/harness.md;
under the launcher, summary.ranks.json, which the launcher completes and publishes as summary.json).
Usually started through `ddpbench launch`, which also guarantees a summary
when a rank is killed or the cell runs out of time. Without torchrun it runs world size 1.

Fault injection for the fault tests (DDPBENCH_INJECT): ddpbench.run.faults. Each rank keeps
a heartbeat (ddpbench.run.diagnose) the launcher reads to name the rank, step and phase of a
failure.

Here: the entry point (`main`; `forked_main`, what ddpbench.run.torchrun's forked ranks call)
and `run`, which sets the rank up (threads, device, process group: ddpbench.run.rank), skips
a cell that cannot run here (`skip_reason`), trains it (ddpbench.run.cell, around the loop
of ddpbench.run.loop) and always leaves a status behind.
"""

from __future__ import annotations

import time

RANK_STARTED = time.time()  # timeline mark ranks_started: this module loaded, torch not yet imported

import argparse
import contextlib
import json
import os
import signal
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from ddpbench import strategies
from ddpbench.core import run_output, safe_io, storage, sysinfo
from ddpbench.core.params import CellParams
from ddpbench.core.run_output import write_json
from ddpbench.run import diagnose, faults
from ddpbench.run.cell import execute, wall_clock
from ddpbench.run.quick_exit import freeze_for_exit
from ddpbench.run.rank import Ranks, configure_threads, cuda_device, join_process_group

IMPORTS_DONE = time.time()  # timeline mark imports_done: torch and the harness imported

REASON_CHARS = 2000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ddpbench train", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="run folder (summary.json, steps_rank*.csv)")
    parser.add_argument("--dump-params", type=Path, help="save the final bare model state dict (rank 0) here")
    args, params = CellParams.parse_args(parser, argv)
    return run(params, args.out, args.dump_params)


FORKED_FROM_THREADS: int | None = None  # threads of the process this rank was forked from (None: not forked)


def threads_of(pid: int) -> int | None:
    """How many threads process `pid` has (Linux /proc), or None where that cannot be read."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None


def forked_main(*argv: str) -> None:
    """A rank forked (ddpbench.run.torchrun's zygote) from a process that had imported this module:
    it starts now with its imports done. A failure exits non-zero, as `main` as a script would.
    Signal handlers it may have inherited (an agent's SIGTERM raising an exception inside
    whatever the rank was doing) are reset to a new interpreter's, so a rank the agent stops
    dies of the signal."""
    global RANK_STARTED, IMPORTS_DONE, FORKED_FROM_THREADS
    RANK_STARTED = IMPORTS_DONE = time.time()
    # One thread: no lock can have been copied held (ddpbench.run.torchrun's zygote); more: a risk
    FORKED_FROM_THREADS = threads_of(os.getppid())
    for name in ("SIGTERM", "SIGHUP", "SIGQUIT"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = main(list(argv))
    if code:
        raise SystemExit(code)


def run(params: CellParams, out: Path, dump_params: Path | None = None) -> int:
    """Set up this rank (threads, device, process group), train, and always leave a
    status behind: skipped/failed summaries from rank 0, error_rank{R}.txt from a failing rank."""
    t_start = time.perf_counter()
    marks = start_marks()
    ranks = Ranks.from_env()
    safe_io.make_dir(out)
    heartbeat = diagnose.Heartbeat(out / f"heartbeat_rank{ranks.rank}")  # where this rank is, should it fail
    cuda = params.device == "cuda"
    backend = params.process_group_backend
    threads = configure_threads(params, ranks)
    # Under the launcher (its timeline in the environment), rank 0's summary is the launcher's
    # to complete and publish as summary.json; run by hand, it is the run's summary.
    summary_path = out / (run_output.RANKS_SUMMARY if os.environ.get(sysinfo.TIMELINE_ENV) else "summary.json")

    def finish(status: str, reason: str) -> None:
        if ranks.rank == 0:
            env = sysinfo.environment(backend, threads, started=wall_clock(t_start))
            summary = run_output.make_summary(status, reason, params.as_dict(), ranks.world, ranks.nodes, env)
            write_json(summary_path, run_output.with_timeline(summary, {**marks, "summary_written": time.time()}))

    reason = skip_reason(params, ranks)
    if reason:
        finish("skipped", reason)
        return 0
    device = cuda_device(params, ranks) if cuda else torch.device("cpu")
    try:
        faults.pause_point(ranks.rank, "rendezvous", out)
        join_process_group(params, ranks, device)
        marks["process_group_ready"] = time.time()
        summary = execute(
            params, out, ranks, device, dump_params=dump_params, threads=threads, t_start=t_start, heartbeat=heartbeat,
            marks=marks, forked_from_threads=FORKED_FROM_THREADS,
        )  # fmt: skip
        if summary is not None:
            faults.pause_point(ranks.rank, "summary", out)
            marks["summary_written"] = time.time()  # the write of the summary itself follows (< 1 ms)
            write_json(summary_path, run_output.with_timeline(summary, marks))
        return 0
    except Exception as err:
        tb = traceback.format_exc()
        if storage.is_storage_error(err):  # kept where a full disk cannot erase it
            heartbeat.storage_failed(err)
            tb += f"{storage.explain(err)}\n"
        print(tb, file=sys.stderr, flush=True)
        try:
            safe_io.atomic_write_text(out / f"error_rank{ranks.rank}.txt", tb)
            finish("failed", f"rank {ranks.rank}: {tb[-REASON_CHARS:]}")
        except OSError as again:
            if not storage.is_storage_error(again):
                raise
            heartbeat.storage_failed(err if storage.is_storage_error(err) else again)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


_first_run = True


def start_marks() -> dict[str, float]:
    """The timeline so far (run_output.TIMELINE_MARKS): the launcher's marks (from its
    environment variable) and this rank's start. The first run of a process starts at the
    module's load; another run in the same process (tests) starts now."""
    global _first_run
    first, _first_run = _first_run, False
    marks: dict[str, float] = {}
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        launcher = json.loads(os.environ.get(sysinfo.TIMELINE_ENV) or "{}")
        marks.update({k: float(v) for k, v in launcher.items() if k in run_output.TIMELINE_MARKS})
    now = time.time()
    marks.update(ranks_started=RANK_STARTED if first else now, imports_done=IMPORTS_DONE if first else now)
    return marks


def skip_reason(params: CellParams, ranks: Ranks) -> str | None:
    """Why this cell cannot run here (status skipped), or None."""
    strategy = strategies.get(params.strategy)
    reason = strategy.unsupported(ranks.world)
    if reason:
        return reason
    if params.device == "cuda":
        if not torch.cuda.is_available():
            return sysinfo.cuda_unavailable(torch.__version__)
        if params.process_group_backend == "gloo":
            if strategy.point_to_point and ranks.world > 1:
                return (
                    f"strategy {strategy.name} sends point to point, which gloo does not do for CUDA "
                    "tensors (backend nccl, one GPU per rank, does)"
                )
            return None  # gloo stages CUDA tensors through the host: ranks may share a GPU
        if torch.cuda.device_count() < ranks.local_world:
            return (
                f"device cuda with {ranks.local_world} processes on this node needs as many GPUs; "
                f"{torch.cuda.device_count()} visible (NCCL refuses two ranks on one GPU; backend gloo lets them share it)"
            )
    return None


if __name__ == "__main__":
    code = main()  # the summary, steps and error files are written and closed, the group destroyed
    freeze_for_exit()
    raise SystemExit(code)
