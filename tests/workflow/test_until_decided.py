"""repeats: until_decided in the workflow: the dry run shows the first round and the most the
design could run; a design stopped in its second round resumes without measuring a run twice;
a cell slowed by 10 % on one rank (DDPBENCH_INJECT) is called slower, and the comparison of
the cells left alone is not called either way.

The grids are cells equal but for their seed (`single`, one rank, the quietest runs here): any
call between them is a false one, unless a slowdown is injected into one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from ddpbench.core.layout import Layout
from ddpbench.plan import design
from ddpbench.run import faults

pytestmark = pytest.mark.workflow

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
RESULTS = "results/tiny"
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def seed_grid(workdir: Path, seeds: int, min_timed_s: float, grid: dict | None = None, **until_decided) -> Path:
    """The tiny preset with `seeds` cells of `single` that differ only in their seed (`grid`: other axes)."""
    config = yaml.safe_load(TINY.read_text())
    config["grid"].update(world_size=[1], strategy=["single"], seed=list(range(seeds)), **(grid or {}))
    config["exclude"] = []
    config["timing"].update(min_timed_s=min_timed_s, max_steps=0, min_timed_steps=5)
    config["repeats"] = "until_decided"
    config["until_decided"] = {"precision": 0, "speedup": False, "compare": ["seed"], **until_decided}
    workdir.mkdir(exist_ok=True)
    (workdir / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    (workdir / "grid.yaml").write_text(yaml.safe_dump(config))
    return workdir


def snakemake_cmd(workdir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
            "--configfile", str(workdir / "grid.yaml"), "--cores", "2", *args]  # fmt: skip


def run(workdir: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(snakemake_cmd(workdir, *args), cwd=workdir, capture_output=True, text=True,
                          env=env or ENV, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-6000:]
    return proc


def seed_of(cell: str) -> str:
    """A cell's (or run folder's) seed (the default, 0, is no folder of its path)."""
    return cell.split("seed~", 1)[1].split("/")[0] if "seed~" in cell else "0"


def last_decision(workdir: Path) -> dict:
    """The design's last decision, as its file holds it."""
    return design.decisions_on_disk(Layout.of(workdir / RESULTS))[-1].to_json()


def test_the_dry_run_shows_the_first_round_and_the_most_the_design_could_run(tmp_path):
    workdir = seed_grid(tmp_path, seeds=2, min_timed_s=0, max_per_cell=8, margin=0.001)
    proc = run(workdir, "-n")
    out = proc.stdout + proc.stderr
    assert "until decided: 1 question(s) (1 comparison(s) within a factor 1.00); the first round runs 6 (3 per cell, " \
           "about " in out, out[-3000:]  # fmt: skip
    assert "the design at most 16 (looks at 3/5/8 runs per cell) and 8.0 min of runs (its budget" in out, out[-3000:]
    jobs = dict(line.split()[:2] for line in out.splitlines() if line.split()[:1] in (["train"], ["decide_round"]))
    assert jobs == {"train": "6", "decide_round": "1"}, out[-3000:]


