"""The report: what the results say, in words, figures and pages (no torch).

`findings/` are the report's lead sentences, `studies/` the answers of the study presets (one
module each), `figures/` the matplotlib figures by kind, `text` turns numbers into words,
`tables` and `context` are the report's tables and context sections (environment, grid,
methodology), `predictions` the step model checked on held-out cells, `render` the escaping,
Jinja environments, SVG inlining and PDF step the pages share, `build` assembles the
HTML/LaTeX/PDF report (`ddpbench report`), and `compare_page` the page and command of two result
sets side by side (`ddpbench compare`; the statistics are analysis.compare's). It reads the
tables through analysis/ and may import core and results, and plan for the study and its
design's Decision; never run/ or torch.
"""
