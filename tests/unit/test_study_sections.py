"""The study presets' report sections (ddpbench.report.studies): each answers its question from the data (the presets' planning and miniatures: tests/workflow/test_studies.py)."""

import re

import numpy as np
import pandas as pd
import pytest
from report_synth import Answers, make_runs

from ddpbench import analysis as A
from ddpbench.report import build as report, studies
from ddpbench.report.studies import accelerators, dataset_size, sync_strategies
from ddpbench.report.text import num, sig3


def _section(name, runs):
    cells, speed = A.cell_stats(runs), A.speedup_table(runs)
    return studies.section(name, runs, cells, speed)


def test_sync_dp_table_and_answer_from_the_cells():
    runs = make_runs(strategies=("single", "allreduce", "bucketed_allreduce", "ddp"), world_sizes=(1, 2),
                     repeats=3, failures=False, others_at_1=False)  # fmt: skip
    calls = {"allreduce": 10.0, "bucketed_allreduce": 1.0, "ddp": 2.0, "single": 0.0}
    runs["comm_calls_per_step"] = runs["strategy"].map(calls)
    sec = _section("sync-dp", runs)
    assert [r[0] for r in sec.rows] == ["allreduce", "bucketed_allreduce", "ddp", "single"]
    row = dict(zip(sec.columns, sec.rows[0]))
    r0 = runs[runs["strategy"] == "allreduce"].iloc[0]
    assert row["calls/step"] == "10"
    assert row["calls/epoch"] == str(int(10 * r0["dataset_size"] / r0["global_batch"]))  # calls x steps per epoch
    cell = A.cell_stats(runs).set_index("strategy").loc["allreduce"]
    assert f"{100 * cell['frac_comm']:.3g}" in row["comm [% of step]"]
    text = " ".join(sec.findings)
    assert "With 2 processes" in text and "Bucketing cuts the calls per step from 10 (per-parameter all-reduce) to 1" in text
    assert "DDP overlaps communication" in text and "best effective speedup at p = 2" in text
    assert sec.figures[0] == "phases"


@pytest.mark.parametrize("f1, s1, fp, sp, epochs, expected", [
    (2.0, 1e-3, 4.0, 0.5e-3, 1, 4000.0),   # 2 s more fixed cost, 0.5 ms less per sample
    (2.0, 1e-3, 4.0, 0.5e-3, 2, 2000.0),   # two epochs: half the samples
    (4.0, 1e-3, 2.0, 0.5e-3, 1, 0.0),      # cheaper and faster: pays off from the first sample
    (2.0, 1e-3, 4.0, 1e-3, 1, np.inf),     # no faster: never
    (2.0, 1e-3, 4.0, np.nan, 1, np.nan),   # a number missing: no answer
])  # fmt: skip
def test_crossover_is_where_the_run_time_lines_meet(f1, s1, fp, sp, epochs, expected):
    got = dataset_size.crossover_samples(f1, s1, fp, sp, epochs)
    assert (np.isnan(got) and np.isnan(expected)) or got == pytest.approx(expected)
    if np.isfinite(got) and got > 0:  # at N*, both runs take the same time
        assert f1 + epochs * got * s1 == pytest.approx(fp + epochs * got * sp)


@pytest.mark.parametrize("f1, s1, fp, sp, shape, n", [
    (2.0, 1e-3, 4.0, 0.5e-3, "above", 4000.0),  # faster steps, dearer start
    (4.0, 1e-3, 2.0, 2e-3, "below", 2000.0),    # issue 46, point 3: a cheaper start, slower steps
    (4.0, 1e-3, 2.0, 0.5e-3, "always", 0.0),
    (2.0, 1e-3, 4.0, 2e-3, "never", np.nan),
])  # fmt: skip
def test_payoff_says_on_which_side_of_the_crossing_p_wins(f1, s1, fp, sp, shape, n):
    got, got_shape = dataset_size.payoff(f1, s1, fp, sp, 1)
    assert got_shape == shape and ((np.isnan(n) and np.isnan(got)) or got == pytest.approx(n))
    if shape == "below":  # before N* p finishes first, after it one process does
        assert fp + 0.5 * n * sp < f1 + 0.5 * n * s1 and fp + 2 * n * sp > f1 + 2 * n * s1
        assert dataset_size.payoff_text(got, got_shape) == "below 2000"


def test_a_cheaper_start_with_slower_steps_pays_off_below_not_never():
    runs = make_runs(strategies=("single", "ddp"), world_sizes=(1, 2), dataset_sizes=(1024, 4096), repeats=3,
                     failures=False, others_at_1=False)  # fmt: skip
    slow = runs["world_size"] == 2
    runs.loc[slow, "step_time_median_s"] *= 3.0  # ddp 3x slower per step than one process ...
    runs["fixed_cost_s"] = np.where(slow, 1.0, 30.0)  # ... but 29 s cheaper to start
    sec = _section("dataset-size", runs)
    assert not any("never pays off" in f for f in sec.findings)
    (below,) = [f for f in sec.findings if "pays off only below about" in f]
    assert below.startswith("ddp at p = 2 pays off only below about")
    assert all(dict(zip(sec.columns, r))["pays off [samples]"].startswith("below ") for r in sec.rows if r[0] == "ddp")


def test_dataset_size_finds_the_size_above_which_more_workers_pay_off():
    runs = make_runs(strategies=("single", "ddp"), world_sizes=(1, 2), dataset_sizes=(1024, 4096), repeats=3,
                     failures=False, others_at_1=False)  # fmt: skip
    runs["fixed_cost_s"] = np.where(runs["world_size"] == 1, 3.0, 5.0)
    sec = _section("dataset-size", runs)
    assert {r[0] for r in sec.rows} == {"single", "ddp"} and len(sec.rows) == 4
    ddp = {r[2]: dict(zip(sec.columns, r)) for r in sec.rows if r[0] == "ddp"}
    cells = A.cell_stats(runs)
    batch = float(runs["global_batch"].median())
    base = cells[cells["strategy"] == "single"]["step_time_median_s"].median() / batch  # medians over the sizes
    for n in ("1024", "4096"):
        mine = cells[(cells["strategy"] == "ddp") & (cells["dataset_size"].astype(str) == n)]["step_time_median_s"]
        expected = dataset_size.crossover_samples(3.0, base, 5.0, float(mine.iloc[0]) / batch, 1)
        assert np.isfinite(expected) and expected > 0
        assert ddp[n]["pays off [samples]"] == f"above {num(expected)}"
    assert any("ddp at p = 2 pays off above about" in f for f in sec.findings)
    # how the epoch time and the speedup change with the size, from the cells' own numbers
    (trend,) = [f for f in sec.findings if f.startswith("ddp at p = 2: epoch time")]
    at = {n: cells[(cells["strategy"] == "ddp") & (cells["dataset_size"] == n)].iloc[0] for n in (1024, 4096)}
    sp = A.speedup_table(runs).set_index(["strategy", "dataset_size"])["speedup"]
    ratio = at[4096]["epoch_time_s"] / at[1024]["epoch_time_s"]
    assert f"(×{sig3(ratio)} for ×4.00 the data)" in trend
    assert f"efficiency {sig3(50 * sp['ddp', 1024])} % → {sig3(50 * sp['ddp', 4096])} %" in trend
    assert sec.findings[0].startswith("single at p = 1: epoch time") and "speedup" not in sec.findings[0]


