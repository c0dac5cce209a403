"""`ddpbench decide`: the body of the workflow's decide_round checkpoint. From the
summary.json paths of a round's runs (one per line on stdin), the decision after that round
(plan.design.Decision) for the study the results folder recorded (plan.study.Study.recorded);
one line to the terminal and the log, and the next round's runs added to the progress count."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ddpbench.core import safe_io
from ddpbench.core.layout import Layout
from ddpbench.plan import design
from ddpbench.plan.study import Study
from ddpbench.results import progress


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ddpbench decide", description=__doc__)
    ap.add_argument("--results", required=True, help="the results folder (its config.yaml is the study's)")
    ap.add_argument("--round", type=int, required=True, help="the round just measured (0 is the first)")
    ap.add_argument("--out", type=Path, required=True, help="the decision's file (RESULTS/design/round~R.json)")
    ap.add_argument("--log", type=Path, required=True, help="where the decision's line is written")
    args = ap.parse_args(argv)
    study = Study.recorded(args.results)
    if not study.sequential:
        ap.error(f"{Layout.of(args.results).config}: repeats is not until_decided")
    summaries = [line for line in sys.stdin.read().splitlines() if line]
    predicted = None
    if study.settings.predict and args.round == 0:  # the parts are measured: predict every cell
        from ddpbench.plan.predict import cell_throughputs, runs_of_summaries

        predicted = cell_throughputs(study, runs_of_summaries(summaries))
    decision = study.decide(args.round, summaries, predicted)
    with safe_io.anchor_writes_at(args.results):  # the decision, the progress count and the log: no link below it
        decision.write(args.out)
        progress.add_round(args.round + 2, decision.runs_next)
        line = design.round_line(decision)
        safe_io.atomic_write_text(args.log, line + "\n")
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
