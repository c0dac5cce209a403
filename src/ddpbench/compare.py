"""`python -m ddpbench.compare`: an alias of `python -m ddpbench.report.compare_page` (and of `ddpbench` subcommands), kept for scripts written before the regroup."""

import runpy

if __name__ == "__main__":
    runpy.run_module("ddpbench.report.compare_page", run_name="__main__", alter_sys=True)
