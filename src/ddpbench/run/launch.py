"""`ddpbench launch`: run one cell with torchrun and always leave a summary.

    ddpbench launch --nproc-per-node P --out DIR [--nnodes N --node-rank R
        --rdzv-endpoint HOST:PORT] [cell flags ...]

Validates the cell flags first (exit 2 naming the bad parameter, nothing started), runs
torchrun with its ranks meeting in a private folder on one node (ddpbench.run.rendezvous: no
socket another host can reach, a folder per cell, so concurrent cells never collide) or a
c10d rendezvous across nodes (torchrun as `python -m ddpbench.run.torchrun`: the same
torch.distributed.run, with a cheaper exit and, on CPU, ranks forked from a zygote with
torch already imported), enforces the wall-clock limit timeout_s + grace, and
guarantees DIR/summary.json (on node 0): if the ranks did not write one (a crash, a kill,
the limit), it writes status failed or timeout; on any failure the summary's `failure`
block names the rank, kind, step and phase (ddpbench.run.diagnose). Exits 0 whenever a
summary exists, so a failed cell never stops the workflow; the training processes'
output is in DIR/train.log. The workflow execs it with `--log FILE --stop-with-parent`:
its output goes to FILE, its result line to stdout, and the cell stops if Snakemake dies.

A cell whose strategy refuses the world size (ddp at 1 rank) is recorded as skipped by the
launcher, with the reason the ranks would give, without starting torchrun (about 3 s saved).
A CPU cell whose ranks per node x threads per rank exceed the usable cores is recorded as
skipped (status skipped, the reason naming the counts) before any rank starts, unless
--allow-oversubscribe is given: then it runs and the ranks see
DDPBENCH_ALLOW_OVERSUBSCRIBE=1 (they flag the run themselves).
"""

from __future__ import annotations

import time

LAUNCHER_START = time.time()  # the timeline's first mark (run_output.TIMELINE_MARKS): before the launcher's imports

import argparse
import contextlib
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from ddpbench.run import diagnose, faults, rendezvous, session
from ddpbench.results import progress
from ddpbench.core import layout, safe_io, storage, sysinfo
from ddpbench.core.params import NO_LINK, CellParams
from ddpbench.core.run_output import RANKS_SUMMARY, failure_summary, write_failure
from ddpbench.core.run_record import read_summary

REASON_CHARS = 2000
ALLOW_OVERSUBSCRIBE_ENV = "DDPBENCH_ALLOW_OVERSUBSCRIBE"
KILL_WAIT_S = 10.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ddpbench launch", description=__doc__.split("\n")[0])
    parser.add_argument("--nproc-per-node", type=int, default=1, help="ranks on this node")
    parser.add_argument("--out", type=Path, required=True, help="run folder")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--rdzv-endpoint", help="HOST:PORT of the c10d rendezvous (multi-node)")
    parser.add_argument("--grace-s", type=float, default=30.0, help="added to timeout_s for the wall-clock limit")
    parser.add_argument("--dump-params", type=Path, help="passed to the ranks (ddpbench train)")
    parser.add_argument(
        "--allow-oversubscribe",
        action="store_true",
        help="run a CPU cell whose ranks per node x threads per rank exceed the usable cores (else: skipped)",
    )
    parser.add_argument("--log", type=Path, help="write the launcher's output here; only its result line goes to stdout")
    parser.add_argument(
        "--stop-with-parent",
        action="store_true",
        help="stop the cell and its ranks when the launcher's parent dies (the workflow execs the launcher, "
        "so a killed Snakemake leaves no cell running)",
    )
    args, params = CellParams.parse_args(parser, argv)
    # Provenance: the ranks record this command line (sysinfo.LAUNCH_COMMAND_ENV), and so
    # does every summary the launcher writes itself: the verb's form, which reruns the cell
    # however the launcher was started (the verb, or by module as srun's and netlab's nodes do).
    args.command = shlex.join(["python", "-m", "ddpbench", "launch", *map(str, sys.argv[1:] if argv is None else argv)])
    if args.nproc_per_node < 1 or args.nnodes < 1:
        parser.exit(2, "error: --nproc-per-node and --nnodes must be >= 1\n")
    if faults.refusal():
        parser.exit(2, f"error: {faults.refusal()}\n")
    if params.link != NO_LINK and args.nnodes != 2:
        parser.exit(2, f"error: --link {params.link} joins two nodes: it needs --nnodes 2 (not {args.nnodes})\n")
    if args.nnodes > 1 and not args.rdzv_endpoint and not on_lab(args, params):
        from ddpbench.cluster import slurm

        if not slurm.in_allocation():
            parser.exit(2, "error: --nnodes > 1 needs --rdzv-endpoint HOST:PORT (or a SLURM allocation)\n")
    args.argv = argv
    args.marks = {"launcher_start": _launcher_start()}
    faults.pause_point("launcher", "start", args.out)
    if args.stop_with_parent:
        signal.signal(signal.SIGTERM, _terminated)
        session.die_with_parent()
    # The run folder's results folder (layout.results_of_run; None for a run folder of another
    # shape): its log (RESULTS/logs/train/...) and the progress files follow no link below it.
    with safe_io.anchor_writes_at(layout.results_of_run(args.out)), storage.output_to(args.log) as output:
        args.output = output
        try:
            return launch(args, params)
        except OSError as err:
            if not storage.is_storage_error(err):
                raise
            # Nothing more can be kept: the job fails (no summary), the workflow says why.
            return storage.fail(output, err, what=getattr(args, "what", str(args.out)))


