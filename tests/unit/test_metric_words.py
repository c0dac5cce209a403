"""Every metric the report quotes is defined in docs/metrics.md (issue 58: words that mean what they say).

The names are collected, not listed by hand: every cells.csv metric (analysis.METRICS: the report's cells
table and its notes are built from them), and every runs.csv metric that a string in the report's code
names: a summary metric (core.run_output.METRIC_KEYS) or an extra (`extra_<k>`, runs.csv's flattening of
summary.json's extra.<k>). A name is defined where the first column of one of docs/metrics.md's tables
names it in backticks: as itself, as `extra.<k>`, or by a pattern (`phase_{data,forward}_s`, `frac_*`,
`timeline_<span>_s`).
"""

import ast
import fnmatch
import itertools
import pathlib
import re

from ddpbench import analysis as A
from ddpbench.core import run_output

ROOT = pathlib.Path(__file__).resolve().parents[2]
REPORT = ROOT / "src" / "ddpbench" / "report"
METRICS_DOC = ROOT / "docs" / "metrics.md"
EXTRA = re.compile(r"extra_[a-z0-9_]+")


def _strings(path: pathlib.Path) -> set[str]:
    """The string constants of a module (f-strings' literal parts included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def report_metrics() -> set[str]:
    """The runs.csv and cells.csv metrics the report's code names, and every cells.csv metric."""
    strings = set().union(*(_strings(p) for p in REPORT.rglob("*.py")))
    runs_metrics = {s for s in strings if s in run_output.METRIC_KEYS or EXTRA.fullmatch(s)}
    return runs_metrics | set(A.METRICS)


def _expand(token: str) -> list[str]:
    """A documented name as glob patterns: `{a,b}` alternatives expanded, `<x>` and `{x}` any text,
    `extra.<k>` as runs.csv's `extra_<k>`."""
    token = re.sub(r"^extra\.", "extra_", token)
    token = re.sub(r"<[^>]*>|\{[^,}]*\}", "*", token)
    parts = re.split(r"\{([^}]*)\}", token)  # odd positions: alternatives
    choices = [p.split(",") if i % 2 else [p] for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def defined_patterns(text: str) -> list[str]:
    """The backticked names in the first column of every table row of docs/metrics.md."""
    patterns = []
    for line in text.splitlines():
        cells = line.split(" | ")
        if line.startswith("| ") and len(cells) > 1 and not set(cells[0]) <= set("|- "):
            for token in re.findall(r"`([^`]+)`", cells[0]):
                patterns += _expand(token)
    return patterns


def undefined(names, text: str) -> list[str]:
    patterns = defined_patterns(text)
    return sorted(n for n in names if not any(fnmatch.fnmatchcase(n, p) for p in patterns))


def test_the_collection_finds_the_metrics_the_report_quotes():
    names = report_metrics()
    # the language-model study's loss sentence and table, the sync-strategies study's test accuracy
    assert {"train_loss_final", "test_loss", "test_acc", "samples_per_s", "extra_mfu_measured"} <= names
    assert "strategy" not in names and "n_repeats" not in names  # axes and counts are not metrics


def test_the_matching_reads_patterns_and_only_the_first_column():
    text = ("| number | definition |\n|---|---|\n| `phase_{data,forward}_s`, `frac_*` | see `not_a_name` |\n"
            "| `extra.param_bytes`, `timeline_<span>_s`, `{metric}_ci_level` | ... |\n")  # fmt: skip
    names = ["phase_data_s", "phase_forward_s", "frac_comm", "extra_param_bytes", "timeline_setup_s", "test_acc_ci_level"]
    assert undefined(names, text) == []
    assert undefined(["phase_backward_s", "not_a_name", "extra_grad_bytes"], text) == sorted(
        ["phase_backward_s", "not_a_name", "extra_grad_bytes"]
    )


def test_every_metric_the_report_quotes_is_defined_in_docs_metrics():
    missing = undefined(report_metrics(), METRICS_DOC.read_text(encoding="utf-8"))
    assert not missing, f"define these in a table of docs/metrics.md (first column, in backticks): {missing}"
