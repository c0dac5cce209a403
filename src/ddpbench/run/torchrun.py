"""`python -m ddpbench.run.torchrun ARGS`: torchrun itself (`torch.distributed.run.main`, the
function torch's `torchrun` console script runs, with the same arguments), whose process
exits without the interpreter's final garbage collections (`freeze_for_exit`).

The launcher starts every cell's agent this way, and the ranks call `freeze_for_exit` once
their run is over: with torch imported, those collections are most of a process's exit
(0.65-1.2 s of it on 2 cores; benchmarks/launch_floor.py measures the whole cell).

With `--start-method fork` and `-m ddpbench.run.train` (the launcher's choice for CPU cells), the
ranks are forked with the harness already imported, instead of each starting as a new
interpreter that imports torch again: they skip those ~2 s of imports (run-to-run noise here
is per run, so a cheaper run buys more repeats). torchrun ignores --start-method for a
module; this is what it would mean. Not for CUDA: a process that touched CUDA cannot fork.

They are forked from a zygote, not from the agent: the agent has threads by then (its
rendezvous store's two server threads, the rendezvous keep-alive timer), and a fork copies a
lock another thread holds, locked, with no thread left to release it. A 4-rank cell hung so,
one rank blocked for good in its TCPStore client's constructor and the others waiting for it
until the run's timeout. The zygote is multiprocessing's fork server, started first thing,
single-threaded when it forks, with torch, torchrun and the harness imported. The agent is
forked from it too (`run_agent_forked`), so a CPU cell imports torch once, not twice: this
process never imports it (a cell's CPU fell from 3.9 to 2.5 s for single, 5.5 to 3.9 s for ddp
at p = 2, on 2 cores). Where the cell imports torch._dynamo anyway (DDP's constructor,
fully_shard, pipelining, torch's AdamW), the zygote imports it too (`zygote_preload`): a ddp
cell's setup fell from 2.0-2.3 s to 0.3 s and its launch from 4.5-5.0 s to 4.0-4.5 s here.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys

from ddpbench.run.quick_exit import freeze_for_exit


FORKED_MODULE = "ddpbench.run.train"
AGENT_MODULE = "torch.distributed.run"  # what the agent imports: the zygote imports it once for both
ENTRY_MODULE = "ddpbench.run.torchrun"  # this module by its name (run with -m it is __main__): the forked entrypoints' home


def _after(argv: list[str], flag: str) -> str | None:
    """The value following `flag` in `argv` (None: absent)."""
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def forks_ranks(argv: list[str]) -> bool:
    """Whether torchrun's arguments ask for forked ranks of the harness (`--start-method fork`
    ... `-m ddpbench.run.train`), read before torch is imported."""
    return _after(argv, "--start-method") == "fork" and _after(argv, "-m") == FORKED_MODULE


def cell_of(argv: list[str]):
    """The cell torchrun's arguments start (the flags after `-m MODULE`) as the rank reads them: a typed
    CellParams (core.params, no torch), or None where a flag's value is one the rank refuses."""
    import argparse

    from ddpbench.core.params import CellParams, ParamError

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    CellParams.add_arguments(parser)
    flags, _ = parser.parse_known_args(argv[argv.index("-m") + 2 :] if "-m" in argv else [])
    try:
        return CellParams.from_namespace(flags)
    except (ParamError, ValueError):
        return None


def zygote_preload(argv: list[str]) -> list[str]:
    """The modules the zygote imports for the cell in torchrun's arguments: the harness, and
    torch._dynamo where the cell imports it anyway (its strategy's wrap, torch's AdamW, compile, a
    torchvision model: torchvision.models imports it; 1.7-1.8 s a rank on 2 cores, paid once
    here). Not for the others: they never import it, and a process that has it starts 1.3 s
    later and exits slower (ddpbench.run.quick_exit)."""
    from ddpbench.core.params import TORCHVISION_MODELS
    from ddpbench.strategies import strategy_traits

    cell = cell_of(argv)
    if cell is None:  # the rank refuses it at once, naming the flag: nothing to preload for it
        return [FORKED_MODULE, ENTRY_MODULE]
    compiled, adamw = cell.compile != "none", cell.optimizer == "adamw"
    dynamo = adamw or compiled or strategy_traits(cell.strategy).imports_dynamo
    extra = ["torchvision.models"] if cell.model in TORCHVISION_MODELS else ["torch._dynamo"] if dynamo else []
    return [FORKED_MODULE, ENTRY_MODULE, *extra]


