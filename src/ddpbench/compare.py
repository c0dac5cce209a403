"""`python -m ddpbench.compare`: an alias of `python -m ddpbench.report.compare` (and of `ddpbench` subcommands), kept for scripts written before the regroup."""

import runpy

if __name__ == "__main__":
    runpy.run_module("ddpbench.report.compare", run_name="__main__", alter_sys=True)
