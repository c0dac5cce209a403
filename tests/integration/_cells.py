"""Run several cells in one torchrun launch (one process group), so the integration tests
check every exact strategy x model without paying torchrun's start-up for each.

    torchrun --standalone --nproc-per-node P _cells.py OUT STRATEGY:MODEL[:KEY=VALUE,...] ... -- [cell flags]

Each cell goes through `ddpbench.run.cell.execute`, the code path of a real launch, and
leaves OUT/<strategy>-<model>[-KEY=VALUE...]/{summary.json, steps_rank*.csv, params.pt}
(KEY=VALUE: cell parameters overriding the flags for that cell).
"""

import argparse
import gc
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from ddpbench.core.params import CellParams
from ddpbench.core.run_output import write_json
from ddpbench.run import rank
from ddpbench.run.cell import execute


def main() -> None:
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    out, cells = Path(argv[0]), argv[1:cut]
    parser = argparse.ArgumentParser()
    CellParams.add_arguments(parser)
    base = vars(parser.parse_args(argv[cut + 1 :]))
    ranks = rank.Ranks.from_env()
    dist.init_process_group("gloo")
    try:
        for cell in cells:
            strategy, model, *more = cell.split(":")
            overrides = dict(kv.split("=") for kv in more[0].split(",")) if more else {}
            params = CellParams.from_mapping({**base, "strategy": strategy, "model": model, **overrides})
            torch.compiler.reset()  # each cell compiles afresh, as in a launch of its own
            threads = rank.configure_threads(params, ranks)
            run_dir = out / "-".join([strategy, model, *(f"{k}={v}" for k, v in overrides.items())])
            run_dir.mkdir(parents=True, exist_ok=True)
            summary = execute(
                params, run_dir, ranks, torch.device("cpu"), dump_params=run_dir / "params.pt", threads=threads
            )
            if summary is not None:
                write_json(run_dir / "summary.json", summary)
    finally:
        # The cells' models and optimizers hold the process group and some sit in reference
        # cycles (FSDP's modules and states): collected now, the group and its gloo threads
        # go in destroy_process_group, not in the interpreter's teardown at exit.
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
