"""Does the main job answer its question? Run it as a newcomer would and measure.

    python benchmarks/main_job.py [--ref main] [--keep DIR] [--json out.json]

Clones the checkout's committed `--ref` into a fresh folder (nothing uncommitted, no
.venv, no results), runs `bash scripts/main.sh` there (set-up included) and prints:

  wall time          of the whole main job, set-up included (target: <= 12 min on 2 cores)
  machine load       1-minute load average before and after, and the median share of the
                     machine other processes took while runs were timed (env.other_cpu_frac)
  throughput         share of cells whose throughput interval half-width <= 5 % of the
                     value (target: >= 90 %)
  speedup            every world-size-2 speedup's interval half-width / S (target: <= 10 %)
  unstable           cells flagged unstable, with their causes
  design             with repeats: until_decided, the share of questions decided (target:
                     >= 90 %), runs per cell and why each stopped, and the decision table

The figures are read from the report's own tables (cells.csv, speedup.csv), so they are
the numbers a user sees. Quiet machine: nothing else running (the load says).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import pandas as pd

ROOT = pathlib.Path(__file__).resolve().parents[1]
TARGETS = {"wall_s": 12 * 60, "throughput_share": 0.90, "throughput_rel_half": 0.05, "speedup_rel_half": 0.10,
           "decided_share": 0.90}


def half_width(df: pd.DataFrame, col: str) -> pd.Series:
    """(high - low) / 2 / estimate: the relative half-width of an interval."""
    return (df[f"{col}_ci_high"] - df[f"{col}_ci_low"]) / 2 / df[col]


def figures(report_dir: pathlib.Path, runs_csv: pathlib.Path) -> dict:
    cells = pd.read_csv(report_dir / "cells.csv")
    speed = pd.read_csv(report_dir / "speedup.csv")
    runs = pd.read_csv(runs_csv)
    tput = half_width(cells.dropna(subset=["samples_per_s_ci_low"]), "samples_per_s")
    s2 = speed[speed["world_size"] == 2]
    sp = half_width(s2, "speedup")
    unstable = cells[cells["unstable"].astype(str) == "True"] if "unstable" in cells else cells.iloc[:0]
    ok = runs[runs["status"] == "ok"]
    return {
        "runs": len(runs),
        "runs_ok": len(ok),
        "cells": len(cells),
        "throughput_cells_with_interval": len(tput),
        "throughput_rel_half_median": float(tput.median()),
        "throughput_rel_half_max": float(tput.max()),
        "throughput_share_within": float((tput <= TARGETS["throughput_rel_half"]).mean()),
        "speedup_cells": len(sp),
        "speedup_rel_half_median": float(sp.median()),
        "speedup_rel_half_max": float(sp.max()),
        "speedup_all_within": bool((sp <= TARGETS["speedup_rel_half"]).all()),
        "timed_steps_median": float(ok["timed_steps"].median()),
        "timed_steps_min": int(ok["timed_steps"].min()),
        "timed_s_total": float(ok["timed_wall_s"].sum()),
        "other_cpu_frac_median": float(ok["env_other_cpu_frac"].median()) if "env_other_cpu_frac" in ok else None,
        "unstable": [
            f"{r.get('strategy')} bs={r.get('batch_size')} p={r.get('world_size')}: {r.get('unstable_cause')}"
            for _, r in unstable.iterrows()
        ],
    }


def design_figures(results: pathlib.Path) -> dict | None:
    """The sequential design's last decision, summarised (None with fixed repeats)."""
    sys.path.insert(0, str(ROOT / "src"))
    from ddpbench.report.decisions import labels

    rounds = sorted((results / "design").glob("round~*.json"), key=lambda p: int(p.stem.split("~")[1]))
    if not rounds:
        return None
    last = json.loads(rounds[-1].read_text())
    name = labels(list(last["counts"]))
    verdicts = last["verdicts"]
    decided = [v for v in verdicts if v["verdict"] not in ("open", "undecided")]
    table = []
    for v in sorted(verdicts, key=lambda v: (v["verdict"] not in ("open", "undecided"), v["kind"])):
        what = " vs ".join(name[c] for c in v["cells"]) + (" (precision)" if v["kind"] == "precision" else "")
        est = "–" if v["estimate"] is None else f"{v['estimate']:.4g} [{v['low']:.4g}, {v['high']:.4g}]"
        table.append(f"{v['verdict']:10s} {est:32s} runs {'/'.join(map(str, v['runs'])):6s} {what}")
    return {
        "rounds": last["round"] + 1,
        "questions": len(verdicts),
        "decided": len(decided),
        "decided_share": len(decided) / max(len(verdicts), 1),
        "runs_per_cell": {name[c]: n for c, n in last["counts"].items()},
        "stopped": {name[c]: why for c, why in last["stopped"].items()},
        "spent": last["spent"],
        "table": table,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="HEAD", help="commit of this checkout to clone (default HEAD)")
    parser.add_argument("--keep", type=pathlib.Path, help="clone here and keep it (default: a temporary folder)")
    parser.add_argument("--json", type=pathlib.Path, help="also write the figures here")
    args = parser.parse_args(argv)

    scratch = args.keep or pathlib.Path(tempfile.mkdtemp(prefix="ddpbench-main-"))
    clone = scratch / "main"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", args.ref], check=True)
    shared = ROOT.parent / "shared"
    if shared.is_dir() and not (scratch / "shared").exists():
        (scratch / "shared").symlink_to(shared)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run(["bash", "scripts/main.sh"], cwd=clone, capture_output=True, text=True)
    wall = time.perf_counter() - start
    load_after = os.getloadavg()[0]
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
        return proc.returncode
    out = {"wall_s": round(wall, 1), "loadavg_before": load_before, "loadavg_after": load_after}
    out.update(figures(clone / "results" / "report", clone / "results" / "aggregate" / "runs.csv"))
    out["last_line"] = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    out["design"] = design_figures(clone / "results")

    print(f"main job: {out['wall_s']:.0f} s wall (target <= {TARGETS['wall_s']} s), "
          f"load {load_before:.2f} before, {load_after:.2f} after; other processes' share of the "
          f"machine while timed (median over runs): {out['other_cpu_frac_median']}")
    print(f"runs: {out['runs_ok']}/{out['runs']} ok; timed steps per run: median {out['timed_steps_median']:.0f}, "
          f"min {out['timed_steps_min']}; {out['timed_s_total']:.0f} s timed in all ({100 * out['timed_s_total'] / wall:.0f} % of the job)")
    print(f"throughput: {100 * out['throughput_share_within']:.0f} % of {out['throughput_cells_with_interval']} cells "
          f"within ±5 % (target >= 90 %); half-width median {100 * out['throughput_rel_half_median']:.1f} %, "
          f"worst {100 * out['throughput_rel_half_max']:.1f} %")
    print(f"speedup at p=2: half-width / S median {100 * out['speedup_rel_half_median']:.1f} %, worst "
          f"{100 * out['speedup_rel_half_max']:.1f} % over {out['speedup_cells']} cells (target: all <= 10 %)")
    print(f"unstable cells: {len(out['unstable'])}" + "".join(f"\n  {u}" for u in out["unstable"]))
    d = out["design"]
    if d:
        print(f"design: {d['decided']}/{d['questions']} questions decided ({100 * d['decided_share']:.0f} %, target "
              f">= 90 %) in {d['rounds']} rounds, {d['spent']['runs']} runs, {d['spent']['seconds'] / 60:.1f} min of runs")
        print("runs per cell: " + "; ".join(f"{c}: {n} ({d['stopped'].get(c, '?')})" for c, n in d["runs_per_cell"].items()))
        print("\n".join("  " + row for row in d["table"]))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
