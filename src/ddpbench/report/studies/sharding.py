"""sharding: what sharding saves in memory per rank and what it costs in time (configs/studies/sharding.yaml).

Per cell: the bytes a rank holds for training — parameters, gradients, optimizer state, counted
from its own tensors (analysis.memory: exact, the same in every repeat) — against ddp's at the
same settings, the measured peak, the throughput against ddp's (Welch interval) and the speedup
over one process. The answer: per sharded strategy (zero: ZeRO-1, fsdp_grad_op: ZeRO-2, fsdp:
ZeRO-3) the memory it saves per rank; per precision and grad_accum what it costs in time
(faster or slower only where the interval of the throughput ratio excludes 1); then what bf16
(against fp32), gradient accumulation (against none) and compile (against eager) change for
every strategy; where the grid has them, what the compile costs and when it pays off, and what
activation checkpointing saves and costs (report.training). A peak is quoted per compile and
checkpointing mode, each named.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.report.studies.common import Study, StudyData, axes_text, cell_ci, study_cells, to_float
from ddpbench.report.text import finite, listing, num, ratio_text, row_verdict, sig3, source_text, verdict_word
from ddpbench.report.training import modes_text, transform_sentences
from ddpbench.strategies import REFERENCE  # the replicated strategy the others are measured against

# The settings whose effect the answer states, with the value each is compared against
# (a grid that lacks one, or has only one value of it, gets no such sentence).
EFFECTS = (("precision", "fp32"), ("grad_accum", 1), ("compile", "none"))
NAMED = 8  # items a listing names before "and N more"
MODE_AXES = A.MODE_AXES  # compile and activation_checkpointing: a peak's span never crosses them


def mib(nbytes) -> str:
    """Bytes in MiB, 3 significant digits."""
    return sig3(to_float(nbytes) / A.MIB)


def _verdict(r) -> A.Verdict:
    """What a row's throughput interval says (no interval: no verdict), or the design's verdict where it
    asked the pair (the row is its answer); a design's question still open reads as no verdict."""
    v = row_verdict(r)
    return v if v in EFFECT_WORDS else A.Verdict.NO_INTERVAL


def _ratio(r) -> str:
    return ratio_text(r["ratio"], r.get("ratio_ci_low"), r.get("ratio_ci_high"), r.get("ratio_ci_level"))


def _judged(r) -> str:
    """'0.667× [0.62, 0.71] (slower)'; without an interval '0.667× (no interval)', no verdict; where a
    design ran, whose interval it is ('(slower, the design's)', '(slower, descriptive)')."""
    v = _verdict(r)
    return _ratio(r) + ("" if v == A.Verdict.NO_INTERVAL else f" ({verdict_word(v)}{source_text(r)})")


def _setting(r, cols: list[str]) -> str:
    """'precision=bf16, grad_accum=4' for the answer's settings (the grid's varying axes but strategy and p)."""
    return ", ".join(f"{c}={r[c]}" for c in cols) or "the one setting measured"


# Why a strategy's shard of a part can be far above 1/p of it (the largest rank's is counted).
UNEVEN = {"zero": "ZeroRedundancyOptimizer hands each rank whole parameters, so a rank holding one large "
                  "parameter keeps most of the state"}  # fmt: skip


def _range(values: pd.Series, fmt) -> str:
    """'13.0' for one value, '12.0–13.0' for several."""
    lo, hi = values.min(), values.max()
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"


def _uneven(strategy: str, g: pd.DataFrame, p: float) -> str:
    """', its optimizer state 0.961× ddp's rather than 1/2 (why)' where a sharded part stays well above 1/p."""
    out = []
    for col, name in A.HELD_PARTS:
        r = pd.to_numeric(g[f"{col}_ratio"], errors="coerce")
        if r.notna().all() and (r < 0.99).all() and (r > 1.1 / p).all():
            out.append(f"its {name} {_range(r, lambda x: sig3(x) + '×')} {REFERENCE}'s rather than 1/{int(p)}")
    if not out:
        return ""
    why = UNEVEN.get(strategy, "its shards are uneven, and the largest rank's is counted")
    return f" ({listing(out)}: {why})"


