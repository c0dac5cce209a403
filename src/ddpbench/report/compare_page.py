"""The comparison of two result sets as a page and a command, and as a section of the report.

`ddpbench compare BASE NEW` (also `python -m ddpbench compare BASE NEW`): BASE and NEW are
result folders (holding aggregate/runs.csv) or runs.csv files. It prints what differs between
the two sides' recorded environments first, then the verdict counts and, per cell, the ratio
NEW/BASE of the headline metric with its 95 % interval and verdict (analysis.compare decides
them), the cells on one side only and the gate. It writes comparison.csv and a self-contained
comparison.html (with a forest plot of the ratios) into --out (atomically; nothing is written
when an input is bad).

Exit status (EXIT_*): 0 compared, and the gate (if asked) passed: every gated cell's interval keeps
its slow end within the threshold. 1 the gate (`--fail-on-slowdown 5%`, repeatable; `METRIC=5%`
for one metric) failed: a matched cell is slower by more than the threshold with the whole
interval beyond it. 2 bad input (a missing or corrupt table, no runs, no common cells, different
columns), with a message naming the path and the problem. 3 the gate cannot judge: a gated cell
that did not fail has no interval, is unstable or has an interval reaching past the threshold
(whatever the noise setting widened it to), or `--job-noise estimate` found more than
JOB_NOISE_CAP (10 %); the terminal and the page name each cell and what would decide it.
docs/compare.md explains the statistics and the gate.

`comparison_section` is the report's `--compare-to`: these runs against a stored result set.
"""

from __future__ import annotations

import argparse
import io
import pathlib
import sys

import numpy as np
import pandas as pd
from markupsafe import Markup

from ddpbench import analysis as A
from ddpbench.analysis.compare import (
    GATED_BY_DEFAULT,
    Comparison,
    InputError,
    cell_label,
    compare_frames,
    compare_paths,
    noise_text,
    parse_gate,
    read_side,
)
from ddpbench.analysis.compare_cells import BY_NAME, COMPARE_METRICS, JOB_NOISE, JOB_NOISE_CAP
from ddpbench.analysis.comparison import Verdict
from ddpbench.core import safe_io
from ddpbench.report.findings import Finding
from ddpbench.report.render import inline_svg, jinja_env, plain
from ddpbench.report.tables import Table
from ddpbench.report.text import as_verdict, num, verdict_word

EXIT_GATE = 1
EXIT_INPUT = 2
# The gate was asked, and a gated cell neither failed nor passed it (analysis.compare_cells.gate_unjudged),
# or the estimated between-job noise is beyond JOB_NOISE_CAP.
EXIT_CANNOT_JUDGE = 3
EXIT_HELP = ("Exit 0: compared, and the gate (if asked) passed: every gated cell's 95 % interval keeps its slow end "
             "within the threshold; 1: the gate failed (a cell slower than the threshold with its whole interval "
             "beyond it); 2: bad input; 3: the gate cannot judge (a gated cell without an interval, unstable, or "
             "with an interval reaching past the threshold, or --job-noise estimate above 10 %): each such cell "
             "is named with what would decide it.")  # fmt: skip


# -- text ---------------------------------------------------------------------------------------


def fmt(x, digits: int = 3) -> str:
    """A BASE or NEW value: whole above 100, else 3 significant digits; absent: en dash."""
    if x is None or (isinstance(x, float) and np.isnan(x)) or x is pd.NA:
        return "–"
    x = float(x)
    return f"{x:.0f}" if 100 <= abs(x) < 1e7 else f"{x:.{digits}g}"


def row_ratio_text(r) -> str:
    """A comparison row's ratio NEW/BASE with its interval: '1.052 [1.010, 1.096]'."""
    if pd.isna(r.get("ratio")):
        return "–"
    if pd.isna(r.get("ratio_ci_low")):
        return f"{r['ratio']:.3f}"
    return f"{r['ratio']:.3f} [{r['ratio_ci_low']:.3f}, {r['ratio_ci_high']:.3f}]"


