"""The launcher end to end: a good cell, bad input, oversubscription (failures: tests/faults)."""

import csv
import json
import os
import subprocess
import sys
import time

import pytest

from ddpbench.core.run_output import METRIC_KEYS, STEP_COLUMNS
from ddpbench.core.params import CellParams

FLAGS = [
    "--synthetic-shape", "mnist", "--dataset-size", "64", "--test-size", "16", "--batch-size", "8",
    "--max-steps", "6", "--warmup-steps", "1",
]  # fmt: skip


def launch(out, *flags, env=None, timeout=300):
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", "2", "--out", str(out), *FLAGS, *flags]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **(env or {})))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert set(CellParams.names()) == set(summary["params"])
    assert summary["world_size"] == 2 and summary["env"]["backend"] == "gloo"
    return summary, proc.stdout, time.monotonic() - start


def test_ok_cell_weak_scaling_with_workers(tmp_path):
    out = tmp_path / "run"
    # Snakemake sets every thread-pool variable to the job's threads (all ranks together):
    # each rank must see its own share in all of them, not only in OMP_NUM_THREADS.
    pools = {"OMP_NUM_THREADS": "7", "MKL_NUM_THREADS": "7", "OPENBLAS_NUM_THREADS": "7"}
    summary, stdout, _ = launch(out, "--strategy", "ddp", "--scaling", "weak", "--num-workers", "1", env=pools)
    assert summary["status"] == "ok", summary["reason"]
    share = str(summary["env"]["threads_per_rank"])
    assert {k: summary["env"]["env_vars"][k] for k in pools} == dict.fromkeys(pools, share)
    assert stdout.strip() == f"[ddpbench] {out}: ok {summary['samples_per_s']:.1f} samples/s"
    assert summary["per_rank_batch"] == 8 and summary["global_batch"] == 16
    assert all(k in summary for k in METRIC_KEYS) and summary["schema"] == 1
    assert summary["timed_steps"] == 4 and summary["samples_per_s"] > 0
    assert 0 <= summary["train_acc_final"] <= 1 and summary["test_loss"] > 0
    assert summary["env"]["threads_per_rank"] == max(1, len(os.sched_getaffinity(0)) // 2)
    for r in range(2):
        rows = list(csv.DictReader(open(out / f"steps_rank{r}.csv")))
        assert len(rows) == 6 and tuple(rows[0]) == STEP_COLUMNS
        assert all(int(x["samples"]) == 8 for x in rows)
    assert not list(out.glob("*.tmp*"))


def test_every_mark_of_the_timeline_is_there_in_order_on_a_real_world_size_2_run(tmp_path):
    from ddpbench.core.run_output import TIMELINE_MARKS, TIMELINE_SPANS

    before = time.time()
    summary, _, outer_s = launch(tmp_path / "run", "--strategy", "ddp")
    after = time.time()
    assert summary["status"] == "ok", summary["reason"]
    marks = summary["timeline"]
    assert list(marks) == list(TIMELINE_MARKS)  # every mark, in the documented order
    times = [marks[name] for name in TIMELINE_MARKS]
    assert all(a <= b for a, b in zip(times, times[1:])), marks
    assert before <= times[0] and times[-1] <= after  # one clock: the launcher's and the ranks' marks
    wall = marks["launcher_exit"] - marks["launcher_start"]
    assert 0 < wall <= outer_s
    spans = summary["timeline_s"]
    assert list(spans) == list(TIMELINE_SPANS) and all(v >= 0 for v in spans.values())
    assert sum(spans.values()) == pytest.approx(wall)
    assert summary["timed_wall_s"] > 0 and 0 < summary["fixed_cost_s"] < wall
    assert summary["fixed_cost_s"] == pytest.approx(wall - summary["timed_wall_s"])


def test_cpu_ranks_are_forked_from_a_single_threaded_zygote(tmp_path):
    """A fork copies any lock another thread of the parent holds, locked, with nobody left to
    release it: a 4-rank cell hung for good in one rank's TCPStore client when its ranks were
    forked from torchrun's agent (two store threads and a keep-alive timer by then). The ranks
    are forked from a zygote started before anything is threaded, with torch imported (and
    torch._dynamo, which ddp's wrap imports: ddpbench.run.torchrun.zygote_preload)."""
    summary, _, _ = launch(tmp_path / "run", "--strategy", "ddp")
    assert summary["status"] == "ok", summary["reason"]
    assert summary["extra"]["forked_from_threads"] == 1
    assert summary["timeline_s"]["imports"] == 0  # forked with the harness imported: no imports of its own


PROBE_MODEL = """
import json, os, random
import numpy, torch
from torch import nn


class Probe(nn.Module):
    \"\"\"A linear model whose first forward on each rank writes where the rank sits and what its
    global random streams draw.\"\"\"

    def __init__(self, shape, classes):
        super().__init__()
        self.linear, self.drawn = nn.Linear(shape[0] * shape[1] * shape[2], classes), False

    def forward(self, x):
        if not self.drawn:
            self.drawn = True
            rank = os.environ["RANK"]
            draws = dict(numpy=numpy.random.random(), random=random.random(), torch=torch.rand(()).item())
            place = dict(pid=os.getpid(), sid=os.getsid(0))
            with open(os.path.join(os.environ["PROBE_DIR"], f"rank{rank}.json"), "w") as f:
                json.dump({**draws, **place}, f)
        return self.linear(x.flatten(1))


def probe(shape, classes, **kwargs):
    return Probe(shape, classes)
"""


def probe_ranks(tmp_path, name):
    """Launch a 2-rank ddp cell of the probe model; what each rank wrote."""
    (tmp_path / "probe_model.py").write_text(PROBE_MODEL)
    draws = tmp_path / name
    draws.mkdir()
    summary, _, _ = launch(
        tmp_path / name / "run", "--strategy", "ddp", "--model", "probe_model:probe", "--model-path", str(tmp_path),
        "--seed", "5", env={"PROBE_DIR": str(draws)},
    )  # fmt: skip
    assert summary["status"] == "ok", summary["reason"]
    return [json.loads((draws / f"rank{r}.json").read_text()) for r in range(2)]


def test_forked_ranks_sit_in_sessions_of_their_own_and_draw_their_own_seeded_numbers(tmp_path):
    """Issue 68: the ranks forked from the zygote stayed in the launcher's session, one share of a
    busy CPU for the whole cell where torchrun's ranks get one each (autogroup scheduling); and they
    inherited the zygote's NumPy and `random` state, so every rank drew the same numbers."""
    first, again = probe_ranks(tmp_path, "a"), probe_ranks(tmp_path, "b")
    for rank in first:
        assert rank["sid"] == rank["pid"] and rank["sid"] != os.getsid(0)  # a session each, as torchrun's
    for stream in ("numpy", "random", "torch"):
        assert first[0][stream] != first[1][stream], stream  # each rank its own stream ...
        assert [r[stream] for r in first] == [r[stream] for r in again], stream  # ... reproducible from the seed


AGENT_PROBE = """
import runpy, sys
sys.argv = ["ddpbench.run.torchrun", *sys.argv[2:]]
try:
    runpy.run_module("ddpbench.run.torchrun", run_name="__main__")
finally:
    open(PROBE, "w").write(str("torch" in sys.modules))
"""


def test_a_cpu_cells_torchrun_agent_is_forked_too_so_the_cell_imports_torch_once(tmp_path):
    """torchrun's agent imported torch in its own process (2 CPU s of a 4-5.5 s cell) beside the
    zygote's import: it is forked from the zygote now, and the process the launcher starts and
    waits for never imports torch. Its exit code is the agent's: 0 here, a rank's failure in
    tests/faults."""
    probe, out = tmp_path / "probe.txt", tmp_path / "run"
    cmd = [
        sys.executable, "-c", AGENT_PROBE.replace("PROBE", repr(str(probe))), "x", "--standalone",
        "--nproc-per-node", "2", "--max-restarts", "0", "--start-method", "fork",
        "-m", "ddpbench.run.train", "--out", str(out), "--strategy", "allreduce", *FLAGS,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert probe.read_text() == "False"  # this process: no torch
    summary = json.loads((out / "summary.json").read_text())  # rank 0's own, without the launcher
    assert summary["status"] == "ok" and summary["extra"]["forked_from_threads"] == 1


def test_the_zygote_is_started_only_for_forked_harness_ranks():
    from ddpbench.run import torchrun

    assert torchrun.forks_ranks(["--standalone", "--start-method", "fork", "-m", "ddpbench.run.train", "--out", "x"])
    assert not torchrun.forks_ranks(["--standalone", "-m", "ddpbench.run.train", "--out", "x"])  # CUDA cells: spawn
    assert not torchrun.forks_ranks(["--start-method", "fork", "-m", "other.module"])
    assert not torchrun.forks_ranks(["--start-method"])


def test_a_single_node_agent_skips_only_the_first_rounds_random_skew(monkeypatch):
    """torch elastic's random 0-0.3 s before a node's first rendezvous spreads many nodes; a
    single-node cell's agent skips that one delay and keeps every other (torchrun.skip_join_skew)."""
    import inspect

    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    from ddpbench.run import torchrun

    source = inspect.getsource(dynamic_rendezvous.DynamicRendezvousHandler.next_rendezvous)
    assert f"_delay(seconds={torchrun.FIRST_ROUND_SKEW!r})" in source  # the delay skipped is still torch's
    waited = []
    monkeypatch.setattr(dynamic_rendezvous, "_delay", waited.append)
    torchrun.skip_join_skew()
    dynamic_rendezvous._delay(torchrun.FIRST_ROUND_SKEW)
    dynamic_rendezvous._delay(1)
    dynamic_rendezvous._delay((0, 0.5))
    assert waited == [1, (0, 0.5)]


def test_the_zygote_imports_torch_dynamo_only_for_cells_that_import_it_anyway():
    from ddpbench.run import torchrun
    from ddpbench.strategies import names, strategy_traits

    head = ["--standalone", "--start-method", "fork", "-m", "ddpbench.run.train", "--out", "x"]
    for name in names():
        preload = torchrun.zygote_preload([*head, "--strategy", name, "--optimizer", "sgd"])
        assert preload[:2] == [torchrun.FORKED_MODULE, torchrun.ENTRY_MODULE]
        assert ("torch._dynamo" in preload) == strategy_traits(name).imports_dynamo, name
    assert "torch._dynamo" in torchrun.zygote_preload([*head, "--strategy", "allreduce", "--optimizer", "adamw"])
    assert "torch._dynamo" in torchrun.zygote_preload(head)  # the default strategy, ddp
    assert "torch._dynamo" not in torchrun.zygote_preload(["-m", "ddpbench.run.train", "--strategy", "ring_allreduce"])
    vgg = torchrun.zygote_preload(["-m", "ddpbench.run.train", "--strategy", "allreduce", "--model", "vgg11"])
    assert vgg[2:] == ["torchvision.models"]  # which imports torch._dynamo
    assert "torch._dynamo" in torchrun.zygote_preload([*head, "--strategy", "allreduce", "--compile", "model"])
    # the cell is read typed, as the rank reads it (issue 70, item 2): its values, or none at all
    cell = torchrun.cell_of([*head, "--strategy", "zero", "--batch-size", "auto", "--scaling", "weak", "--memory-format", "channels_last"])
    assert (cell.strategy, cell.batch_size, cell.memory_format, cell.model) == ("zero", "auto", "channels_last", "mlp")
    assert torchrun.cell_of([*head, "--strategy", "nope"]) is None
    assert torchrun.zygote_preload([*head, "--strategy", "nope"]) == [torchrun.FORKED_MODULE, torchrun.ENTRY_MODULE]


# Loaded by every Python process of a launch (PYTHONPATH): each rank records at exit
# whether torch._dynamo was imported. A forked rank (CPU cells) leaves through
# os._exit, which skips atexit: the probe wraps it.
DYNAMO_PROBE = """
import atexit, json, os, sys

def _report():
    if "RANK" in os.environ:
        path = os.path.join(os.environ["DYNAMO_PROBE"], "rank" + os.environ["RANK"] + ".json")
        with open(path, "w") as f:
            json.dump({"dynamo": "torch._dynamo" in sys.modules, "torch": "torch" in sys.modules}, f)

_exit = os._exit

def _exit_reporting(code):
    _report()
    _exit(code)

atexit.register(_report)
os._exit = _exit_reporting
"""


def test_a_real_cell_never_imports_torch_dynamo(tmp_path):
    """Importing torch._dynamo costs each rank about 1.2 s (more under load) and a slower
    exit (issue 19), and no cell compiles anything: torch.optim.Optimizer's methods import
    it, so the strategies step with strategies.base.SGD. A regression fails here. (The
    DistributedDataParallel strategies - ddp, ddp_fp16, powersgd, zero - import it in
    DDP's own constructor, pipeline in torch.distributed.pipelining's import: torch's own
    code is what they measure.) MFU's FLOP count runs the model under a Python dispatch mode,
    which imports it in rank 0: once per host, code and model (run.flops.cached_count), so
    the probe watches the second run of the cell, which reads the count."""
    host = {"DDPBENCH_HOST_PEAKS": str(tmp_path / "host")}  # a fresh host copy: the first run counts
    first, _, _ = launch(tmp_path / "run1", "--strategy", "allreduce", env=host)
    assert first["status"] == "ok" and first["env"]["flop_count"]["cached"] is False, first["reason"]
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(DYNAMO_PROBE)
    path = os.pathsep.join(filter(None, [str(probe), os.environ.get("PYTHONPATH")]))
    summary, _, _ = launch(tmp_path / "run", "--strategy", "allreduce", env={"PYTHONPATH": path, "DYNAMO_PROBE": str(probe), **host})
    assert summary["status"] == "ok", summary["reason"]
    assert summary["env"]["flop_count"]["cached"] is True
    assert summary["extra"]["train_flops_per_sample"] == first["extra"]["train_flops_per_sample"] > 0
    reports = {p.name: json.loads(p.read_text()) for p in probe.glob("rank*.json")}
    assert set(reports) == {"rank0.json", "rank1.json"}
    assert all(r["torch"] for r in reports.values())  # the probe saw the ranks' imports
    assert not any(r["dynamo"] for r in reports.values()), reports


def test_bad_value_exits_2_before_anything_starts(tmp_path):
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--out", str(tmp_path / "x"), "--model", "alexnet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "'model'" in proc.stderr and "mlp" in proc.stderr
    assert not (tmp_path / "x").exists()


# 3 ranks whose threads exceed the usable cores on any machine (3 x 1 > 2 here).
RANKS = 3
OVER_THREADS = len(os.sched_getaffinity(0)) // RANKS + 1
TINY = [
    "--model", "mlp", "--dataset-size", "64", "--batch-size", "16", "--test-size", "0", "--max-steps", "3",
    "--warmup-steps", "1", "--min-timed-steps", "1", "--min-timed-s", "0",
    "--strategy", "allreduce", "--threads-per-rank", str(OVER_THREADS),
]  # fmt: skip


def launch_oversubscribed(out, *flags, timeout=300):
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", str(RANKS), "--out", str(out), *TINY, *flags]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((out / "summary.json").read_text()), proc.stdout, time.monotonic() - start


def test_oversubscribed_cell_is_skipped_before_any_rank_starts(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text('{"status": "ok"}')  # an earlier attempt's must not survive
    summary, stdout, elapsed = launch_oversubscribed(out)
    cores = len(os.sched_getaffinity(0))
    assert summary["status"] == "skipped"
    assert summary["reason"] == (
        f"oversubscribed: {RANKS} ranks x {OVER_THREADS} thread{'s' if OVER_THREADS > 1 else ''} = "
        f"{RANKS * OVER_THREADS} > {cores} usable cores (set allow_oversubscribe: true to run it anyway)"
    )
    assert summary["world_size"] == RANKS and summary["env"]["threads_per_rank"] == OVER_THREADS
    assert set(CellParams.names()) == set(summary["params"])
    assert not (out / "train.log").exists() and not list(out.glob("steps_rank*.csv"))  # torchrun never started
    assert stdout.strip() == f"[ddpbench] {out}: skipped - samples/s ({summary['reason']})"
    assert elapsed < 60


def no_gpu_here() -> bool:
    from ddpbench.core import sysinfo

    return sysinfo.no_gpu_here()


@pytest.mark.parametrize("flags, reason", [
    (["--strategy", "ddp"], "strategy ddp needs a world size >= 2, got 1"),
    pytest.param(["--strategy", "single", "--device", "cuda"], "device cuda requested but CUDA is not available here",
                 marks=pytest.mark.skipif(not no_gpu_here(), reason="a GPU device node exists here")),
])  # fmt: skip
def test_a_cell_the_ranks_would_refuse_is_skipped_without_torchrun(tmp_path, flags, reason):
    """ddp at one rank, a CUDA cell on a machine without a GPU device node: the launcher writes
    the skipped summary the ranks would write (the same reason, the whole summary), in a
    fraction of a second, and starts no torchrun."""
    import torch

    from ddpbench.run import train
    from ddpbench.core.run_output import METRIC_KEYS

    out = tmp_path / "run"
    import argparse

    flags = [*FLAGS, *flags]
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", "1", "--out", str(out), *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    by_ranks = tmp_path / "ranks"
    _, params = CellParams.parse_args(argparse.ArgumentParser(), flags)
    assert train.run(params, by_ranks) == 0  # what the ranks write (they still check)
    theirs = json.loads((by_ranks / "summary.json").read_text())
    assert summary["status"] == theirs["status"] == "skipped"
    assert summary["reason"] == theirs["reason"] and summary["reason"].startswith(reason)
    assert summary["env"]["torch"] == theirs["env"]["torch"] == torch.__version__  # read without importing it
    assert set(summary) == set(theirs) and all(k in summary for k in METRIC_KEYS)
    assert summary["params"] == theirs["params"] and summary["world_size"] == theirs["world_size"] == 1
    assert summary["env"]["threads_per_rank"] == theirs["env"]["threads_per_rank"]
    assert not (out / "train.log").exists() and "torchrun_started" not in summary["timeline"]  # never started
    # The launcher's own marks only: no torchrun, no rank (a count of events, not a timing, which
    # a busy machine would make fail; benchmarks/launch_floor.py measures the seconds saved).
    assert set(summary["timeline"]) == {"launcher_start", "launcher_exit"}, summary["timeline"]
    assert proc.stdout.strip() == f"[ddpbench] {out}: skipped - samples/s ({summary['reason']})"


def test_oversubscribed_cell_runs_when_allowed(tmp_path):
    summary, stdout, _ = launch_oversubscribed(tmp_path / "run", "--allow-oversubscribe")
    assert summary["status"] == "ok", summary["reason"]
    assert summary["world_size"] == RANKS and summary["timed_steps"] >= 1
    if "oversubscribed" in summary["extra"]:  # the ranks' own check, when they record it
        assert summary["extra"]["oversubscribed"] is True
    assert stdout.startswith(f"[ddpbench] {tmp_path / 'run'}: ok ")


def test_summary_json_appears_once_complete_and_an_interrupted_finish_leaves_none(tmp_path):
    """Rank 0's summary waits under summary.ranks.json until the launcher has completed it (its
    timeline) and published it as summary.json in one write: a reader never sees a summary.json
    that is about to change (a stopped workflow's rerun keeps the runs finished before). Stopped
    between the two (Ctrl-C), the launcher leaves neither: the run is redone."""
    from ddpbench.core.run_output import RANKS_SUMMARY

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", "2", "--out", str(out), *FLAGS,
           "--strategy", "ddp"]  # fmt: skip
    proc = subprocess.Popen(cmd, env={**os.environ, "DDPBENCH_INJECT": "pause:launcher:finish"}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (out / "paused_launcher_finish").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (out / "paused_launcher_finish").exists(), proc.communicate(timeout=30)[0]
        assert json.loads((out / RANKS_SUMMARY).read_text())["status"] == "ok"  # measured, ...
        assert not (out / "summary.json").exists()  # ... not yet published
        proc.send_signal(2)  # Ctrl-C
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert not (out / "summary.json").exists() and not (out / RANKS_SUMMARY).exists()
    summary, _, _ = launch(out, "--strategy", "ddp")  # the rerun publishes it, with the launcher's marks
    assert summary["status"] == "ok" and summary["timeline"]["launcher_exit"] and not (out / RANKS_SUMMARY).exists()


def test_a_fault_variable_without_the_opt_in_is_refused_before_any_work(tmp_path):
    """Issue 54: DDPBENCH_INJECT (or DDPBENCH_FILL) worked in production runs. Without
    DDPBENCH_FAULTS=1 the launcher and the workflow refuse to start, naming it; with it, the run
    records both (env.env_vars)."""
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "DDPBENCH_FAULTS"}
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", "2", "--out", str(out), *FLAGS]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**env, "DDPBENCH_INJECT": "slow:1:1"})
    assert proc.returncode == 2 and "DDPBENCH_INJECT is set" in proc.stderr and "DDPBENCH_FAULTS=1" in proc.stderr
    assert not out.exists()
    summary, _, _ = launch(out, env={"DDPBENCH_INJECT": "slow:1:1", "DDPBENCH_FAULTS": "1"})
    assert summary["status"] == "ok"
    assert {k: summary["env"]["env_vars"].get(k) for k in ("DDPBENCH_INJECT", "DDPBENCH_FAULTS")} == {
        "DDPBENCH_INJECT": "slow:1:1", "DDPBENCH_FAULTS": "1"}
