"""The report: statistics tables, fits, figures, and one HTML and one LaTeX/PDF document.

    python -m ddpbench.report --runs runs.csv [--steps steps.csv] [--comm comm.csv] --out DIR

writes DIR/cells.csv, speedup.csv, fits.csv, figures/, report.html (self-contained: SVGs
inline, no network), report.tex and, where latexmk is installed, report.pdf. Prints the
path of report.html last. Works without Snakemake; the workflow's report rule calls it.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

import jinja2
from markupsafe import Markup
import numpy as np
import pandas as pd

from ddpbench import analysis as A
from ddpbench import plots


def _report_dir() -> pathlib.Path:
    """report/ of the checkout: next to src/ (editable install) or in the working directory
    (the workflow runs from the repository root, also with a non-editable install)."""
    here = pathlib.Path(__file__).resolve().parents[2] / "report"
    return here if (here / "templates").is_dir() else pathlib.Path.cwd() / "report"


TEMPLATES = _report_dir() / "templates"
CAPTIONS = _report_dir() / "captions"
STATUS_ORDER = ("failed", "timeout", "skipped")

# Metrics shown in the cells table (the CSV has all of them).
CELL_TABLE = ["step_time_median_s", "samples_per_s", "epoch_time_s", "frac_comm", "peak_rss_mb"]


# -- formatting ------------------------------------------------------------------------------


def num(x, digits: int = 3) -> str:
    """Compact number; an absent value is an en dash, never 0 or 'nan'."""
    if x is None or x is pd.NA or (isinstance(x, float) and np.isnan(x)):
        return "–"
    if isinstance(x, float) and np.isinf(x):
        return "∞" if x > 0 else "−∞"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    x = float(x)
    if x == int(x) and abs(x) < 1e7:
        return str(int(x))
    if 100 <= abs(x) < 1e7:
        return f"{x:.0f}"  # throughput, memory: digits beyond the integer are noise
    return f"{x:.{digits}g}"


def with_ci(est, lo, hi) -> str:
    """'median [low, high]', or the median alone when there is no interval."""
    if pd.isna(lo) or pd.isna(hi):
        return num(est)
    return f"{num(est)} [{num(lo)}, {num(hi)}]"


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    note: str = ""


def cells_table(cells: pd.DataFrame, shown: list[str]) -> Table:
    metrics = [m for m in CELL_TABLE if m in cells]
    rows = []
    for _, r in cells.iterrows():
        if r["n_repeats"] == 0:
            continue
        rows.append([str(r[c]) for c in shown] + [num(r["n_repeats"])] + [
            with_ci(r[m], r[f"{m}_ci_low"], r[f"{m}_ci_high"]) for m in metrics
        ])  # fmt: skip
    return Table(shown + ["repeats"] + [A.METRICS[m] for m in metrics], rows,
                 "median over repeats [bootstrap 95% CI]; one repeat: no interval")  # fmt: skip


def speedup_table(speed: pd.DataFrame, shown: list[str]) -> Table:
    if speed.empty:
        return Table([], [], "no speedup: no successful run has a baseline")
    rows = [
        [str(r[c]) for c in shown]
        + [r["measure"], r["baseline"], num(r["n_repeats"]), num(r["time_s"]),
           with_ci(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]),
           with_ci(r["efficiency"], r["efficiency_ci_low"], r["efficiency_ci_high"])]  # fmt: skip
        for _, r in speed.iterrows()
    ]
    return Table(shown + ["measure", "baseline", "repeats", "epoch time [s]", "S(p)", "E(p)"], rows,
                 "S = median baseline epoch time / median epoch time [bootstrap 95% CI]; E = S/p")  # fmt: skip


def fits_table(fits: pd.DataFrame) -> Table:
    if fits.empty:
        return Table([], [], "no fits: no scaling group")
    rows = []
    for _, r in fits.iterrows():
        kind = "PREDICTION" if r["kind"] == "prediction" else r["kind"]
        rows.append([r["group"], r["law"], r["parameter"], num(r["p"]), kind,
                     with_ci(r["estimate"], r["ci_low"], r["ci_high"]), num(r["n_points"]), num(r["r2"]),
                     str(r["note"]) if pd.notna(r["note"]) else ""])  # fmt: skip
    return Table(["group", "law", "parameter", "p", "kind", "estimate [95% CI]", "points", "R²", "note"], rows)


def problems_table(runs: pd.DataFrame, shown: list[str]) -> Table:
    bad = runs[runs["status"] != "ok"]
    cols = [c for c in [*shown, "repeat"] if c in bad]
    rows = [[str(r[c]) for c in cols] + [r["status"], _reason(r.get("reason")), str(r.get("run_dir", ""))]
            for _, r in bad.iterrows()]  # fmt: skip
    return Table(cols + ["status", "reason", "run"], rows)


def _reason(reason) -> str:
    # The last line of an error tail is the one that names the exception.
    text = "" if pd.isna(reason) else str(reason).strip()
    last = text.splitlines()[-1] if text else ""
    return last[:300]


# -- context: environment, grid, methodology -------------------------------------------------


def _values(s: pd.Series) -> str:
    vals = [num(v) if isinstance(v, (float, np.floating)) else str(v) for v in pd.unique(s.dropna())]
    return ", ".join(vals) if vals else "–"


def environment(runs: pd.DataFrame) -> list[tuple[str, str]]:
    cols = [c for c in runs.columns if c.startswith("env_")]
    return [(c.removeprefix("env_var_").removeprefix("env_"), _values(runs[c])) for c in cols if runs[c].notna().any()]


def grid(runs: pd.DataFrame) -> dict:
    cols = A.axes(runs)
    shown = A.varying(runs, cols)
    fixed = [(c, _values(runs[c])) for c in cols if c not in shown]
    counts = runs["status"].value_counts()
    cells = runs.groupby(cols, dropna=False).ngroups
    return dict(
        axes=[(c, _values(runs[c].sort_values())) for c in shown],
        fixed=fixed,
        n_runs=len(runs),
        n_cells=cells,
        status=[(s, int(counts[s])) for s in ("ok", *STATUS_ORDER) if s in counts],
    )


def methodology(runs: pd.DataFrame, cells: pd.DataFrame, n_boot: int, steps_given: bool, comm_given: bool) -> dict:
    ok = runs[runs["status"] == "ok"]
    span = lambda s: "0" if s.empty else num(s.min()) if s.min() == s.max() else f"{num(s.min())}–{num(s.max())}"  # noqa: E731
    get = lambda c: _values(runs[c]) if c in runs else "–"  # noqa: E731
    timed = f"{num(ok['timed_steps'].min())}–{num(ok['timed_steps'].max())}" if "timed_steps" in ok and len(ok) else "–"
    return dict(
        warmup_steps=get("warmup_steps"),
        max_steps=get("max_steps"),
        epochs=get("epochs"),
        timed_steps=timed,
        launches=span(cells["n_runs"]),
        repeats=span(cells["n_repeats"]),
        n_boot=n_boot,
        level=int(A.LEVEL * 100),
        seed=A.SEED,
        seeds=get("seed"),
        threads=get("threads_per_rank"),
        backend=_values(runs["env_backend"]) if "env_backend" in runs else "–",
        steps_given=steps_given,
        comm_given=comm_given,
    )


DEFINITIONS = [
    ("step time", "maximum over ranks of one step's time (the slowest rank sets the pace); the first step and the "
                  "warm-up steps are excluded from every timed figure"),
    ("throughput", "global samples processed in timed steps / timed wall time"),
    ("epoch time", "timed wall time scaled to one epoch's steps: the time of a fixed amount of work"),
    ("phases", "data wait, forward, backward, communication (explicit sync), optimizer, total, summed over timed "
               "steps with the slowest rank per step; exposed communication is the part not hidden behind "
               "computation (equal to communication for blocking strategies)"),
    ("compute / comm", "(forward + backward + optimizer) / exposed communication"),
    ("speedup", "S(p) = T_baseline / T_p with T the epoch time; baseline: the baseline strategy (default `single`) at p = 1 with every other axis "
                "equal (settings that cannot affect it relaxed), else the strategy's own p = 1 run"),
    ("scaled speedup", "weak scaling keeps the per-rank batch, so the same epoch takes p times fewer steps: "
                       "T_1/T_p = p·t_step(1)/t_step(p)"),
    ("efficiency", "E(p) = S(p) / p"),
    ("Amdahl", "T(p) = T(1)·(f + (1 − f)/p), f the serial fraction; nonlinear least squares on relative error with "
               "T(1) free; interval: Student t from the covariance; strong scaling only"),
    ("Gustafson", "S(p) = p − α(p − 1) for weak scaling; least squares through S(1) = 1; Student-t interval"),
    ("Karp–Flatt", "e(p) = (1/S − 1/p)/(1 − 1/p) at every measured p > 1, interval from the speedup's; "
                   "rising e means overhead growing with p"),
    ("cost model", "T(p) = T_comp/p + T_comm(p) + T_sync per step, T_comm(p) = α·calls + v(p)·M/B with v the "
                   "strategy's volume law (all-reduce 2(p − 1)/p, gather/scatter p − 1, ZeRO 3(p − 1)/p, "
                   "point-to-point 1; all-reduce for runs that do not state it); M from the measured bytes under "
                   "the same law; α, B from the collective sweep when given, else from the measured "
                   "communication; T_comp, T_sync by least squares; T_sync absorbs overlap (may be negative); "
                   "intervals by resampling each world size's repeats and refitting"),
    ("bus bandwidth", "nccl-tests: algbw = M/t, busbw = algbw·2(p − 1)/p for all-reduce"),
    ("rank skew", "median over timed steps of (max − min)/max of the ranks' step times"),
    ("predictions", "model values at 2× and 4× the largest measured p: extrapolations, not measurements"),
]  # fmt: skip


def captions() -> dict[str, str]:
    """Figure captions: the same text snakemake --report shows (report/captions/<kind>.rst)."""
    out = {}
    for path in sorted(CAPTIONS.glob("*.rst")):
        text = " ".join(path.read_text().split())
        out[path.stem] = re.sub(r"``?([^`]+)``?", r"\1", text)  # plain text: drop RST literals
    return out


# -- rendering -------------------------------------------------------------------------------

_SVG_HEAD = re.compile(r"^.*?(?=<svg)", re.S)


def inline_svg(path: pathlib.Path, prefix: str) -> str:
    """An SVG file as an inline element; ids prefixed so several figures never collide."""
    text = _SVG_HEAD.sub("", path.read_text())
    text = re.sub(r'id="([^"]+)"', rf'id="{prefix}-\1"', text)
    text = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", text)
    return re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', text)


_TEX = {
    # Replacements that exist in the default OT1 encoding (no T1/lmodern needed).
    "\\": r"$\backslash$", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
    "~": r"\~{}", "^": r"\^{}", "<": r"$<$", ">": r"$>$", "|": r"$|$",
    "–": "--", "—": "---", "−": "-", "×": r"$\times$", "α": r"$\alpha$", "·": r"$\cdot$", "²": r"$^2$",
    "≥": r"$\geq$", "≤": r"$\leq$", "∞": r"$\infty$", "`": "", "\n": " ",
}  # fmt: skip
_TEX_RE = re.compile("|".join(re.escape(k) for k in _TEX))


class TexRaw(str):
    """Text already in LaTeX (e.g. a figure path); not escaped."""


def tex_escape(value) -> str:
    if isinstance(value, TexRaw):
        return value
    text = _TEX_RE.sub(lambda m: _TEX[m.group()], str(value))
    return text.encode("latin-1", "replace").decode("latin-1")  # pdflatex+utf8 handles Latin-1 only


def _env(kind: str, templates: pathlib.Path) -> jinja2.Environment:
    loader = jinja2.FileSystemLoader(str(templates))
    if kind == "html":
        return jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined)
    # LaTeX-friendly delimiters; every printed value is escaped unless marked TexRaw.
    env = jinja2.Environment(
        loader=loader, undefined=jinja2.StrictUndefined, autoescape=False,
        block_start_string="((*", block_end_string="*))", variable_start_string="(((",
        variable_end_string=")))", comment_start_string="((#", comment_end_string="#))",
        trim_blocks=True, lstrip_blocks=True, finalize=tex_escape,
    )  # fmt: skip
    env.filters["texraw"] = TexRaw  # macro output is LaTeX already
    return env


def compile_pdf(tex: pathlib.Path, timeout: int = 600) -> tuple[bool, str]:
    """latexmk → PDF; returns (made, message). Without latexmk, says plainly that no PDF was made."""
    if not shutil.which("latexmk"):
        return False, "No PDF was made: latexmk is not installed (Debian: texlive-latex-recommended texlive-latex-extra latexmk)."
    cmd = ["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "-file-line-error", tex.name]
    try:
        proc = subprocess.run(cmd, cwd=tex.parent, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"No PDF was made: latexmk exceeded {timeout} s."
    if proc.returncode != 0:
        return False, f"No PDF was made: latexmk failed (exit {proc.returncode}); see {tex.with_suffix('.log')}."
    subprocess.run(["latexmk", "-c", tex.name], cwd=tex.parent, capture_output=True)  # keep the PDF, drop aux files
    return True, f"PDF: {tex.with_suffix('.pdf')}"


@dataclass
class Inputs:
    runs: pd.DataFrame
    steps: pd.DataFrame | None = None
    comm: pd.DataFrame | None = None
    title: str = "ddpbench report"
    n_boot: int = A.N_BOOT
    sources: dict = field(default_factory=dict)
    baseline_strategy: str = A.BASELINE_STRATEGY


def build(inp: Inputs, out: pathlib.Path, pdf: bool = True, templates: pathlib.Path = TEMPLATES) -> pathlib.Path:
    out.mkdir(parents=True, exist_ok=True)
    runs = inp.runs
    cells = A.cell_stats(runs, inp.n_boot)
    speed = A.speedup_table(runs, inp.n_boot, baseline_strategy=inp.baseline_strategy)
    fits = A.fits_table(runs, speed, inp.comm, inp.baseline_strategy)
    cells.to_csv(out / "cells.csv", index=False)
    speed.to_csv(out / "speedup.csv", index=False)
    fits.to_csv(out / "fits.csv", index=False)
    figures = plots.make_figures(plots.Data(runs, cells, speed, fits, inp.steps, inp.comm), out)

    shown = A.varying(runs, A.axes(runs)) or ["world_size"]
    caps = captions()
    ctx = dict(
        title=inp.title,
        sources=inp.sources,
        environment=environment(runs),
        grid=grid(runs),
        method=methodology(runs, cells, inp.n_boot, inp.steps is not None, inp.comm is not None),
        definitions=DEFINITIONS,
        cells=cells_table(cells, shown),
        speedup=speedup_table(speed, shown),
        fits=fits_table(fits),
        problems=problems_table(runs, shown),
        figures=[dict(title=f.title, kind=f.kind, caption=caps.get(f.kind, ""), svg=f.svg, pdf=TexRaw(f.pdf)) for f in figures],
        missing=[plots.TITLES[k] for k in plots.KINDS if k not in {f.kind for f in figures}],
    )

    tex_path = out / "report.tex"
    tex_path.write_text(_env("tex", templates).get_template("report.tex.j2").render(**ctx))
    made, pdf_msg = compile_pdf(tex_path) if pdf else (False, "No PDF was made: PDF compilation was switched off (--no-pdf).")
    for f in ctx["figures"]:
        f["svg_inline"] = Markup(inline_svg(out / f["svg"], f["svg"].split("/")[-1][:-4]))
    html_path = out / "report.html"
    html_path.write_text(_env("html", templates).get_template("report.html.j2").render(**ctx, pdf_message=pdf_msg, pdf_made=made))
    print(pdf_msg, file=sys.stderr)
    return html_path


def _read_optional(path: str | None) -> pd.DataFrame | None:
    # An absent or empty optional table means "no such data", not an error.
    if not path or not pathlib.Path(path).exists() or pathlib.Path(path).stat().st_size == 0:
        return None
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None
    return None if df.empty else df


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ddpbench.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", required=True, help="aggregated runs.csv")
    ap.add_argument("--steps", help="aggregated steps.csv (loss and step-time figures)")
    ap.add_argument("--comm", help="collective sweep CSV (latency/bandwidth for the cost model)")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--title", default="ddpbench report")
    ap.add_argument("--bootstrap", type=int, default=A.N_BOOT, help="bootstrap resamples (default %(default)s)")
    ap.add_argument("--baseline-strategy", default=A.BASELINE_STRATEGY,
                    help="strategy whose world-size-1 runs are the speedup baseline (default %(default)s)")
    ap.add_argument("--no-pdf", action="store_true", help="write report.tex but do not run latexmk")
    args = ap.parse_args(argv)
    runs = A.load_runs(args.runs)
    inp = Inputs(runs, _read_optional(args.steps), _read_optional(args.comm), args.title, args.bootstrap,
                 {"runs": args.runs, "steps": args.steps or "–", "comm": args.comm or "–"},
                 args.baseline_strategy)  # fmt: skip
    path = build(inp, pathlib.Path(args.out), pdf=not args.no_pdf)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
