"""Which findings the report keeps, and in what order.

At most PER_KIND findings per kind, then at most the report's limit in all (`trim`). Order: the
kinds in the order of KINDS, except that the answer to the question the grid asked leads
(`answers_first`): a link study's crossings come first, else the memory sharding saves, and a comparison the intervals could not
decide (a tie: no strategy is "fastest") comes after the scaling verdicts rather than before them.
"""

from __future__ import annotations

from ddpbench.report.findings.common import KINDS, Finding

# At most this many findings per kind before the overall limit is applied.
PER_KIND = {"winner": 3, "memory": 3, "scaling": 3, "time": 3, "mfu": 1, "batch": 1, "dataset": 1, "link": 2, "fit": 3,
            "warning": 6}  # fmt: skip
# Who gives up extras first; memory last: where a sharded strategy ran beside ddp, it is the answer.
TRIM_FIRST = ("scaling", "fit", "winner", "time", "mfu", "batch", "dataset", "link", "warning", "memory")
# With every kind down to one, whole kinds go in this order (warnings last).
DROP_WHOLE = ("fit", "mfu", "dataset", "batch", "link", "time", "memory", "scaling", "winner", "warning")


def trim(groups: dict[str, list[Finding]], max_items: int) -> list[Finding]:
    """At most PER_KIND per kind, then at most max_items in all: the longest kind loses its last
    item first (on a tie in the order of TRIM_FIRST: warnings and memory last), so every kind keeps one while it can."""
    kept = {k: list(groups.get(k, []))[: PER_KIND[k]] for k in KINDS}
    while sum(map(len, kept.values())) > max(max_items, 0):
        longest = max(TRIM_FIRST, key=lambda k: len(kept[k]))  # max keeps the first of equals
        if len(kept[longest]) > 1:
            kept[longest].pop()
        else:  # every kind down to one: drop whole kinds from the end, warnings last
            victim = next(k for k in DROP_WHOLE if kept[k])
            kept[victim].pop()
    return [f for k in KINDS for f in kept[k]]


def answers_first(found: list[Finding]) -> list[Finding]:
    """The answer to the question the grid asked leads: a link study's crossings first (its grid
    asked how the strategies degrade on slower links), else what sharding saves in memory (a grid
    that measures a sharded strategy beside ddp asked what it buys), and a comparison the intervals
    could not decide after the scaling verdicts (a tie says no strategy is fastest; the speedups say
    whether any beats one process). Otherwise the order of KINDS."""
    kinds = {f.kind for f in found}
    lead = "link" if "link" in kinds else "memory" if "memory" in kinds else None
    after_scaling = KINDS.index("scaling") + 0.5

    def rank(f: Finding) -> float:
        if f.kind == lead:
            return -1
        return after_scaling if f.kind == "winner" and not f.decided else KINDS.index(f.kind)

    return sorted(found, key=rank)  # stable: each kind keeps its own order
