"""`python -m ddpbench VERB ...`: the same as the `ddpbench VERB ...` console command (cli.py).

Works wherever the package is importable (PYTHONPATH=src, as inside the containers), with or
without the console script installed; the workflow's rules call it this way.
"""

import sys

from ddpbench.cli import main

if __name__ == "__main__":
    sys.exit(main())