def summary_text(cmp: Comparison, out: pathlib.Path | None = None, max_rows: int = 40) -> str:
    """The terminal summary: provenance differences, the verdict counts, then the headline metric
    per cell (throughput, else the first metric compared), the one-sided cells and the gate."""
    lines = [f"ddpbench compare: BASE = {plain(getattr(cmp, 'base_path', cmp.base_name), 200)}",
             f"                  NEW  = {plain(getattr(cmp, 'new_path', cmp.new_name), 200)}", ""]  # fmt: skip
    diff = cmp.provenance[cmp.provenance["differs"]]
    if diff.empty:
        lines.append("Provenance: no recorded difference in environment or code.")
    else:
        lines.append("Provenance differs:")
        for _, r in diff.iterrows():
            lines.append(f"  {plain(r['label'], 40)}: {plain(r['base'], 60)} -> {plain(r['new'], 60)}")
    for _, r in cmp.provenance[cmp.provenance["measured"]].iterrows():
        lines.append(f"  ({plain(r['label'], 50)}: {plain(r['base'], 50)} | {plain(r['new'], 50)})")
    lines += [f"WARNING: {plain(w, 400)}" for w in cmp.warnings]
    lines.append("")
    counts = cmp.counts()
    lines.append(f"Verdicts per metric (NEW vs BASE; 95 % interval of the ratio decides, {noise_text(cmp.job_noise, cmp.job_noise_cells, cmp.job_noise_beyond_cap)}):")
    for _, c in counts.iterrows():
        extra = f", {c['not_compared']} not compared" if c["not_compared"] else ""
        lines.append(f"  {c['label']:<38} {c['faster']} faster, {c['slower']} slower, {c['undecided']} no detectable "
                     f"difference{extra}")  # fmt: skip
    m = cmp.matched
    head = next((x.name for x in COMPARE_METRICS if (m["metric"] == x.name).any()), None)
    if head:
        lines += ["", f"{BY_NAME[head].label}, NEW/BASE with 95 % interval:"]
        rows = m[m["metric"] == head]
        labels = [plain(cell_label(r, cmp.label_axes), 60) for _, r in rows.iterrows()]
        width = max(len(s) for s in [*labels, "cell"])
        lines.append(f"  {'cell':<{width}}  {'BASE':>9}  {'NEW':>9}  {'ratio [95% interval]':<26} verdict")
        shown = list(zip(labels, (r for _, r in rows.iterrows())))
        for lab, r in shown[:max_rows]:
            lines.append(f"  {lab:<{width}}  {fmt(r['base']):>9}  {fmt(r['new']):>9}  {row_ratio_text(r):<26} {verdict_word(r['verdict'])}"
                         + ("  UNSTABLE" if r["unstable"] else ""))  # fmt: skip
        if len(shown) > max_rows:
            lines.append(f"  ... {len(shown) - max_rows} more cells in comparison.csv")
    one = cmp.unmatched
    if len(one):
        lines += ["", f"Cells not compared ({len(one)}; {len(cmp.one_sided)} of them on one side only):"]
        for _, r in one.iterrows():
            lines.append(f"  {plain(cell_label(r, cmp.label_axes), 80)}: {plain(r['verdict'], 80)} ({plain(r['metric_label'], 80)})")
    if cmp.gates:
        lines += ["", *gate_lines(cmp)]
    if out is not None:
        lines += ["", f"Written: {out / 'comparison.csv'}, {out / 'comparison.html'}"]
    return "\n".join(lines)


GATE_ADVICE = ("more repeats narrow the repeats' part of an interval; the between-job noise (--job-noise) puts a floor "
               "under it that only measuring both sides in one job (and --job-noise 0) or a larger threshold gets "
               "past; an unstable cell needs measuring again on a quiet machine.")  # fmt: skip


