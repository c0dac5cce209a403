"""What every stage shares: the contract between the workflow, the ranks and the readers.

`params` is the one typed definition of a grid cell; `run_output` what a run records (the
columns of steps_rank<R>.csv, the keys of summary.json, the statistics that fill them, the
launcher's own summary for a run no rank finished), `run_record` the fields of its extra and
env blocks as runs.csv columns and the one reader of a summary.json, and `timers` the instruments that
measure a step inside a rank (clock, phases, communication meter; torch only on CUDA, when
first used); `sysinfo` and `container` the provenance
of every result row (machine, load, packages, lock, code fingerprint, image); `safe_io` and
`storage` the file writes that never follow a planted link and never leave half a file or a
full disk unexplained; `bounded` the reads of a file from someone else within a size and depth; `registry` reads the registries' declarations (one module per strategy,
model family, study or kind of finding) from their source. It imports nothing of ddpbench but the strategy registry
(`ddpbench.strategies`, for the strategy names) and never torch at import time, so the
workflow, the analysis and the report can all read it.
"""