def launch(args: argparse.Namespace, params: CellParams) -> int:
    """Run the validated cell (main's work once the flags are parsed)."""
    lab = on_lab(args, params)
    if not args.allow_oversubscribe:
        # A lab's nodes share this machine: each gets its half of the cores (netlab.node_cpus).
        cores = sysinfo.usable_cores() // (args.nnodes if lab else 1) or 1
        reason = sysinfo.oversubscription(params.device, params.threads_per_rank, args.nproc_per_node, args.nnodes, cores)
        if reason:
            return skip(args, params, reason, sysinfo.rank_threads(params.threads_per_rank, args.nproc_per_node, cores))
    refusal = world_size_skip(params.strategy, args.nproc_per_node * args.nnodes)
    if not refusal and params.device == "cuda" and args.nnodes == 1 and sysinfo.no_gpu_here():  # (other nodes: theirs)
        refusal = sysinfo.cuda_unavailable(sysinfo.torch_version())
    if refusal:  # the ranks would only say so: the same skipped summary, without torchrun's seconds
        return skip(args, params, refusal, sysinfo.rank_threads(params.threads_per_rank, args.nproc_per_node))
    if lab:
        return across_lab_nodes(args, params)
    if args.nnodes > 1 and not args.rdzv_endpoint:
        return across_slurm_nodes(args, params, args.argv)

    out: Path = args.out
    lead = args.node_rank == 0
    problem = storage.probe(out)  # a full or read-only disk: fail now, not after the ranks ran
    if problem:
        return storage.report(args.output, f"[ddpbench] {out}: {problem}")
    if lead:
        clear_earlier_attempt(out)

    # A workflow stops a job with SIGTERM: turn it into an exception so that the ranks,
    # in their own session, are stopped too instead of being orphaned.
    signal.signal(signal.SIGTERM, _terminated)
    limit = params.timeout_s + args.grace_s
    oom_before = diagnose.oom_kills()
    # Nodes of a multi-node cell share DIR: node 0 logs to train.log, the others apart.
    # torchrun gets SIGTERM when the launcher dies, even by SIGKILL, and stops its ranks: a killed
    # launcher leaves no training behind (session.die_with_parent).
    with contextlib.ExitStack() as stack:
        place = stack.enter_context(rendezvous.private()) if meets_alone(args) else None
        cmd, env = torchrun_command(args, params, out, place)
        log = stack.enter_context(safe_io.open_log(out / ("train.log" if lead else f"train_node{args.node_rank}.log")))
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, preexec_fn=session.die_with_parent
        )
        try:
            rc, timed_out = proc.wait(timeout=limit), False
        except subprocess.TimeoutExpired:
            rc, timed_out = stop(proc), True
        except BaseException:  # Ctrl-C, SIGTERM from the workflow: take the ranks down too
            stop(proc)
            unfinished(out, lead)
            raise
    args.marks["torchrun_exited"] = time.time()
    if not lead:
        return 0 if rc == 0 else 1
    try:
        faults.pause_point("launcher", "finish", out)
        return complete_summary(args, params, out, rc, timed_out, limit, oom_before)
    except (KeyboardInterrupt, SystemExit):
        unfinished(out, lead)
        raise