def test_report_has_the_study_section_and_rejects_an_unknown_study(tmp_path, capsys):
    runs = make_runs(strategies=("single", "allreduce", "ddp"), world_sizes=(1, 2), repeats=2, failures=False,
                     others_at_1=False)  # fmt: skip
    path = tmp_path / "runs.csv"
    runs.to_csv(path, index=False)
    argv = ["--runs", str(path), "--out", str(tmp_path / "out"), "--no-pdf", "--bootstrap", "100"]
    with pytest.raises(SystemExit) as err:
        report.main([*argv, "--study", "no-such-study"])
    assert err.value.code == 2 and "no-such-study" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before any work
    assert report.main([*argv, "--study", "sync-dp"]) == 0
    html = (tmp_path / "out" / "report.html").read_text()
    assert html.index('id="findings"') < html.index('id="study-sync-dp"') < html.index('id="speedup"')
    assert "Study: Synchronous data parallelism" in html and 'id="study-sync-dp-table"' in html
    assert 'href="#fig-phases"' in html
    tex = (tmp_path / "out" / "report.tex").read_text()
    assert "\\section{Study: Synchronous data parallelism" in tex
    assert report.main(argv) == 0 and 'class="study"' not in (tmp_path / "out" / "report.html").read_text()


def test_a_report_answers_several_studies_each_in_its_own_section(tmp_path):
    """A GPT's DDP-or-FSDP question is the language-model and the sharding study at once (issue 58)."""
    from report_synth import make_token_runs

    runs = make_token_runs()
    path = tmp_path / "runs.csv"
    runs.to_csv(path, index=False)
    argv = ["--runs", str(path), "--out", str(tmp_path / "out"), "--no-pdf", "--bootstrap", "100"]
    assert report.main([*argv, "--study", "language-model", "--study", "sharding"]) == 0
    html = (tmp_path / "out" / "report.html").read_text()
    assert html.index('id="study-language-model"') < html.index('id="study-sharding"') < html.index('id="speedup"')
    assert 'href="#study-language-model"' in html and 'href="#study-sharding"' in html
    tex = (tmp_path / "out" / "report.tex").read_text()
    assert tex.count("\\section{Study: ") == 2


@pytest.mark.parametrize("name", sorted(studies.STUDIES))
def test_a_study_on_runs_without_phase_timings_shows_its_cells_and_claims_nothing(name):
    runs = make_runs(strategies=("single", "ddp"), world_sizes=(1, 2), repeats=2, failures=False, others_at_1=False)
    runs = runs.drop(columns=[c for c in runs.columns if c.startswith(("phase_", "frac_", "comm_"))] + ["global_batch"])
    sec = _section(name, runs)
    assert len(sec.rows) == 2 and all(len(r) == len(sec.columns) for r in sec.rows)
    assert not any("communicating" in f or "pays off" in f for f in sec.findings)


def test_sync_strategies_reads_each_ranks_step_the_loss_at_20_and_40_and_the_profile():
    from report_synth import make_profile, make_steps

    runs = make_runs(strategies=("single", "gather_scatter", "allreduce", "ddp"), world_sizes=(1, 4), repeats=3,
                     failures=False, others_at_1=False)  # fmt: skip
    ok = runs[runs["status"] == "ok"]
    steps, profile = make_steps(ok, n_steps=42), make_profile(runs)
    sec = studies.section("sync-strategies", runs, A.cell_stats(runs), A.speedup_table(runs), steps, profile)
    rows = {r[0]: dict(zip(sec.columns, r)) for r in sec.rows}
    assert set(rows) == {"single", "gather_scatter", "allreduce", "ddp"}
    gs = rows["gather_scatter"]
    t = ok[ok["strategy"] == "gather_scatter"]["step_time_median_s"]
    assert gs["rank 0 [ms]"] == num(1e3 * t.median())  # make_steps: rank r takes (1 + 0.02 r) x the step
    assert gs["slowest other rank [ms]"] == num(1e3 * (t * 1.06).median())
    # the global batch's loss: make_steps' rank r loses 0.01 r more on its equal shard, so the mean over 4 ranks adds 0.015
    assert gs["loss at 20"] == num(2.3 * np.exp(-2.0) + 0.015) and gs["loss at 40"] == num(2.3 * np.exp(-4.0) + 0.015)
    assert rows["single"]["loss at 20"] == num(2.3 * np.exp(-2.0))
    # make_profile at p = 4: communication 0.30 of the step x (1 + 0.1 r) on rank r, ranks summing to 1, 1, 1.08, 1.17
    assert gs["profiled comm [% of step]"] == num(100 * (0.30 * 1.15) / ((1 + 1 + 1.08 + 1.17) / 4))
    assert rows["single"]["profiled comm [% of step]"] == "0"
    text = " ".join(sec.findings)
    assert "Gather/scatter's rank 0" in text and "The fastest strategy here is" in text
    assert "At iteration 40 the loss ranges from" in text and "differ from single (p=1)'s from the first iteration" in text
    # every rank of every cell on one curve: the same model
    steps = steps.assign(loss=2.3 * np.exp(-0.1 * steps["step"]))
    same = " ".join(studies.section("sync-strategies", runs, A.cell_stats(runs), A.speedup_table(runs), steps, profile).findings)
    assert "the strategies train the same model (" in same
    ddp = steps["run_dir"].isin(ok[ok["strategy"] == "ddp"]["run_dir"])
    off = steps.assign(loss=np.where(ddp, steps["loss"] * 1.1, steps["loss"]))
    other = " ".join(studies.section("sync-strategies", runs, A.cell_stats(runs), A.speedup_table(runs), off, profile).findings)
    assert "differ from single (p=1)'s from the first iteration (ddp)" in other and "do not all train the same model" in other
    # every curve jumps to twice its first loss at step 6; ddp's parts from the others' at step 9 (rounding, amplified)
    spiked = steps["loss"].where(steps["step"] != 6, 2 * 2.3)
    chaos = steps.assign(loss=np.where(ddp & (steps["step"] >= 9), spiked * 1.01, spiked))
    text = " ".join(studies.section("sync-strategies", runs, A.cell_stats(runs), A.speedup_table(runs), chaos, profile).findings)
    assert "agree with single (p=1)'s within 0.1 % through iteration 8 and part from iteration 9 (ddp first)" in text
    assert "the loss peaks at 4.60 at iteration 6 (2.30 at the first)" in text and "by chance, not by strategy" in text
    # a curve that parts without a spike, with other final weights: not the same model
    late = steps.assign(loss=np.where(ddp & (steps["step"] >= 9), steps["loss"] * 1.01, steps["loss"]))
    apart = runs.assign(param_norm=np.where(runs["strategy"] == "ddp", 10.01, 10.0))
    text = " ".join(studies.section("sync-strategies", apart, A.cell_stats(apart), A.speedup_table(apart), late, profile).findings)
    assert "part from iteration 9 (ddp first): the strategies do not all train the same model" in text
    # ... with the same final weights (to 2e-6, as VGG-11's exact strategies measured): one model, rounding spread
    close = runs.assign(param_norm=np.where(runs["strategy"] == "ddp", 10.00002, 10.0))
    text = " ".join(studies.section("sync-strategies", close, A.cell_stats(close), A.speedup_table(close), late, profile).findings)
    gap = (0.01 * 2.3 * np.exp(-0.9)) / 2.3  # ddp's 1 % at iteration 9, the largest, over the first loss
    assert f"part from iteration 9 (ddp first), by at most {sig3(100 * gap)} % of the first loss (iteration 9)" in text
    assert "final weights' norms agree to a relative 2e-06 (10–10.00002): one model" in text
    # the final weights themselves (issue 46, point 5): equal norms, different vectors -> not one model ...
    base = np.linspace(-1.0, 1.0, 32)
    sample = lambda strategy: " ".join(f"{v:.9g}" for v in (base[::-1] if strategy == "ddp" else base))  # noqa: E731
    swapped = close.assign(extra_param_sample=close["strategy"].map(sample))  # same norms (10 vs 10.00002), other weights
    text = " ".join(studies.section("sync-strategies", swapped, A.cell_stats(swapped), A.speedup_table(swapped), late, profile).findings)
    assert "their final weights differ by a relative" in text and "do not all train the same model" in text
    # ... and vectors 1e-6 apart: one model, whatever the norms say
    near = apart.assign(extra_param_sample=apart["strategy"].map(
        lambda st: " ".join(f"{v:.9g}" for v in base * (1 + 1e-6 * (st == "ddp")))))  # fmt: skip
    text = " ".join(studies.section("sync-strategies", near, A.cell_stats(near), A.speedup_table(near), late, profile).findings)
    assert "final weights agree to a relative 1e-06 (the parameter vectors at 32 sampled coordinates): one model" in text
    # a loss near 0 magnifies rounding: 0.1 % of the first loss is the least gap that counts
    ref = pd.Series([2.3, 1.0, 0.02]).rename_axis("step")
    assert np.isnan(sync_strategies.parting_step(ref * [1, 1, 1.04], ref)) and sync_strategies.parting_step(ref * [1, 1, 1.2], ref) == 2
    # curves that share no iteration with the reference never "agree" (issue 46, point 5)
    curves = {("single", 1): pd.Series([2.3, 1.0], index=[0, 1]), ("ddp", 2): pd.Series([0.9, 0.8], index=[5, 6])}
    table = pd.DataFrame({"strategy": ["single", "ddp"], "world_size": [1, 2]})
    said = sync_strategies._curves_text(curves, table, ["strategy", "world_size"])
    assert "same model cannot be told" in said and "train the same model (" not in said
    # without steps or a profile: the cells, no per-rank or loss claims
    bare = studies.section("sync-strategies", runs, A.cell_stats(runs), A.speedup_table(runs))
    assert len(bare.rows) == 4 and not any("rank 0" in f or "iteration 40" in f for f in bare.findings)