def test_a_bad_design_setting_is_refused_naming_its_key(tmp_path):
    workdir = seed_grid(tmp_path, seeds=2, min_timed_s=0, compare=["sede"])
    proc = subprocess.run(snakemake_cmd(workdir, "-n"), cwd=workdir, capture_output=True, text=True, env=ENV, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "until_decided.compare" in out and "sede is not a grid axis" in out, out[-3000:]


def test_a_budget_that_cannot_pay_the_first_round_is_refused_before_anything_runs(tmp_path):
    """Issue 68: the first round ran whatever the budget; now the dry run refuses it, naming the key
    and a budget that would pay the round at the plan's estimate of a run."""
    workdir = seed_grid(tmp_path, seeds=4, min_timed_s=0, budget="5s")
    proc = subprocess.run(snakemake_cmd(workdir, "-n"), cwd=workdir, capture_output=True, text=True, env=ENV, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "until_decided.budget" in out, out[-3000:]
    assert "5 s of runs cannot pay the design's first round: 12 runs (3 per cell x 4 cells)" in out, out[-3000:]
    assert "(the plan's default estimate: no run of this host to learn from yet" in out, out[-3000:]
    assert "Set until_decided.budget to at least" in out and not (workdir / RESULTS).exists()


@pytest.mark.faults
def test_a_design_stopped_in_its_second_round_resumes_without_measuring_a_run_twice(tmp_path):
    """Two identical cells and a margin no measurement can meet: every round runs, to the cap (5,
    the second look: round 2 is the last, so a stop inside it leaves the design one round short).
    SIGTERM once round 2 has finished a run; the rerun finishes the design, keeping every run."""
    workdir = seed_grid(tmp_path, seeds=2, min_timed_s=0, max_per_cell=5, margin=0.001)
    runs = workdir / RESULTS / "runs"
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(snakemake_cmd(workdir, "--until", "aggregate"), cwd=workdir, env=ENV, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 300
    while not list(runs.rglob("repeat~3/summary.json")) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
    first.send_signal(signal.SIGTERM)
    first.wait(timeout=120)
    assert (workdir / RESULTS / "design" / "round~0.json").exists()
    assert not (workdir / RESULTS / "design" / "round~1.json").exists()  # stopped inside round 2
    kept = {p: (p.stat().st_mtime_ns, json.loads(p.read_text())["timeline"]["launcher_start"]) for p in runs.rglob("summary.json")}
    assert 7 <= len(kept) < 10, sorted(kept)  # round 1's 6 and some of round 2's 4

    run(workdir, "--until", "aggregate")
    final = last_decision(workdir)
    assert final["done"] and final["counts"] == {c: 5 for c in final["counts"]}
    assert set(final["stopped"].values()) == {"cap"}
    assert [v["verdict"] for v in final["verdicts"]] == ["undecided"]
    after = {p: (p.stat().st_mtime_ns, json.loads(p.read_text())["timeline"]["launcher_start"]) for p in runs.rglob("summary.json")}
    assert len(after) == 10 and all(after[p] == kept[p] for p in kept)  # no run measured twice
    rows = (workdir / RESULTS / "aggregate" / "runs.csv").read_text().splitlines()
    assert len(rows) == 1 + 10


# The spread of a run's throughput (log scale) below which 8 runs a cell tell 10 % apart at the
# design's level (the interval's half-width about 3 standard errors, 3 x 0.05 x sqrt(2/8) = 0.075):
# a quiet 2-core VM gives 2-4 %; busy loops on every core, 15-25 %.
QUIET_SIGMA = 0.05


def test_a_cell_slowed_by_ten_percent_on_one_rank_is_called_slower_and_the_others_are_left_alone(tmp_path):
    """Three identical cells, the third's rank 0 slowed by 10 % of its step: it is slower than
    each of the other two, and the pair of untouched cells is not called faster or slower. On a
    machine too busy to tell 10 % apart in 8 runs (spread over QUIET_SIGMA) the slowed cell's
    comparisons may end undecided, but never the wrong way."""
    workdir = seed_grid(tmp_path, seeds=3, min_timed_s=0.5, max_per_cell=8, margin=0.05,
                        grid={"batch_size": [128], "dataset_size": [1024]})  # steps of ~10 ms: sleeps of ~1 ms
    run(workdir, "--until", "aggregate", env={**ENV, "DDPBENCH_INJECT": "slow:0:10%:seed=2"})
    final = last_decision(workdir)
    runs = pd.read_csv(workdir / RESULTS / "aggregate" / "runs.csv")
    untouched_runs = runs[runs["run_dir"].map(seed_of) != "2"]
    sigma = float(untouched_runs.groupby(untouched_runs["run_dir"].map(seed_of))["samples_per_s"]
                  .apply(lambda x: np.log(x).std()).max())  # fmt: skip
    verdicts = {frozenset(map(seed_of, v["cells"])): v for v in final["verdicts"]}
    for other in ("0", "1"):
        v = verdicts[frozenset({"2", other})]
        slowed_first = seed_of(v["cells"][0]) == "2"
        wanted = "slower" if slowed_first else "faster"
        assert v["verdict"] == wanted or (sigma > QUIET_SIGMA and v["verdict"] == "undecided"), (sigma, v)
        ratio = v["estimate"] if slowed_first else 1 / v["estimate"]
        assert ratio < 0.97 or sigma > QUIET_SIGMA, (sigma, v)
    untouched = verdicts[frozenset({"0", "1"})]
    assert untouched["verdict"] not in ("faster", "slower"), untouched


@pytest.mark.parametrize("spec, rank, strategy, expected", [
    ("slow:1:10%:strategy=ddp", 1, "ddp", ("slow", "10%")),
    ("slow:1:10%:strategy=ddp", 1, "allreduce", None),
    ("slow:1:10%:strategy=ddp", 0, "ddp", None),
    ("slow:0:20", 0, "ddp", ("slow", 20)),
])  # fmt: skip
def test_a_slow_injection_can_name_its_cell(monkeypatch, spec, rank, strategy, expected):
    monkeypatch.setenv("DDPBENCH_INJECT", spec)
    params = type("Params", (), {"strategy": strategy})()
    assert faults.injection(rank, params) == expected
    assert faults.slow_seconds("10%", 0.5) == pytest.approx(0.05) and faults.slow_seconds(20, 9.0) == 0.02
