"""What the workflow needs before any run starts, without torch.

`config_schema` builds the configuration schema and its reference from core.params;
`catalog` knows each model's parameters, gradient bytes and FLOPs per sample (catalog.json,
committed; rebuilding it imports the models); `preflight` states what a grid will measure
and the traps in it (bucket, fit and precision warnings) after `estimate`'s wall time,
learned from this host's earlier runs; `status` tells which stored runs are stale and
clears a dead Snakemake's lock; `grid` expands the config's axes into
cells and their run folders, `cells` checks the expanded cells (and the synthetic stand-ins),
`jobs` gives each run its parameters, launcher flags and resources (the workflow's
common.smk calls these three at include time). It imports core, strategies' registry,
results and cluster (whether a network lab can be made), never run/ at import time.
"""
