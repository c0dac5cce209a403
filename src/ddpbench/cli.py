"""The `ddpbench` console command: one subcommand per `python -m ddpbench.<module>` entry point.

`ddpbench compare BASE NEW` runs exactly what `python -m ddpbench.report.compare_page BASE NEW` runs: the
module's `main(argv)` with the remaining arguments. Adding a subcommand is one line in
SUBCOMMANDS (name -> (module, one-line help)); the module needs a `main(argv) -> int`. Modules
are imported only when their subcommand runs, so `ddpbench --help` stays fast and a module
that needs torch costs nothing to the others.
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "models": ("plan.catalog", "each model's parameters, gradient bytes, FLOPs per sample and strategies; each dataset"),
    "compare": ("report.compare_page", "did a change make training faster or slower? two result sets, cell by cell"),
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
}


def usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = ["usage: ddpbench COMMAND [ARGS...]   (ddpbench COMMAND --help for its arguments)", "",
             "Each command is the same as `python -m ddpbench.<module>` below:", ""]  # fmt: skip
    lines += [f"  {name:<{width}}  {help_}  ({module})" for name, (module, help_) in SUBCOMMANDS.items()]
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
    except SystemExit as exit_:  # argparse's --help and errors
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)


if __name__ == "__main__":
    sys.exit(main())
