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
before this process imports torch (so its import of torch and the harness runs beside the
agent's own), single-threaded when it forks.
"""

from __future__ import annotations

import importlib
import sys

from ddpbench.run.quick_exit import freeze_for_exit


FORKED_MODULE = "ddpbench.run.train"
ENTRY_MODULE = "ddpbench.run.torchrun"  # this module by its name (run with -m it is __main__): forked_rank's home


def forks_ranks(argv: list[str]) -> bool:
    """Whether torchrun's arguments ask for forked ranks of the harness (`--start-method fork`
    ... `-m ddpbench.run.train`), read before torch is imported."""
    def after(flag):
        return argv[argv.index(flag) + 1] if flag in argv[:-1] else None

    return after("--start-method") == "fork" and after("-m") == FORKED_MODULE


def start_zygote() -> None:
    """Start multiprocessing's fork server with the harness imported (it imports torch): the
    process the ranks are forked from. Returns at once; the first fork waits for its imports."""
    import multiprocessing
    import multiprocessing.forkserver

    multiprocessing.set_forkserver_preload([FORKED_MODULE, ENTRY_MODULE])
    multiprocessing.forkserver.ensure_running()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    forked = forks_ranks(argv)
    if forked:
        start_zygote()  # before torch is imported here: nothing is threaded yet
    from torch.distributed.run import parse_args, run

    args = parse_args(argv)
    try:
        if forked:
            run_forked(args)
        else:
            run(args)  # raises (ChildFailedError, SystemExit) when a rank fails
    finally:
        freeze_for_exit()


def forked_rank(*argv: str) -> None:
    """A rank's entrypoint, forked from the zygote (which has the harness imported)."""
    from ddpbench.run import train

    train.forked_main(*argv)


def run_forked(args) -> None:
    """torch.distributed.run.run(args) with the ranks forked from the zygote (start_zygote):
    `forked_rank` is their entrypoint, passed by name, so this agent never imports the harness."""
    import uuid

    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args

    if args.standalone:  # as torch's run() does
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    args.start_method = "forkserver"
    config, _, _ = config_from_args(args)
    entry = importlib.import_module(ENTRY_MODULE).forked_rank  # pickled by name: not __main__'s copy
    elastic_launch(config=config, entrypoint=entry)(*args.training_script_args)


if __name__ == "__main__":
    main()
