"""The report: statistics tables, fits, figures, and one HTML and one LaTeX/PDF document.

    ddpbench report --runs runs.csv [--steps steps.csv] [--comm comm.csv] [--max-rel-ci 0.05] --out DIR

writes DIR/cells.csv, speedup.csv, fits.csv, comparisons.csv, links.csv (header only without two-node
cells over a link), predictions.csv (the step model on held-out cells: `predictions`), figures/,
report.html (self-contained: SVGs inline, no network), report.tex and, where latexmk is installed,
report.pdf. Prints the path of report.html last. Works without Snakemake; the workflow's report rule calls it.

This module assembles the page (the tables: `tables`, the context sections: `context`, the
comparison section: `compare_page`, the step model on held-out cells: `predictions`, escaping and
the PDF: `render`) and is the command line.
The out folder and the tables are untrusted (issue 22: people exchange result folders):
every output is replaced atomically (safe_io: a symlink planted at an output's name is
replaced, its target untouched; a symlinked figures/ is refused), latexmk runs -norc and
-no-shell-escape in a fresh private folder (a latexmkrc in the out folder is never read),
and every string from the data is escaped for HTML, LaTeX and matplotlib.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import pathlib
import re
import sys
import tempfile
from dataclasses import dataclass, field

from markupsafe import Markup
import pandas as pd

from ddpbench import analysis as A
from ddpbench.results import aggregate
from ddpbench.report import decisions, figures as plots, predictions, studies
from ddpbench.core import safe_io, storage
from ddpbench.core import layout, study_config
from ddpbench.plan import design
from ddpbench.plan.design import Decision
from ddpbench.plan.config_schema import DEFAULT_MAX_RUNS
from ddpbench.plan.grid import ConfigError
from ddpbench.plan.study import Study, recorded_config
from ddpbench.report.compare_page import comparison_section
from ddpbench.report.context import DEFINITIONS, environment, grid, methodology, provenance_warnings
from ddpbench.report.findings import findings
from ddpbench.report.render import CAPTIONS, TEMPLATES, TexRaw, compile_pdf, inline_svg, jinja_env
from ddpbench.report.tables import (
    Table,
    cells_table,
    comparisons_table,
    fits_table,
    links_tables,
    problems_table,
    speedup_table,
)

# Rows of a table shown at once in the HTML report (a pager and the filter box reach the rest).
PAGE_SIZE = 50


@dataclass
class Inputs:
    runs: pd.DataFrame
    steps: pd.DataFrame | None = None
    comm: pd.DataFrame | None = None
    title: str = "ddpbench report"
    n_boot: int = A.N_BOOT
    sources: dict = field(default_factory=dict)
    baseline_strategy: str = A.BASELINE_STRATEGY
    max_rel_ci: float = A.MAX_REL_CI
    plan: list[str] = field(default_factory=list)  # the workflow's `ddpbench plan:` lines (ddpbench.plan.preflight)
    compare_to: str | None = None  # a stored result set: this report compares its runs against it
    profile: pd.DataFrame | None = None  # aggregate's profile.csv (runs with profile_steps > 0)
    studies: tuple[str, ...] = ()  # study presets' names (studies.STUDIES): their sections follow the findings
    design: Decision | None = None  # a sequential design's last decision (report.decisions), None for fixed repeats


# -- the page's parts --------------------------------------------------------------------------

PAGE_ANCHORS = ("comparisons", "speedup-table", "cells", "fits", "problems", "links", decisions.ANCHOR, predictions.ANCHOR)


def study_section(name: str, inp: Inputs, cells: pd.DataFrame, speed: pd.DataFrame, figures: list,
                  design: A.DesignAnswers | None = None) -> dict:  # fmt: skip
    """A study's section for the templates: its question, answer, table and the figures it points
    to that this report has (in a grid of figure groups, the first group's)."""
    sec = studies.section(name, inp.runs, cells, speed, inp.steps, inp.profile, design)
    anchors = {}
    for f in figures:
        anchors.setdefault(f.kind, ("fig-" + pathlib.Path(f.svg).stem, f.title))
    shown = [(anchors[k][1], anchors[k][0]) for k in sec.figures if k in anchors]
    return dict(name=sec.name, anchor=f"study-{sec.name}", title=sec.title, question=sec.question,
                findings=sec.findings, figures=shown, table=Table(sec.columns, sec.rows, sec.note))


def linked_findings(found: list, figures: list) -> list:
    """Findings whose link points at something on the page: a table, or a figure this report
    has (in a grid of figure groups, the first group's figure of that name; a figure left out for
    lack of data sends the reader to the figures section)."""
    ids = set(PAGE_ANCHORS) | {"fig-" + pathlib.Path(f.svg).stem for f in figures}
    grouped = {}
    for f in figures:
        stem = pathlib.Path(f.svg).stem
        grouped.setdefault("fig-" + re.sub(r"^g\d+-", "", stem), "fig-" + stem)
    out = []
    for f in found:
        anchor = f.anchor if f.anchor in ids else grouped.get(f.anchor, "figures")
        out.append(f if anchor == f.anchor else dataclasses.replace(f, anchor=anchor))
    return out


# A report with more figures than this, or more bytes of them, links them as files under figures/
# (loaded when scrolled to) instead of inlining every SVG, so its entry page stays small (at
# 8,100 runs 30 figures were 7 MB); the folder stays self-contained. The byte limit is the guard
# that matters; the count allows one training-curve figure per registered strategy (13) besides
# the rest, which a full grid draws (32 figures, 1.4 MB).
INLINE_FIGURES = 40
INLINE_BYTES = 2_000_000


def figure_index(figures: list[dict]) -> list[dict]:
    """The figure groups in order: label, anchor and figures; one unnamed group for a grid without group axes."""
    groups: dict[str, dict] = {}
    for f in figures:
        g = groups.setdefault(f["group"], dict(label=f["group"], anchor=f"group-{len(groups) + 1}", figures=[]))
        g["figures"].append(f)
    return list(groups.values())


def captions() -> dict[str, str]:
    """Figure captions: the same text snakemake --report shows (report/captions/<kind>.rst)."""
    out = {}
    for path in sorted(CAPTIONS.glob("*.rst")):
        text = " ".join(path.read_text().split())
        out[path.stem] = re.sub(r"``?([^`]+)``?", r"\1", text)  # plain text: drop RST literals
    return out


# -- tables, figures and the page --------------------------------------------------------------


def _table(job: tuple[str, Inputs]):
    """One of the report's tables (speedup and fits together: the fits read the speedups)."""
    name, inp = job
    design = decisions.answers(inp.design, inp.runs)  # where a design ran, the pairs it asked read its answers
    if name == "cells":
        return A.cell_stats(inp.runs, inp.max_rel_ci, design)
    if name == "comparisons":
        return A.comparisons_table(inp.runs, inp.max_rel_ci, design)
    speed = A.speedup_table(inp.runs, inp.baseline_strategy, inp.max_rel_ci, design)
    return speed, A.fits_table(inp.runs, speed, inp.comm, inp.baseline_strategy, inp.n_boot)


TABLE_JOBS = ("speedup+fits", "cells", "comparisons")  # the longest first


def start_tables(inp: Inputs, pool) -> dict:
    """cells, speedup and fits, and comparisons, computed side by side in `pool`'s workers (at 8,100
    runs they are 10-40 s of work), or here when none; each entry gives its table when called."""
    slim = dataclasses.replace(inp, steps=None)  # what the tables read; the steps table can be large
    if pool is None:
        return {name: functools.partial(_table, (name, slim)) for name in TABLE_JOBS}
    return {name: pool.apply_async(_table, ((name, slim),)).get for name in TABLE_JOBS}


def write_tables(out: pathlib.Path, tables: dict[str, pd.DataFrame]) -> None:
    """Each table as out/<name>.csv, replaced atomically."""
    for name, table in tables.items():
        with safe_io.atomic_write(out / f"{name}.csv", newline="") as handle:
            table.to_csv(handle, index=False)


def build(inp: Inputs, out: pathlib.Path, pdf: bool = True, templates: pathlib.Path = TEMPLATES) -> pathlib.Path:
    safe_io.make_dir(out)
    runs = inp.runs
    # No PDF, no PDF figures: at 8,100 runs they were a third of the report's time (report.tex
    # still compiles, saying where a figure was not drawn)
    formats = plots.FORMATS if pdf else ("svg",)
    with plots.worker_pool() as pool:  # one pool for the tables and the figures
        pending = start_tables(inp, pool)
        cells = pending["cells"]()
        # The figures of the runs and cells are drawn while the fits are still being computed
        none = pd.DataFrame()
        kinds = plots.kinds_for([k for name in inp.studies for k in studies.STUDIES[name].figures])
        early = plots.start_figures(plots.Data(runs, cells, none, none, inp.steps, inp.comm, profile=inp.profile), out, formats,
                                    [k for k in kinds if k not in plots.FITTED_KINDS], pool)  # fmt: skip
        speed, fits = pending["speedup+fits"]()
        comparisons = pending["comparisons"]()
        links = A.links_table(runs, inp.baseline_strategy)
        data = plots.Data(runs, cells, speed, fits, inp.steps, inp.comm, profile=inp.profile)
        late = plots.start_figures(data, out, formats, [k for k in kinds if k in plots.FITTED_KINDS], pool)
        predicted = predictions.section(runs, inp.comm, fits)  # the step model on held-out cells, while the workers draw
        write_tables(out, dict(cells=cells, speedup=speed, fits=fits, comparisons=comparisons, links=links,
                               predictions=predicted.held))  # fmt: skip
        # The findings and the page's tables are written while the workers draw
        against = (comparison_section(inp.compare_to, runs, out, inp.baseline_strategy, inp.max_rel_ci)
                   if inp.compare_to else None)  # fmt: skip
        design = decisions.answers(inp.design, runs)  # the design's answers, for the pairs findings and studies make
        found = findings(runs, cells, speed, comparisons, fits, links=links, profile=inp.profile, design=design,
                         predictions=predicted.summary) + decisions.findings(inp.design)  # the answer first, then the design's
        shown = A.varying(runs, A.axes(runs)) or ["world_size"]
        ctx = dict(
            title=inp.title,
            sources=inp.sources,
            plan=inp.plan,
            decisions=decisions.section(inp.design),
            against=against,
            environment=environment(runs),
            provenance_warnings=provenance_warnings(runs, cells, speed),
            grid=grid(runs),
            method=methodology(runs, cells, inp.n_boot, inp.steps is not None, inp.comm is not None, inp.max_rel_ci),
            definitions=DEFINITIONS,
            cells=cells_table(cells, shown),
            speedup=speedup_table(speed, shown),
            comparisons=comparisons_table(comparisons, shown),
            fits=fits_table(fits),
            predictions=bool(len(fits)) and bool((fits["kind"] == "prediction").any()),
            predicted=predicted,
            links=links_tables(links),
            problems=problems_table(runs, shown),
        )
        figures = plots.collect(early, late)
    found = linked_findings(found, figures)
    ctx["studies"] = [study_section(name, inp, cells, speed, figures, design) for name in inp.studies]
    if against and not against["error"]:
        found.insert(0, against["finding"])
    caps = captions()
    ctx.update(
        findings=found,
        figures=[dict(title=f.title, kind=f.kind, caption=caps.get(f.kind, ""), svg=f.svg, pdf=TexRaw(f.pdf),
                      group=f.group) for f in figures],
        missing=[plots.TITLES[k] for k in plots.KINDS if k not in {f.kind for f in figures}],
    )

    tex_path = out / "report.tex"
    safe_io.atomic_write_text(tex_path, jinja_env("tex", templates).get_template("report.tex.j2").render(**ctx))
    if pdf:
        made, pdf_msg = compile_pdf(tex_path, assets=[f.pdf for f in figures])
    else:
        made, pdf_msg = False, "No PDF was made: PDF compilation was switched off (--no-pdf)."
    svg_bytes = sum((out / f["svg"]).stat().st_size for f in ctx["figures"])
    inline = len(ctx["figures"]) <= INLINE_FIGURES and svg_bytes <= INLINE_BYTES
    for f in ctx["figures"]:
        f["svg_inline"] = Markup(inline_svg((out / f["svg"]).read_text(), f["svg"].split("/")[-1][:-4])) if inline else None
    groups = figure_index(ctx["figures"])
    html_path = out / "report.html"
    safe_io.atomic_write_text(html_path, jinja_env("html", templates).get_template("report.html.j2").render(
        **ctx, pdf_message=pdf_msg, pdf_made=made, groups=groups if len(groups) > 1 else [], page_size=PAGE_SIZE))
    print(pdf_msg, file=sys.stderr)
    return html_path


# -- command line ------------------------------------------------------------------------------


def read_plan(path: pathlib.Path | None) -> list[str]:
    """The plan's lines without their prefix ([] when there is no plan file)."""
    if path is None or not pathlib.Path(path).is_file():
        return []
    lines = pathlib.Path(path).read_text(errors="replace").splitlines()
    return [line.removeprefix("ddpbench plan: ").strip()[:2000] for line in lines[:50] if line.strip()]


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
    ap = argparse.ArgumentParser(prog="ddpbench report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", help="aggregated runs.csv (required unless --from)")
    ap.add_argument("--from", dest="archive", metavar="ARCHIVE",
                    help="a study archive (ddpbench archive): its runs are aggregated again and the "
                         "report rebuilt into --out (tables in --out/aggregate); baseline and stability threshold "
                         "from its config unless given")
    ap.add_argument("--max-runs", type=int, default=DEFAULT_MAX_RUNS, metavar="N",
                    help="with --from: the most runs the archive's grid may expand to, whatever its own config says "
                         "(default %(default)s, the schema's max_runs; the config passes the schema first)")
    ap.add_argument("--steps", help="aggregated steps.csv (loss and step-time figures)")
    ap.add_argument("--comm", help="collective sweep CSV (latency/bandwidth for the cost model)")
    ap.add_argument("--profile", help="aggregated profile.csv (default: profile.csv beside --runs, when there)")
    ap.add_argument("--study", choices=sorted(studies.STUDIES), action="append", default=[],
                    help="a study preset's name: the report answers its question in a section after the findings "
                         "(repeat it for several, each its own section)")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--title", default="ddpbench report")
    ap.add_argument("--bootstrap", type=int, default=A.N_BOOT,
                    help="bootstrap resamples of the cost model's intervals (default %(default)s)")
    ap.add_argument("--max-rel-ci", type=float, default=None,
                    help="stability threshold: a cell whose throughput interval's relative half-width exceeds it is "
                         f"flagged unstable (default {A.MAX_REL_CI})")
    ap.add_argument("--baseline-strategy", default=None,
                    help=f"strategy whose world-size-1 runs are the speedup baseline (default {A.BASELINE_STRATEGY})")
    ap.add_argument("--no-pdf", action="store_true",
                    help="write report.tex but do not run latexmk, nor draw the figures' PDFs (SVG only)")
    ap.add_argument("--log", type=pathlib.Path, help="write the output here; only the result line goes to stdout")
    ap.add_argument("--compare-to", metavar="RESULTS",
                    help="a stored result set (folder with aggregate/runs.csv, or a runs.csv): the report compares "
                         "these runs against it as `ddpbench compare RESULTS` would, and writes comparison.csv and "
                         "comparison.html beside it")
    ap.add_argument("--design", type=pathlib.Path,
                    help="a sequential design's last decision (RESULTS/design/round~R.json): its verdicts, runs and "
                         "budget follow the findings")
    ap.add_argument("--plan", type=pathlib.Path,
                    help="the workflow's plan (its `ddpbench plan:` lines, one a line), shown after the findings")
    ap.add_argument("--results", type=pathlib.Path,
                    help="the results folder --out and --log lie in (the workflow's): no folder below it is "
                         "followed if it is a link, whenever it was planted")  # fmt: skip
    args = ap.parse_args(argv)
    if bool(args.runs) == bool(args.archive):
        ap.error("give either --runs or --from ARCHIVE")
    with safe_io.anchor_writes_at(args.results), storage.output_to(args.log) as output:
        args.output = output
        try:
            if args.archive:
                return rebuild_from_archive(args)
            args.baseline_strategy = args.baseline_strategy or A.BASELINE_STRATEGY
            args.max_rel_ci = A.MAX_REL_CI if args.max_rel_ci is None else args.max_rel_ci
            return build_from_args(args)
        except OSError as err:  # a full disk or quota, a read-only folder: name it, keep the tables
            if not storage.is_storage_error(err):
                raise
            return storage.fail(output, err, what="report")


@contextlib.contextmanager
def terminated_as_exit():
    """SIGTERM (and SIGHUP) raise SystemExit for the duration, so the unpacked archive's temporary
    folder is removed on that exit path too (the default action would leave it behind)."""
    import signal

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def rebuild_from_archive(args: argparse.Namespace) -> int:
    """Unpack the archive privately, aggregate its runs again (the same run folders the study
    aggregated, named as it named them), then build the report from those tables."""
    from ddpbench.results import aggregate, archive

    out = pathlib.Path(args.out).resolve()
    source = pathlib.Path(args.archive).resolve()
    with terminated_as_exit(), tempfile.TemporaryDirectory(prefix="ddpbench-archive-") as tmp, contextlib.chdir(tmp):
        results = archive.extract(source, pathlib.Path(tmp)).relative_to(tmp)
        # Its config first: checked (schema, max_runs) before anything is aggregated or expanded.
        study, config = recorded_study(results, getattr(args, "max_runs", DEFAULT_MAX_RUNS), source)
        listed = results / layout.RUNS_TABLE
        if listed.is_file():
            listed_dirs = [str(d) for d in pd.read_csv(listed)["run_dir"]]
            found = {d: archived_run(results, d) for d in listed_dirs}
            missing = [d for d, path in found.items() if path is None or not safe_io.inside(path / "summary.json", tmp)]
            if missing:
                raise SystemExit(f"error: {source}: {len(missing)} run(s) its tables list are not in it, e.g. {missing[0]}")
            summaries = [str(found[d] / "summary.json") for d in listed_dirs]
        else:
            summaries = sorted(str(p) for p in results.glob(f"{layout.RUNS}/**/{layout.SUMMARY}"))
        tables = out / pathlib.Path(layout.RUNS_TABLE).parent  # out/aggregate: runs.csv and steps.csv
        aggregate.aggregate(summaries, out / layout.RUNS_TABLE, out / layout.STEPS_TABLE)
        # A sequential design's: its last decision, read as the study's rounds where it has one.
        rounds = study.decisions() if study and study.sequential else design.decisions_on_disk(layout.Layout.of(results))
        if rounds and not getattr(args, "design", None):
            args.design = tables / "design.json"
            rounds[-1].write(args.design)
    args.runs, args.steps = str(out / layout.RUNS_TABLE), str(out / layout.STEPS_TABLE)
    args.baseline_strategy = args.baseline_strategy or (config.get("baseline") or {}).get("strategy") or A.BASELINE_STRATEGY
    # The unstable flag's threshold and the study sections the workflow's report had (names this
    # checkout has a section for): the recorded study's, as the workflow read them.
    if args.max_rel_ci is None:
        args.max_rel_ci = study.stability_threshold if study else study_config.stability_threshold(config)
    names = study.study_names if study else study_config.study_names(config)
    args.study = args.study or [name for name in names if name in studies.STUDIES]
    return build_from_args(args)


def recorded_study(results: pathlib.Path, max_runs: int = DEFAULT_MAX_RUNS,
                   source: pathlib.Path | None = None) -> tuple[Study | None, dict]:  # fmt: skip
    """The study an unpacked archive recorded, and its raw config. Its config.yaml is someone
    else's: it is read within bounds and passes the schema, and its grid expands to at most
    `max_runs` runs (Study.recorded), else SystemExit naming the key and how to allow more. The
    Study is None where the config does not pass (an older archive, a model of another
    checkout), said on stderr; its config ({} without one) still gives the threshold and sections."""
    if not (results / layout.CONFIG).is_file():
        return None, {}
    try:
        config = recorded_config(results)
    except ConfigError as err:
        raise SystemExit(f"error: {source or results}: {err}") from None
    try:
        return Study.recorded(results, max_runs=max_runs), config
    except ConfigError as err:
        if err.key == "max_runs":
            raise SystemExit(f"error: {source or results}: its config.yaml: {err}") from None
        print(f"[ddpbench] warning: {source or results}: its config.yaml does not plan here ({err}); the report "
              "takes its threshold and study sections from it as written", file=sys.stderr)  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"[ddpbench] warning: {source or results}: its config.yaml does not plan here ({type(err).__name__}: "
              f"{err})", file=sys.stderr)  # fmt: skip
    return None, config


