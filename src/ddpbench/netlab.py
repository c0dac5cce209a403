"""`python -m ddpbench.netlab`: an alias of `python -m ddpbench.cluster.netlab` (and of `ddpbench` subcommands), kept for scripts written before the regroup."""

import runpy

if __name__ == "__main__":
    runpy.run_module("ddpbench.cluster.netlab", run_name="__main__", alter_sys=True)
