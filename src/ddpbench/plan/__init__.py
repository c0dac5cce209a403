"""What the workflow needs before any run starts, without torch.

`config_schema` builds the configuration schema and its reference from core.params;
`catalog` knows each model's parameters, gradient bytes and FLOPs per sample (catalog.json,
committed; rebuilding it imports the models); `preflight` states what a grid will measure
and the traps in it (time estimate, bucket and fit warnings); `status` tells which stored
runs are stale and clears a dead Snakemake's lock. It imports core, strategies' registry,
results and cluster (whether a network lab can be made), never run/ at import time.
"""
