"""`python -m ddpbench.train`: an alias of `python -m ddpbench.run.train` (and of `ddpbench` subcommands), kept for scripts written before the regroup."""

import runpy

if __name__ == "__main__":
    runpy.run_module("ddpbench.run.train", run_name="__main__", alter_sys=True)