def test_cores_and_gpus_names_the_best_count_per_batch_and_the_batches_that_did_not_fit():
    runs = make_runs(strategies=("single", "ddp"), world_sizes=(1, 2, 4), batch_sizes=(32, 64), repeats=3,
                     failures=False, others_at_1=False)  # fmt: skip
    big = (runs["batch_size"] == 64) & (runs["world_size"] == 4)
    runs.loc[big, ["status", "failure_kind"]] = ["failed", "oom"]
    runs.loc[big, ["samples_per_s", "step_time_median_s", "epoch_time_s"]] = np.nan
    sec = _section("cores-and-gpus", runs)
    rows = [dict(zip(sec.columns, r)) for r in sec.rows]
    cells = A.cell_stats(runs)
    for b in (32, 64):
        mine = cells[(cells["batch_size"] == b) & cells["samples_per_s"].notna()]
        top = mine.sort_values("samples_per_s").iloc[-1]
        (best,) = [r for r in rows if r["batch"] == str(b) and r["best for its batch"] == "best"]
        assert best["processes / GPUs"] == str(top["world_size"])
    (oom,) = [r for r in rows if r["out of memory"]]
    assert oom["batch"] == "64" and oom["processes / GPUs"] == "4" and oom["out of memory"] == "3 of 3 runs"
    text = " ".join(sec.findings)
    assert "On cpu, the number of processes with the highest throughput, per batch size: batch 32:" in text
    assert "Out of memory, recorded and the grid went on: batch 64 at 4 on cpu (3 of 3 runs)" in text
    assert "On cpu at batch 32, throughput against processes: 1 → " in text and "falls" not in text
    # 4 processes on a 2-core machine: flagged, and slower than 2
    slow = runs.copy()
    four = (slow["world_size"] == 4) & (slow["batch_size"] == 32)
    slow.loc[four, "extra_oversubscribed"] = True
    slow.loc[four, "samples_per_s"] /= 3
    slow.loc[four, ["step_time_median_s", "epoch_time_s"]] *= 3
    sec = _section("cores-and-gpus", slow)
    text = " ".join(sec.findings)
    at = re.search(r"On cpu at batch 32, throughput against processes: (.*?)\.(?: On|$)", text).group(1)
    assert re.search(r"2 → [\d.]+ \[.*?\] samples/s \(speedup [\d.]+ \[.*?\], [\d.]+ % \[.*?\] (?:\(\d+ % interval\) )?of a step communicating\)", at)
    assert "4 → " in at and "oversubscribed)" in at and at.endswith("beyond 2 processes throughput falls")
    assert [r for r in sec.rows if r[1] == "32" and r[2] == "4 (oversubscribed)"]


def test_cores_and_gpus_on_one_gpu_answers_with_the_batch_and_names_the_counts_skipped():
    """One GPU: the 2-GPU cells are skipped at start (NCCL wants a GPU per rank), so no best count
    exists to name; the answer gives throughput against the batch instead (measured on an H100)."""
    runs = make_runs(strategies=("single", "ddp"), world_sizes=(1, 2), batch_sizes=(16, 64), repeats=3,
                     failures=False, others_at_1=False)  # fmt: skip
    runs["device"] = "cuda"
    two = runs["world_size"] == 2
    reason = "device cuda with 2 processes on this node needs as many GPUs; 1 visible"
    runs.loc[two, ["status", "reason"]] = ["skipped", reason]
    runs.loc[two, ["samples_per_s", "step_time_median_s", "epoch_time_s"]] = np.nan
    runs.loc[runs["batch_size"] == 64, "samples_per_s"] *= 3
    sec = _section("cores-and-gpus", runs)
    (answer,) = [f for f in sec.findings if f.startswith("On cuda")]
    assert answer.startswith(f"On cuda only 1 GPU ran (the 2-GPU cells were skipped: {reason}); throughput against the batch: batch 16 → ")
    assert answer.endswith("samples/s; it rises to the largest batch.") and "highest throughput" not in answer
    cells = A.cell_stats(runs).dropna(subset=["samples_per_s"]).set_index("batch_size")
    assert f"batch 64 → {num(cells.loc[64, 'samples_per_s'])} [" in answer


def test_epoch_throughput_counts_every_ranks_samples_over_the_slowest_ranks_time():
    runs = pd.DataFrame([dict(run_dir="a", status="ok", strategy="ddp", world_size=2),
                         dict(run_dir="b", status="ok", strategy="pipeline", world_size=2),
                         dict(run_dir="c", status="failed", strategy="ddp", world_size=2)])  # fmt: skip
    rows = []
    for run, samples, times in (("a", (10, 10), (1.0, 2.0)), ("b", (0, 20), (1.0, 1.0)), ("c", (10, 10), (9.0, 9.0))):
        for step in range(4):  # two epochs of two steps; the first step a warm-up
            for rank in (0, 1):
                rows.append(dict(run_dir=run, epoch=step // 2, step=step, rank=rank, samples=samples[rank],
                                 total_s=times[rank] * (2 if step == 0 else 1), timed=int(step > 0)))  # fmt: skip
    got = A.epoch_throughput(runs, pd.DataFrame(rows), ["strategy", "world_size"]).set_index(["strategy", "epoch"])
    # ddp: 2 steps x 20 samples over 2 x the slower rank's 2 s (4 s in the warm-up step): 40 / 6, then 40 / 4
    assert got.loc[("ddp", 0), "samples_per_s"] == pytest.approx(40 / 6) and got.loc[("ddp", 1), "samples_per_s"] == 10
    assert got.loc[("pipeline", 1), "samples_per_s"] == 20  # the last stage's samples, not twice the batch
    assert got.loc[("ddp", 0), "warmup"] and not got.loc[("ddp", 1), "warmup"]
    assert set(got["n"]) == {1}  # the failed run left out


def test_round_time_is_local_sgds_measured_round_and_one_step_for_the_others():
    runs = pd.DataFrame([dict(status="ok", strategy="local_sgd", step_time_median_s=0.1, extra_round_time_s=0.5, extra_steps_per_round=4),
                         dict(status="ok", strategy="local_sgd_short", step_time_median_s=0.1, extra_round_time_s=np.nan, extra_steps_per_round=4),
                         dict(status="ok", strategy="ddp", step_time_median_s=0.2, extra_round_time_s=np.nan, extra_steps_per_round=np.nan)])  # fmt: skip
    got = A.round_time(runs, ["strategy"]).set_index("strategy")["round_s"]
    assert got["local_sgd"] == 0.5 and got["local_sgd_short"] == pytest.approx(0.4) and got["ddp"] == 0.2


