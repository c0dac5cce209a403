"""Which findings the report keeps, and in what order.

At most each kind's `at_most` findings, then at most the report's limit in all (`trim`). Order: the
kinds by their declared `order`, except that the answer to the question the grid asked leads
(`answers_first`): a link study's crossings come first, else the memory sharding saves, and a comparison the intervals could not
decide (a tie: no strategy is "fastest") comes after the scaling verdicts rather than before them.
Each kind's numbers are declared by its topic module (`common.Kind`); `kinds` maps every kind's
name to its Kind, in their order.
"""

from __future__ import annotations

from ddpbench.report.findings.common import Finding, Kind


def trim(groups: dict[str, list[Finding]], max_items: int, kinds: dict[str, Kind]) -> list[Finding]:
    """At most `at_most` per kind, then at most max_items in all: the longest kind loses its last
    item first (on a tie, the kind of the lowest `trim`: warnings and memory last), so every kind
    keeps one while it can; with every kind down to one, whole kinds go by their `drop`."""
    kept = {k: list(groups.get(k, []))[: kinds[k].at_most] for k in kinds}
    trim_first = sorted(kinds, key=lambda k: kinds[k].trim)
    drop_whole = sorted(kinds, key=lambda k: kinds[k].drop)
    while sum(map(len, kept.values())) > max(max_items, 0):
        longest = max(trim_first, key=lambda k: len(kept[k]))  # max keeps the first of equals
        if len(kept[longest]) > 1:
            kept[longest].pop()
        else:  # every kind down to one: drop whole kinds, warnings last
            victim = next(k for k in drop_whole if kept[k])
            kept[victim].pop()
    return [f for k in kinds for f in kept[k]]


def answers_first(found: list[Finding], kinds: dict[str, Kind]) -> list[Finding]:
    """The answer to the question the grid asked leads: a link study's crossings first (its grid
    asked how the strategies degrade on slower links), else what sharding saves in memory (a grid
    that measures a sharded strategy beside ddp asked what it buys), and a comparison the intervals
    could not decide after the scaling verdicts (a tie says no strategy is fastest; the speedups say
    whether any beats one process). Otherwise the kinds' order."""
    present = {f.kind for f in found}
    lead = "link" if "link" in present else "memory" if "memory" in present else None
    after_scaling = kinds["scaling"].order + 0.5

    def rank(f: Finding) -> float:
        if f.kind == lead:
            return float("-inf")
        return after_scaling if f.kind == "winner" and not f.decided else kinds[f.kind].order

    return sorted(found, key=rank)  # stable: each kind keeps its own order
