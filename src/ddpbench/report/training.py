"""The words for today's training options, shared by the findings and the study sections: the modes
a cell ran in (`modes_text`, `modes_of`), the HFU beside the MFU (`hfu_text`), what compiling costs
and after how many steps it pays off (`compile_sentences`), and what activation checkpointing saves
in memory and costs in throughput (`checkpointing_sentences`); `transform_sentences` computes both
from the runs and cells.

The numbers come from analysis.transforms; every sentence names the compile and checkpointing
settings it speaks of, so no sentence mixes an eager cell with a compiled one unsaid. A ratio's
word is what its interval says, or a sequential design's verdict where it asked the pair
(report.text.row_verdict, the words report.text's).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from ddpbench import analysis
from ddpbench.core.run_record import Extra
from ddpbench.report.text import (
    SETTING_WORDS,
    finite,
    level_ci,
    pct_text,
    ratio_text,
    row_verdict,
    sig3,
    source_text,
    value_text,
    verdict_word,
)

MODES = analysis.MODE_AXES  # compile and activation_checkpointing
HFU, HFU_DATASHEET = Extra.hfu_measured, Extra.hfu_datasheet


def _num(x) -> float:
    v = pd.to_numeric(pd.Series([x]), errors="coerce").iloc[0]
    return float(v) if pd.notna(v) else np.nan


def modes_text(r, skip=()) -> str:
    """'compile=model, activation_checkpointing=none': the row's modes (those it has, but `skip`)."""
    return ", ".join(f"{c}={value_text(r[c])}" for c in MODES
                     if c not in skip and c in r and (isinstance(r[c], str) or pd.notna(r[c])))  # fmt: skip


def mode_order(values) -> list[str]:
    """The values of a mode, none (eager, no checkpointing) first."""
    return sorted({str(v) for v in values}, key=lambda v: (v != "none", v))


def modes_of(frame: pd.DataFrame) -> str:
    """'compile=none and model, activation_checkpointing=none': the modes the rows span ('' without them)."""
    parts = []
    for c in (c for c in MODES if c in frame):
        values = mode_order(value_text(v) for v in frame[c].dropna())
        if values:
            parts.append(f"{c}=" + (" and ".join(values) if len(values) < 3 else ", ".join(values)))
    return ", ".join(parts)


def hfu_text(r, col: str = HFU) -> str:
    """'HFU 41.2 % [39.0, 43.1] (75 % interval)': the hardware FLOP utilisation (checkpointing's recompute
    counted; equal to the MFU without checkpointing); '' where the row has none."""
    if not finite(r.get(col)):
        return ""
    return "HFU " + pct_text(*(r.get(col + s, np.nan) for s in ("", "_ci_low", "_ci_high", "_ci_level")))


def _word(r, prefix: str = "") -> str:
    """What the row's ratio says ('higher', 'lower', ...); '' without an interval."""
    v = analysis.verdict_of(_num(r.get(f"{prefix}ratio_ci_low")), _num(r.get(f"{prefix}ratio_ci_high"))) if prefix \
        else row_verdict(r)  # fmt: skip
    return "" if v == analysis.Verdict.NO_INTERVAL else verdict_word(v, SETTING_WORDS)


def _ratio(r, prefix: str = "") -> str:
    """'0.750× [0.72, 0.78] its twin's (lower)': the row's ratio, and what it says where it has an interval."""
    text = ratio_text(*(r.get(f"{prefix}ratio{s}", np.nan) for s in ("", "_ci_low", "_ci_high", "_ci_level")))
    word = _word(r, prefix)
    return text + " its twin's" + (f" ({word}{'' if prefix else source_text(r)})" if word else "")


def _payoff_text(r) -> str:
    """'it pays off after 773 steps (650–900 over the intervals ...)', or why it does not."""
    faster = r["verdict"]  # the compiled cell against its eager twin (analysis.transforms)
    if faster == analysis.Verdict.FASTER and finite(r["payoff_steps"]):
        span = (f" ({sig3(r['payoff_steps_low'])}–{sig3(r['payoff_steps_high'])} over the intervals of the compile "
                "time and of the step-time ratio)") if r["payoff_steps_low"] != r["payoff_steps_high"] else ""  # fmt: skip
        return f"it pays off after {sig3(r['payoff_steps'])} steps{span}"
    if faster == analysis.Verdict.FASTER:
        return "compiled steps are faster, but no compile time was recorded to pay off"
    if faster == analysis.Verdict.SLOWER:
        return "compiled steps are slower: it does not pay off"
    if faster == analysis.Verdict.NO_DIFFERENCE:
        return "compiled steps are not detectably faster (the interval holds 1): it does not pay off"
    return "no interval (fewer than 2 repeats on a side): whether it pays off is not known"