def _accelerator_runs():
    """CPU: one process at batch 32 and 128 with 0 and 2 DataLoader workers, batch auto, DDP at 2 and 4 and local
    SGD at 2 (batch 128, 0 workers); the same cells on cuda recorded as skipped."""
    base = make_runs(strategies=("single", "ddp", "local_sgd"), world_sizes=(1, 2, 4), batch_sizes=(32, 128), repeats=3,
                     failures=False, others_at_1=False)  # fmt: skip
    base = base[(base["strategy"] == "single") | ((base["batch_size"] == 128) &
                                                  ~((base["strategy"] == "local_sgd") & (base["world_size"] == 4)))]  # fmt: skip
    base = base.assign(device="cpu", num_workers=0, batch_size=base["batch_size"].astype(str))
    workers = base[base["strategy"] == "single"].assign(num_workers=2, run_dir=lambda d: d["run_dir"] + "-w2",
                                                        samples_per_s=lambda d: d["samples_per_s"] * 1.1)  # fmt: skip
    auto = base[(base["strategy"] == "single") & (base["batch_size"] == "128")].assign(
        batch_size="auto", run_dir=lambda d: d["run_dir"] + "-auto", extra_auto_batch=1024,
        extra_auto_batch_method="cpu: peak RSS growth", peak_rss_mb=1800.0)  # fmt: skip
    local = base["strategy"] == "local_sgd"
    base.loc[local, "extra_round_time_s"] = 4 * base.loc[local, "step_time_median_s"] * 0.9
    base.loc[local, "extra_steps_per_round"] = 4
    cuda = base.assign(device="cuda", status="skipped", run_dir=lambda d: d["run_dir"] + "-cuda",
                       reason="device cuda requested but CUDA is not available here")  # fmt: skip
    cuda[["samples_per_s", "step_time_median_s", "epoch_time_s"]] = np.nan
    return pd.concat([base, workers, auto, cuda], ignore_index=True)


def test_accelerators_answers_each_part_of_its_question():
    from report_synth import make_steps

    runs = _accelerator_runs()
    ok = runs[runs["status"] == "ok"]
    steps = make_steps(ok, n_steps=12)  # three epochs of four steps; the first step 1.5x, three warm-up steps
    sec = studies.section("accelerators", runs, A.cell_stats(runs), A.speedup_table(runs), steps)
    rows = [dict(zip(sec.columns, r)) for r in sec.rows]
    assert len(rows) == 8 and {r["device"] for r in rows} == {"cpu"}  # skipped cells: in the findings and problems
    (auto,) = [r for r in rows if r["batch"].startswith("auto") and r["device"] == "cpu"]
    assert auto["batch"] == "auto → 1024" and auto["peak memory [MiB]"].endswith("(RSS)")
    (local,) = [r for r in rows if r["strategy"] == "local_sgd" and r["device"] == "cpu"]
    t = ok[ok["strategy"] == "local_sgd"]["step_time_median_s"]
    assert local["round [ms]"] == num(1e3 * (4 * t * 0.9).median())
    assert local["per epoch [samples/s]"].count("→") == 2  # three epochs
    assert accelerators._epochs_text([1.0, 2.0, 3.0, 4.0, 5.0]) == "1 → 2 → … → 5 (5 epochs)"
    text = " ".join(sec.findings)
    assert "Nothing ran on cuda here: its 15 runs were recorded as skipped" in text
    assert "On cpu, the first epoch (with the warm-up steps) runs at" in text
    assert "batch_size auto on cpu (mlp) chose 1024 samples per rank (cpu: peak RSS growth)" in text
    assert "2 workers instead of 0 change throughput by +10.0 %" in text  # the sweep's workers: 1.1x at each batch
    # a model that ran without the workers sweep (ResNet-18 on CPU) claims none
    one = (runs["strategy"] == "single") & (runs["batch_size"] == "128") & (runs["num_workers"] == 0) & (runs["device"] == "cpu")
    other = pd.concat([runs, runs[one].assign(model="resnet18", run_dir=lambda d: d["run_dir"] + "-r18")], ignore_index=True)
    again = studies.section("accelerators", other, A.cell_stats(other), A.speedup_table(other), steps)
    assert " ".join(again.findings).count("DataLoader-workers sweep") == 1
    assert "one process against 2 (per-rank batch 128)" in text and "local_sgd" in text
    # accuracy is stated with its optimizer steps; where they and the accuracies differ, the answer says why
    one = runs[(runs["strategy"] == "single") & (runs["batch_size"] == "128") & (runs["num_workers"] == 0)].iloc[0]
    assert f"after {one['total_steps']} steps of {one['global_batch']}" in text
    assert "compare training budgets" not in text  # same accuracy everywhere (make_runs)
    runs.loc[runs["strategy"] == "ddp", ["test_acc", "total_steps"]] = [0.2, 6]
    text = " ".join(studies.section("accelerators", runs, A.cell_stats(runs), A.speedup_table(runs), steps).findings)
    assert "The accuracies come after different numbers of optimizer steps (the same epochs in steps of 2× the samples)" in text
    assert re.search(r"the epoch time against processes \(one process, then DDP\): .+ s at 1, .+ s at 2, .+ s at 4\.", text)


def test_accelerators_compares_the_devices_on_the_same_cells():
    runs = _accelerator_runs()
    cpu = runs[runs["device"] == "cpu"]
    gpu = cpu.assign(device="cuda", run_dir=lambda d: d["run_dir"] + "-gpu", samples_per_s=cpu["samples_per_s"] * 10,
                     epoch_time_s=cpu["epoch_time_s"] / 10, step_time_median_s=cpu["step_time_median_s"] / 10,
                     cuda_max_allocated_mb=700.0)  # fmt: skip
    runs = pd.concat([cpu, gpu], ignore_index=True)
    sec = studies.section("accelerators", runs, A.cell_stats(runs), A.speedup_table(runs))
    text = " ".join(sec.findings)
    assert "the GPU's throughput is 10.0× the CPU's (median over 8 cells; 10.0–10.0×)" in text and "Nothing ran" not in text
    assert "batch_size auto on cuda (mlp) chose 1024" in text and "peak memory 700 [700, 700] MB (GPU)" in text
    rows = [dict(zip(sec.columns, r)) for r in sec.rows]
    assert {r["peak memory [MiB]"][-5:] for r in rows if r["device"] == "cuda"} == {"(GPU)"}
    assert "did not run" not in text

    # one GPU: its one-process cells ran, its 2- and 4-rank strategies were skipped at start (as on the H100)
    reason = "device cuda with 2 processes on this node needs as many GPUs; 1 visible"
    multi = (runs["device"] == "cuda") & (runs["world_size"] > 1)
    runs.loc[multi, ["status", "reason"]] = ["skipped", reason]
    runs.loc[multi, ["samples_per_s", "step_time_median_s", "epoch_time_s"]] = np.nan
    sec = studies.section("accelerators", runs, A.cell_stats(runs), A.speedup_table(runs))
    n = int(multi.sum())
    assert f"On cuda the strategies at p = 2, 4 did not run: their {n} runs were recorded as skipped ({reason})." in sec.findings
    assert not any(f.startswith("On cuda (mlp), one process against") for f in sec.findings)


# -- sharding ------------------------------------------------------------------------------------


def _mib(nbytes):
    return sig3(nbytes / A.MIB)


def _verdict_matches_interval(text):
    """Every 'name R× [lo, hi] (word)' in `text` says what its interval says: slower only above..below 1."""
    found = re.findall(r"(\w+) ([\d.]+)× \[([\d.]+), ([\d.]+)\] \(([a-z ]+)\)", text)
    for _, _, lo, hi, word in found:
        lo, hi = float(lo), float(hi)
        expected = "faster" if lo > 1 else "slower" if hi < 1 else "no detectable difference"
        assert word == expected, (word, lo, hi, text)
    return found