def archived_run(results: pathlib.Path, run_dir: str) -> pathlib.Path | None:
    """Where a run folder an archive's tables list lies in the unpacked archive: its path from
    its `runs/` folder on, under the archive's results folder (None: it has no `runs` part, or
    `..` after it). The table is the archive's data: a `run_dir` leading elsewhere must not make
    the report read this machine's files (the caller also checks the result stays inside), and
    a study whose `results:` was an absolute path is read from the archive, not from the disk
    it ran on."""
    parts = pathlib.PurePath(run_dir).parts
    if "runs" not in parts:
        return None
    rest = parts[len(parts) - 1 - parts[::-1].index("runs") :]
    return None if ".." in rest else results.joinpath(*rest)


def build_from_args(args: argparse.Namespace) -> int:
    runs = A.load_runs(args.runs)
    profile = getattr(args, "profile", None) or aggregate.profile_path(args.runs)
    profile = str(profile) if pathlib.Path(profile).is_file() else None
    inp = Inputs(runs, _read_optional(args.steps), _read_optional(args.comm), args.title, args.bootstrap,
                 {"runs": args.runs, "steps": args.steps or "–", "comm": args.comm or "–", **({"profile": profile} if profile else {})},
                 args.baseline_strategy, args.max_rel_ci, read_plan(getattr(args, "plan", None)),
                 getattr(args, "compare_to", None), _read_optional(profile), tuple(getattr(args, "study", None) or ()),
                 decisions.read(getattr(args, "design", None)))  # fmt: skip
    try:
        path = build(inp, pathlib.Path(args.out), pdf=not args.no_pdf)
    except safe_io.UnsafePathError as err:
        print(f"ddpbench report: {err}", file=sys.stderr)
        return 1
    args.output.say(str(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
