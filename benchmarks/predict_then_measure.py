"""Predict, then measure against today's design on the same grid and machine: what each spent and
decided, and every answer that differs (docs/report.md, "Predict, then measure", quotes the output).

    python benchmarks/predict_then_measure.py PREDICTED_FIRST MEASURED_ALL

Each argument is the results folder of one design of the same grid (benchmarks/configs/
predict_then_measure.yaml, run with `until_decided.predict` true and false). Printed: per design the
rounds, runs, run time (the budget's measure: the runs' own wall), the wall from the first run's start
to the last one's end, and the questions decided (by prediction and by measurement); then every
question whose answers differ, and each predicted answer beside the measured one of the same question.
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

from ddpbench.core.layout import Layout
from ddpbench.plan import design


def last_decision(results: Path) -> design.Decision:
    decisions = design.decisions_on_disk(Layout.of(results))
    if not decisions:
        raise SystemExit(f"{results}: no design decision (results/design/round~R.json)")
    return decisions[-1]


def run_wall(results: Path) -> float:
    """Seconds from the first run's launcher start to the last one's exit."""
    starts, ends = [], []
    for path in glob.glob(str(results / "runs" / "**" / "summary.json"), recursive=True):
        t = json.loads(Path(path).read_text()).get("timeline") or {}
        if t.get("launcher_start") and t.get("launcher_exit"):
            starts.append(t["launcher_start"])
            ends.append(t["launcher_exit"])
    return max(ends) - min(starts) if starts else float("nan")


def contradict(a: design.VerdictRecord, b: design.VerdictRecord) -> bool:
    """Two decided answers that cannot both hold: faster against slower, or equivalent against a
    difference whose interval lies wholly beyond the margin."""
    words = {a.verdict, b.verdict}
    if words == {"faster", "slower"}:
        return True
    if "equivalent" not in words or len(words) == 1:
        return False
    other = a if a.verdict != "equivalent" else b
    m = 1 + other.tolerance
    return (other.verdict == "faster" and other.low > m) or (other.verdict == "slower" and other.high < 1 / m)


def name(cell: str) -> str:
    parts = dict(p.split("~", 1) for p in cell.split("/") if "~" in p)
    return f"{parts.get('strategy')}@{parts.get('link', 'none')}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("predicted_first", type=Path)
    ap.add_argument("measured_all", type=Path)
    args = ap.parse_args()
    sides = {"predict, then measure": args.predicted_first, "measure all (today)": args.measured_all}
    decisions = {label: last_decision(path) for label, path in sides.items()}
    print(f"{'design':24} {'rounds':>6} {'runs':>5} {'run min':>8} {'wall min':>9} {'decided':>9} {'predicted':>9} "
          f"{'measured':>9}")  # fmt: skip
    for label, d in decisions.items():
        predicted = sum(v.predicted and not v.open for v in d.verdicts)
        print(f"{label:24} {d.round + 1:>6} {d.spent['runs']:>5} {d.spent['seconds'] / 60:>8.1f} "
              f"{run_wall(sides[label]) / 60:>9.1f} {f'{d.settled}/{len(d.verdicts)}':>9} {predicted:>9} "
              f"{d.settled - predicted:>9}")  # fmt: skip
    a, b = (dict((frozenset(v.cells), v) for v in d.verdicts) for d in decisions.values())
    print("\nper question: predict-then-measure's answer | today's (the ratio and interval of each)")
    differ = 0
    for key in sorted(set(a) | set(b), key=lambda k: sorted(map(name, k))):
        va, vb = a.get(key), b.get(key)
        cells = " vs ".join(name(c) for c in (va or vb).cells)

        def text(v):
            if v is None:
                return "not asked"
            ratio = f" {v.estimate:.3g} [{v.low:.3g}, {v.high:.3g}]" if v.low is not None else ""
            return f"{v.verdict}{' (predicted)' if v.predicted else ''}{ratio}"

        both = va is not None and vb is not None and not va.open and not vb.open
        flag = "" if not both or va.verdict == vb.verdict else "CONTRADICTS" if contradict(va, vb) else "compatible"
        differ += flag == "CONTRADICTS"
        print(f"  {cells:48} {text(va):44} | {text(vb):38} {flag}")
    print(f"\nanswers that contradict each other where both decided: {differ} (compatible: faster or slower by less "
          "than the margin beside equivalent)")


if __name__ == "__main__":
    main()