def test_sharding_states_the_memory_each_strategy_saves_from_the_held_bytes():
    from report_synth import PARAM_BYTES, held_bytes, make_sharding_runs

    sec = _section("sharding", make_sharding_runs(noise=0.0))
    ddp = held_bytes("ddp", 2, state_per_param=2.0)["extra_held_bytes"]
    zero = held_bytes("zero", 2, state_per_param=2.0)["extra_held_bytes"]
    fsdp = held_bytes("fsdp", 2, state_per_param=2.0)["extra_held_bytes"]
    assert (ddp, zero, fsdp) == (4 * PARAM_BYTES, 3 * PARAM_BYTES, 2 * PARAM_BYTES)  # AdamW: 2 state values a parameter
    saved = {f.split(" ")[0]: f for f in sec.findings if " shards " in f}
    assert list(saved) == ["zero", "fsdp_grad_op", "fsdp"]  # least to most sharded
    assert saved["zero"] == (f"zero shards its optimizer state: at p = 2 each rank holds {_mib(zero)} MiB against ddp's "
                             f"{_mib(ddp)} MiB (0.750×): {_mib(ddp - zero)} MiB saved per rank, the same at every "
                             "precision and grad_accum measured; its peak RSS is 638 MiB against ddp's 638 MiB at "
                             "compile=none, activation_checkpointing=none (medians "
                             "over repeats: the peak also holds the process, activations and communication buffers, so "
                             "the saving need not show in it).")  # fmt: skip
    assert saved["fsdp"].startswith(f"fsdp shards its parameters, gradients and optimizer state: at p = 2 each rank "
                                    f"holds {_mib(fsdp)} MiB against ddp's {_mib(ddp)} MiB (0.500×)")  # fmt: skip
    # the table: what each cell holds, by part, and against ddp
    rows = {(r[0], r[1]): dict(zip(sec.columns, r)) for r in sec.rows}
    row = rows["fsdp", "p=2, precision=fp32, grad_accum=1"]
    assert row["held [MiB]"] == _mib(fsdp) and row["optimizer state [MiB]"] == _mib(PARAM_BYTES)
    assert row["held vs ddp"] == "0.500×" and row["throughput vs ddp"].endswith("(slower)")
    assert rows["ddp", "p=2, precision=fp32, grad_accum=1"]["held vs ddp"] == "–"
    assert sec.figures[0] == "memory_held"
    # zero's shards are whole parameters: one large parameter keeps its rank's state far above 1/p
    runs = make_sharding_runs(noise=0.0)
    big = runs["strategy"] == "zero"
    runs.loc[big, "extra_optimizer_state_bytes"] = 0.92 * 2 * PARAM_BYTES
    runs.loc[big, "extra_held_bytes"] = 2 * PARAM_BYTES + 0.92 * 2 * PARAM_BYTES
    (zero,) = [f for f in _section("sharding", runs).findings if f.startswith("zero shards")]
    assert "(0.960×): " in zero and "(its optimizer state 0.920× ddp's rather than 1/2: ZeroRedundancyOptimizer" in zero
    assert "rather than" not in saved["fsdp"]  # fsdp's shards are even: 1/p


def test_sharding_compares_with_ddp_where_a_setting_only_ddp_reads_was_set():
    """The newcomer's grid of issue 58: bucket_mb 0.43 (the language-model preset's) held ddp and zero
    apart from fsdp's held default, and the section said no sharded strategy ran beside ddp."""
    from report_synth import make_sharding_runs

    raw = make_sharding_runs(noise=0.0)
    raw.loc[raw["strategy"].isin(["ddp", "zero"]), "bucket_mb"] = 0.43
    sec = _section("sharding", A.load_runs_frame(raw))
    assert not any("No sharded strategy" in f for f in sec.findings), sec.findings
    assert [f.split(" ")[0] for f in sec.findings if " shards " in f] == ["zero", "fsdp_grad_op", "fsdp"]
    rows = {(r[0], r[1]): dict(zip(sec.columns, r)) for r in sec.rows}
    assert rows["fsdp", "p=2, precision=fp32, grad_accum=1"]["held vs ddp"] == "0.500×"
    assert rows["fsdp", "p=2, precision=fp32, grad_accum=1"]["throughput vs ddp"].endswith("(slower)")


def test_sharding_states_the_time_per_precision_and_grad_accum_only_as_the_interval_allows():
    from report_synth import make_sharding_runs

    sec = _section("sharding", make_sharding_runs(noise=0.03, seed=3))
    costs = [f for f in sec.findings if f.startswith("What it costs in time")]
    assert [c.split(",")[0] for c in costs] == ["What it costs in time at precision=bf16"] * 2 + [
        "What it costs in time at precision=fp32"] * 2  # one per precision and grad_accum  # fmt: skip
    for text in costs:
        named = _verdict_matches_interval(text)
        assert [n for n, *_ in named] == ["zero", "fsdp_grad_op", "fsdp"]
        assert re.search(r"fsdp [\d.]+× \[[\d.]+, [\d.]+\] \(slower\)", text)  # 1.5x slower: every interval says so
    # a strategy as fast as ddp with wide noise: its interval holds 1, so no claim
    tie = _section("sharding", make_sharding_runs(slowdown={"fsdp": 1.0}, noise=0.2, precisions=("fp32",),
                                                  grad_accums=(1,), seed=1))  # fmt: skip
    (cost,) = [f for f in tie.findings if f.startswith("What it costs")]
    assert "fsdp " in cost and _verdict_matches_interval(cost)
    assert re.search(r"fsdp [\d.]+× \[[\d.]+, [\d.]+\] \(no detectable difference\)", cost), cost


def test_sharding_states_what_bf16_and_grad_accum_change():
    from report_synth import make_sharding_runs

    sec = _section("sharding", make_sharding_runs(noise=0.0, bf16_speedup=1.25))
    (bf16,) = [f for f in sec.findings if f.startswith("With precision=bf16 instead of fp32")]
    assert "throughput is higher in all 10 cells measured: 1.25× [1.25, 1.25]" in bf16
    assert "The memory held per rank does not change" in bf16
    (accum,) = [f for f in sec.findings if f.startswith("With grad_accum=4 instead of 1")]
    assert "no detectable difference in throughput (the interval holds 1) in all 10 cells measured" in accum
    slow = _section("sharding", make_sharding_runs(noise=0.0, bf16_speedup=0.5))
    (bf16,) = [f for f in slow.findings if f.startswith("With precision=bf16")]
    assert "throughput is lower in all 10 cells measured: 0.500× [0.500, 0.500]" in bf16


def test_sharding_states_what_compiling_changes():
    from report_synth import make_sharding_runs

    sec = _section("sharding", make_sharding_runs(noise=0.0, precisions=("fp32",), grad_accums=(1,), compiles=("none", "model")))
    (compiled,) = [f for f in sec.findings if f.startswith("With compile=model instead of none")]
    assert "throughput is higher in all 5 cells measured: 2.00× [2.00, 2.00]" in compiled
    assert "The memory held per rank does not change" in compiled
    costs = [f for f in sec.findings if f.startswith("What it costs in time")]
    assert len(costs) == 2 and all(_verdict_matches_interval(c) for c in costs)  # per compile setting, eager and compiled


def test_sharding_quotes_the_peak_per_compile_mode_never_across_them():
    """Issue 68, item 3: the sharding study's peak-RSS span ran over eager and compiled cells at once."""
    from report_synth import make_sharding_runs

    runs = make_sharding_runs(noise=0.0, precisions=("fp32",), grad_accums=(1,), compiles=("none", "model"))
    runs.loc[runs["compile"] == "model", "peak_rss_mb"] += 100  # dynamo and inductor in the process
    (zero,) = [f for f in _section("sharding", runs).findings if f.startswith("zero shards")]
    assert ("its peak RSS is 638 MiB against ddp's 638 MiB at compile=none, activation_checkpointing=none and 738 MiB "
            "against ddp's 738 MiB at compile=model, activation_checkpointing=none (medians over repeats") in zero  # fmt: skip
    assert "638–738" not in zero


