"""The report's figures, matplotlib only (Agg backend): SVG for the HTML page, PDF for LaTeX, drawn
as small multiples from analysis's tables (`Data`). `style` sets matplotlib up (the only module
that imports pyplot, after choosing Agg) and gives each strategy its colour; `layout` makes the
panels, titles and legend and sizes each figure once; `marks` draws series and bars; `tables`
holds the data and splits it into figure groups; `scaling`, `breakdown`, `sizes`, `memory`,
`mfu`, `training` and `links` draw the figure kinds; `kinds` is their registry; `pool` draws and writes them, in worker
processes where there are cores. The package reads analysis, core and the strategy registry
(strategies.names), imports no torch and never run/; the submodules import each other by submodule
path, and this file only re-exports the names the rest of the report uses.
"""

from ddpbench.report.figures.kinds import FITTED_KINDS, KINDS, kinds_for
from ddpbench.report.figures.layout import TITLES
from ddpbench.report.figures.pool import collect, start_figures, worker_pool
from ddpbench.report.figures.style import FORMATS, METADATA, RC, strategy_style, text
from ddpbench.report.figures.tables import Data

__all__ = ["Data", "FITTED_KINDS", "FORMATS", "KINDS", "METADATA", "RC", "TITLES", "collect", "kinds_for",
           "start_figures", "strategy_style", "text", "worker_pool"]  # fmt: skip
