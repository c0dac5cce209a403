"""The step model on cells held out of its fit (kind "prediction", anchor "predictions").

One sentence, where some held-out cell was predicted: how close the model came (median and worst
absolute error, and how many of its intervals covered the measurement) one cell at a time and with
the largest world size held out. Nothing where nothing could be held out: the Predictions section
says why and what to run.
"""

from __future__ import annotations

import pandas as pd

from ddpbench.report.findings.common import Finding
from ddpbench.report.text import sig3

# The kinds this module gives (ddpbench.report.findings discovers them; fields: common.Kind).
KINDS = {"prediction": dict(find=lambda t: prediction_findings(t.predictions), at_most=1, order=95, trim=25, drop=15)}

EACH, LARGEST = "each cell", "largest world size"  # stepmodel.holdout's kinds of hold-out (its summary's held_out)


def _clause(r: pd.Series) -> str:
    n = int(r["predicted"])
    return (f"within a median {sig3(100 * r['median_abs_error'])} % (worst {sig3(100 * r['worst_abs_error'])} %; "
            f"its intervals covered {int(round(float(r['coverage']) * n))} of {n})")  # fmt: skip


def prediction_findings(summary: pd.DataFrame) -> list[Finding]:
    if summary.empty or not {"held_out", "predicted"} <= set(summary.columns):
        return []
    got = summary[pd.to_numeric(summary["predicted"], errors="coerce") > 0].set_index("held_out")
    said = []
    if EACH in got.index:
        said.append(f"{int(got.loc[EACH, 'predicted'])} cells held out one at a time {_clause(got.loc[EACH])}")
    if LARGEST in got.index:
        said.append(f"the largest world size, fitted without it, {_clause(got.loc[LARGEST])}")
    if not said:
        return []
    return [Finding("prediction", f"The step model predicted {' and '.join(said)}.", "predictions")]
