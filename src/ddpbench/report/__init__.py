"""The report: what the results say, in words, figures and pages (no torch).

`findings/` are the report's lead sentences, `studies/` the answers of the study presets (one
module each), `figures/` the matplotlib figures by kind, `text` turns numbers into words,
`build` assembles the HTML/LaTeX/PDF report (`python -m ddpbench.report`), and `compare`
the page of two result sets side by side. It reads the tables through analysis/ and may
import core and results; never run/ or torch.
"""
