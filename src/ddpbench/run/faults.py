"""Fault injection for the fault tests (tests/faults): a rank that fails, hangs, dies or is
slow at a planned step, so that the launcher's diagnosis of each can be checked.

DDPBENCH_INJECT="fail:RANK:STEP" raises in that rank at that step, "hang:RANK:STEP" makes it
sleep (a stuck rank), "kill:RANK:STEP" SIGKILLs it, "oom:RANK:STEP" makes an allocation fail
under an address-space limit, "grow:RANK:STEP" allocates until the kernel's out-of-memory
killer stops it (run it in a memory-limited cgroup), "slow:RANK:MS" makes that rank's forward
MS milliseconds longer in every step (rank imbalance), "slow:RANK:P%" longer by P % of its
previous step, and either with ":KEY=VALUE" appended only in cells whose parameter KEY has that
value (slow:1:10%:strategy=ddp: one strategy 10 % slower on one rank, the rest of a grid as is), "fill:RANK:STEP" fills the filesystem
of the file DDPBENCH_FILL names (another program filling the results disk; training goes on
until a write fails). The training loop (ddpbench.run.loop) reads the plan once
(`injection`) and calls `inject` at the start of the step (`slow` it applies itself).

"pause:WHO:MOMENT" stops a process at a named moment of a run, as a stuck one would, so that a
test can send its signal exactly then (`pause_point`; WHO a rank or `launcher`): `launcher:start`
(before the launcher's signal handlers exist), `launcher:finish` (torchrun has exited, the
summary is not yet completed), `RANK:rendezvous` (before the process group is joined: the
other ranks wait in the rendezvous), `RANK:summary` (the run is measured, its summary not yet
written). A stuck collective is `hang`. Torch is imported only where used: the launcher imports this.

All of it acts only with DDPBENCH_FAULTS=1 (OPT_IN) set too; the launcher and the workflow refuse
to start with a fault variable set without it (`refusal`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


#: The opt-in: fault injection acts only where this is "1" (the test suite sets it), and is recorded
#: in each run's env.env_vars beside the fault. Without it a fault variable is refused (`refusal`).
OPT_IN = "DDPBENCH_FAULTS"
FAULT_VARS = ("DDPBENCH_INJECT", "DDPBENCH_FILL")


def refusal() -> str | None:
    """Why a run must not start here: a fault variable set without the opt-in (a test's tool left
    in a shell, or a received environment, would make production runs fail or slow), or None."""
    found = [v for v in FAULT_VARS if os.environ.get(v)]
    if found and os.environ.get(OPT_IN) != "1":
        return (f"{' and '.join(found)} is set, which injects faults into the runs (the fault tests' tool): unset it, "
                f"or set {OPT_IN}=1 as well to mean it (recorded in every run)")  # fmt: skip
    return None


def injection(rank: int, params: object = None) -> tuple[str, int | str] | None:
    """This rank's planned fault from DDPBENCH_INJECT: (kind, step; for slow MS or "P%"), or None
    (also when a slow's KEY=VALUE does not match `params`, the cell's CellParams)."""
    spec = os.environ.get("DDPBENCH_INJECT", "")
    if not spec or spec.startswith("pause:") or refusal():
        return None
    kind, r, s, *only = spec.split(":")
    if only:
        key, _, value = only[0].partition("=")
        if str(getattr(params, key, None)) != value:
            return None
    if int(r) != rank:
        return None
    return (kind, s) if s.endswith("%") else (kind, int(s))


def slow_seconds(amount: int | str, last_step_s: float) -> float:
    """How long a slow rank sleeps this step: MS, or P % of its previous step (0 before one)."""
    return float(amount[:-1]) / 100 * last_step_s if isinstance(amount, str) else amount / 1000


def inject(kind: str, rank: int, step: int) -> None:
    """Cause fault `kind` now (every kind but `fill` ends in an exception or the rank's death)."""
    if kind == "fill":
        from ddpbench.core import safe_io

        with os.fdopen(safe_io.open_fd(os.environ["DDPBENCH_FILL"], "a"), "ab", buffering=0) as filler:
            with contextlib.suppress(OSError):  # ENOSPC: the disk is full
                while True:
                    filler.write(b"\0" * 4096)
        return
    if kind == "hang":
        time.sleep(10**6)
    if kind == "kill":  # what the kernel's out-of-memory killer does
        os.kill(os.getpid(), signal.SIGKILL)
    import torch

    if kind == "oom":  # a real failed allocation, under an address-space limit
        import resource

        held = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (held + 2**28, resource.getrlimit(resource.RLIMIT_AS)[1]))
        torch.empty(2**33, dtype=torch.uint8).fill_(1)
    if kind == "grow":  # touch memory until the kernel's out-of-memory killer stops this rank
        hog = []
        while True:
            hog.append(torch.ones(2**26, dtype=torch.uint8))
    raise RuntimeError(f"injected failure (DDPBENCH_INJECT) in rank {rank} at step {step}")


def pause_point(who: str | int, moment: str, out: Path) -> None:
    """If DDPBENCH_INJECT is "pause:WHO:MOMENT": mark out/paused_WHO_MOMENT (the test's cue)
    and sleep until a signal ends the process. Else nothing."""
    if os.environ.get("DDPBENCH_INJECT") == f"pause:{who}:{moment}" and not refusal():
        from ddpbench.core import safe_io

        safe_io.atomic_write_text(out / f"paused_{who}_{moment}", "")
        time.sleep(10**6)