def gate_lines(cmp: Comparison, max_rows: int = 12) -> list[str]:
    """The gate's result for the terminal: failed, cannot judge (each cell, why and what would decide
    it), or passed; a failed cell outranks the ones it cannot judge (exit 1, not 3)."""
    gated = ", ".join(f"{k} {100 * v:g}%" for k, v in cmp.gates.items())
    failed, unjudged, lines = cmp.failed_gate, cmp.unjudged, []
    if cmp.cannot_judge:
        lines.append(f"GATE CANNOT JUDGE: {noise_beyond_text(cmp)}")
    if len(failed):
        lines.append(f"GATE FAILED: {len(failed)} cell/metric(s) slower than allowed ({gated}), interval wholly beyond:")
        for _, r in failed.iterrows():
            lines.append(f"  {plain(cell_label(r, cmp.label_axes), 80)} -- {r['metric']}: {100 * r['slowdown']:+.1f}% "
                         f"slower (ratio {row_ratio_text(r)})")  # fmt: skip
        if cmp.warnings:
            lines.append("  (see the WARNING above: runs were measured on a busy machine, so the change may not be the only cause)")
    if len(unjudged):
        head = "The gate also cannot judge" if len(failed) else "GATE CANNOT JUDGE"
        lines.append(f"{head} {len(unjudged)} cell/metric(s) ({gated}): a pass needs each gated interval's slow end "
                     "within its threshold:")  # fmt: skip
        for _, r in unjudged.head(max_rows).iterrows():
            lines.append(f"  {plain(cell_label(r, cmp.label_axes), 80)} -- {r['metric']}: ratio {row_ratio_text(r)}: "
                         f"{plain(r['gate_cannot_judge'], 600)}")  # fmt: skip
        if len(unjudged) > max_rows:
            lines.append(f"  ... {len(unjudged) - max_rows} more in comparison.csv (column gate_cannot_judge)")
        lines.append(f"  What decides them: {GATE_ADVICE}")
    if not (len(failed) or len(unjudged) or cmp.cannot_judge):
        lines.append(f"Gate passed: every gated cell's interval keeps its slow end within the threshold ({gated}).")
    return lines


def noise_beyond_text(cmp: Comparison) -> str:
    return (f"the between-job noise estimated from the data is {100 * cmp.job_noise_beyond_cap:.3g} % per side, beyond "
            f"the {100 * JOB_NOISE_CAP:.3g} % a gate can work with; measure both sides again (several repeats in each "
            "of two jobs), or give --job-noise as a number")  # fmt: skip


# -- the page -----------------------------------------------------------------------------------

FOREST_MAX_CELLS = 60  # rows of a forest plot; beyond that the cells with the largest changes


def forest_svg(cmp: Comparison) -> str | None:
    """A forest plot: one panel per metric, one row per matched cell, the ratio NEW/BASE with its
    interval on a log axis, coloured by strategy (plots.strategy_style); SVG text."""
    from ddpbench.report import figures as plots
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    m = cmp.matched[cmp.matched["ratio"].notna()]
    metrics = [x for x in COMPARE_METRICS if (m["metric"] == x.name).any()]
    if not metrics:
        return None
    keys = list(dict.fromkeys(tuple(map(str, r)) for r in m[cmp.axes].itertuples(index=False)))
    if len(keys) > FOREST_MAX_CELLS:
        size = m.assign(_k=[tuple(map(str, r)) for r in m[cmp.axes].itertuples(index=False)],
                        _d=np.abs(np.log(m["ratio"].astype(float))))  # fmt: skip
        keep = size.groupby("_k")["_d"].max().sort_values(ascending=False).index[:FOREST_MAX_CELLS]
        keys = [k for k in keys if k in set(keep)]
    ypos = {k: i for i, k in enumerate(keys)}
    labels = []
    for k in keys:
        row = dict(zip(cmp.axes, k))
        labels.append(plots.text(cell_label(row, cmp.label_axes), 60))
    with plt.rc_context(plots.RC):
        fig, axs = plt.subplots(1, len(metrics), sharey=True, squeeze=False, layout="constrained",
                                figsize=(1.2 + 2.3 * len(metrics) + 0.05 * max(map(len, labels)), 1.3 + 0.24 * len(keys)))  # fmt: skip
        seen = {}
        for ax, metric in zip(axs[0], metrics):
            d = m[m["metric"] == metric.name]
            for _, r in d.iterrows():
                k = tuple(str(r[c]) for c in cmp.axes)
                if k not in ypos:
                    continue
                strategy = r["strategy"] if "strategy" in r else ""
                style = plots.strategy_style(strategy)
                lo, hi = r["ratio_ci_low"], r["ratio_ci_high"]
                err = None if pd.isna(lo) else [[r["ratio"] - lo], [hi - r["ratio"]]]
                hollow = r["verdict"] not in (Verdict.FASTER, Verdict.SLOWER)
                ax.errorbar([r["ratio"]], [ypos[k]], xerr=err, fmt=style["marker"], color=style["color"],
                            mfc="white" if hollow else style["color"], ms=5, capsize=2, lw=1.2)  # fmt: skip
                seen.setdefault(str(strategy), style)
            ax.axvline(1.0, color="#444", lw=0.8)
            threshold = cmp.gates.get(metric.name)
            if threshold:
                bound = 1 / (1 + threshold) if metric.higher_is_better else 1 + threshold
                ax.axvline(bound, color="#c33", lw=0.8, ls="--")
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]))
            ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(plt.NullFormatter())
            better = "right" if metric.higher_is_better else "left"
            ax.set_title(plots.text(metric.label))
            ax.set_xlabel(f"NEW / BASE ({better} = faster)")
        axs[0][0].set_yticks(range(len(keys)), labels)
        axs[0][0].invert_yaxis()
        handles = [plt.Line2D([], [], marker=s["marker"], color=s["color"], ls="", label=plots.text(f"strategy={name}"))
                   for name, s in seen.items()]  # fmt: skip
        if handles:
            fig.legend(handles=handles, loc="outside lower center", ncols=min(4, len(handles)))
        fig.suptitle("Ratio NEW / BASE per cell with 95 % interval (filled: the interval excludes 1)")
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata=plots.METADATA["svg"], bbox_inches="tight")
        plt.close(fig)
    svg = buf.getvalue()
    return inline_svg(svg, "forest")


