"""What the workflow needs before any run starts, without torch.

`study` is the plan as one object: `Study.from_config` builds, once, the grid's cells, the
results folder's layout (core.layout) and a sequential design's settings and questions; the
workflow (common.smk), the design's checkpoint (`decide`), the status and a report rebuilt from
an archive share it. `design` holds the rounds of `repeats: until_decided` and their typed
`Decision` (the statistics are analysis.sequential's). `config_schema` builds the configuration
schema and its reference from core.params; `catalog` knows each model's parameters, gradient
bytes and FLOPs per sample (catalog.json, committed; rebuilding it imports the models);
`preflight` states what a grid will measure and the traps in it (bucket, fit and precision
warnings) after `estimate`'s wall time, learned from this host's earlier runs; `status` tells
which stored runs are stale and clears a dead Snakemake's lock; `grid` expands the config's
axes into cells, `cells` checks the expanded cells (and the synthetic stand-ins), `jobs` gives
each run its parameters, launcher flags and resources; `predict` (`ddpbench predict`) expands a grid
the same way and asks the step model what its cells would measure without running them. It imports
core, strategies' registry, results, cluster (whether a network lab can be made), analysis (the
design's statistics) and stepmodel (the predictions), never run/ at import time.
"""
