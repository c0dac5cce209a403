"""`python -m ddpbench.commbench`: an alias of `python -m ddpbench.comm.commbench` (and of `ddpbench` subcommands), kept for scripts written before the regroup."""

import runpy

if __name__ == "__main__":
    runpy.run_module("ddpbench.comm.commbench", run_name="__main__", alter_sys=True)
