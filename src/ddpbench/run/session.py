"""Where a cell's processes sit for the kernel's scheduler and how they go when their parent goes:
the launcher's torchrun (`die_with_parent`) and the ranks forked from the zygote (`own_session`).

Why sessions matter for the numbers: with autogroup scheduling (Linux's default on desktops and
many servers, /proc/sys/kernel/sched_autogroup_enabled = 1) CPU time is shared fairly between
*sessions*, not processes. torch elastic starts every rank of a plain torchrun in a session of its
own (`start_new_session=True`), so a p-rank cell gets p shares of a busy machine. Ranks forked
from the zygote stayed in the launcher's one session: under background load a 2-rank ddp cell
stepped in 0.61-0.76 s forked against 0.39-0.41 s through plain torchrun (issue 68).
"""

from __future__ import annotations

import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Have the kernel send `sig` to this process when its parent dies, even by SIGKILL, which no
    handler sees (Linux; elsewhere nothing). Called in a child right after its fork."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        pass


def own_session() -> None:
    """Make this forked rank the leader of a session of its own, as torchrun's ranks are, so that
    it gets its own share of the CPU. It then no longer gets the signals the launcher sends to the
    cell's process group, so it dies with its parent instead: the zygote it was forked from, which
    is in that group and goes with it (a SIGTERM, or the SIGKILL that follows one ignored); the
    agent stops it as before, by its pid. A parent already gone (the check after the call) ends
    it at once."""
    zygote = os.getppid()
    try:
        os.setsid()
    except OSError:  # already a group leader (not a fork): stays where it is
        return
    die_with_parent(signal.SIGTERM)
    if os.getppid() != zygote:  # the zygote died before the kernel was told
        os.kill(os.getpid(), signal.SIGTERM)