def test_sharding_says_what_it_cannot_answer():
    from report_synth import make_sharding_runs

    runs = make_sharding_runs()
    without = runs.drop(columns=[c for c in runs if c.startswith("extra_") and c.endswith("_bytes")])
    sec = _section("sharding", without)
    assert len(sec.rows) == 20 and sec.findings[0].startswith("These runs did not count the memory each rank holds")
    assert not any(" shards " in f or f.startswith("What it costs") for f in sec.findings)
    no_ddp = _section("sharding", runs[runs["strategy"] != "ddp"])
    assert no_ddp.findings[0].startswith("No sharded strategy (zero, fsdp_grad_op and fsdp) ran beside ddp")
    one = _section("sharding", make_sharding_runs(repeats=1, precisions=("fp32",), grad_accums=(1,)))
    (cost,) = [f for f in one.findings if f.startswith("What it costs")]
    assert "(no interval)" in cost and "slower" not in cost and "faster" not in cost


# -- language-model ------------------------------------------------------------------------------


def _judged_as_the_interval_says(text):
    """Every 'R× [lo, hi] (word)' in `text` says what its interval says; returns the words."""
    found = re.findall(r"([\d.]+)× \[([\d.]+), ([\d.]+)\] \((faster|slower|higher|lower|no detectable difference)\)", text)
    for _, lo, hi, word in found:
        lo, hi = float(lo), float(hi)
        expected = ("faster", "higher") if lo > 1 else ("slower", "lower") if hi < 1 else ("no detectable difference",)
        assert word in expected, (word, lo, hi, text)
    return [w for *_, w in found]


def test_language_model_table_and_answer_in_tokens_per_s():
    from report_synth import make_token_runs

    runs = A.load_runs_frame(make_token_runs(seed=1))
    cells = A.cell_stats(runs)
    sec = _section("language-model", runs)
    assert sec.figures[0] == "throughput" and sec.title.startswith("Language model")
    assert sec.columns == ["strategy", "cell", "throughput [tokens/s]", "per rank [tokens/s]", "speedup", "efficiency [%]", "MFU [%]",
                           "HFU [%]", "comm [% of step]", "exposed comm [% of step]", "last-step train loss", "test loss"]  # fmt: skip
    assert len(sec.rows) == 8 and [r[0] for r in sec.rows[:4]] == ["single", "bucketed_allreduce", "ddp", "fsdp"]
    rows = {(r[0], r[1]): dict(zip(sec.columns, r)) for r in sec.rows}
    ddp = cells[(cells["strategy"] == "ddp") & (cells["seq_len"] == 128)].iloc[0]
    row = rows["ddp", "p=2, batch_size=64, seq_len=128"]
    assert row["throughput [tokens/s]"] == f"{num(ddp['tokens_per_s'])} [{num(ddp['tokens_per_s_ci_low'])}, " \
                                           f"{num(ddp['tokens_per_s_ci_high'])}]"  # fmt: skip
    assert row["MFU [%]"].startswith(num(100 * ddp["extra_mfu_measured"]) + " [")
    assert row["per rank [tokens/s]"] == (f"{num(ddp['tokens_per_s'] / 2)} [{num(ddp['tokens_per_s_ci_low'] / 2)}, "
                                          f"{num(ddp['tokens_per_s_ci_high'] / 2)}]")  # ddp at p = 2  # fmt: skip
    assert row["comm [% of step]"].startswith("15 [") and row["exposed comm [% of step]"].startswith("7.5 [")
    assert row["last-step train loss"].startswith("1.2") and row["test loss"] == "1.3"
    speed = A.speedup_table(runs).set_index(["strategy", "seq_len"])
    assert row["speedup"].startswith(num(speed.loc[("ddp", 128), "speedup"]) + " [")
    assert row["efficiency [%]"].startswith(num(100 * speed.loc[("ddp", 128), "efficiency"]) + " [")
    found = sec.findings
    # every sentence that quotes a throughput names its unit
    for f in found:
        if re.search(r"\d{4,}", f.replace("8,192", "")):
            assert "tokens/s" in f or "MFU" in f, f
    # the highest throughput at each seq_len, against ddp's as the interval allows
    for seq, batch in ((128, 64), (512, 16)):
        mine = cells[cells["seq_len"] == seq].sort_values("tokens_per_s", ascending=False).iloc[0]
        (fastest,) = [f for f in found if f.startswith(f"At seq_len={seq}, batch_size={batch} (8,192 tokens per step)")]
        assert f"the highest throughput is {mine['strategy']}'s at p = {mine['world_size']}: " \
               f"{num(mine['tokens_per_s'])} [" in fastest  # fmt: skip
        words = _judged_as_the_interval_says(fastest)
        assert re.search(r"fsdp \(p = 2\) [\d.]+× \[[\d.]+, [\d.]+\] \(slower\)", fastest), fastest  # 1.4x slower
        assert re.search(r"single \(p = 1\) [\d.]+× \[[\d.]+, [\d.]+\] \(slower\)", fastest), fastest
        assert len(words) == 3
    # longer sequences at the same tokens per step: 0.8x the tokens/s (lower), half the communication share
    (longer,) = [f for f in found if f.startswith("From seq_len=128 to 512")]
    assert longer.startswith("From seq_len=128 to 512 at the same 8,192 tokens per step (64 → 16 sequences)")
    assert _judged_as_the_interval_says(longer) == ["lower"] * 4
    assert re.search(r"ddp \(p = 2\): \d+ → \d+ tokens/s, 0\.[78]\d+× .*communication 15\.0 % \[[^]]*\]( \(\d+ % interval\))? → "
                     r"7\.50 %", longer), longer  # fmt: skip
    assert "where the time goes" in " ".join(found).lower()
    # MFU: the highest and the lowest cell, from cells.csv
    (mfu,) = [f for f in found if f.startswith("Model FLOP utilisation")]
    top = cells.sort_values("extra_mfu_measured").iloc[-1]
    assert f"highest for {top['strategy']} (p = {top['world_size']}, seq_len={top['seq_len']}, batch_size=" \
           f"{top['batch_size']}, compile=none, activation_checkpointing=none): " \
           f"{sig3(100 * top['extra_mfu_measured'])} %" in mfu  # fmt: skip (both modes named, held or not)
    assert found[-1].startswith("The loss fell in every cell: last-step train loss 1.20 (medians over repeats), test loss "
                                "1.30, from ln 256 = 5.55")  # fmt: skip


def test_language_model_states_what_compiling_changes_with_intervals():
    """Issue 53, part 7: compiled steps 2x faster, the same bytes, so communication takes a larger share of
    each step; the answer says so per strategy, and how each strategy stands against ddp eager and compiled."""
    from report_synth import make_token_runs

    runs = A.load_runs_frame(make_token_runs(seed=2, noise=0.0, compiled=(2.0, 1.6)))
    found = _section("language-model", runs).findings
    changed = [f for f in found if f.startswith("With compile=model instead of none")]
    assert [f.split(",")[0] for f in changed] == ["With compile=model instead of none at seq_len=128",
                                                  "With compile=model instead of none at seq_len=512"]
    for text in changed:
        assert _judged_as_the_interval_says(text.split(" Against ")[0]) == ["higher"] * 4  # single and the 3 at p = 2
        assert re.search(r"ddp \(p = 2\): \d+ → \d+ tokens/s, 2\.00× .*communication 15\.0 % .*→ 24\.0 %", changed[0]), text
        against = text.split(" Against ddp at the same settings (throughput ratio): ")[1]
        assert re.search(r"fsdp \(p = 2\) 0\.714× \[[\d.]+, [\d.]+\] \(slower\) eager, 0\.714× \[[\d.]+, [\d.]+\] "
                         r"\(slower\) compiled", against), against
        assert "single" not in against  # p = 1: not a data-parallel strategy against ddp
    # the longer-sequence sentence names the compile mode beside each strategy (each appears twice)
    (longer,) = [f for f in found if f.startswith("From seq_len=128 to 512")]
    assert "ddp (p = 2, compile=none): " in longer and "ddp (p = 2, compile=model): " in longer
    # a grid with one compile mode says nothing of it
    assert not [f for f in _section("language-model", A.load_runs_frame(make_token_runs(seed=2))).findings
                if f.startswith("With compile")]