def _peak(rows: pd.DataFrame, first: bool) -> str:
    """'; its peak RSS is 595–695 MiB against ddp's 579–630 MiB at compile=none, activation_checkpointing=none
    (medians; ...)': over the settings of each compile and checkpointing mode, each named (a span never crosses
    modes: a compiled cell's peak is not an eager one's); why the saving need not show in it: the `first` time only."""
    modes = [c for c in MODE_AXES if c in rows]
    clauses = []
    groups = dict(list(rows.groupby([rows[c].astype(str) for c in modes], sort=True))) if modes else {(): rows}
    for _, g in sorted(groups.items(), key=lambda kv: [(v != "none", v) for v in kv[0]]):  # eager first
        mine, ref = (pd.to_numeric(g[c], errors="coerce").dropna() for c in ("peak_mib", "reference_peak_mib"))
        if not (mine.empty or ref.empty):
            at = modes_text(g.iloc[0])
            clauses.append(f"{_range(mine, num)} MiB against {REFERENCE}'s {_range(ref, num)} MiB{f' at {at}' if at else ''}")
    if not clauses:
        return ""
    kind = listing(sorted(set(rows["peak_kind"].astype(str)) - {""})) or "peak"
    why = (": the peak also holds the process, activations and communication buffers, so the saving need not show "
           "in it") if first else ""  # fmt: skip
    return f"; its {kind} is {listing(clauses, limit=len(clauses))} (medians over repeats{why})"


def _saved(savings: pd.DataFrame, cols: list[str]) -> list[str]:
    """Per sharded strategy: the memory it holds per rank against ddp's, which parts it shards (the same at
    every setting of the grid's other axes, `cols`, where it is), and the peaks per mode."""
    found = []
    for strategy in [s for s in A.SHARDED if s in set(savings["strategy"])]:
        rows = savings[savings["strategy"] == strategy]
        parts = [name for col, name in A.HELD_PARTS
                 if (pd.to_numeric(rows[f"{col}_ratio"], errors="coerce") < 0.99).all()]  # fmt: skip
        per_p = []
        for p, g in rows.groupby(pd.to_numeric(rows["world_size"], errors="coerce"), sort=True):
            held, ref, saved = (g[c].astype(float) for c in ("held_bytes", "reference_held_bytes", "saved_bytes"))
            per_p.append(f"at p = {int(p)} each rank holds {_range(held, mib)} MiB against {REFERENCE}'s "
                         f"{_range(ref, mib)} MiB ({_range(g['held_ratio'].astype(float), lambda x: sig3(x) + '×')}): "
                         f"{_range(saved.abs(), mib)} MiB {'saved' if (saved >= 0).all() else 'more'} per rank"
                         + _uneven(strategy, g, p))  # fmt: skip
        same = all(g["held_bytes"].nunique() == 1 for _, g in rows.groupby("world_size"))
        shards = f"shards its {listing(parts)}" if parts else "shards nothing measurable here"
        varied = [c for c in cols if c in rows and c not in ("strategy", "world_size") and rows[c].astype(str).nunique() > 1]
        found.append(f"{strategy} {shards}: " + "; ".join(per_p)
                     + (f", the same at every {listing(varied)} measured" if same and varied else "")
                     + _peak(rows, not found) + ".")  # fmt: skip
    return found


def _costs(savings: pd.DataFrame, cols: list[str]) -> list[str]:
    """Per setting (precision, grad_accum, world size): each sharded strategy's throughput against ddp's."""
    found = []
    keys = [c for c in cols if c in savings]
    groups = savings.groupby(keys, dropna=False, sort=True) if keys else [((), savings)]
    for _, g in groups:
        r0 = g.iloc[0]
        items = [f"{r['strategy']} {_judged(r)}" for _, r in g.iterrows()]
        flag = " Unstable cells among them: " + listing(list(g.loc[g["unstable"].map(A.truthy), "strategy"])) + "." \
            if g["unstable"].map(A.truthy).any() else ""  # fmt: skip
        found.append(f"What it costs in time at {_setting(r0, [c for c in keys if c != 'world_size'])}, p = "
                     f"{r0['world_size']} (throughput against {REFERENCE}'s): " + "; ".join(items) + "." + flag)  # fmt: skip
    return found


