"""The training process: everything that launches ranks or runs inside one (torch).

`launch` runs one cell (`python -m ddpbench.run.launch`: torchrun, the always-written
summary, skips and failures); `torchrun` is torchrun itself with forked ranks and a cheap
exit (`quick_exit`); `train` is one rank's harness (argument parsing, threads, skips) around
`loop`, the timed training loop, with `timers` (clock, phases, communication meter),
`models`, `data`, `autobatch`, `profiling` and `diagnose` (heartbeats, hangs, failures).
It may import core, strategies, comm and cluster; nothing here is imported by plan/,
results/, analysis/ or report/.
"""
