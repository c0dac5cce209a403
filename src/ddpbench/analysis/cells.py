"""Per-cell statistics (cells.csv) and strategy-vs-strategy comparisons (comparisons.csv).

cell_stats: per cell, run counts by status and health flag, every metric's estimate and interval
over its repeats, the stability check and the timeline medians. comparisons_table: per setting and
world size, every pair of strategies as a throughput ratio with its Welch interval and a verdict.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
from scipy import special  # the t distribution's functions: scipy.stats would add 0.55 s to every import

from ddpbench.analysis.health import (
    MAX_REL_CI,
    THROUGHPUT,
    busy_runs,
    cell_stability,
    nondeterministic_mask,
    oversubscribed_runs,
    unhealthy_runs,
)
from ddpbench.analysis.comparison import Comparison, DesignAnswers, Source, Verdict
from ddpbench.analysis.intervals import LEVEL, Interval, metric_interval
from ddpbench.analysis.links import ACHIEVED
from ddpbench.analysis.tables import SUPERSEDED, TIME, axes, numeric_column, run_version, text_column, text_key
from ddpbench.core.run_output import TIMELINE_SPANS
from ddpbench.core.run_record import Env, Extra

# Per-cell statistics: summary metric -> label with its unit (timing metrics: geometric means over
# repeats, intervals.TIMING_METRICS; the others medians).
METRICS = {
    "step_time_median_s": "step time [s]",
    "samples_per_s": "throughput [samples/s]",
    "tokens_per_s": "throughput [tokens/s]",  # token data only: samples/s x seq_len
    "epoch_time_s": "epoch time [s]",
    "frac_comm": "communication fraction",
    "frac_exposed_comm": "exposed communication fraction",
    "frac_other": "other (unattributed) fraction",
    "frac_imbalance": "imbalance fraction",
    "compute_comm_ratio": "compute / exposed comm",
    "peak_rss_mb": "peak RSS [MiB]",
    "cuda_max_allocated_mb": "peak CUDA memory [MiB]",
    # Bytes a rank holds for training, counted from its own tensors (its shards under zero and the
    # FSDP strategies; the largest rank's): exact, the same in every repeat of a cell.
    Extra.param_bytes: "parameters held per rank [bytes]",
    Extra.grad_bytes: "gradients held per rank [bytes]",
    Extra.optimizer_state_bytes: "optimizer state held per rank [bytes]",
    Extra.held_bytes: "memory held per rank (parameters + gradients + optimizer state) [bytes]",
    # Model FLOP utilisation (core.peaks): the counted FLOPs per sample, the achieved rate (throughput x
    # FLOPs) and its share of world x the peak per rank, measured (matmul benchmark) and from the datasheet.
    Extra.train_flops_per_sample: "model FLOPs per sample (forward + backward, counted) [FLOP]",
    Extra.achieved_flops_per_s: "achieved model FLOP/s, all ranks [FLOP/s]",
    Extra.peak_flops_measured: "measured peak per rank (matmul) [FLOP/s]",
    Extra.peak_flops_datasheet: "datasheet peak per device [FLOP/s]",
    Extra.mfu_measured: "MFU (measured peak)",
    Extra.mfu_datasheet: "MFU (datasheet peak)",
    # HFU: the FLOPs the hardware did (activation checkpointing's recompute included) over the same reference.
    Extra.hardware_flops_per_sample: "hardware FLOPs per sample (with checkpointing's recompute, counted) [FLOP]",
    Extra.hfu_measured: "HFU (measured peak)",
    Extra.hfu_datasheet: "HFU (datasheet peak)",
    # What compiling cost outside the timed steps (compile: model only): the first step's wall beyond a
    # median timed step, and the graphs dynamo compiled. A one-off, not a timing metric: the median.
    # The timed steps' energy from the hardware's counters (core.energy): none where no counter was read.
    Extra.energy_per_sample_j: "energy per sample [J]",
    Extra.energy_per_token_j: "energy per token [J]",
    Extra.power_w: "average power of the timed steps [W]",
    Extra.compile_s: "compile time (first step beyond a timed one) [s]",
    Extra.compiled_graphs: "graphs compiled (rank 0)",
    "rank_skew": "rank skew",
    "train_loss_final": "last-step train loss",  # the last optimizer step's (docs/metrics.md)
    "test_acc": "test accuracy",
}
# Where a run's wall time goes beyond its measurement (summary.json timeline, core.run_output.TIMELINE_SPANS):
# per cell, the median over its timed runs; NaN for runs from before the timeline was recorded.
TIMELINE_COLUMNS = ("fixed_cost_s", *(f"timeline_{span}_s" for span in TIMELINE_SPANS))


def _nan_median(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(np.median(x)) if len(x) else np.nan


def cell_stats(runs: pd.DataFrame, max_rel_ci: float = MAX_REL_CI, design: DesignAnswers | None = None) -> pd.DataFrame:
    """One row per cell: run counts by status, each metric's estimate and interval over the
    repeats that measured something (geometric mean and log-t interval for timing metrics,
    median and order-statistic interval otherwise; `{m}_ci_level` is the interval's level),
    and the stability check on the throughput interval; where a sequential design ran, the
    design's throughput interval for a cell it asked the precision of (`design_precision`).

    Every per-run flag and number is read once into an array and each cell takes its rows by
    position: per cell, pandas filtering cost ~5 ms, 8 s of a 1,620-cell report."""
    cols = axes(runs)
    runs = runs.reset_index(drop=True)
    status = runs["status"].astype(str).to_numpy()
    metric = next((m for m in (TIME, *THROUGHPUT) if m in runs), None)
    timed = (status == "ok") & (runs[metric].notna().to_numpy() if metric else True)  # as timed_runs
    flags = dict(
        n_busy=busy_runs(runs).to_numpy(bool),
        n_oversubscribed=oversubscribed_runs(runs).to_numpy(bool),
        n_off_lock=(text_column(runs, Env.off_lock) != "").to_numpy(),
        n_nondeterministic=nondeterministic_mask(runs[timed], cols).reindex(runs.index, fill_value=False).to_numpy(bool),
        n_diverged=unhealthy_runs(runs).to_numpy(bool),
    )
    values = {m: numeric_column(runs, m).to_numpy(float) for m in METRICS if m in runs}
    medians = {c: numeric_column(runs, c).to_numpy(float) for c in TIMELINE_COLUMNS}
    if ACHIEVED in runs:  # the link's bandwidth as the probe at each run's start measured it
        medians["link_gbps"] = numeric_column(runs, ACHIEVED).to_numpy(float) / 1e9
    judge = next((m for m in THROUGHPUT if m in runs), None)
    rows = []
    for key, idx in runs.groupby(cols, dropna=False, sort=True).indices.items():
        used = idx[timed[idx]]
        st = status[idx]
        row = dict(zip(cols, key if isinstance(key, tuple) else (key,)))
        row.update(
            n_runs=len(idx),
            n_repeats=len(used),
            n_untimed=int((st == "ok").sum()) - len(used),
            n_failed=int((st == "failed").sum()),
            n_timeout=int((st == "timeout").sum()),
            n_skipped=int((st == "skipped").sum()),
            n_superseded=int((st == SUPERSEDED).sum()),
            **{name: int(flag[used].sum()) for name, flag in flags.items()},
        )
        row.update(zip(("unstable", "unstable_cause", "throughput_rel_ci"),
                       cell_stability(runs, used, values.get(judge), max_rel_ci)))  # fmt: skip
        for m, v in values.items():
            iv = metric_interval(m, v[used])
            row.update({m: iv.estimate, f"{m}_ci_low": iv.low, f"{m}_ci_high": iv.high, f"{m}_ci_level": iv.level})
        row.update({c: _nan_median(v[used]) for c, v in medians.items()})
        rows.append(row)
    link = ["link_gbps"] if ACHIEVED in runs else []
    counts = ["n_runs", "n_repeats", "n_untimed", "n_failed", "n_timeout", "n_skipped", "n_superseded", "n_busy",
              "n_oversubscribed", "n_off_lock", "n_nondeterministic", "n_diverged"]  # fmt: skip
    flags = ["unstable", "unstable_cause", "throughput_rel_ci"]
    stats_cols = [f"{m}{s}" for m in METRICS if m in runs for s in ("", "_ci_low", "_ci_high", "_ci_level")]
    out = pd.DataFrame(rows, columns=[*cols, *counts, *flags, *stats_cols, *TIMELINE_COLUMNS, *link])
    return out if design is None else design_precision(out, cols, design)


def design_precision(cells: pd.DataFrame, cols: list[str], design: DesignAnswers) -> pd.DataFrame:
    """A cell with a design's precision question takes the design's throughput interval (samples/s;
    tokens/s and the epoch time, which follow from it, alike), and its unstable flag says whether
    the design's precision target was met (its interval at the design's tolerance, not a plain
    95 % one); interval_from says whose interval each row carries (comparison.Source)."""
    out = cells.copy()
    out["interval_from"] = Source.DESCRIPTIVE
    for i, r in out.iterrows():
        v = design.precision.get(design.cell({c: r[c] for c in cols}))
        if v is None or v.estimate is None or v.low is None or v.high is None:
            continue
        met = v.verdict == Verdict.MET
        cause = "" if met else f"the design's precision ±{v.tolerance:.0%} not met after {v.runs[0]} runs"
        if not met and r.get("unstable_cause"):
            cause += f"; {r['unstable_cause']}"
        for metric in ("samples_per_s", "tokens_per_s", "epoch_time_s"):
            if f"{metric}_ci_low" not in out or pd.isna(r.get(metric)) or not r.get(metric):
                continue
            if metric == "epoch_time_s":  # an epoch's samples / throughput: the interval turned round
                scale = float(r[metric]) * v.estimate
                bounds = [scale / v.high, scale / v.low]
            else:  # tokens/s: samples/s times the tokens of a sample
                scale = float(r[metric]) / v.estimate
                bounds = [v.low * scale, v.high * scale]
            out.loc[i, [f"{metric}_ci_low", f"{metric}_ci_high", f"{metric}_ci_level"]] = [*bounds, design.level]
        out.loc[i, ["throughput_rel_ci", "unstable", "unstable_cause", "interval_from"]] = \
            [(v.high - v.low) / 2 / v.estimate, not met, cause, Source.DESIGN]  # fmt: skip
    return out


# -- comparisons between strategies -----------------------------------------------------------

COMPARISON_COLUMNS = [
    "strategy_a", "strategy_b", "n_a", "n_b", "ratio", "ratio_ci_low", "ratio_ci_high", "ratio_ci_level", "verdict",
    "unstable", "unstable_cause", "versions_differ", "interval_from", "margin",
]  # fmt: skip
# verdict: comparison.Verdict (faster: A's throughput above B's); interval_from: comparison.Source;
# margin: the equivalence margin of a design's question (a factor 1 + margin), on the rows whose
# verdict and interval are the design's; NaN elsewhere.


def comparisons_table(runs: pd.DataFrame, max_rel_ci: float = MAX_REL_CI,
                      design: DesignAnswers | None = None) -> pd.DataFrame:  # fmt: skip
    """comparisons.csv: for every setting (all axes equal except strategy) and world size, every
    pair of strategies A < B (by name) as the throughput ratio A/B with its Welch log-t interval
    (welch_log_ratio), unstable when either side is (stability), versions_differ when the sides'
    run versions differ. Where a sequential design ran (`design`), a pair it asked about is its
    comparison (verdict and repeated interval), every other pair's interval descriptive.

    Each cell (setting and strategy) is read once, by position, and the Student-t quantiles of
    all pairs come from one call: per pair, pandas filtering and scipy's ppf cost ~0.7 ms, 3 s of
    a 1,620-cell report."""
    cols = axes(runs)
    setting = [c for c in cols if c != "strategy"]
    ok = runs[runs["status"] == "ok"]
    if "strategy" not in runs or "samples_per_s" not in runs or ok.empty:
        return pd.DataFrame(columns=[*setting, *COMPARISON_COLUMNS])
    ok = ok[ok["samples_per_s"].notna() & ok["strategy"].notna()].reset_index(drop=True)
    if ok.empty:
        return pd.DataFrame(columns=[*setting, *COMPARISON_COLUMNS])
    values = numeric_column(ok, "samples_per_s").to_numpy(float)
    metric = next((m for m in THROUGHPUT if m in ok), None)  # as stability()
    throughput = numeric_column(ok, metric).to_numpy(float) if metric else None
    version = run_version(ok).to_numpy()
    by = ok.groupby([*setting, "strategy"], dropna=False, sort=True)  # settings in order, strategies by name
    gid = by.ngroup().to_numpy()
    members = np.split(np.argsort(gid, kind="stable"), np.cumsum(np.bincount(gid))[:-1])
    settings: dict[tuple, list] = {}
    for key, pos in zip(by.size().index, members):
        key = key if isinstance(key, tuple) else (key,)
        with np.errstate(invalid="ignore", divide="ignore"):  # as welch_log_ratio: the log of what is there
            la = np.log(values[pos][~np.isnan(values[pos])])
        unstable, cause, _ = cell_stability(ok, pos, throughput, max_rel_ci)
        settings.setdefault(text_key(key[:-1]), (key[:-1], []))[1].append(dict(  # (as text: NaN keys are not equal)
            name=key[-1], n=len(pos), logs=la, mean=la.mean() if len(la) else np.nan,
            var=la.var(ddof=1) / len(la) if len(la) > 1 else np.nan, unstable=unstable, cause=cause,
            versions=frozenset(version[pos])))  # fmt: skip
    rows, dofs = [], []
    for key, sides in settings.values():
        for i, a in enumerate(sides):
            for b in sides[i + 1 :]:
                d = a["mean"] - b["mean"]
                se = np.sqrt(a["var"] + b["var"])
                interval = len(a["logs"]) > 1 and len(b["logs"]) > 1
                dof = 1.0
                if interval and se > 0:  # Welch–Satterthwaite, Hsu's at unequal counts: as welch_halfwidth
                    va, vb = np.float64(a["var"]), np.float64(b["var"])
                    na, nb = len(a["logs"]), len(b["logs"])
                    dof = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
                    dof = dof if na == nb or va == 0 or vb == 0 else min(dof, min(na, nb) - 1)
                dofs.append(dof)
                causes = [f"{s['name']}: {s['cause']}" for s in (a, b) if s["unstable"]]
                rows.append(dict(zip(setting, key), strategy_a=a["name"], strategy_b=b["name"], n_a=a["n"], n_b=b["n"],
                                 _d=d, _se=se if interval else np.nan, unstable=bool(causes),
                                 unstable_cause="; ".join(causes), versions_differ=a["versions"] != b["versions"]))  # fmt: skip
    q = special.stdtrit(np.asarray(dofs, float), 0.5 + LEVEL / 2)  # one call for every pair
    for row, qi in zip(rows, q):
        d, se = row.pop("_d"), row.pop("_se")
        if np.isnan(d):
            iv = Interval(np.nan)
        elif np.isnan(se):
            iv = Interval(float(np.exp(d)))
        else:
            half = float(qi * se) if se > 0 else 0.0
            iv = Interval(float(np.exp(d)), float(np.exp(d - half)), float(np.exp(d + half)), LEVEL)
        row.update(Comparison.of_interval(iv).columns())
        if design is not None:
            where = {c: row[c] for c in setting}
            cells = [design.cell({**where, "strategy": row[f"strategy_{side}"]}) for side in "ab"]
            row.update((design.between(*cells) or dataclasses.replace(Comparison.of_interval(iv),
                                                                      source=Source.DESCRIPTIVE)).columns())  # fmt: skip
    return pd.DataFrame(rows, columns=[*setting, *COMPARISON_COLUMNS])