def _lm_section(runs, first_loss=None):
    """The language-model section with a steps table whose every run starts at `first_loss`
    (None: no steps table, as `ddpbench report` without --steps)."""
    runs = A.load_runs_frame(runs)
    steps = None if first_loss is None else pd.DataFrame(
        [dict(run_dir=d, rank=0, step=k, loss=first_loss - k) for d in runs["run_dir"] for k in (0, 1)])  # fmt: skip
    return studies.section("language-model", runs, A.cell_stats(runs), A.speedup_table(runs), steps)


def test_a_loss_that_fell_from_its_models_start_is_not_called_not_learning():
    """Issue 68: a user's model whose loss fell from 64.99 to 18.91 in 8 steps (training health ok)
    read "the loss did not fall below ln 256 ... a model that does not learn; a lower lr may help".
    Against where the model started it fell: it learns, and ended above the uniform guess's loss."""
    from report_synth import make_token_runs

    runs = make_token_runs(seed=3, final_loss=18.91).assign(extra_training_health="ok")
    found = " ".join(_lm_section(runs, first_loss=64.99).findings)
    assert "does not learn" not in found and "lower lr" not in found
    assert "The loss fell in every cell, from 65.0 at the first step to last-step train loss 18.9 (medians over " \
           "repeats), test loss 19.0, and ended above ln 256 = 5.55, a uniform guess's loss over the vocabulary: the " \
           "model learns" in found  # fmt: skip
    # one cell of several that fell but stayed above the guess is named, with where it started
    one = runs.assign(train_loss_final=np.where(runs["strategy"] == "single", 18.91, 1.2))
    found = " ".join(_lm_section(one, first_loss=64.99).findings)
    assert "In 2 cell(s) the loss fell from where the model started but ended above ln 256 = 5.55, a uniform " \
           "guess's loss over the vocabulary: single (p=1, batch_size=16, seq_len=512): 65.0 → 18.9" in found  # fmt: skip
    assert "does not learn" not in found
    # without a steps table its start is not known: the words say so, and claim nothing
    unknown = " ".join(_lm_section(runs).findings)
    assert "does not learn" not in unknown and "whether the model learned is not known" in unknown
    # a diverged run says it did not learn, whatever the steps table holds
    diverged = runs.assign(extra_training_health=np.where(runs["strategy"] == "ddp", "diverged", "ok"))
    (loss,) = [f for f in _lm_section(diverged).findings if "did not fall" in f]
    assert "in 2 of 8 cells: ddp (p=2, batch_size=16, seq_len=512): 18.9" in loss and "lower lr may help" in loss


def test_language_model_states_the_hfu_beside_the_mfu_and_names_the_modes_of_every_cell():
    """Issue 68, item 3: HFU never reached the report, and the MFU sentence named the seq_len but not the compile
    mode of a cell of a grid that varies it."""
    from report_synth import make_token_runs

    runs = A.load_runs_frame(make_token_runs(seed=3, noise=0.0, compiled=(2.0, 1.6), checkpointed=(0.75, 0.6)))
    cells = A.cell_stats(runs)
    sec = _section("language-model", runs)
    i = sec.columns.index("MFU [%]")
    assert sec.columns[i + 1 : i + 3] == ["HFU [%]", "compile [s]"]
    rows = {(r[0], r[1]): dict(zip(sec.columns, r)) for r in sec.rows}
    full = rows["ddp", "p=2, batch_size=64, seq_len=128, compile=none, activation_checkpointing=full"]
    mine = cells[(cells["strategy"] == "ddp") & (cells["seq_len"] == 128) & (cells["compile"] == "none")
                 & (cells["activation_checkpointing"] == "full")].iloc[0]  # fmt: skip
    assert full["HFU [%]"].startswith(num(100 * mine["extra_hfu_measured"]) + " [") and full["compile [s]"] == "–"
    assert rows["ddp", "p=2, batch_size=64, seq_len=128, compile=model, activation_checkpointing=full"]["compile [s]"] \
        .startswith("31 [30, 32]")  # fmt: skip
    assert "HFU: the FLOPs the hardware did" in sec.note
    (mfu,) = [f for f in sec.findings if f.startswith("Model FLOP utilisation")]
    highest, lowest = mfu.split(", lowest for ")
    assert re.search(r"highest for single \(p = 1, seq_len=128, batch_size=64, compile=model, "
                     r"activation_checkpointing=none\): [\d.]+ % \[[\d.]+, [\d.]+\] \(75 % interval\), HFU ", highest), highest
    assert lowest.startswith("fsdp (p = 2, seq_len=512, batch_size=16, compile=none, activation_checkpointing=full): ")
    low = cells.loc[pd.to_numeric(cells["extra_mfu_measured"]).idxmin()]
    assert f"HFU {sig3(100 * low['extra_hfu_measured'])} %" in lowest  # 4/3 of its MFU: the recompute counted
    # a span over cells of both modes says so; a grid that holds a mode says which, first
    (loss,) = [f for f in sec.findings if f.startswith("The loss fell")]
    assert "cells at compile=none and model, activation_checkpointing=none and full" in loss
    one = _section("language-model", A.load_runs_frame(make_token_runs(seed=2, compiled=(2.0, 1.6))))
    assert one.findings[0] == "Every cell here ran at activation_checkpointing=none; compile is named where it varies."


def test_language_model_states_what_compiling_costs_and_what_checkpointing_saves():
    """Issue 68, item 3: the compile time (92.8 s against a 0.33 s step) and the steps it takes to pay off, and
    checkpointing's memory saved and throughput paid against its twin, with intervals, per mode."""
    from report_synth import make_token_runs

    runs = A.load_runs_frame(make_token_runs(seed=3, noise=0.03, compiled=(2.0, 1.6), checkpointed=(0.75, 0.6)))
    cells = A.cell_stats(runs)
    found = _section("language-model", runs).findings
    (compiled,) = [f for f in found if f.startswith("What compiling costs (compile=model against none")]
    key = ["strategy", "world_size", "seq_len", "activation_checkpointing"]
    c = cells.set_index([*key, "compile"])
    saved = c.loc[("ddp", 2, 128, "none", "none"), "step_time_median_s"] - c.loc[("ddp", 2, 128, "none", "model"),
                                                                                   "step_time_median_s"]  # fmt: skip
    item = re.search(r"ddp \(p = 2, seq_len=128, batch_size=64\), activation_checkpointing=none: compiling takes 31\.0 s "
                     r"\[30\.0, 32\.0\] \(75 % interval\), 12 graphs; a step takes [\d.]+ s against [\d.]+ s eager \(eager / "
                     r"compiled [\d.]+× \[[\d.]+, [\d.]+\]\), so it pays off after (\d+) steps", compiled)  # fmt: skip
    assert item and item[1] == sig3(31.0 / saved), compiled
    assert compiled.count("pays off after") == 16  # every compiled cell, each named with its checkpointing mode
    ckpt = [f for f in found if f.startswith("With activation_checkpointing=full instead of none")]
    assert [f.split(" (every")[0] for f in ckpt] == ["With activation_checkpointing=full instead of none at compile=none",
                                                     "With activation_checkpointing=full instead of none at compile=model"]
    for text in ckpt:
        assert text.count("MiB saved, 0.6") == 8 and text.count("its twin's (lower)") == 16  # peak and throughput each
        assert re.search(r"ddp \(p = 2, seq_len=128, batch_size=64\): peak RSS \d+ MiB \[\d+, \d+\] \(75 % interval\) "
                         r"against its twin's \d+ MiB", text), text  # fmt: skip
    # eager only, no checkpointing: neither sentence
    plain = _section("language-model", A.load_runs_frame(make_token_runs(seed=2))).findings
    assert not [f for f in plain if f.startswith(("What compiling costs", "With activation_checkpointing"))]


