"""The `ddpbench` command: one verb per entry point, the project's one command-line surface.

`ddpbench VERB ARGS...` and `python -m ddpbench VERB ARGS...` (ddpbench/__main__.py: no console
script needed, as inside the containers; the workflow's rules call it so) run the verb's module's
`main(argv)` with ARGS, in this process. Adding a verb is one line in SUBCOMMANDS (name ->
(module, one-line help)); the module needs a `main(argv) -> int`. Modules are imported only when
their verb runs, so `ddpbench --help` stays fast and a module that needs torch costs nothing to
the others. SUBCOMMANDS is the one place that maps verbs to module paths (besides the commands
that start a process: torchrun's `-m ddpbench.run.train`, srun's node launcher).
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "models": ("plan.catalog", "each model's parameters, gradient bytes, FLOPs per sample and strategies; each dataset"),
    "compare": ("report.compare_page", "did a change make training faster or slower? two result sets, cell by cell"),
    "predict": ("plan.predict", "the step model's step time, throughput and intervals for cells never run"),
    "report": ("report.build", "statistics, fits, figures, HTML and PDF report from runs.csv"),
    "aggregate": ("results.aggregate", "merge run folders into runs.csv and steps.csv"),
    "status": ("plan.status", "which runs are stale (other code, settings or lock); --rerun redoes them"),
    "archive": ("results.archive", "pack a study (runs, tables, report, config, lock) into one file"),
    "launch": ("run.launch", "run one cell with torchrun"),
    "train": ("run.train", "the training harness of one rank (under torchrun)"),
    "commbench": ("comm.commbench", "collective sweep (under torchrun)"),
    "commfit": ("comm.commfit", "latency and bandwidth fits of a collective sweep"),
    "data": ("run.data", "fetch a real dataset once"),
    "config-schema": ("plan.config_schema", "the configuration schema and its reference"),
    "netlab": ("cluster.netlab", "two nodes and slow links on one machine (root)"),
    "slurm": ("cluster.slurm", "SLURM helpers"),
    "decide": ("plan.decide", "the sequential design's decision after a round (the decide_round checkpoint)"),
    "check-model": ("run.user_model", "check a user's model (package.module:function) as the plan does"),
}


def usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = ["usage: ddpbench COMMAND [ARGS...]   (ddpbench COMMAND --help for its arguments;",
             "       python -m ddpbench COMMAND ... is the same)", "", "commands:"]  # fmt: skip
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"ddpbench: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"ddpbench.{SUBCOMMANDS[name][0]}")
    try:
        return int(module.main(rest) or 0)
    except SystemExit as exit_:  # argparse's --help and errors, SystemExit("error: ...")
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)  # as the interpreter does with a message
        return 1


if __name__ == "__main__":
    sys.exit(main())
