"""Per-cell breakdowns beyond the runs' own statistics: the profiler's operators of a step
(profile.csv), throughput per epoch (steps.csv), the time of one synchronisation round and the
batch that batch_size auto chose (the accelerators study).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench.core.run_record import Extra

# -- the profiler's breakdown of a step (profile_steps > 0: aggregate's profile.csv) -------------


def profile_cells(profile: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell (`cols`) and operator: seconds of self time per profiled step, the mean over the
    ranks of a run (an operator outside a rank's top list counts 0 there) and the median over the
    cell's runs; `comm` marks communication operators, `activity` the device's (cuda) where a run
    recorded it, else cpu. Rows of one cell sum to its profiled step (the "other" row included)."""
    pr = profile.assign(self_s_per_step=pd.to_numeric(profile["self_s_per_step"], errors="coerce"),
                        comm=pd.to_numeric(profile["comm"], errors="coerce") > 0)  # fmt: skip
    has_cuda = pr.groupby("run_dir")["activity"].transform(lambda a: (a.astype(str) == "cuda").any())
    pr = pr[pr["activity"].astype(str) == np.where(has_cuda, "cuda", "cpu")]
    ranks = pr.groupby("run_dir")["rank"].transform("nunique")
    pr = pr.assign(per_rank=pr["self_s_per_step"] / ranks)
    out = []
    for key, g in pr.groupby([*cols, "activity"], dropna=False, sort=False):
        runs = g.pivot_table(index=["op", "comm"], columns="run_dir", values="per_rank", aggfunc="sum", fill_value=0.0)
        med = runs.median(axis=1).rename("self_s").reset_index()  # a run without the operator: 0 there
        out.append(med.assign(**dict(zip([*cols, "activity"], key))))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=[*cols, "activity", "op", "comm", "self_s"])


def profile_comm_shares(profile: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per profiled cell (`cols`): `comm_share`, its communication operators' share of the profiled
    step (profile_cells); NaN for a cell without profiled time."""
    table = profile_cells(profile, cols)
    rows = []
    for key, g in table.groupby(cols, dropna=False, sort=False):
        total = g["self_s"].sum()
        rows.append((*(key if isinstance(key, tuple) else (key,)), g.loc[g["comm"], "self_s"].sum() / total if total > 0 else np.nan))
    return pd.DataFrame(rows, columns=[*cols, "comm_share"])


# -- per epoch, per round, the batch auto chose (the accelerators study) ----------------------------


def epoch_throughput(runs: pd.DataFrame, steps: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell (`cols`, from runs.csv through run_dir) and epoch: `samples_per_s`, the global samples
    of the epoch's steps (every rank's, summed: a pipeline's samples are its last stage's) over the
    steps' pacing time (per step the slowest rank's), median over the cell's ok runs; `warmup` when
    the epoch holds untimed warm-up steps (in some run), `n` the runs measured."""
    empty = pd.DataFrame(columns=[*cols, "epoch", "samples_per_s", "warmup", "n"])
    need = {"run_dir", "epoch", "step", "rank", "samples", "total_s", "timed"}
    if steps is None or steps.empty or not need <= set(steps.columns):
        return empty
    ok = runs.loc[runs["status"] == "ok", ["run_dir", *cols]].drop_duplicates("run_dir")
    st = steps[list(need)].merge(ok, on="run_dir", how="inner")
    if st.empty:
        return empty
    st = st.assign(samples=pd.to_numeric(st["samples"], errors="coerce"), total_s=pd.to_numeric(st["total_s"], errors="coerce"),
                   untimed=pd.to_numeric(st["timed"], errors="coerce") == 0)  # fmt: skip
    per_step = st.groupby(["run_dir", "epoch", "step"], sort=False).agg(samples=("samples", "sum"), s=("total_s", "max"),
                                                                        untimed=("untimed", "any"))  # fmt: skip
    per_epoch = per_step.groupby(["run_dir", "epoch"], sort=False).agg(samples=("samples", "sum"), s=("s", "sum"),
                                                                       warmup=("untimed", "any")).reset_index()  # fmt: skip
    per_epoch = per_epoch[per_epoch["s"] > 0].merge(ok, on="run_dir")
    per_epoch["samples_per_s"] = per_epoch["samples"] / per_epoch["s"]
    out = per_epoch.groupby([*cols, "epoch"], dropna=False, sort=True).agg(
        samples_per_s=("samples_per_s", "median"), warmup=("warmup", "any"), n=("run_dir", "nunique")).reset_index()  # fmt: skip
    return out


def round_time(runs: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell (`cols`): `round_s`, the median over its ok runs of one round, the steps between two
    synchronisations of the model: local SGD's measured round (extra.round_time_s: its local steps
    and the averaging), else one step (every other strategy synchronises each step); `steps_per_round`."""
    ok = runs[runs["status"] == "ok"]
    step = pd.to_numeric(ok.get("step_time_median_s", pd.Series(np.nan, index=ok.index)), errors="coerce")
    measured = pd.to_numeric(ok.get(Extra.round_time_s, pd.Series(np.nan, index=ok.index)), errors="coerce")
    per = pd.to_numeric(ok.get(Extra.steps_per_round, pd.Series(np.nan, index=ok.index)), errors="coerce")
    # A run too short for one whole round has no measured round: its steps per round times its step
    frame = ok[cols].assign(round_s=measured.fillna(step * per.fillna(1.0)), steps_per_round=per.fillna(1.0))
    return frame.groupby(cols, dropna=False, sort=True)[["round_s", "steps_per_round"]].median().reset_index()


def auto_batch(runs: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per cell of `batch_size` auto (`cols`): `chosen`, the per-rank batch it settled on (median over
    its ok runs), `tried` (one run's list) and `method` (how it judged what fits)."""
    empty = pd.DataFrame(columns=[*cols, "chosen", "tried", "method"])
    if "batch_size" not in runs or Extra.auto_batch not in runs:
        return empty
    ok = runs[(runs["status"] == "ok") & (runs["batch_size"].astype(str) == "auto")]
    if ok.empty:
        return empty
    frame = ok[cols].assign(chosen=pd.to_numeric(ok[Extra.auto_batch], errors="coerce"),
                            tried=ok.get(Extra.auto_batch_tried, pd.Series("", index=ok.index)).astype(str),
                            method=ok.get(Extra.auto_batch_method, pd.Series("", index=ok.index)).astype(str))  # fmt: skip
    return frame.groupby(cols, dropna=False, sort=True).agg(chosen=("chosen", "median"), tried=("tried", "first"),
                                                            method=("method", "first")).reset_index()  # fmt: skip