def render_html(cmp: Comparison, title: str = "ddpbench comparison") -> str:
    """comparison.html: the provenance diff, the verdict counts, the forest plot and the table."""
    env = jinja_env("html")
    m = cmp.matched
    rows, classes = [], []
    for _, r in m.iterrows():
        rows.append([cell_label(r, cmp.label_axes), r["metric_label"], str(int(r["n_base"])) if pd.notna(r["n_base"]) else "–",
                     str(int(r["n_new"])) if pd.notna(r["n_new"]) else "–", fmt(r["base"]), fmt(r["new"]), row_ratio_text(r),
                     "–" if pd.isna(r["slowdown"]) else f"{100 * r['slowdown']:+.1f}%", verdict_word(r["verdict"]),
                     ("GATE FAILED" if r["gate_failed"] else "GATE CANNOT JUDGE" if r["gate_cannot_judge"] else "")
                     + (f" UNSTABLE: {r['unstable_cause']}" if r["unstable"] else "")])  # fmt: skip
        v = as_verdict(r["verdict"])
        classes.append(v.value if v is not None and v.difference else "")  # the page's CSS: tr.faster, tr.slower
    one = [[cell_label(r, cmp.label_axes), r["verdict"], r["metric_label"]] for _, r in cmp.unmatched.iterrows()]
    svg = forest_svg(cmp)
    prov = cmp.provenance
    ctx = dict(
        title=title,
        base=getattr(cmp, "base_path", cmp.base_name),
        new=getattr(cmp, "new_path", cmp.new_name),
        differs=[r for _, r in prov[prov["differs"]].iterrows()],
        warnings=cmp.warnings,
        same=[r for _, r in prov[~prov["differs"] & ~prov["measured"]].iterrows()],
        measured=[r for _, r in prov[prov["measured"]].iterrows()],
        counts=[r for _, r in cmp.counts().iterrows()],
        columns=["cell", "metric", "n BASE", "n NEW", "BASE", "NEW", "NEW/BASE [95% interval]", "slowdown", "verdict", "flags"],
        rows=rows, row_class=classes, one_sided=one,
        gates=[(k, f"{100 * v:g}%") for k, v in cmp.gates.items()],
        failed=[(cell_label(r, cmp.label_axes), r["metric_label"], f"{100 * r['slowdown']:+.1f}%", row_ratio_text(r))
                for _, r in cmp.failed_gate.iterrows()],  # fmt: skip
        unjudged=[(cell_label(r, cmp.label_axes), r["metric_label"], row_ratio_text(r), r["gate_cannot_judge"])
                  for _, r in cmp.unjudged.iterrows()],  # fmt: skip
        noise_beyond=noise_beyond_text(cmp) if cmp.cannot_judge else "",
        gate_advice=GATE_ADVICE,
        forest=Markup(svg) if svg else None,
        forest_max=FOREST_MAX_CELLS,
        n_cells=len(m.drop_duplicates(cmp.axes)) if len(m) else 0,
        axes=cmp.label_axes,
        job_noise=cmp.job_noise,
        job_noise_pct=f"{100 * cmp.job_noise:.3g} %",
    )
    return env.get_template("compare.html.j2").render(**ctx)


