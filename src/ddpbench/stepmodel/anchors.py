"""The cells whose runs give the step model every part it needs to predict the rest of a grid (what
`until_decided.predict` measures first): the baseline strategy's cells (its compute at each per-rank
batch), each other strategy once for every combination of the axes the model does not extrapolate
(model, batch, precision, ...) at its smallest world size (its message, its compute on top of the
baseline's, its schedule's correction), and at least one communicating cell at every value of the axes
it does extrapolate (a world size, a node count, a link, a bucket size: the link's latency and
bandwidth, how compute slows with more ranks). Cells whose schedule the model does not know (the
pipeline's stages) are all measured. Picks follow the grid's order, so a plan is the same every time.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import pandas as pd

from ddpbench.strategies import strategy_traits

# What the model extrapolates along: a strategy measured at one value of these predicts the others.
EXTRAPOLATED = ("world_size", "nodes", "link", "bucket_mb")
UNMODELLED = ("stages",)  # schedules the model cannot predict (model.StepModel.parts)


def anchors(cells: pd.DataFrame, axes: Sequence[str], baseline: Mapping[str, Any]) -> list:
    """The index labels of `cells` (one row per cell: its `strategy`, `world_size` and axis values, in
    grid order) to measure first; `axes` the grid's axes, `baseline` the config's baseline."""
    strategy = cells["strategy"].astype(str)
    schedule = strategy.map(lambda s: strategy_traits(s).schedule)
    world = pd.to_numeric(cells["world_size"])
    base = strategy == str(baseline.get("strategy", "single"))
    talks = ~base & (world > 1) & ~schedule.isin(["none", *UNMODELLED])
    chosen = list(cells.index[base | schedule.isin(UNMODELLED)])
    order = cells.assign(_p=world).sort_values("_p", kind="stable")  # smallest world size first, else grid order
    kept = [a for a in axes if a not in EXTRAPOLATED and a in cells]
    rest = order[~base & (world > 1)]
    for _, group in rest.groupby([rest[a].astype(str) for a in kept], sort=False) if kept else [(None, rest)]:
        chosen.append(group.index[0])
    for axis in (a for a in EXTRAPOLATED if a in axes and a in cells):
        talking = order[talks.reindex(order.index).to_numpy()]
        covered = set(cells.loc[[c for c in chosen if talks[c]], axis].astype(str))
        for value, group in talking.groupby(talking[axis].astype(str), sort=False):
            if value not in covered:
                chosen.append(group.index[0])
                covered.add(value)
    return [c for c in cells.index if c in set(chosen)]
