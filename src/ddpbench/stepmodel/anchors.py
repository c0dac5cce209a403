"""The cells whose runs give the step model every part it needs to predict the rest of a grid (what
`until_decided.predict` measures first): the baseline strategy's cells (its compute at each per-rank
batch), each other strategy once for every combination of the axes the model does not extrapolate
(model, batch, precision, ...) at its smallest world size (its message, its compute on top of the
baseline's, its schedule's correction), and two communicating strategies at every value of the axes
it does extrapolate (a world size, a node count, a link, a bucket size: the link's latency and
bandwidth, how compute slows with more ranks). Two, so that each can be held out and predicted from
the other and its own strategy elsewhere, as every cell not measured is: the model's held-out error
then describes the predictions it makes (one cell alone there, held out, takes its link or world
size with it, and the check measures an extrapolation no prediction makes). Cells whose schedule the model does not know (the
pipeline's stages) are all measured. Picks follow the grid's order, so a plan is the same every time.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import pandas as pd

from ddpbench.strategies import strategy_traits

# What the model extrapolates along: a strategy measured at one value of these predicts the others.
EXTRAPOLATED = ("world_size", "nodes", "link", "bucket_mb")
UNMODELLED = ("stages",)  # schedules the model cannot predict (model.StepModel.parts)
PER_VALUE = 2  # communicating strategies measured at each value of an extrapolated axis


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
    talking = order[talks.reindex(order.index).to_numpy()]
    for axis in (a for a in EXTRAPOLATED if a in axes and a in cells):
        for _, group in talking.groupby(talking[axis].astype(str), sort=False):
            have = [c for c in group.index if c in set(chosen)]
            # two strategies at every value, where there are two: held out in turn, each is predicted as the
            # cells never run are, from its strategy elsewhere and the other one here (holdout.validate)
            strategies = {strategy[c] for c in have}
            for c in group.index:
                if len(have) >= PER_VALUE or len(strategies) >= group["strategy"].nunique():
                    break
                if c not in have and strategy[c] not in strategies:
                    chosen.append(c)
                    have.append(c)
                    strategies.add(strategy[c])
    return [c for c in cells.index if c in set(chosen)]
