"""ddpbench: a benchmark suite for data-parallel training, grouped by component.

Each folder is one component; its __init__ says what lives there and what it may import.
Data flows down this list, and imports only point down it (tests/unit/test_structure.py
checks both, and that the folders marked "no torch" never load it):

- ``core/``       what every stage shares: the cell's parameters, what a run records
                  (summary.json keys, steps.csv columns) and the timers that measure it,
                  provenance, safe file writes. No torch at import (timers use it on CUDA).
- ``strategies/`` the gradient-sync strategies, one module each; the registry in its
                  __init__ is read at plan time without torch, the modules run in a rank.
- ``run/``        the training process: the launcher, torchrun, the rank's harness and loop,
                  models, data. Torch.
- ``comm/``       collective benchmarks (torch) and their latency/bandwidth fits (no torch).
- ``cluster/``    more than one node: SLURM and the two-namespace network lab. No torch.
- ``plan/``       what the workflow needs before any run: the config schema, the model
                  catalog, the grid's cells, the preflight warnings, stale-run status. No torch.
- ``results/``    run folders into tables (aggregate), archives, the progress line. No torch.
- ``analysis/``   statistics, intervals, fits and comparisons over the tables. No torch.
- ``report/``     figures, findings, study answers and the HTML/LaTeX pages. No torch.

``cli.py`` is the ``ddpbench`` command. The other top-level modules are the ``python -m
ddpbench.<name>`` commands that scripts and docs used before the regroup, kept as aliases.
"""

from pathlib import Path

__version__ = "0.1.0"

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parents[1]  # src/ddpbench -> the checkout (templates, schema, docs, uv.lock)
