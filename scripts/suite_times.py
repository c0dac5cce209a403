#!/usr/bin/env python3
"""The test suite's time by part and by file, as a markdown table (docs/testing.md's figures).

    bash scripts/test.sh --suite-times after.json           # any run saves its times
    python scripts/suite_times.py after.json                 # one run: wall and CPU per part and file
    python scripts/suite_times.py before.json after.json     # side by side, with the change

Wall is the sum of the tests' durations (setup + call + teardown); under pytest-xdist the
workers' sums add up, so the session's wall (first line) is the figure to compare with a
serial run. CPU includes the children a test waited for (torchrun, snakemake, their ranks).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load(path: str) -> dict:
    data = json.loads(Path(path).read_text())
    if "parts" not in data:
        raise SystemExit(f"{path}: not a --suite-times file (no 'parts')")
    return data


def fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f}"


def table(title: str, runs: list[dict], key: str, limit: int | None) -> list[str]:
    names = sorted({n for r in runs for n in r[key]}, key=lambda n: -max(r[key].get(n, {}).get("wall_s", 0) for r in runs))
    head = [title] + [f"{c} ({i + 1})" for i in range(len(runs)) for c in ("tests", "wall s", "CPU s")]
    if len(runs) == 2:
        head.append("wall change")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names[:limit]:
        cells = [f"`{name}`" if key == "files" else name]
        walls = []
        for r in runs:
            t = r[key].get(name)
            walls.append(t["wall_s"] if t else None)
            cells += [str(t["tests"]) if t else "0", fmt(t and t["wall_s"]), fmt(t and t.get("cpu_s"))]
        if len(runs) == 2:
            a, b = walls
            cells.append(f"{(b or 0) / a:.2f}×" if a else "new")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="one or two --suite-times JSON files (before, after)")
    parser.add_argument("--files", type=int, default=15, dest="limit", help="how many files to list (default 15)")
    args = parser.parse_args(argv)
    if len(args.files) > 2:
        parser.error("one or two files")
    runs = [load(f) for f in args.files]
    walls = " → ".join(f"{r['session_wall_s']:.0f} s" for r in runs)
    tests = " → ".join(str(sum(p["tests"] for p in r["parts"].values())) for r in runs)
    print(f"session wall: {walls}; tests: {tests}\n")
    print("\n".join(table("part", runs, "parts", None)))
    print()
    print("\n".join(table("file", runs, "files", args.limit)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
