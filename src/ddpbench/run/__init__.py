"""The training process: everything that launches ranks or runs inside one (torch).

`launch` runs one cell (`ddpbench launch`: torchrun, the always-written
summary, skips and failures); `torchrun` is torchrun itself with forked ranks and a cheap
exit (`quick_exit`); `train` is one rank's entry (arguments, skips, the process group)
around `cell`, which trains one cell and writes its summary, through `loop`, the training
loop timed by core.timers, with `rank` (per-rank set-up and small collectives), `models`,
`data`, `autobatch`, `profiling`, `diagnose` (heartbeats, hangs, failures) and `faults` (the
DDPBENCH_INJECT hooks the fault tests use). It may import core, strategies, comm, cluster
and results; nothing outside it imports it but the catalog's rebuild (plan.catalog).
"""