def write(cmp: Comparison, out, title: str = "ddpbench comparison") -> tuple[pathlib.Path, pathlib.Path]:
    """comparison.csv and comparison.html into `out`, each written atomically; the page is rendered
    before anything is written, so a failure leaves the folder as it was."""
    html = render_html(cmp, title)
    folder = safe_io.real_dir(out)
    csv = folder / "comparison.csv"
    with safe_io.atomic_write(csv, newline="") as handle:
        cmp.table.to_csv(handle, index=False)
    page = folder / "comparison.html"
    safe_io.atomic_write_text(page, html)
    return csv, page


# -- the report's section -----------------------------------------------------------------------

# Cells of a comparison named in the report (the rest are in comparison.csv / comparison.html).
COMPARISON_NAMED = 12


def comparison_section(base_path: str, runs: pd.DataFrame, out: pathlib.Path, baseline_strategy: str,
                       max_rel_ci: float) -> dict:  # fmt: skip
    """These runs (NEW) against a stored result set (BASE), as `ddpbench compare` judges them:
    comparison.csv and comparison.html beside the report, and what the report shows of them --
    what differs in the environments, the verdict counts, the cells that changed. A baseline that
    cannot be compared gives the reason instead of failing the report."""
    try:
        base, csv = read_side(base_path)
        cmp = compare_frames(base, runs, base_name="baseline", new_name="these runs", max_rel_ci=max_rel_ci,
                             baseline_strategy=baseline_strategy)  # fmt: skip
    except InputError as err:
        return dict(base=str(base_path), error=f"not compared: {err}")
    cmp.base_path, cmp.new_path = str(csv), "these runs"
    write(cmp, out, title=f"ddpbench comparison: these runs against {csv}")
    head = "samples_per_s"
    m = cmp.matched[cmp.matched["metric"] == head]
    changed = m[m["verdict"].isin([Verdict.SLOWER, Verdict.FASTER])]
    changed = changed.reindex(changed["ratio"].sub(1).abs().sort_values(ascending=False).index)
    rows = [[cell_label(r, cmp.label_axes), num(r["base"]), num(r["new"]), row_ratio_text(r), verdict_word(r["verdict"])]
            for _, r in changed.head(COMPARISON_NAMED).iterrows()]  # fmt: skip
    diff = cmp.provenance[cmp.provenance["differs"]]
    counts = cmp.counts()
    return dict(
        base=str(csv),
        error="",
        provenance=[(r["label"], r["base"], r["new"]) for _, r in diff.iterrows()],
        counts=[(c["label"], c["faster"], c["slower"], c["undecided"], c["not_compared"]) for _, c in counts.iterrows()],
        changed=Table(["cell", "baseline", "these runs", "ratio [95% interval]", "verdict"], rows,
                      f"throughput of the cells whose change the interval decides, largest first"
                      f"{f' ({len(changed) - COMPARISON_NAMED} more in comparison.csv)' if len(changed) > COMPARISON_NAMED else ''}"),
        one_sided=len(cmp.one_sided),
        warnings=cmp.warnings,
        noise=noise_text(cmp.job_noise, cmp.job_noise_cells, cmp.job_noise_beyond_cap),
        finding=comparison_finding(counts, diff, len(cmp.one_sided), csv),
    )


def comparison_finding(counts: pd.DataFrame, diff: pd.DataFrame, one_sided: int, csv: pathlib.Path) -> Finding:
    """One sentence from the comparison's verdict counts (throughput) and provenance differences."""
    row = counts[counts["metric"] == "samples_per_s"]
    n_fast, n_slow, same, other = (int(row[c].sum()) for c in ("faster", "slower", "undecided", "not_compared"))
    what = (f" (differs: {', '.join(diff['label'].head(3))}{', ...' if len(diff) > 3 else ''})" if len(diff)
            else " (same recorded environment and code)")  # fmt: skip
    text = (f"Against the baseline {csv}{what}: throughput is slower in {n_slow}, faster in {n_fast} and not "
            f"detectably different in {same} of {n_fast + n_slow + same + other} cells (95 % intervals of the ratio).")
    if one_sided:
        text += f" {one_sided} cell(s) are on one side only."
    return Finding("warning" if n_slow else "winner", text, "comparison-section")


