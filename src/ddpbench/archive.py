"""`python -m ddpbench.archive`: an alias of `python -m ddpbench.results.archive` (and of `ddpbench` subcommands), kept for scripts written before the regroup."""

import runpy

if __name__ == "__main__":
    runpy.run_module("ddpbench.results.archive", run_name="__main__", alter_sys=True)
