"""`python -m ddpbench.launch`: an alias of `python -m ddpbench.run.launch` (and of `ddpbench` subcommands), kept for scripts written before the regroup."""

import runpy

if __name__ == "__main__":
    runpy.run_module("ddpbench.run.launch", run_name="__main__", alter_sys=True)