EFFECT_WORDS = {A.Verdict.FASTER: "throughput is higher", A.Verdict.SLOWER: "throughput is lower",
                A.Verdict.NO_DIFFERENCE: "no detectable difference in throughput (the interval holds 1)",
                A.Verdict.EQUIVALENT: "throughput equivalent within the design's margin",
                A.Verdict.UNDECIDED: "throughput left undecided by the design",
                A.Verdict.NO_INTERVAL: "no verdict (fewer than 2 repeats on a side)"}  # fmt: skip


def _span(values, fmt) -> str:
    """'1.00×' for one value, '0.950× to 1.02×' for several."""
    lo, hi = min(values), max(values)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)} to {fmt(hi)}"


def _effect(effects: pd.DataFrame, axis: str, reference, cols: list[str]) -> str | None:
    """What one setting changes (every other axis equal): each cell's throughput over its twin's, grouped by
    what the interval says, then the memory held per rank and the peak (point estimates)."""
    if effects.empty:
        return None
    several_p = effects["world_size"].astype(str).nunique() > 1 if "world_size" in effects else False
    others = [c for c in cols if c not in (axis, "strategy") and (c != "world_size" or several_p)]

    def name(r) -> str:
        return ", ".join([str(r["strategy"]), *(f"{'p' if c == 'world_size' else c}={r[c]}" for c in others)])

    groups: dict[str, list] = {}
    for _, r in effects.iterrows():
        groups.setdefault(_verdict(r), []).append((to_float(r["ratio"]), _ratio(r), name(r)))
    value = listing(sorted({str(v) for v in effects[axis]}))
    text = f"With {axis}={value} instead of {reference} (every other setting equal), "
    if len(groups) == 1:
        word, items = next(iter(groups.items()))
        items = sorted(items, key=lambda it: it[0] if finite(it[0]) else np.inf)
        lo, hi = items[0], items[-1]
        text += EFFECT_WORDS[word] + (f" in all {len(items)} cells measured: {lo[1]} ({lo[2]}) to {hi[1]} ({hi[2]})"
                                      if len(items) > 1 else f": {lo[1]} ({lo[2]})")  # fmt: skip
    else:
        parts = []
        for word in EFFECT_WORDS:
            items = sorted(groups.get(word, []), key=lambda it: it[0] if finite(it[0]) else np.inf)
            if items:
                parts.append(
                    f"{EFFECT_WORDS[word]} for {listing([f'{n} {v}' for _, v, n in items], limit=NAMED, sep='; ')}"
                )
        text += "; ".join(parts)
    held = pd.to_numeric(effects["held_ratio"], errors="coerce").dropna()
    if not held.empty:
        text += (". The memory held per rank does not change" if np.allclose(held, 1.0)
                 else f". The memory held per rank changes by {_span(held, lambda x: sig3(x) + '×')}")  # fmt: skip
    peak = (pd.to_numeric(effects["peak_mib"], errors="coerce")
            / pd.to_numeric(effects["reference_peak_mib"], errors="coerce")).dropna()  # fmt: skip
    if not peak.empty:
        kind = listing(sorted(set(effects["peak_kind"].astype(str)) - {""})) or "peak"
        text += f"; the {kind} is {_span(peak, lambda x: sig3(x) + '×')} its twin's (medians, no interval)"
    return text + "."


def _setting_name(r, cols: list[str]) -> str:
    """'fsdp (p=2, precision=fp32)': a cell by its strategy and the grid's other axes but the modes (the sentences
    name those)."""
    rest = ", ".join(f"{'p' if c == 'world_size' else c}={r[c]}" for c in cols if c not in ("strategy", *MODE_AXES))
    return f"{r['strategy']} ({rest})" if rest else str(r["strategy"])


