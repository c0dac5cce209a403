"""A cheap exit for a process whose work is over: the launcher's torchrun agent (run.torchrun)
and the ranks (run.train) both call it, so it is a module of its own rather than one of theirs.
With torch imported, the interpreter's final garbage collections are most of a process's exit
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
