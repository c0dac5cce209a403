"""`python -m ddpbench.config_schema`: an alias of `python -m ddpbench.plan.config_schema` (and of `ddpbench` subcommands), kept for scripts written before the regroup."""

import runpy

if __name__ == "__main__":
    runpy.run_module("ddpbench.plan.config_schema", run_name="__main__", alter_sys=True)