def unfinished(out: Path, lead: bool) -> None:
    """The launch was interrupted (Ctrl-C, SIGTERM) before it completed the run's summary: the
    run is not a measurement, whatever the ranks wrote, so the next run redoes it."""
    if lead:
        (out / "summary.json").unlink(missing_ok=True)
        (out / RANKS_SUMMARY).unlink(missing_ok=True)


def complete_summary(args, params: CellParams, out: Path, rc: int, timed_out: bool, limit: float, oom_before) -> int:
    """After torchrun: rank 0's summary, or the diagnosed failure in its place, completed with
    the launcher's timeline and published as summary.json; its result line said."""
    ranks_path = out / RANKS_SUMMARY
    summary = read_summary(ranks_path) if ranks_path.exists() else None
    # An ok (or skipped) summary stands even if a rank then failed in teardown: what it
    # measured is complete. Without one, or with rank 0's "failed", the cause is diagnosed.
    if summary is None or summary["status"] == "failed":
        oom_after = diagnose.oom_kills()
        log_text = (out / "train.log").read_text(errors="replace") if (out / "train.log").exists() else ""
        failure = diagnose.diagnose(
            out, args.nproc_per_node * args.nnodes, timed_out=timed_out, limit_s=limit,
            oom_kills_during=(oom_after - oom_before) if None not in (oom_before, oom_after) else 0, log_text=log_text,
            storage_problem=storage.probe(out),
        )  # fmt: skip
        status = "timeout" if failure["kind"] in ("hang", "timeout") else "failed"
        reason = diagnose.summary_reason(failure, f"torchrun exited with code {rc}\n" + error_tail(out))
        args.what = f"{out}: {status} ({failure['reason']}); and its summary"  # if that cannot be written either
        if summary is not None:  # rank 0 wrote "failed" (often about a lost peer): the cause replaces it
            summary = {**summary, "status": status, "reason": reason, "failure": failure}
        else:
            summary = failure_summary(
                params, args.nproc_per_node * args.nnodes, args.nnodes, status, reason, command=args.command,
                failure=failure,
            )  # fmt: skip
    publish(args, out, summary)
    return 0


def publish(args: argparse.Namespace, out: Path, summary: dict) -> None:
    """Write the run's summary.json, with the launcher's marks (run_output.TIMELINE_MARKS), the
    spans and fixed_cost_s, in one atomic write; say its result line. If a full disk refuses
    that write, rank 0's own summary is moved into place as it was (a rename needs no space)."""
    from ddpbench.core import run_output

    args.marks["launcher_exit"] = time.time()
    ranks_path = out / RANKS_SUMMARY
    try:
        run_output.write_json(out / "summary.json", run_output.with_timeline(summary, args.marks))
    except OSError as err:
        if not storage.is_storage_error(err):
            raise
        if ranks_path.exists():
            safe_io.move(ranks_path, out / "summary.json")
        elif not (out / "summary.json").exists():
            raise
        print(f"[ddpbench] warning: {out}: the launcher's timeline was not added ({err})", file=sys.stderr)
    ranks_path.unlink(missing_ok=True)
    args.output.say(with_progress(progress_line(out, summary)))


_first_launch = True


def _launcher_start() -> float:
    """When this launch began: the module's load time for the process's first launch (the
    interpreter's start is a few tens of ms before it), else now."""
    global _first_launch
    first, _first_launch = _first_launch, False
    return LAUNCHER_START if first else time.time()


