"""Drawing and writing the figures, in worker processes where there are cores to spare.

One job per figure group and kind (`start_figures`), run in a forked pool (`worker_pool`) while
the report writes its tables, or in this process; each job writes its figures atomically as SVG
(the page's) and PDF (LaTeX's) and returns what it wrote (`Figure`), gathered in page order by
`collect`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pathlib
from dataclasses import dataclass

from ddpbench.core import safe_io
from ddpbench.report.figures.kinds import KINDS, draw_all, kinds_for
from ddpbench.report.figures.layout import GROUP_LABEL
from ddpbench.report.figures.style import FORMATS, METADATA, RC, plt
from ddpbench.report.figures.tables import Data, figure_groups


@dataclass
class Figure:
    kind: str
    strategy: str | None
    title: str
    svg: str  # relative to the output folder
    pdf: str
    group: str = ""  # the figure group's label ("" when the grid has one group)


def _draw_group(args) -> list[Figure]:
    """Draw and write one group's figures of some kinds (in a worker process, or in this one)."""
    number, label, d, folder, kinds, formats = args
    prefix = f"g{number:02d}-" if label else ""
    written = []
    token = GROUP_LABEL.set(label)
    try:
        with plt.rc_context(RC):
            for kind, strategy, stem, title, fig in draw_all(d, kinds):
                for ext in formats:
                    with safe_io.atomic_write(folder / f"{prefix}{stem}.{ext}", "wb") as handle:
                        fig.savefig(handle, format=ext, metadata=METADATA[ext])
                plt.close(fig)
                written.append(Figure(kind, strategy, title + (f" — {label}" if label else ""),
                                      f"figures/{prefix}{stem}.svg", f"figures/{prefix}{stem}.pdf", label))  # fmt: skip
    finally:
        GROUP_LABEL.reset(token)
    return written


def workers(n_jobs: int) -> int:
    """Processes that draw figures: one per job up to the usable cores (DDPBENCH_REPORT_WORKERS
    overrides; 1 draws in this process)."""
    env = os.environ.get("DDPBENCH_REPORT_WORKERS", "")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = int(env) if env.isdigit() and int(env) > 0 else cores
    return max(1, min(limit, n_jobs))


def make_figures(d: Data, out: pathlib.Path, formats: tuple[str, ...] = FORMATS) -> list[Figure]:
    """Draw every figure the data allow into out/figures, in `formats` (SVG for the page, PDF for
    LaTeX); returns what was written, in group order (start_figures, waited for)."""
    with worker_pool() as pool:
        return collect(start_figures(d, out, formats, pool=pool))


@contextlib.contextmanager
def worker_pool(n_jobs: int = 1 << 20):
    """Worker processes (fork) for the report's tables and figures, or None where one worker is all
    there is (`workers`): then each job runs in this process when its result is asked for. Leaving
    the context stops workers still busy (the caller failed)."""
    n = workers(n_jobs)
    if n == 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield None
        return
    pool = multiprocessing.get_context("fork").Pool(n)
    try:
        yield pool
    finally:
        pool.terminate()
        pool.join()


class Drawing:
    """Figures being drawn in worker processes while the caller goes on (the report writes its
    findings and tables meanwhile); parts() waits for them, one list of figures per job."""

    def __init__(self, jobs: list, pool=None):
        self.jobs = jobs
        self.pending = pool.map_async(_draw_group, jobs, chunksize=1) if pool is not None else None

    def parts(self) -> list[list[Figure]]:
        return self.pending.get() if self.pending is not None else [_draw_group(job) for job in self.jobs]


def collect(*drawings: Drawing) -> list[Figure]:
    """The figures of one or more drawings, in page order: by group, then by kind as in KINDS."""
    order = list(KINDS)
    parts = [((job[0], order.index(job[4][0])), figs) for dr in drawings for job, figs in zip(dr.jobs, dr.parts())]
    return [f for _, figs in sorted(parts, key=lambda part: part[0]) for f in figs]


def start_figures(d: Data, out: pathlib.Path, formats: tuple[str, ...] = FORMATS, kinds=None, pool=None) -> Drawing:
    """Start drawing the figures of `kinds` (default kinds_for()) in `pool`'s workers, one job per group and
    kind: small jobs keep the workers evenly busy (3 groups on 2 cores, as whole groups, left one
    core idle for a third of the time, and a grid of one group was drawn on one core). Without a
    pool the figures are drawn in this process when they are asked for."""
    folder = safe_io.real_dir(pathlib.Path(out) / "figures")
    kinds = kinds_for() if kinds is None else [k for k in KINDS if k in kinds]
    jobs = [(i, label, g, folder, [kind], formats) for i, (label, _, g) in enumerate(figure_groups(d), 1) for kind in kinds]
    return Drawing(jobs, pool)