# -- command line -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="ddpbench compare",
        # argparse %-formats help strings, but a description only where it names %(prog): one % here
        description="Compare two result sets (folders with aggregate/runs.csv, or runs.csv files): what differs in "
                    "their environments, and per matched cell whether NEW is faster, slower or not detectably "
                    "different from BASE (95 % Welch interval of the ratio NEW/BASE).",
        epilog=EXIT_HELP + " Metrics: " + ", ".join(f"{m.name} ({m.label})" for m in COMPARE_METRICS)
               + ". Details: docs/compare.md.",
    )  # fmt: skip
    ap.add_argument("base", metavar="BASE", help="the reference result set (folder or runs.csv)")
    ap.add_argument("new", metavar="NEW", help="the result set to judge against it")
    ap.add_argument("--out", default="comparison", type=pathlib.Path,
                    help="folder for comparison.csv and comparison.html (default: %(default)s)")
    ap.add_argument("--fail-on-slowdown", action="append", default=[], metavar="[METRIC=]PCT",
                    help="exit 1 when a matched cell is slower than BASE by more than PCT with the whole 95 %% "
                         "interval beyond it, 3 when a gated cell's interval reaches past PCT without lying beyond "
                         "it (or it has none, or is unstable); bare PCT gates " + ", ".join(GATED_BY_DEFAULT)
                         + "; repeatable (e.g. 5%%, samples_per_s=3%%)")  # fmt: skip
    ap.add_argument("--max-rel-ci", type=float, default=A.MAX_REL_CI,
                    help="stability threshold for the UNSTABLE flag (default %(default)s)")
    ap.add_argument("--baseline-strategy", default=A.BASELINE_STRATEGY,
                    help="strategy whose p = 1 runs are each side's speedup baseline (default %(default)s)")
    ap.add_argument("--ignore", action="append", default=[], metavar="AXIS",
                    help="match cells without this axis: the change being judged (e.g. --ignore bucket_mb to compare "
                         "two bucket sizes); its values are listed first in the provenance; repeatable")
    ap.add_argument("--job-noise", default=str(JOB_NOISE), metavar="FRACTION|estimate",
                    help="between-job standard deviation of a cell's (log) value, added to every interval: two jobs "
                         "on one machine differ by more than their repeats show (default %(default)s, measured on a "
                         "2-core VM; 0: repeats only, for sides measured in one job; estimate: from the cells either "
                         "side measured in several jobs). See docs/compare.md")
    ap.add_argument("--title", default="ddpbench comparison")
    ap.add_argument("--no-files", action="store_true", help="print the summary only; write nothing")
    args = ap.parse_args(argv)
    try:
        gates = parse_gate(args.fail_on_slowdown)
        if args.job_noise != "estimate":
            try:
                args.job_noise = float(args.job_noise)
            except ValueError:
                args.job_noise = -1.0
            if not (0 <= args.job_noise < 1):
                raise ValueError("--job-noise must be a fraction in [0, 1) (0.03 = 3 %) or 'estimate'")
    except ValueError as err:
        print(f"ddpbench compare: error: {err}", file=sys.stderr)
        return EXIT_INPUT
    try:
        cmp = compare_paths(args.base, args.new, gates, max_rel_ci=args.max_rel_ci,
                            baseline_strategy=args.baseline_strategy, ignore=args.ignore,
                            job_noise=args.job_noise)  # fmt: skip
    except InputError as err:
        print(f"ddpbench compare: error: {plain(err, 500)}", file=sys.stderr)
        return EXIT_INPUT
    out = None
    if not args.no_files:
        try:
            write(cmp, args.out, args.title)
        except (OSError, safe_io.UnsafePathError) as err:
            print(f"ddpbench compare: error: cannot write {args.out}: {err}", file=sys.stderr)
            return EXIT_INPUT
        out = args.out
    print(summary_text(cmp, out))
    return gate_exit(cmp) if gates else 0


def gate_exit(cmp: Comparison) -> int:
    """The gate's exit status, said on stderr unless it passed: never a pass (nor a fail) on intervals
    the estimated noise made this wide; a failed cell before the cells it cannot judge."""
    if cmp.cannot_judge:
        print(f"ddpbench compare: the gate cannot judge: {noise_beyond_text(cmp)}", file=sys.stderr)
        return EXIT_CANNOT_JUDGE
    if len(cmp.failed_gate):
        return EXIT_GATE
    if len(cmp.unjudged):
        print(f"ddpbench compare: the gate cannot judge {len(cmp.unjudged)} cell/metric(s): neither slower beyond "
              "the threshold nor within it, as listed above with what would decide each", file=sys.stderr)  # fmt: skip
        return EXIT_CANNOT_JUDGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
