"""The timed steps' energy (core.energy) from counters laid out as the kernel lays out RAPL's powercap
zones (symlinks in /sys/class/powercap into the device tree, a package zone with its core, uncore and dram
sub-zones, a psys zone beside them), and NVML readings as the ranks record them; and the report's figure,
finding and cells table (report/figures/energy.py, report/findings/energy.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from powercap_synth import RANGE, powercap, set_energy

from ddpbench.core import energy
from ddpbench.core.run_record import Extra

pytestmark = pytest.mark.unit

def test_the_counters_laid_out_as_the_kernel_lays_them_out_give_the_windows_joules(tmp_path, monkeypatch):
    root = powercap(tmp_path, {"intel-rapl:0": ("package-0", RANGE - 2_000_000), "intel-rapl:0:0": ("core", 5),
                               "intel-rapl:0:1": ("uncore", 5), "intel-rapl:0:2": ("dram", 1_000_000),
                               "intel-rapl:1": ("package-1", 10_000_000), "intel-rapl:2": ("psys", 50)})  # fmt: skip
    monkeypatch.setenv(energy.POWERCAP_ENV, str(root))
    assert sorted(energy.rapl_zones()) == ["intel-rapl:0", "intel-rapl:0/dram", "intel-rapl:1"]  # no core, uncore, psys
    start = energy.snapshot()
    # 4 J on package 0 across its wrap, 0.5 J of its DRAM, 1.5 J on package 1 (core and psys moving are not counted)
    set_energy(root, "intel-rapl:0", 2_000_000)
    set_energy(root, "intel-rapl:0:2", 1_500_000)
    set_energy(root, "intel-rapl:1", 11_500_000)
    set_energy(root, "intel-rapl:0:0", 9_000_000)
    set_energy(root, "intel-rapl:2", 90_000_000)
    end = energy.snapshot()
    end["t"] = start["t"] + 2.0  # a 2 s window
    # two ranks of the host read the same counters: counted once (the wider window)
    other = {"start": dict(start, t=start["t"] + 0.1), "end": dict(end, t=end["t"] - 0.1)}
    got = energy.fields([{"start": start, "end": end}, other], samples_per_s=300.0, tokens_per_s=None)
    assert got["energy_j"] == pytest.approx(6.0) and got["energy_cpu_j"] == pytest.approx(6.0)
    assert got["energy_gpu_j"] is None and got["power_w"] == pytest.approx(3.0)
    assert got["energy_per_sample_j"] == pytest.approx(3.0 / 300) and got["energy_per_token_j"] is None
    assert got["energy_source"] == "rapl" and got["energy_window_s"] == pytest.approx(2.0)
    assert got["energy_short_window"] is False
    assert set(got) <= {a for a in vars(Extra) if not a.startswith("_")}  # every field has its runs.csv column


def test_where_no_counter_can_be_read_or_none_moves_there_is_no_field_never_a_zero(tmp_path, monkeypatch):
    monkeypatch.setenv(energy.POWERCAP_ENV, str(tmp_path / "none"))
    assert energy.rapl_zones() == {}
    blank = energy.snapshot()
    assert energy.fields([{"start": blank, "end": dict(blank, t=blank["t"] + 1)}], 100.0, None) == {}
    root = powercap(tmp_path / "still", {"intel-rapl:0": ("package-0", 7)})
    monkeypatch.setenv(energy.POWERCAP_ENV, str(root))
    same = energy.snapshot()
    assert energy.fields([{"start": same, "end": dict(same, t=same["t"] + 1)}], 100.0, None) == {}  # did not advance
    # a zone only root may read (energy_uj since Linux 5.10): left out, as if absent
    (root / "intel-rapl:0" / "energy_uj").unlink()
    (root / "intel-rapl:0" / "energy_uj").mkdir()
    assert energy.rapl_zones() == {}
    assert energy.fields([{}, {"start": same}], 100.0, None) == {}  # a rank without both ends


def test_gpus_are_summed_over_ranks_and_a_short_window_is_flagged():
    def reading(host, gpu, t, mj):
        return {"host": host, "t": t, "rapl": {}, "gpu": {"id": gpu, "mj": mj}}

    ranks = [{"start": reading("a", "GPU-0", 0.0, 1_000), "end": reading("a", "GPU-0", 2.0, 601_000)},  # 600 J
             {"start": reading("a", "GPU-1", 0.0, 5_000), "end": reading("a", "GPU-1", 2.0, 805_000)}]  # 800 J
    got = energy.fields(ranks, samples_per_s=1000.0, tokens_per_s=1_024_000.0)
    assert got["energy_gpu_j"] == pytest.approx(1400) and got["power_w"] == pytest.approx(700)
    assert got["energy_per_sample_j"] == pytest.approx(0.7) and got["energy_per_token_j"] == pytest.approx(700 / 1_024_000)
    assert got["energy_source"] == "nvml" and got["energy_short_window"] is True  # 2 s < NVML's 5 s
    assert energy.gpu_energy_mj(None, 0) is None  # no NVML on this machine: nothing, not a zero


def test_the_report_draws_energy_per_sample_and_says_once_where_none_was_read():
    from report_synth import make_runs

    from ddpbench import analysis
    from ddpbench.report.figures import Data
    from ddpbench.report.figures.energy import fig_energy
    from ddpbench.report.findings.energy import NOT_HERE, energy_findings
    from ddpbench.report.tables import cells_table

    def data(runs):
        speed = analysis.speedup_table(runs)
        return Data(runs, analysis.cell_stats(runs), speed, analysis.fits_table(runs, speed, n_boot=10))

    runs = analysis.load_runs_frame(make_runs(world_sizes=(1, 2), strategies=("single", "ddp"), failures=False))
    cells = analysis.cell_stats(runs)
    (none,) = energy_findings(cells, ["strategy"], runs)
    assert none.text == NOT_HERE and fig_energy(data(runs)) == []
    watts = runs["world_size"].map({1: 20.0, 2: 45.0})
    runs = runs.assign(**{Extra.power_w: watts, Extra.energy_per_sample_j: watts / runs["samples_per_s"],
                          Extra.energy_source: "rapl"})  # fmt: skip
    cells = analysis.cell_stats(runs)
    assert Extra.energy_per_sample_j in cells and cells[Extra.energy_per_sample_j].notna().all()
    (said,) = energy_findings(cells, ["strategy"], runs)
    assert said.text.startswith("Energy per sample, the timed steps' average power over their throughput: least ")
    assert "W on average" in said.text and "counters: RAPL (CPU packages and DRAM)" in said.text and "not available" not in said.text
    (fig,) = fig_energy(data(runs))
    assert "counters: RAPL" in fig.get_suptitle()
    table = cells_table(cells, ["strategy", "world_size"])
    assert any("energy per sample" in c for c in table.columns)
