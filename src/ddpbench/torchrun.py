"""`python -m ddpbench.torchrun ARGS`: torchrun itself (`torch.distributed.run.main`, the
function torch's `torchrun` console script runs, with the same arguments), whose process
exits without the interpreter's final garbage collections (`freeze_for_exit`).

The launcher starts every cell's agent this way, and the ranks call `freeze_for_exit` once
their run is over: with torch imported, those collections are most of a process's exit
(0.65-1.2 s of it on 2 cores; benchmarks/launch_floor.py measures the whole cell).
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


def main(argv: list[str] | None = None) -> None:
    from torch.distributed.run import main as torchrun

    try:
        torchrun(argv)  # raises (ChildFailedError, SystemExit) when a rank fails
    finally:
        freeze_for_exit()


if __name__ == "__main__":
    main()