def _compile_item(r, name: Callable[[pd.Series], str]) -> str:
    """'ddp at world size 2, activation_checkpointing=none: compiling takes 92.8 s [...] (75 % interval), 12 graphs;
    a step takes 0.330 s against 0.450 s eager (eager / compiled 1.36× [1.30, 1.42]), so it pays off after ...'."""
    mode_text = modes_text(r, skip=("compile",))
    cs = level_ci(r["compile_s"], r["compile_s_ci_low"], r["compile_s_ci_high"], r["compile_s_ci_level"], "s")
    graphs = f", {value_text(r['compiled_graphs'])} graphs" if finite(r["compiled_graphs"]) else ""
    cost = f"compiling takes {cs}{graphs}" if finite(r["compile_s"]) else "no compile time recorded"
    ratio = ratio_text(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"], r["speedup_ci_level"])
    return (f"{name(r)}{f', {mode_text}' if mode_text else ''}: {cost}; a step takes {sig3(r['step_s'])} s against "
            f"{sig3(r['eager_step_s'])} s eager (eager / compiled {ratio}), so {_payoff_text(r)}")  # fmt: skip


def compile_sentences(payoff: pd.DataFrame, name: Callable[[pd.Series], str], limit: int | None = None) -> list[str]:
    """Per compile mode: each compiled cell's compile time (in the untimed first step), its steps against
    its eager twin's, and after how many steps the compile pays off (analysis.compile_payoff's rows), the
    cells that pay off soonest first; `name(row)`: the cell's name without its modes (named here); at most
    `limit` cells named, the rest counted."""
    found = []
    for mode, g in payoff.groupby(payoff["compile"].astype(str), sort=True) if not payoff.empty else []:
        timed = g[pd.to_numeric(g["compile_s"], errors="coerce").notna()]
        if timed.empty:
            found.append(f"The compile={mode} runs here recorded no compile time (no {Extra.compile_s} in runs.csv: a "
                         "harness from before it), so what compiling costs and when it pays off is not known.")  # fmt: skip
            continue
        timed = timed.sort_values("payoff_steps", kind="stable", na_position="last")
        items = [_compile_item(r, name) for _, r in timed.iterrows()]
        more = f"; and {len(items) - limit} more compiled cells (the cells table)" if limit and len(items) > limit else ""
        more += f"; {len(g) - len(timed)} compiled cells recorded no compile time" if len(timed) < len(g) else ""
        found.append(f"What compiling costs (compile={mode} against none, every other setting equal; the compile is "
                     "in the untimed first step, its time the median over repeats): "
                     + "; ".join(items[:limit]) + more + ".")  # fmt: skip
    return found


def _peak_item(r) -> str:
    """'peak RSS 412 MiB [405, 418] (75 % interval) against its twin's 655 MiB [650, 661] (75 % interval): 243 MiB
    saved, 0.629× [0.61, 0.65] its twin's (lower)'."""
    kind = str(r.get("peak_kind") or "peak")
    mine = level_ci(r["peak_mib"], r["peak_ci_low"], r["peak_ci_high"], r["peak_ci_level"], "MiB")
    twin = level_ci(r["reference_peak_mib"], r["reference_peak_ci_low"], r["reference_peak_ci_high"],
                    r["reference_peak_ci_level"], "MiB")  # fmt: skip
    saved = _num(r["reference_peak_mib"]) - _num(r["peak_mib"])
    amount = f"{sig3(abs(saved))} MiB {'saved' if saved >= 0 else 'more'}" if finite(saved) else "no saving measured"
    return f"{kind} {mine} against its twin's {twin}: {amount}, {_ratio(r, 'peak_')}"


def checkpointing_sentences(effects: pd.DataFrame, name: Callable[[pd.Series], str]) -> list[str]:
    """Per checkpointing setting and compile mode: each cell's peak memory against its twin's without
    checkpointing (what it saves) and its throughput against the twin's (what it costs), with their intervals
    (analysis.checkpointing_effects' rows); `name(row)`: the cell's name without its modes."""
    if effects.empty:
        return []
    found = []
    keys = [c for c in MODES if c in effects]
    groups = {tuple(k) if isinstance(k, tuple) else (k,): g
              for k, g in effects.groupby([effects[c].astype(str) for c in keys], sort=True)}  # fmt: skip
    for key in sorted(groups, key=lambda k: [(v != "none", v) for v in k]):  # eager before compiled
        g, setting = groups[key], dict(zip(keys, key))
        at = f" at compile={setting['compile']}" if "compile" in setting else ""
        items = [f"{name(r)}: {_peak_item(r) if finite(r['peak_mib']) else 'no peak recorded'}; throughput "
                 f"{_ratio(r)}" for _, r in g.iterrows()]  # fmt: skip
        found.append(f"With activation_checkpointing={setting.get('activation_checkpointing', '?')} instead of none"
                     f"{at} (every other setting equal), what recomputing the activations saves in memory and costs "
                     "in throughput, the cell against its twin (peaks: medians over repeats [order-statistic "
                     "intervals]; ratios: Welch intervals): " + "; ".join(items) + ".")  # fmt: skip
    return found


def transform_sentences(runs: pd.DataFrame, cells: pd.DataFrame, name: Callable[[pd.Series], str],
                        design: analysis.DesignAnswers | None = None,
                        limit: int | None = None) -> tuple[list[str], list[str]]:  # fmt: skip
    """(what compiling costs, what checkpointing saves and costs): each a list of sentences, empty where the grid has
    no compiled or checkpointed cell beside its twin. `design`: a sequential design's answers (a checkpointed cell
    and its twin read its verdict where it asked about them)."""
    if cells.empty or runs.empty:
        return [], []
    effects = analysis.checkpointing_effects(runs, cells, design)
    return (compile_sentences(analysis.compile_payoff(runs, cells), name, limit),
            checkpointing_sentences(effects, name))  # fmt: skip

