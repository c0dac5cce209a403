"""`python -m ddpbench.torchrun ARGS`: torchrun itself (`torch.distributed.run.main`, the
function torch's `torchrun` console script runs, with the same arguments), whose process
exits without the interpreter's final garbage collections (`freeze_for_exit`).

The launcher starts every cell's agent this way, and the ranks call `freeze_for_exit` once
their run is over: with torch imported, those collections are most of a process's exit
(0.65-1.2 s of it on 2 cores; benchmarks/launch_floor.py measures the whole cell).

With `--start-method fork` and `-m ddpbench.train` (the launcher's choice for CPU cells), the
agent imports the harness once and forks the ranks from itself with `ddpbench.train` as a
function entrypoint (torch's own fork start method), instead of starting each rank as a new
interpreter that imports torch again: the ranks skip those ~2 s of imports (run-to-run noise
here is per run, so a cheaper run buys more repeats). torchrun ignores --start-method for a
module; this is what it would mean. Not for CUDA: a process that touched CUDA cannot fork.
"""

from __future__ import annotations

import gc
import sys


def freeze_for_exit() -> bool:
    """Make the interpreter's exit cheap once a process's work is over: gc.freeze() moves
    every live object out of the final collections' reach. Nothing else is skipped:
    atexit handlers, flushes and module teardown run as usual; only reference cycles
    still alive at exit are left to the operating system. Call it only when every file
    the process writes is closed. Not when triton is loaded (torch._dynamo imports it,
    and DistributedDataParallel imports torch._dynamo): its nanobind leak check at exit
    would print every object the freeze kept into the log. Returns whether it froze."""
    if "triton" in sys.modules:
        return False
    gc.freeze()
    return True


FORKED_MODULE = "ddpbench.train"


def main(argv: list[str] | None = None) -> None:
    from torch.distributed.run import parse_args, run

    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.start_method == "fork" and args.module and args.training_script == FORKED_MODULE:
            run_forked(args)
        else:
            run(args)  # raises (ChildFailedError, SystemExit) when a rank fails
    finally:
        freeze_for_exit()


def run_forked(args) -> None:
    """torch.distributed.run.run(args) with ddpbench.train.forked_main as the ranks' entrypoint."""
    import uuid

    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args

    from ddpbench import train  # imported here, once, before the fork

    if args.standalone:  # as torch's run() does
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    config, _, _ = config_from_args(args)
    elastic_launch(config=config, entrypoint=train.forked_main)(*args.training_script_args)


if __name__ == "__main__":
    main()