def test_language_model_says_what_it_cannot_answer():
    from report_synth import make_token_runs

    runs = make_token_runs(noise=0.2, longer=1.0, seed=2)
    # runs from before MFU was measured: no column, no claim
    old = runs.drop(columns=[c for c in runs if "mfu" in c or "flops" in c])
    sec = _section("language-model", old)
    assert "MFU [%]" not in sec.columns and all(len(r) == len(sec.columns) for r in sec.rows)
    assert any(f.startswith("MFU was not measured in these runs") for f in sec.findings)
    assert "MFU: not measured" in sec.note
    (longer,) = [f for f in sec.findings if f.startswith("From seq_len=128 to 512")]
    assert _judged_as_the_interval_says(longer)  # wide noise, the same tokens/s: each word as its interval says
    # a model that did not learn is named, from where it started (its first step's loss, steps.csv)
    stuck = runs.assign(train_loss_final=np.where(runs["strategy"] == "fsdp", 5.7, 1.2))
    (loss,) = [f for f in _lm_section(stuck, first_loss=5.55).findings if "did not fall" in f]
    assert loss.startswith("The loss did not fall from where the model started, or its training diverged, in 2 of 8 "
                           "cells: fsdp (p=2, batch_size=16, seq_len=512): 5.55 → 5.70")  # fmt: skip
    # a runs.csv from before train_loss_last10_mean: its train_loss_final is that mean, and is called so
    old = _section("language-model", runs.drop(columns=["train_loss_last10_mean"]))
    assert "train loss (mean of the last 10 steps)" in old.columns and "last-step" not in " ".join(old.findings)
    assert old.findings[-1].startswith("The loss fell in every cell: train loss (mean of the last 10 steps) 1.20")
    # no ddp to compare with; one repeat: no interval, so no verdict
    no_ddp = _section("language-model", runs[runs["strategy"] != "ddp"])
    assert all("no ddp cell at this setting" in f for f in no_ddp.findings if f.startswith("At seq_len="))
    one = _section("language-model", make_token_runs(repeats=1))
    text = " ".join(one.findings)
    assert "(no interval)" in text and not re.search(r"\((faster|slower|higher|lower)\)", text)
    # nothing measured (every run failed): no answer, and no crash
    (nothing,) = _section("language-model", A.load_runs_frame(runs.assign(status="failed"))).findings
    assert nothing.startswith("No cell of this study measured a throughput here")


def test_dataset_size_crossings_are_per_model_with_an_interval():
    """Issue 46, point 2: two models at 1 and 10 ms per sample, ddp at p = 2 halving the time per sample
    for 4 s more fixed cost per run: the crossings are 8,000 and 800 samples, not one pooled answer."""
    rows = []
    rng = np.random.default_rng(1)
    for model, per_sample in (("slow_net", 10e-3), ("fast_net", 1e-3)):
        for n in (500, 1000, 4000, 16000):
            for p, fixed, ps in ((1, 2.0, per_sample), (2, 6.0, per_sample / 2)):
                for rep in range(4):
                    step = 64 * ps * np.exp(rng.normal(0, 0.02))
                    rows.append(dict(strategy="single" if p == 1 else "ddp", world_size=p, nodes=1, dataset_size=n,
                                     model=model, repeat=rep, status="ok", reason="", global_batch=64, timed_steps=20,
                                     step_time_median_s=step, samples_per_s=64 / step, epoch_time_s=n * step / 64,
                                     fixed_cost_s=fixed * np.exp(rng.normal(0, 0.02)), epochs=1))  # fmt: skip
    sec = _section("dataset-size", pd.DataFrame(rows))
    answers = [f for f in sec.findings if "pays off above about" in f]
    assert len(answers) == 2, sec.findings
    fast = next(f for f in answers if "model=fast_net" in f)
    slow = next(f for f in answers if "model=slow_net" in f)
    n_fast = float(re.search(r"above about ([\d.,]+)", fast).group(1).replace(",", ""))
    n_slow = float(re.search(r"above about ([\d.,]+)", slow).group(1).replace(",", ""))
    assert n_fast == pytest.approx(8000, rel=0.1) and n_slow == pytest.approx(800, rel=0.1)
    for text, truth in ((fast, 8000), (slow, 800)):
        lo, hi = (float(x.replace(",", "")) for x in re.search(r"\[([\d.,]+), ([\d.,]+)\] \(95 % bootstrap over runs; within", text).groups())
        assert lo <= truth <= hi and hi / lo < 1.5  # covers it, and narrow at 2 % noise


def test_where_a_design_ran_the_sharding_study_reads_its_verdicts_and_labels_the_rest_descriptive():
    """issue 55: a pair the design asked about (fsdp against ddp at fp32, grad_accum 1) reads the
    design's verdict and interval in the study's sentences and table; every other pair keeps its
    own interval, labelled descriptive; the note says so."""
    from report_synth import make_sharding_runs

    runs = make_sharding_runs(noise=0.03, seed=3)
    asked = A.Comparison("", "", 1.02, 0.95, 1.09, 0.95, A.Verdict.EQUIVALENT, A.Source.DESIGN, 0.15)

    def rule(a, b):
        fp32 = str(a.get("precision")) == "fp32" and str(a.get("grad_accum")) == "1"
        return asked if fp32 and a["strategy"] == "fsdp" and b["strategy"] == "ddp" else None

    cells, speed = A.cell_stats(runs), A.speedup_table(runs)
    sec = studies.section("sharding", runs, cells, speed, design=Answers(rule))
    (fp32,) = [f for f in sec.findings if f.startswith("What it costs in time at precision=fp32, grad_accum=1")]
    assert "fsdp 1.02× [0.950, 1.09] (equivalent, the design's)" in fp32, fp32
    assert re.search(r"zero [\d.]+× \[[\d.]+, [\d.]+\] \([a-z ]+, descriptive\)", fp32), fp32
    assert "A sequential design ran" in sec.note
    assert any("(equivalent, the design's)" in cell for row in sec.rows for cell in row)
    plain = studies.section("sharding", runs, cells, speed)  # no design: as before, no labels
    assert "descriptive" not in " ".join(plain.findings) and "A sequential design ran" not in plain.note


def test_where_a_design_ran_the_language_model_twins_read_its_verdicts_and_label_the_rest_descriptive():
    """issue 55: fsdp against ddp (eager, seq_len 128) is a pair the design asked about: its verdict
    and interval; every other twin the study compares keeps its Welch interval, labelled descriptive."""
    from report_synth import make_token_runs

    runs = A.load_runs_frame(make_token_runs(seed=2, noise=0.0, compiled=(2.0, 1.6)))
    asked = A.Comparison("", "", 0.75, 0.7, 0.8, 0.95, A.Verdict.SLOWER, A.Source.DESIGN, 0.15)

    def rule(a, b):
        eager = str(a.get("compile")) == "none" and str(a.get("seq_len")) == "128"
        return asked if eager and a["strategy"] == "fsdp" and b["strategy"] == "ddp" else None

    cells, speed = A.cell_stats(runs), A.speedup_table(runs)
    found = studies.section("language-model", runs, cells, speed, design=Answers(rule)).findings
    (at_128,) = [f for f in found if f.startswith("With compile=model instead of none at seq_len=128")]
    assert "fsdp (p = 2) 0.750× [0.700, 0.800] (slower, the design's) eager" in at_128, at_128
    assert re.search(r"\(slower, descriptive\) compiled", at_128), at_128
    assert "(higher, descriptive)" in at_128
