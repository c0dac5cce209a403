"""`python -m ddpbench.status`: an alias of `python -m ddpbench.plan.status` (and of `ddpbench` subcommands), kept for scripts written before the regroup."""

import runpy

if __name__ == "__main__":
    runpy.run_module("ddpbench.plan.status", run_name="__main__", alter_sys=True)
