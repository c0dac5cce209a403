"""A real run reads the energy counters around its timed steps (core.energy, run.loop): a powercap tree
laid out as the kernel's, whose package counter a thread advances at a known rate while two ranks train,
gives the run's energy fields (summary.json extra, runs.csv extra_energy_*); without a counter (this VM,
the shared launches) the run has none of them, never a zero."""

import json
import os
import threading
import time

import pytest
from harness_common import CELL_FLAGS, torchrun
from powercap_synth import powercap

from ddpbench.core import energy

pytestmark = pytest.mark.integration

WATTS = 5.0  # the rate the thread advances the package counter at


def test_a_run_reads_the_counters_around_its_timed_steps(tmp_path, monkeypatch):
    from pathlib import Path

    root = powercap(tmp_path, {"intel-rapl:0": ("package-0", 1_000), "intel-rapl:0:0": ("dram", 1_000)})
    monkeypatch.setenv(energy.POWERCAP_ENV, str(root))
    stop = threading.Event()

    def advance():  # the package at WATTS, from the wall clock (a late wake-up adds what it missed)
        t0, zone = time.time(), root / "intel-rapl:0"
        while not stop.wait(0.005):
            uj = 1_000 + int((time.time() - t0) * WATTS * 1e6)
            # replaced whole, as the kernel's file reads: a rank never sees it emptied half-way through a write
            (zone / "energy_uj.new").write_text(f"{uj}\n")
            os.replace(zone / "energy_uj.new", zone / "energy_uj")

    ticker = threading.Thread(target=advance, daemon=True)
    ticker.start()
    out = tmp_path / "run"
    here = Path(__file__).resolve().parent
    try:
        proc = torchrun(2, str(here / "_cells.py"), str(out), "allreduce:mlp", "--", *CELL_FLAGS,
                        "--max-steps", "0", "--min-timed-s", "0.5")  # fmt: skip
    finally:
        stop.set()
        ticker.join()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    (summary,) = out.glob("*/summary.json")
    extra = json.loads(summary.read_text())["extra"]
    assert extra["energy_source"] == "rapl" and extra["energy_gpu_j"] is None
    assert extra["energy_window_s"] >= 0.4  # the timed steps (min_timed_s 0.5 on the slowest rank)
    # the thread's rate, give or take its wake-ups (the DRAM zone did not move: it adds nothing)
    assert 0.8 * WATTS < extra["power_w"] < 1.2 * WATTS, extra
    assert extra["energy_j"] == pytest.approx(extra["power_w"] * extra["energy_window_s"], rel=0.01)
    throughput = json.loads(summary.read_text())["samples_per_s"]
    assert extra["energy_per_sample_j"] == pytest.approx(extra["power_w"] / throughput, rel=1e-3)  # power_w rounded


def test_a_run_without_a_counter_has_no_energy_field(cells_dir):
    if energy.rapl_zones(energy.POWERCAP):
        pytest.skip("this machine's RAPL counters are readable: its runs have energy fields")
    for path in cells_dir[max(cells_dir)].glob("*/summary.json"):
        extra = json.loads(path.read_text())["extra"]
        assert not [k for k in extra if k.startswith("energy") or k == "power_w"], path