def start_zygote(preload: list[str]) -> None:
    """Start multiprocessing's fork server with `preload` imported (the harness: it imports
    torch): the process the ranks are forked from. Returns at once; the first fork waits for
    its imports. None of them starts a thread (tests/integration/test_launch.py)."""
    import multiprocessing
    import multiprocessing.forkserver

    multiprocessing.set_forkserver_preload(preload)
    multiprocessing.forkserver.ensure_running()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if forks_ranks(argv):
        preload = [*zygote_preload(argv), AGENT_MODULE]
        zygote = warm_zygote(preload)
        if zygote is None:
            start_zygote(preload)  # before anything here imports torch or starts a thread
        raise SystemExit(run_agent_forked(argv, zygote))
    from torch.distributed.run import parse_args, run

    try:
        args = parse_args(argv)
        if args.nnodes in ("1", "1:1"):
            skip_join_skew()
        run(args)  # raises (ChildFailedError, SystemExit) when a rank fails
    finally:
        freeze_for_exit()


def warm_zygote(preload: list[str]) -> int | None:
    """The pid of a zygote forked from a server with `preload` imported (ddpbench.run.warm), or
    None: a cold start (switched off, or not to be had here: said in the cell's log)."""
    from ddpbench.run import warm

    if not warm.enabled():
        return None
    try:
        return warm.zygote(preload)
    except Exception as err:  # whatever stops it (another OS, a server gone), the cell still runs: cold
        print(f"[ddpbench] a cold start (no warm zygote: {err})", file=sys.stderr, flush=True)
        return None


def run_agent_forked(argv: list[str], zygote: int | None = None) -> int:
    """Run torchrun's agent in a process forked from the zygote, which has torch imported, and
    return its exit code (128 + N for signal N, as a shell says). This process never imports
    torch: the agent's own import was 2 CPU s of every cell's 4-5.5. It stays the session's
    leader that the launcher waits for and signals; the launcher stops a cell by signalling its
    whole process group, which reaches the agent directly, so a signal is passed on to the
    agent only when the launcher is gone (the parent-death signal: only this process gets it).
    A warm zygote (`zygote`, its pid) is in a session of its own, out of that group's reach:
    every signal is passed on to its group, the zygote and the agent."""
    import multiprocessing

    launcher = os.getppid()

    def pass_on(signum, frame):
        if zygote is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(zygote, signum)
        elif os.getppid() != launcher:
            os.kill(agent.pid, signum)

    entry = importlib.import_module(ENTRY_MODULE).forked_agent  # pickled by name: not __main__'s copy
    agent = multiprocessing.get_context("forkserver").Process(target=entry, args=(argv,), name="torchrun")
    agent.start()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, pass_on)
    agent.join()
    return 128 - agent.exitcode if agent.exitcode < 0 else agent.exitcode


def forked_agent(argv: list[str]) -> None:
    """torchrun's agent (`torch.distributed.run.run`), forked from the zygote: its ranks are
    forked from the same zygote (`forked_rank` is their entrypoint, passed by name, so the agent
    needs nothing of the harness). multiprocessing would start a second fork server for this
    process's requests, since it did not start the first itself; the first's address and the pipe
    that keeps it alive are inherited (Python 3.11-3.13), so it is told that one is running."""
    import uuid
    import multiprocessing.forkserver

    from ddpbench.run import session

    session.die_with_parent()  # the zygote: gone with a warm one's cell (ddpbench.run.warm)

    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, parse_args

    zygote = multiprocessing.forkserver._forkserver  # its state as the zygote left it to this child
    if zygote._forkserver_address is not None and zygote._forkserver_alive_fd is not None:
        zygote.ensure_running = lambda: None  # it runs: it forked this process (else a new one starts: slower, same result)
    args = parse_args(argv)
    if args.standalone:  # as torch's run() does
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    args.start_method = "forkserver"
    if args.nnodes in ("1", "1:1"):
        skip_join_skew()
    config, _, _ = config_from_args(args)
    # forked_rank is ENTRY_MODULE's here (this function came from it by name), so it pickles by name
    elastic_launch(config=config, entrypoint=forked_rank)(*args.training_script_args)


def skip_join_skew() -> None:
    """torch elastic delays a node's first rendezvous by a random 0-0.3 s so that many nodes do
    not reach the store at once (dynamic_rendezvous's `next_rendezvous`, round 0); the one node of
    a single-node cell meets nobody, and waited 0.15 s a run on average for nothing. Every other
    delay (a failed state write's backoff, polling for other nodes) stays."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    delay = getattr(dynamic_rendezvous, "_delay", None)  # torch's private helper: another torch may lack it
    if delay is None:
        return

    def without_first_round_skew(seconds):
        if seconds != FIRST_ROUND_SKEW:
            delay(seconds)

    dynamic_rendezvous._delay = without_first_round_skew


FIRST_ROUND_SKEW = (0, 0.3)  # dynamic_rendezvous's argument to _delay for that skew (torch 2.1-2.15)


def forked_rank(*argv: str) -> None:
    """A rank's entrypoint, forked from the zygote (which has the harness imported), in a session
    of its own as torchrun's ranks are (ddpbench.run.session: a share of the CPU each)."""
    from ddpbench.run import session, train

    session.own_session()

    train.forked_main(*argv)


if __name__ == "__main__":
    main()
