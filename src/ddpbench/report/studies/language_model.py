"""language-model: what data-parallel training of a small GPT costs, and where the time goes
(configs/studies/language-model.yaml).

Per cell (strategy, p, seq_len): the throughput in tokens/s (samples/s × seq_len) and per rank, the speedup over
one process at the same seq_len and batch, the efficiency, the model FLOP utilisation against the
peak measured per rank (where the runs measured it), the share of a step spent communicating (all
of it, and the exposed part), the last step's train loss and the test loss. The answer: per setting the
strategy with the highest throughput and every other cell against ddp (faster or slower only where
the interval of the throughput ratio excludes 1) and where the step's time goes; what longer
sequences at the same tokens per step change, per strategy, in tokens/s and in the communication
share; what compiling changes (tokens/s, the communication share, each strategy against ddp, eager
and compiled), what the compile costs and after how many steps it pays off; what activation checkpointing
saves in peak memory and costs in throughput (against the twin without it); the highest and lowest MFU with
the HFU beside it; and whether the loss fell below ln(vocab_size), the loss of a uniform guess over the
vocabulary, where an untrained model starts. Every sentence names the compile and checkpointing modes it
speaks of: where they vary, beside each cell or setting; where the grid holds one, in the first sentence.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench.analysis.health import unhealthy_runs
from ddpbench.core.run_record import Extra
from ddpbench.report.studies.common import Study, StudyData, axes_text, cell_ci, comm_share, study_cells, to_float
from ddpbench.report.text import SETTING_WORDS, VERDICT_WORDS, finite, listing, num, pct_text, ratio_text, sig3, source_text, value_text
from ddpbench.report.training import HFU, hfu_text, modes_of, transform_sentences
from ddpbench.strategies import REFERENCE  # the replicated strategy the others are measured against

MFU = Extra.mfu_measured  # cells.csv: model FLOPs achieved / (p x the matmul peak measured per rank)
MFU_DATASHEET = Extra.mfu_datasheet
COMPILE_S = Extra.compile_s  # cells.csv: the untimed first step's wall beyond a timed one (compile: model)
MODE_AXES = A.MODE_AXES  # compile and activation_checkpointing: every sentence names them
# What train_loss_final is: the last step's loss; in a runs.csv from before the 10-step mean had its own
# column (train_loss_last10_mean), it was that mean, and the report says so.
LAST_STEP_LOSS, OLD_TAIL_LOSS = "last-step train loss", "train loss (mean of the last 10 steps)"
# What a throughput ratio's interval says, between strategies and between settings (report.text's words).
STRATEGY_WORDS = VERDICT_WORDS


def _judge(d: StudyData, cols: list[str], thr: str):
    """The study's `judged(a, b, words)`: cell a's throughput over cell b's in words, '0.712× [0.69,
    0.74] (slower)', without an interval no verdict; where a sequential design ran, the design's
    verdict and interval for a pair it asked about ('(equivalent, the design's)') and the Welch
    interval labelled descriptive for the others."""
    values = A.runs_by_cell(d.runs, cols, thr)

    def judged(a, b, words: dict) -> str:
        xa, xb = (values.get(A.cell_key(r[cols]), ()) for r in (a, b))
        found = A.compare_pair(d.design, {c: a[c] for c in cols}, {c: b[c] for c in cols}, xa, xb)
        said = ratio_text(found.ratio, found.low, found.high, found.level)
        word = None if found.verdict in (A.Verdict.NO_INTERVAL, A.Verdict.OPEN) else words[found.verdict]
        return said + (f" ({word}{source_text(found.columns())})" if word else "")

    return judged


def _median_of_runs(runs: pd.DataFrame, cols: list[str], col: str) -> pd.DataFrame:
    """Per cell: the median of `col` over its ok runs, as `<col>_median` (test_loss is not in cells.csv)."""
    out = f"{col}_median"
    if col not in runs:
        return pd.DataFrame(columns=[*cols, out])
    ok = runs[runs["status"].astype(str) == "ok"]
    values = ok.assign(**{out: pd.to_numeric(ok[col], errors="coerce")})
    return values.groupby(cols, dropna=False, sort=False)[out].median().reset_index()


def _setting_text(r, setting: list[str]) -> str:
    """'seq_len=128, batch_size=64' (the cell's axes but strategy and p)."""
    return ", ".join(f"{c}={value_text(r[c])}" for c in setting) or "the one setting measured"


def _tokens_per_step(r) -> float:
    """Global batch × seq_len: the tokens one step trains on (NaN where either is unknown)."""
    return to_float(r.get("global_batch")) * to_float(r.get("seq_len"))


def _span(values: pd.Series) -> str:
    """'1.20' for one value (3 significant digits), '1.05–1.20' for several."""
    lo, hi = sig3(values.min()), sig3(values.max())
    return lo if lo == hi else f"{lo}–{hi}"


def _tokens_text(x: float) -> str:
    """8192 -> '8,192'."""
    return f"{int(round(x)):,}" if finite(x) else "–"


def _where(r, setting: list[str] | None = None) -> str:
    """'ddp (p = 2)', or with the cell's `setting` named: 'ddp (p = 2, compile=model)'."""
    named = f", {_setting_text(r, setting)}" if setting else ""
    return f"{r['strategy']} (p = {value_text(r['world_size'])}{named})"


def _fastest(t: pd.DataFrame, setting: list[str], thr: str, unit: str, judged) -> list[str]:
    """Per setting: the cell with the highest throughput, and every other cell against ddp's."""
    found = []
    groups = t.groupby(setting, dropna=False, sort=True) if setting else [((), t)]
    for _, g in groups:
        g = g.dropna(subset=[thr]).sort_values(thr, ascending=False, kind="stable")
        if g.empty:
            continue
        top = g.iloc[0]
        tps = _tokens_per_step(top)
        head = f"At {_setting_text(top, setting)}" + (f" ({_tokens_text(tps)} tokens per step)" if finite(tps) else "")
        text = (f"{head}, the highest throughput is {top['strategy']}'s at p = {value_text(top['world_size'])}: "
                f"{cell_ci(top, thr)} {unit}")  # fmt: skip
        mine = g["strategy"].astype(str) == REFERENCE
        ref = g[mine & (g["_p"] == g.loc[mine, "_p"].max())]
        if ref.empty:
            text += f" (no {REFERENCE} cell at this setting to compare with)."
        else:
            ref = ref.iloc[0]
            others = [f"{_where(r)} {judged(r, ref, STRATEGY_WORDS)}"
                      for _, r in g.iterrows() if r.name not in (ref.name, top.name)]  # fmt: skip
            if top.name == ref.name:
                text += "; the others against it (throughput ratio): " if others else ""
            else:
                text += (f", against {REFERENCE}'s {cell_ci(ref, thr)} {unit} at p = {value_text(ref['world_size'])}: "
                         f"{judged(top, ref, STRATEGY_WORDS)}"
                         + (f"; the others against {REFERENCE}'s: " if others else ""))  # fmt: skip
            text += "; ".join(others) + "."
        unstable = g.loc[g["unstable"].map(A.truthy), "strategy"].astype(str).tolist() if "unstable" in g else []
        if unstable:
            text += f" Unstable cells among them: {listing(unstable)}."
        found.append(text)
    return found


def _comm(t: pd.DataFrame, setting: list[str]) -> list[str]:
    """Per setting: the share of a step each multi-process cell spends communicating, and its exposed part."""
    found = []
    multi = t[(t["_p"] > 1) & pd.to_numeric(t.get("frac_comm", pd.Series(np.nan, index=t.index)), errors="coerce").notna()]
    groups = multi.groupby(setting, dropna=False, sort=True) if setting else [((), multi)]
    for _, g in groups:
        if g.empty:
            continue
        g = g.sort_values("frac_comm", ascending=False, kind="stable")
        parts = []
        for _, r in g.iterrows():
            exposed = to_float(r.get("frac_exposed_comm"))
            parts.append(f"{_where(r)} {comm_share(r)}" + (
                f", {pct_text(exposed, r.get('frac_exposed_comm_ci_low'), r.get('frac_exposed_comm_ci_high'))} exposed"
                if finite(exposed) else ""))  # fmt: skip
        found.append(f"Where the time goes at {_setting_text(g.iloc[0], setting)}: the share of a step spent "
                     "communicating (and its exposed part, not hidden behind computation) is " + "; ".join(parts)
                     + ". The phases figure splits the rest of the step.")  # fmt: skip
    return found


def _pairs(g: pd.DataFrame):
    """In one strategy's cells at one p: (shorter, longer, same tokens per step?) for each longer seq_len,
    against the shortest seq_len at the same tokens per step, else at the same batch."""
    shortest = g[g["_s"] == g["_s"].min()]
    none = shortest.iloc[0:0]
    for _, hi in g[g["_s"] > g["_s"].min()].sort_values("_s").iterrows():
        tps = _tokens_per_step(hi)
        same = shortest[np.isclose(shortest["_tps"], tps)] if finite(tps) else none
        if not same.empty:
            yield same.iloc[0], hi, True
            continue
        batch = shortest[shortest["batch_size"].astype(str) == str(hi["batch_size"])] if "batch_size" in g else none
        if not batch.empty:
            yield batch.iloc[0], hi, False


def _longer(t: pd.DataFrame, cols: list[str], thr: str, unit: str, judged) -> list[str]:
    """What longer sequences change, per strategy: tokens/s (the interval of the ratio decides the word)
    and the communication share."""
    if "seq_len" not in cols or thr != "tokens_per_s" or t["_s"].nunique() < 2:
        return []
    keys = [c for c in cols if c not in ("seq_len", "batch_size")]
    others = [c for c in keys if c not in ("strategy", "world_size")]  # e.g. compile: named beside each strategy
    by: dict[tuple, list[str]] = {}
    for _, g in t.dropna(subset=[thr]).groupby(keys, dropna=False, sort=False):
        for lo, hi, same in _pairs(g):
            how = (f"at the same {_tokens_text(_tokens_per_step(hi))} tokens per step" if same
                   else f"at the same batch of {value_text(hi['batch_size'])} sequences")  # fmt: skip
            if same and "batch_size" in cols:
                how += f" ({value_text(lo['batch_size'])} → {value_text(hi['batch_size'])} sequences)"
            comm = ""
            if to_float(lo["_p"]) > 1 and finite(lo.get("frac_comm")) and finite(hi.get("frac_comm")):
                comm = f", communication {comm_share(lo)} → {comm_share(hi)} of a step"
            item = (f"{_where(hi, others)}: {num(to_float(lo[thr]))} → {num(to_float(hi[thr]))} {unit}, "
                    f"{judged(hi, lo, SETTING_WORDS)}{comm}")  # fmt: skip
            by.setdefault((value_text(lo["seq_len"]), value_text(hi["seq_len"]), how), []).append(item)
    return [f"From seq_len={a} to {b} {how}, the throughput per strategy: " + "; ".join(items) + "."
            for (a, b, how), items in by.items()]


def _compiled(t: pd.DataFrame, cols: list[str], thr: str, unit: str, judged) -> list[str]:
    """What compiling changes, per strategy at each other setting: its throughput compiled against eager (the
    interval decides the word) and its communication share; then each strategy against ddp, eager and compiled."""
    if "compile" not in cols or t["compile"].astype(str).nunique() < 2:
        return []
    keys = [c for c in cols if c != "compile"]
    setting = sorted((c for c in keys if c not in ("strategy", "world_size")), key=lambda c: c != "seq_len")
    eager = t[t["compile"].astype(str) == "none"].dropna(subset=[thr])

    def twin(r, frame=eager, **fixed):
        want = {**{c: str(r[c]) for c in keys}, **fixed}
        match = frame[np.logical_and.reduce([frame[c].astype(str) == v for c, v in want.items()])]
        return match.iloc[0] if len(match) else None

    changed: dict[tuple, list[str]] = {}
    against: dict[tuple, list[str]] = {}
    compiled = t[t["compile"].astype(str) != "none"].dropna(subset=[thr])
    for _, hi in compiled.sort_values(["_s", "_p", "strategy"], kind="stable").iterrows():
        where = (value_text(hi["compile"]), _setting_text(hi, setting) if setting else "")
        lo = twin(hi)
        if lo is None:
            continue
        comm = ""
        if to_float(hi["_p"]) > 1 and finite(lo.get("frac_comm")) and finite(hi.get("frac_comm")):
            comm = f", communication {comm_share(lo)} → {comm_share(hi)} of a step"
        changed.setdefault(where, []).append(f"{_where(hi)}: {num(to_float(lo[thr]))} → {num(to_float(hi[thr]))} {unit}, "
                                             f"{judged(hi, lo, SETTING_WORDS)}{comm}")  # fmt: skip
        ref_hi, ref_lo = twin(hi, compiled, strategy=REFERENCE), twin(hi, strategy=REFERENCE)
        if str(hi["strategy"]) != REFERENCE and to_float(hi["_p"]) > 1 and ref_hi is not None and ref_lo is not None:
            against.setdefault(where, []).append(
                f"{_where(hi)} {judged(lo, ref_lo, STRATEGY_WORDS)} eager, "
                f"{judged(hi, ref_hi, STRATEGY_WORDS)} compiled")
    found = []
    for (mode, at), items in changed.items():
        text = f"With compile={mode} instead of none{f' at {at}' if at else ''}, the throughput per strategy: "
        text += "; ".join(items) + "."
        if against.get((mode, at)):
            text += f" Against {REFERENCE} at the same settings (throughput ratio): " + "; ".join(against[(mode, at)]) + "."
        found.append(text)
    return found


def _named(r, setting: list[str]) -> str:
    """'ddp (p = 2, seq_len=128, compile=none, activation_checkpointing=none)': the cell with every setting
    that tells it apart and both modes, named even where the grid holds them (issue 68)."""
    return _where(r, [*(c for c in setting if c in r), *(c for c in MODE_AXES if c in r and c not in setting)])


def _mixed(t: pd.DataFrame) -> str:
    """'; cells at compile=none and model': where a span over these cells crosses modes, which; else ''."""
    return f"; cells at {modes_of(t)}" if any(c in t and t[c].astype(str).nunique() > 1 for c in MODE_AXES) else ""


def _mfu(t: pd.DataFrame, setting: list[str]) -> list[str]:
    """The highest and lowest MFU against the measured peak, each with its HFU and named with its modes (and the
    datasheet's range where recorded)."""
    m = pd.to_numeric(t[MFU], errors="coerce") if MFU in t else pd.Series(np.nan, index=t.index)
    if m.notna().sum() == 0:
        return [f"MFU was not measured in these runs (no {MFU} in runs.csv: a harness from before the FLOP count, "
                "or no peak measured); the table leaves it out."]  # fmt: skip
    ranked = t.assign(_m=m).dropna(subset=["_m"]).sort_values("_m", ascending=False, kind="stable")
    hi, lo = ranked.iloc[0], ranked.iloc[-1]

    def mfu(r) -> str:
        hfu = hfu_text(r)
        return pct_text(r[MFU], r.get(f"{MFU}_ci_low"), r.get(f"{MFU}_ci_high"), r.get(f"{MFU}_ci_level")) + (
            f", {hfu}" if hfu else "")  # fmt: skip

    text = ("Model FLOP utilisation (MFU: the model's training FLOPs achieved over p × the matmul peak measured per "
            "rank; HFU beside it counts the FLOPs the hardware did, activation checkpointing's recompute included) "
            f"is highest for {_named(hi, setting)}: {mfu(hi)}")  # fmt: skip
    text += f", lowest for {_named(lo, setting)}: {mfu(lo)}." if len(ranked) > 1 else "."
    sheet = pd.to_numeric(t[MFU_DATASHEET], errors="coerce").dropna() if MFU_DATASHEET in t else pd.Series(dtype=float)
    if not sheet.empty:
        text += f" Against the datasheet peak: {sig3(100 * sheet.min())}–{sig3(100 * sheet.max())} %"
        text += f" ({modes_of(t)})." if _mixed(t) else "."
    return [text]


def _modes_held(t: pd.DataFrame) -> list[str]:
    """Where the grid holds a mode (compile, activation_checkpointing) at one value, one sentence says which, so the
    sentences that name only the settings that vary still say what they speak of."""
    held = [c for c in MODE_AXES if c in t and t[c].astype(str).nunique() == 1]
    if not held:
        return []
    named = ", ".join(f"{c}={value_text(t[c].iloc[0])}" for c in held)
    varies = [c for c in MODE_AXES if c in t and c not in held]
    return [f"Every cell here ran at {named}" + (f"; {listing(varies)} is named where it varies." if varies else ".")]


def _transforms(d: StudyData, setting: list[str]) -> list[str]:
    """What compiling costs and when it pays off, and what activation checkpointing saves and costs, the cell
    against its twin (report.training's words, which name the modes)."""
    unnamed = [c for c in setting if c not in MODE_AXES]
    compiled, checkpointed = transform_sentences(d.runs, d.cells, lambda r: _where(r, unnamed), d.design)
    return compiled + checkpointed


def _loss_words(runs: pd.DataFrame) -> str:
    """The words for train_loss_final in these runs (LAST_STEP_LOSS, or OLD_TAIL_LOSS for an old table)."""
    return LAST_STEP_LOSS if "train_loss_last10_mean" in runs else OLD_TAIL_LOSS


START = "_start_loss"  # a cell's loss at its first step: where its model started (_start_losses)
UNHEALTHY = "_unhealthy"  # a run of the cell diverged or spiked (extra.training_health)


def _start_losses(d: StudyData, cols: list[str]) -> pd.DataFrame:
    """Per cell: the median over its ok runs of the loss at the run's first step (the mean over the
    ranks that recorded it), as START; empty without a steps table."""
    steps = d.steps
    if steps is None or not {"run_dir", "step", "loss"} <= set(steps.columns) or "run_dir" not in d.runs:
        return pd.DataFrame(columns=[*cols, START])
    s = pd.DataFrame({"run_dir": steps["run_dir"], "step": pd.to_numeric(steps["step"], errors="coerce"),
                      "loss": pd.to_numeric(steps["loss"], errors="coerce")})  # fmt: skip
    first = s[s["step"] == s.groupby("run_dir")["step"].transform("min")].groupby("run_dir")["loss"].mean()
    ok = d.runs[d.runs["status"].astype(str) == "ok"]
    return ok.assign(**{START: ok["run_dir"].map(first)}).groupby(cols, dropna=False, sort=False)[START] \
        .median().reset_index()  # fmt: skip


def _unhealthy_cells(d: StudyData, cols: list[str]) -> pd.DataFrame:
    """Per cell: whether a run of it did not learn by its training health (diverged or spiked)."""
    bad = unhealthy_runs(d.runs) if len(d.runs) else pd.Series(dtype=bool)
    return d.runs.assign(**{UNHEALTHY: bad}).groupby(cols, dropna=False, sort=False)[UNHEALTHY].any().reset_index()


def _loss(t: pd.DataFrame, cols: list[str], words: str = LAST_STEP_LOSS) -> list[str]:
    """Whether the loss fell: each cell's train_loss_final (`words`) against where its own model
    started (START: its first step's loss) and its training health; ln(vocab_size), a uniform
    guess's loss, only says how far it got. Issue 68: a user's model whose loss fell from 65 to 18.9
    in 8 steps, training health ok, was called "a model that does not learn" for ending above ln 256."""
    final = _column(t, "train_loss_final")
    if final.notna().sum() == 0:
        return [f"No {words} was recorded in these runs: whether the model learned is not known."]
    vocab, start = _column(t, "vocab_size"), _column(t, START)
    guess_loss = np.log(vocab.where(vocab > 1))
    test = _column(t, "test_loss_median").dropna()
    tests = f", test loss {_span(test)}" if not test.empty else ""
    ran = f"{words} {_span(final.dropna())} (medians over repeats{_mixed(t)}){tests}"
    v = vocab.dropna()
    guess = (f"ln {value_text(v.iloc[0])} = {sig3(guess_loss.dropna().iloc[0])}" if v.nunique() == 1
             else "ln(vocab_size)")  # fmt: skip
    unhealthy = t[UNHEALTHY].fillna(False).astype(bool) if UNHEALTHY in t else pd.Series(False, index=t.index)
    stuck = final.notna() & (unhealthy | (start.notna() & ~(final < start)))
    above = final.notna() & ~stuck & guess_loss.notna() & ~(final < guess_loss)
    found = []
    if stuck.any():
        found.append(f"The loss did not fall from where the model started, or its training diverged, in "
                     f"{int(stuck.sum())} of {int(final.notna().sum())} cells: {_losses_named(t[stuck], cols, start)} (a model "
                     f"that does not learn answers nothing about training; a lower lr may help). Over all cells: {ran}.")  # fmt: skip
    fell, unknown = t[above & start.notna()], t[above & start.isna()]
    measured = int(final.notna().sum())
    if len(fell) == measured:  # all alike: one sentence, no cell named
        return [f"The loss fell in every cell, from {_span(start[fell.index])} at the first step to {ran}, and ended "
                f"above {guess}, a uniform guess's loss over the vocabulary: {FAR_ABOVE}."]  # fmt: skip
    if not fell.empty:
        found.append(f"In {len(fell)} cell(s) the loss fell from where the model started but ended above {guess}, a "
                     f"uniform guess's loss over the vocabulary: {_losses_named(fell, cols, start)} ({FAR_ABOVE}).")  # fmt: skip
    if not unknown.empty:
        found.append(f"In {len(unknown)} cell(s) the loss ended above {guess}, a uniform guess's loss over the "
                     f"vocabulary: {_losses_named(unknown, cols, start)}; their first step's loss is not in these tables (no "
                     "steps.csv), so whether the model learned is not known: one that starts above the guess can "
                     "fall and still end above it.")  # fmt: skip
    if not found:
        return [f"The loss fell in every cell: {ran}, from {guess}, the loss of a uniform guess over the vocabulary "
                "(where an untrained model starts)."]  # fmt: skip
    return found if stuck.any() else [*found, f"Over all cells: {ran}."]


FAR_ABOVE = "the model learns; one that starts far above the guess has further to go, and more steps would tell how far"


def _column(t: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(t[name], errors="coerce") if name in t else pd.Series(np.nan, index=t.index)


def _losses_named(rows: pd.DataFrame, cols: list[str], start: pd.Series) -> str:
    """'fsdp (p=2, seq_len=512): 5.55 → 5.70' (its start where known), '; ' between cells."""
    def one(i, r):
        began = f"{sig3(start[i])} → " if finite(start[i]) else ""
        return f"{r['strategy']} ({axes_text(r, cols)}): {began}{sig3(to_float(r['train_loss_final']))}"

    return listing([one(i, r) for i, r in rows.iterrows()], sep="; ")


def build(d: StudyData):
    cols = [c for c in dict.fromkeys(("strategy", "world_size", *A.varying(d.runs, A.axes(d.runs)))) if c in d.cells]
    t = study_cells(d, cols)
    eff = [c for c in ("efficiency", "efficiency_ci_low", "efficiency_ci_high") if c in d.speed]
    if eff and not d.speed.empty:
        t = t.merge(d.speed[[*cols, *eff]].drop_duplicates(cols), on=cols, how="left")
    t = t.merge(_median_of_runs(d.runs, cols, "test_loss"), on=cols, how="left")
    t = t.merge(_start_losses(d, cols), on=cols, how="left").merge(_unhealthy_cells(d, cols), on=cols, how="left")
    if "vocab_size" not in t and "vocab_size" in d.runs:  # (not an axis of the cells where it never varies)
        t["vocab_size"] = pd.to_numeric(d.runs["vocab_size"], errors="coerce").median()
    t = t.assign(_p=pd.to_numeric(t["world_size"], errors="coerce"),
                 _s=pd.to_numeric(t["seq_len"], errors="coerce") if "seq_len" in t else np.nan)  # fmt: skip
    t["_tps"] = [_tokens_per_step(r) for _, r in t.iterrows()]
    thr, unit = A.throughput_metric(t)
    judged = _judge(d, cols, thr)
    has = {c: c in t and pd.to_numeric(t[c], errors="coerce").notna().any() for c in (MFU, HFU, COMPILE_S)}
    loss_words = _loss_words(d.runs)
    columns = ["strategy", "cell", f"throughput [{unit}]", f"per rank [{unit}]", "speedup", "efficiency [%]",
               *(["MFU [%]"] if has[MFU] else []), *(["HFU [%]"] if has[HFU] else []),
               *(["compile [s]"] if has[COMPILE_S] else []),
               "comm [% of step]", "exposed comm [% of step]", loss_words, "test loss"]  # fmt: skip
    rows = []
    for _, r in t.sort_values(["_s", "_p", "strategy"] if "seq_len" in t else ["_p", "strategy"], kind="stable").iterrows():
        rows.append([str(r["strategy"]), axes_text(r, cols), cell_ci(r, thr), cell_ci(r, thr, 1 / r["_p"]), cell_ci(r, "speedup"),
                     cell_ci(r, "efficiency", 100), *([cell_ci(r, MFU, 100)] if has[MFU] else []),
                     *([cell_ci(r, HFU, 100)] if has[HFU] else []), *([cell_ci(r, COMPILE_S)] if has[COMPILE_S] else []),
                     cell_ci(r, "frac_comm", 100), cell_ci(r, "frac_exposed_comm", 100), cell_ci(r, "train_loss_final"),
                     num(to_float(r.get("test_loss_median")))])  # fmt: skip
    setting = sorted((c for c in cols if c not in ("strategy", "world_size")), key=lambda c: c != "seq_len")
    if thr not in t or pd.to_numeric(t[thr], errors="coerce").notna().sum() == 0:
        found = ["No cell of this study measured a throughput here (the problems table says why), so it answers "
                 "nothing yet."]  # fmt: skip
    else:
        found = _modes_held(t) + _fastest(t, setting, thr, unit, judged) + _comm(t, setting)
        found += _longer(t, cols, thr, unit, judged) + _compiled(t, cols, thr, unit, judged) + _transforms(d, setting)
        found += _mfu(t, setting) + _loss(t, cols, loss_words)
    per = "samples/s × seq_len" if thr == "tokens_per_s" else "global samples per second"
    note = (f"Throughput ({unit}: {per}; per rank: the throughput over p, one rank's or GPU's share), speedup (over single at p = 1 with the same seq_len and batch) and "
            "efficiency (speedup / p): geometric means over repeats [95 % intervals]; throughput ratios: ratios of "
            "geometric means [95 % Welch intervals], faster or slower (higher or lower) only where the interval "
            "excludes 1; "
            + ("MFU: the model's training FLOPs achieved over p × the matmul peak measured per rank; " if has[MFU]
               else "MFU: not measured in these runs; ")
            + ("HFU: the FLOPs the hardware did (activation checkpointing's recompute included) over the same; "
               if has[HFU] else "")
            + ("compile: the untimed first step's wall beyond a timed step (compile=model cells); " if has[COMPILE_S]
               else "")
            + "comm: the share of a step spent communicating, exposed comm its part not hidden behind computation; "
            + "".join(f"{x}, " for x, c in (("MFU", MFU), ("HFU", HFU), ("compile", COMPILE_S)) if has[c])
            + f"comm and {loss_words}: medians [order-statistic intervals]; test loss: "
            "median over repeats (the held-out sequences).")  # fmt: skip
    if d.design is not None:
        note += (" A sequential design ran: where it asked a pair, the verdict and interval are the design's (as in "
                 "'What the design decided'); the others are descriptive, not controlled by the design.")  # fmt: skip
    return columns, rows, note, found


STUDY = Study(
    "language-model",
    "Language model: what data-parallel training of a small GPT costs, and where the time goes",
    "How many tokens per second does each strategy train a small GPT at, against one process and against DDP, "
    "where does a step's time go, what do longer sequences at the same tokens per step and compiling change (and what "
    "does the compile cost, and when does it pay off), what does activation checkpointing save and cost, and does the "
    "model learn?",
    ("throughput", "phases", "mfu", "checkpointing", "speedup", "loss"),
    build,
)