def add_timeline(args: argparse.Namespace, summary_path: Path) -> None:
    """Add the launcher's marks to a summary.json another launcher published (the lab's node 0):
    this launcher's span bounds the run."""
    publish(args, summary_path.parent, read_summary(summary_path))


def with_progress(line: str) -> str:
    """The result line, with how far the grid is when the workflow runs it (ddpbench.results.progress)."""
    done = progress.advance(line)
    return f"{line} [{done}]" if done else line


def progress_line(out: Path, summary: dict) -> str:
    rate = summary.get("samples_per_s")
    line = f"[ddpbench] {out}: {summary['status']} {rate:.1f} samples/s" if rate else f"[ddpbench] {out}: {summary['status']} - samples/s"
    if summary.get("tokens_per_s"):  # token data: a sample is a sequence
        line += f", {summary['tokens_per_s']:,.0f} tokens/s"
    if summary["status"] != "ok":
        failure = summary.get("failure")
        text = failure["reason"] if failure else (summary["reason"].strip().splitlines() or [""])[-1]
        line += f" ({text})"
    return line


def clear_earlier_attempt(out: Path) -> None:
    """A stale summary (or profile) from an earlier attempt must not pass for this one."""
    stale = [out / "summary.json", out / RANKS_SUMMARY, out / "profile.csv"]
    stale += [p for pattern in ("steps_rank*.csv", "error_rank*.txt", "paused_*") for p in out.glob(pattern)]
    for path in stale:
        path.unlink(missing_ok=True)
    diagnose.clear(out)
    safe_io.remove_temporaries(out)  # left by a process killed mid-write


def world_size_skip(strategy: str, world: int) -> str | None:
    """Why the ranks would skip this strategy at this world size (base.Strategy.unsupported,
    read without importing torch: params.strategy_traits), or None."""
    from ddpbench.strategies import strategy_traits, world_size_refusal

    traits = strategy_traits(strategy)
    return world_size_refusal(strategy, world, traits.min_world, traits.max_world)


def skip(args: argparse.Namespace, params: CellParams, reason: str, threads: int) -> int:
    """Record the cell as skipped without starting a rank. Every node of a multi-node cell
    decides alike (same rule, its own cores); node 0 writes the summary."""
    out: Path = args.out
    if args.node_rank != 0:
        args.output.say(f"[ddpbench] {out} (node {args.node_rank}): skipped ({reason})")
        return 0
    safe_io.make_dir(out)
    clear_earlier_attempt(out)
    world = args.nproc_per_node * args.nnodes
    publish(args, out, failure_summary(params, world, args.nnodes, "skipped", reason, threads, args.command))
    return 0


def across_slurm_nodes(args: argparse.Namespace, params: CellParams, argv: list[str] | None) -> int:
    """--nnodes N inside a SLURM allocation: one launcher per node (ddpbench.cluster.slurm)."""
    from ddpbench.cluster import slurm

    out: Path = args.out
    safe_io.make_dir(out)
    (out / "summary.json").unlink(missing_ok=True)
    try:
        rc = slurm.run_across_nodes(
            sys.argv[1:] if argv is None else argv, args.nnodes, args.nproc_per_node, params.threads_per_rank
        )
        reason = f"srun exited with code {rc}"
    except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
        reason = f"could not start the nodes: {e}"
    if not (out / "summary.json").exists():
        write_failure(
            out, params, args.nproc_per_node * args.nnodes, args.nnodes, "failed", reason + "\n" + error_tail(out),
            command=args.command,
        )  # fmt: skip
        args.output.say(f"[ddpbench] {out}: failed - samples/s ({reason})")
    return 0


def on_lab(args: argparse.Namespace, params: CellParams) -> bool:
    """Whether this launcher makes the two nodes itself, as namespaces joined by the cell's link
    (a node's own launcher, started by netlab, has the rendezvous endpoint)."""
    return params.link != NO_LINK and not args.rdzv_endpoint