def build(d: StudyData):
    cols = [c for c in dict.fromkeys(("strategy", "world_size", *A.varying(d.runs, A.axes(d.runs)))) if c in d.cells]
    t = study_cells(d, cols)
    t = pd.concat([t.reset_index(drop=True), A.peaks(t).reset_index(drop=True)], axis=1)
    setting = [c for c in cols if c != "strategy"]
    savings = A.memory_savings(d.runs, d.cells, design=d.design)
    by_cell = {tuple(str(r[c]) for c in cols): r for _, r in savings.iterrows()}
    thr, unit = A.throughput_metric(t)  # tokens/s for token data (the ratio to ddp's is the same in either unit)
    columns = ["strategy", "cell", "parameters [MiB]", "gradients [MiB]", "optimizer state [MiB]", "held [MiB]",
               f"held vs {REFERENCE}", "peak [MiB]", f"throughput [{unit}]", f"throughput vs {REFERENCE}",
               "speedup"]  # fmt: skip
    rows = []
    for _, r in t.sort_values(cols, kind="stable").iterrows():
        s = by_cell.get(tuple(str(r[c]) for c in cols))
        vs_held = f"{sig3(s['held_ratio'])}×" if s is not None else "–"
        vs_time = _judged(s) if s is not None else "–"
        peak = "–" if not finite(r.get("peak_mib")) else (
            f"{num(r['peak_mib'])} [{num(r['peak_ci_low'])}, {num(r['peak_ci_high'])}]"
            if finite(r.get("peak_ci_low")) else num(r["peak_mib"]))  # fmt: skip
        rows.append([str(r["strategy"]), axes_text(r, cols), *(mib(r.get(c, np.nan)) for c, _ in A.HELD_PARTS),
                     mib(r.get(A.HELD, np.nan)), vs_held, peak, cell_ci(r, thr), vs_time,
                     cell_ci(r, "speedup")])  # fmt: skip
    found = []
    if not A.has_held(d.cells):
        found.append("These runs did not count the memory each rank holds (no extra_held_bytes in runs.csv: made by a "
                     "harness from before the count); rerun them to answer the question.")  # fmt: skip
    elif savings.empty:
        found.append(f"No sharded strategy ({listing(list(A.SHARDED))}) ran beside {REFERENCE} at the same settings "
                     "here, so there is no saving to state.")  # fmt: skip
    else:
        found += _saved(savings, cols)
        found += _costs(savings, [c for c in setting if c in A.varying(d.runs, A.axes(d.runs)) or c == "world_size"])
    for axis, reference in EFFECTS:
        if axis in cols:  # (a grid without the reference value has no twins: no sentence)
            effects = A.axis_effects(d.runs, d.cells, axis, reference, d.design)
            text = _effect(effects, axis, reference, cols)
            if text:
                found.append(text)
    compiled, checkpointed = transform_sentences(d.runs, d.cells, lambda r: _setting_name(r, cols), d.design)
    found += compiled + checkpointed
    note = ("Parameters, gradients, optimizer state and held (their sum): bytes one rank holds for training, counted "
            "from its own tensors (its shards; the largest rank's), in MiB (2^20 bytes), exact and the same in every "
            f"repeat; held vs {REFERENCE}: their ratio to {REFERENCE}'s at the same settings. Peak: the largest rank's "
            "peak RSS (CPU) or peak CUDA allocation (GPU), MiB, median [order-statistic interval]. Throughput and "
            f"speedup: geometric means [95 % intervals]; throughput vs {REFERENCE}: ratio of geometric means [95 % Welch "
            "interval], faster or slower only where it excludes 1.")  # fmt: skip
    if d.design is not None:
        note += (" A sequential design ran: where it asked a pair, the verdict and interval are the design's (as in "
                 "'What the design decided'); the others are descriptive, not controlled by the design.")  # fmt: skip
    return columns, rows, note, found


STUDY = Study(
    "sharding",
    "Sharding: what it saves in memory per rank, and what it costs in time",
    "How much memory per rank do ZeRO-1 (zero), ZeRO-2 (fsdp_grad_op) and ZeRO-3 (fsdp) save against DDP, what "
    "does it cost in throughput, and what do bf16, gradient accumulation and compiling change?",
    ("memory_held", "strategy_bars", "phases", "speedup"),
    build,
)
