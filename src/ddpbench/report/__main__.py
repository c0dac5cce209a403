"""`python -m ddpbench.report`: build the report (report.build)."""

import sys

from ddpbench.report.build import main

sys.exit(main())
