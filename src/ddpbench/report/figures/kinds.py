"""The figure kinds: `KINDS` maps each to its drawing function; `draw_all` draws those the data allow.

Each kind's function returns its figures, none where the grid has no data for it (a figure is
left out rather than drawn empty), as (strategy, figure) pairs: strategy None but for the
per-strategy kinds. The figures of a kind split into parts (too many panels or strategies) keep
the stable name <kind> for the first part and get <kind>_2, <kind>_3, ... for the next;
per-strategy figures are <kind>__<strategy> (a name with characters other than ASCII letters,
digits, '-' and '_', or a long one, is shortened and gets a hash of the original, so two
strategies never share a file). Some kinds are drawn only when a study asks for them
(`ON_REQUEST`).
"""

from __future__ import annotations

import hashlib

from ddpbench.report.figures.breakdown import fig_fixed_cost, fig_phases, fig_profile
from ddpbench.report.figures.checkpointing import fig_checkpointing
from ddpbench.report.figures.energy import fig_energy
from ddpbench.report.figures.layout import TITLES
from ddpbench.report.figures.links import fig_comm_sweep, fig_link
from ddpbench.report.figures.memory import fig_memory_held
from ddpbench.report.figures.mfu import fig_mfu
from ddpbench.report.figures.scaling import (fig_efficiency, fig_epoch_time, fig_karp_flatt, fig_rank_skew,
                                             fig_speedup, fig_throughput)  # fmt: skip
from ddpbench.report.figures.sizes import fig_dataset_size, fig_memory_vs_batch, fig_throughput_vs_batch
from ddpbench.report.figures.tables import Data
from ddpbench.report.figures.training import fig_epoch_throughput, fig_loss, fig_step_time, fig_strategy_bars


def _one(draw):
    """A drawing function that returns figures, as (None, figure) pairs."""
    return lambda d: [(None, f) for f in draw(d)]


KINDS = {
    "speedup": _one(fig_speedup),
    "efficiency": _one(fig_efficiency),
    "karp_flatt": _one(fig_karp_flatt),
    "phases": _one(fig_phases),
    "throughput_vs_batch": _one(fig_throughput_vs_batch),
    "memory_vs_batch": _one(fig_memory_vs_batch),
    "memory_held": _one(fig_memory_held),
    "mfu": _one(fig_mfu),
    "energy": _one(fig_energy),
    "checkpointing": _one(fig_checkpointing),
    "dataset_size": _one(fig_dataset_size),
    "rank_skew": _one(fig_rank_skew),
    "loss": fig_loss,
    "step_time": fig_step_time,
    "comm_sweep": fig_comm_sweep,
    "fixed_cost": _one(fig_fixed_cost),
    "link": _one(fig_link),
    "profile": _one(fig_profile),
    "epoch_throughput": _one(fig_epoch_throughput),
    "strategy_bars": _one(fig_strategy_bars),
    "throughput": _one(fig_throughput),
    "epoch_time": _one(fig_epoch_time),
}
# Kinds a study's report asks for (studies.Study.figures); other reports do not draw them: each is
# another view of numbers the default figures and tables already show.
ON_REQUEST = ("epoch_throughput", "strategy_bars", "throughput", "epoch_time")


def kinds_for(requested=()) -> list[str]:
    """The kinds a report draws: every kind but those drawn on request, plus the `requested` ones."""
    return [k for k in KINDS if k not in ON_REQUEST or k in requested]


def draw_all(d: Data, kinds=None):
    """(kind, stem, title, figure) for every figure the data allow (of `kinds`, default kinds_for()); parts
    after the first of a split figure get _2, _3, ... after the stem."""
    wanted = kinds_for() if kinds is None else kinds
    for kind, draw in KINDS.items():
        if kind not in wanted:
            continue
        figs = draw(d)
        count: dict = {}
        totals: dict = {}
        for strategy, _ in figs:
            totals[strategy] = totals.get(strategy, 0) + 1
        for strategy, fig in figs:
            count[strategy] = count.get(strategy, 0) + 1
            n = count[strategy]
            if strategy is None:
                stem = kind + (f"_{n}" if n > 1 else "")
            else:  # the part inside the hashed name, so no other strategy's file can have this name
                stem = f"{kind}__{_safe(strategy if n == 1 else f'{strategy} ({n})')}"
            title = TITLES[kind] + (f": {strategy}" if strategy else "")
            title += f" ({n} of {totals[strategy]})" if totals[strategy] > 1 else ""
            yield kind, strategy, stem, title, fig


# Kinds drawn from the speedup and fits tables. The others need only the runs and the cells, so
# the report starts them while the fits (the longest table) are still being computed.
FITTED_KINDS = ("speedup", "efficiency", "karp_flatt", "dataset_size")


def _safe(name: str) -> str:
    """A file-name part for `name`: itself when it is short and only ASCII letters, digits, '-' and '_';
    else those characters ('-' for the rest), shortened, plus a hash of the name, so names never collide."""
    stem = "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "-_" else "-" for ch in name)[:60]
    if stem != name:
        stem += "-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return stem
