"""ddpbench: a benchmark suite for data-parallel training, grouped by component.

Each folder is one component; its __init__ says what lives there and what it may import
(tests/unit/test_structure.py checks those rules, that no import circle forms, and that the
folders marked "no torch" never load it). Data flows down this list:

- ``core/``       what every stage shares: the cell's parameters, what a run records
                  (summary.json keys, steps.csv columns) and the timers that measure it,
                  provenance, safe file writes. No torch at import (timers use it on CUDA).
- ``strategies/`` the gradient-sync strategies, one module each; the registry in its
                  __init__ is read at plan time without torch, the modules run in a rank.
- ``run/``        the training process: the launcher, torchrun, the rank's harness and loop,
                  models, data. Torch.
- ``comm/``       collective benchmarks (torch) and their latency/bandwidth fits (no torch).
- ``cluster/``    more than one node: SLURM and the two-namespace network lab. No torch.
- ``plan/``       what the workflow needs before any run: the Study (the grid's cells, the
                  results layout, a sequential design and its decisions), the config schema,
                  the model catalog, the preflight warnings, stale-run status. No torch.
- ``results/``    run folders into tables (aggregate), archives, the progress line. No torch.
- ``analysis/``   statistics, intervals, fits and comparisons over the tables. No torch.
- ``stepmodel/``  the step model: a step's compute, communication and exposure fitted from the
                  measured parts, predicting cells never run, checked on held-out ones. No torch.
- ``report/``     figures, findings, study answers and the HTML/LaTeX pages. No torch.

``cli.py`` is the ``ddpbench`` command, one verb per stage (its SUBCOMMANDS), and ``__main__.py``
makes ``python -m ddpbench VERB`` the same command where no console script is installed. There is
no other top-level module: a stage's module is reached through its verb, and its module path is
written only where a process is started with ``-m`` (tests/unit/test_structure.py).
"""

from pathlib import Path

__version__ = "0.1.0"

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parents[1]  # src/ddpbench -> the checkout (templates, schema, docs, uv.lock)
