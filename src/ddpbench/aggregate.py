"""`python -m ddpbench.aggregate`: an alias of `python -m ddpbench.results.aggregate` (and of `ddpbench` subcommands), kept for scripts written before the regroup."""

import runpy

if __name__ == "__main__":
    runpy.run_module("ddpbench.results.aggregate", run_name="__main__", alter_sys=True)