def across_lab_nodes(args: argparse.Namespace, params: CellParams) -> int:
    """--link: the two nodes are network namespaces on this machine joined by a veth link
    shaped to the rate (ddpbench.cluster.netlab; root). Without namespaces the cell is skipped with the
    reason, never failed. A signal stops the nodes and deletes the namespaces before exit."""
    from ddpbench.cluster import netlab

    out: Path = args.out
    reason = netlab.available()
    if reason:
        return skip(args, params, f"link {params.link}: {reason}", sysinfo.rank_threads(params.threads_per_rank, args.nproc_per_node))
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminated)  # SystemExit: run_cell's cleanup runs
    try:
        cell_args = params.to_argv() + (["--allow-oversubscribe"] if args.allow_oversubscribe else [])
        netlab.run_cell(out, params.link, args.nproc_per_node, cell_args, params.timeout_s + args.grace_s)
    except netlab.NetlabError as err:
        write_failure(out, params, args.nproc_per_node * 2, 2, "failed", f"netlab: {err}"[-REASON_CHARS:], command=args.command)
    # This launcher's start and exit bound the timeline: making the lab and probing the link
    # count in the launcher span, deleting it in launcher_finish (the fixed cost of the cell).
    add_timeline(args, out / "summary.json")
    return 0


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def torchrun_command(
    args: argparse.Namespace, params: CellParams, out: Path, place: rendezvous.Private | None
) -> tuple[list[str], dict[str, str]]:
    """The command that starts the cell's torchrun and its environment (its timeline mark set now)."""
    cmd = [sys.executable, "-m", "ddpbench.run.torchrun", *rendezvous_args(args, out, place)]  # a cheaper exit
    cmd += ["--nproc-per-node", str(args.nproc_per_node), "--max-restarts", "0"]
    if params.device == "cpu":  # ranks forked with torch already imported (ddpbench.run.torchrun's zygote)
        cmd += ["--start-method", "fork"]
    cmd += ["-m", "ddpbench.run.train", "--out", str(out), *params.to_argv()]
    if args.dump_params:
        cmd += ["--dump-params", str(args.dump_params)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(place.environment() if place else {}))
    env[sysinfo.LAUNCH_COMMAND_ENV] = args.command
    if args.allow_oversubscribe:
        env[ALLOW_OVERSUBSCRIBE_ENV] = "1"
    threads = str(sysinfo.rank_threads(params.threads_per_rank, args.nproc_per_node))
    env.update({name: threads for name in sysinfo.THREAD_POOL_VARS})
    args.marks["torchrun_started"] = time.time()
    env[sysinfo.TIMELINE_ENV] = json.dumps(args.marks)
    return cmd, env


def meets_alone(args: argparse.Namespace) -> bool:
    """Whether the cell's processes are all on this node: they meet in a private folder, with no
    socket another host can reach (ddpbench.run.rendezvous)."""
    return args.nnodes == 1 and not args.rdzv_endpoint


def rendezvous_args(args: argparse.Namespace, out: Path, place: rendezvous.Private | None) -> list[str]:
    if place is not None:
        return place.torchrun_args()
    run_id = hashlib.sha1(str(out.resolve()).encode()).hexdigest()[:16]
    return [
        "--nnodes", str(args.nnodes), "--node-rank", str(args.node_rank), "--rdzv-backend", "c10d",
        "--rdzv-endpoint", args.rdzv_endpoint, "--rdzv-id", run_id,
    ]  # fmt: skip


def stop(proc: subprocess.Popen) -> int:
    """SIGTERM the whole torchrun session (agent and ranks), SIGKILL if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()


def error_tail(out: Path) -> str:
    """The traceback of the rank that failed first (the others often only report the
    lost peer), naming the others; without error files, the end of the log."""
    errors = sorted(out.glob("error_rank*.txt"), key=lambda p: p.stat().st_mtime)
    if not errors:
        log = out / "train.log"
        return (log.read_text(errors="replace") if log.exists() else "")[-REASON_CHARS:]
    first, *others = errors
    also = f"\n(then also failed: {', '.join(p.stem for p in others)})" if others else ""
    return f"[{first.stem} failed first]\n" + first.read_text()[-REASON_CHARS:] + also


if __name__ == "__main__":
    raise SystemExit(main())
