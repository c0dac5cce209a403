"""What today's training options cost and buy (kinds "compile", anchor "cells", and "checkpointing",
anchor "fig-checkpointing").

Spoken where the grid measured a cell beside its twin that differs only in the option: a compiled
cell (compile: model) beside its eager twin, a checkpointed one (activation_checkpointing: full or
selective) beside its twin without. "compile": per compile mode, each compiled cell's compile time
(the untimed first step's wall beyond a timed step, median over repeats with its interval), its step
time against the eager twin's (the Welch interval of the ratio) and the steps the compile takes to pay
off, or that it does not where compiled steps are not faster by the interval (analysis.compile_payoff).
"checkpointing": per setting and compile mode, each cell's peak memory against its twin's (what
recomputing saves) and its throughput against the twin's (what it costs), each ratio with its Welch
interval (analysis.checkpointing_effects). The words are report.training's, shared with the study
sections; each sentence names both modes.
"""

from __future__ import annotations

from ddpbench import analysis
from ddpbench.report.findings.common import Finding, cell_name
from ddpbench.report.training import transform_sentences

NAMED = 4  # compiled cells a finding names; the cells table has them all

# The kinds this module gives (ddpbench.report.findings discovers them; fields: common.Kind).
KINDS = {
    "compile": dict(find=lambda t: compile_findings(t.runs, t.cells, t.shown), at_most=2, order=52, trim=52, drop=22),
    "checkpointing": dict(find=lambda t: checkpointing_findings(t.runs, t.cells, t.shown, t.design), at_most=2,
                          order=54, trim=54, drop=24),
}  # fmt: skip


def _namer(shown: list[str]):
    """A cell's name without its modes (the sentences name them): 'ddp at world size 2, seq_len=128'."""
    cols = [c for c in shown if c not in analysis.MODE_AXES]
    return lambda r: cell_name(r, cols)


def compile_findings(runs, cells, shown: list[str]) -> list[Finding]:
    found, _ = transform_sentences(runs, cells, _namer(shown), limit=NAMED)
    return [Finding("compile", text, "cells") for text in found]


def checkpointing_findings(runs, cells, shown: list[str], design=None) -> list[Finding]:
    _, found = transform_sentences(runs, cells, _namer(shown), design)
    return [Finding("checkpointing", text, "fig-checkpointing") for text in found]
