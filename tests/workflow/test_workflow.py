"""The Snakemake workflow end to end on the tiny grid, in a temporary working directory.

Each test runs the repository's Snakefile with `--directory <tmp>`, so nothing is
written into the checkout's results/ (the workflow's own profiles/default applies); the tmp folder holds a copy of config.yaml, and
configs/tiny.yaml is merged over it exactly as `snakemake --configfile configs/tiny.yaml`
does from the repository root.
"""

import csv
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
RESULTS = "results/tiny"  # the tiny preset's own results folder
# the default target (every run, the tables, the report), stopping after the tables
TABLES = ["--until", "aggregate"]
# (world size, strategy) -> status: single only at 1 (excluded at 2); ddp at 1 is a
# cell the harness skips (it needs two ranks), which must still be a row.
EXPECTED_CELLS = {("1", "single"): "ok", ("1", "ddp"): "skipped", ("2", "ddp"): "ok"}


def snakemake(workdir, *args, configfile=TINY, check=True):
    """Run snakemake on the repository's Snakefile in `workdir`; returns the process."""
    cmd = [
        sys.executable, "-m", "snakemake",
        "--snakefile", str(ROOT / "Snakefile"),
        "--directory", str(workdir),
        *(["--configfile", str(configfile)] if configfile else []),
        "--cores", "2",
        *args,
    ]  # fmt: skip
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=env, timeout=600)
    if check and proc.returncode != 0:
        pytest.fail(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return proc


def read_runs(workdir):
    with open(workdir / RESULTS / "aggregate/runs.csv", newline="") as f:
        return list(csv.DictReader(f))


def summaries(workdir):
    return sorted((workdir / RESULTS / "runs").rglob("summary.json"))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The tiny grid, run once for the tests of this module (they only read or rerun)."""
    workdir = tmp_path_factory.mktemp("tiny")
    shutil.copy(ROOT / "config.yaml", workdir / "config.yaml")
    proc = snakemake(workdir, *TABLES)
    return workdir, proc


def test_tiny_grid_end_to_end(tiny_run):
    workdir, proc = tiny_run
    runs = read_runs(workdir)
    assert len(runs) == len(EXPECTED_CELLS)
    statuses = {(r["world_size"], r["strategy"]): r["status"] for r in runs}
    assert statuses == EXPECTED_CELLS, [(r["run_dir"], r["status"], r["reason"]) for r in runs]
    assert {r["model"] for r in runs} == {"mlp"} and {r["dataset"] for r in runs} == {"synthetic"}
    assert {r["repeat"] for r in runs} == {"0"}
    # every axis is readable in the run's path
    for r in runs:
        assert f"world_size~{r['world_size']}/strategy~{r['strategy']}/" in r["run_dir"]
    with open(workdir / RESULTS / "aggregate/steps.csv", newline="") as f:
        ranks = {(row["run_dir"], row["rank"]) for row in csv.DictReader(f)}
    assert len(ranks) == sum(int(ws) for (ws, _), status in EXPECTED_CELLS.items() if status == "ok")
    # one progress line per finished cell reaches the terminal
    progress = [line for line in proc.stdout.splitlines() if line.startswith(f"[ddpbench] {RESULTS}/runs/")]
    assert len(progress) == len(EXPECTED_CELLS), proc.stdout[-3000:]


def test_second_run_does_nothing(tiny_run):
    workdir, _ = tiny_run
    proc = snakemake(workdir, *TABLES, "--dry-run")
    out = proc.stdout + proc.stderr
    assert "Nothing to be done" in out or re.search(r"^total\s+0$", out, re.M), out[-3000:]
    assert not re.search(r"rule train:", out)


def test_adding_an_axis_value_plans_only_the_new_cells(tiny_run):
    workdir, _ = tiny_run
    config = write_config(workdir / "more", lambda c: c["grid"].update(batch_size=[16, 32]))
    proc = snakemake(workdir, *TABLES, "--dry-run", configfile=config)
    out = proc.stdout + proc.stderr
    planned = re.findall(rf"^\s*output: ({RESULTS}/runs/\S+)", out, re.M)
    assert len(planned) == len(EXPECTED_CELLS), out[-3000:]
    assert all("batch_size~32/" in path for path in planned)


def test_deleting_one_run_reruns_only_that_cell(tiny_run):
    workdir, _ = tiny_run
    runs = summaries(workdir)
    victim = next(p for p in runs if "world_size~2/strategy~ddp" in str(p))
    before = {p: p.stat().st_mtime_ns for p in runs if p != victim}
    shutil.rmtree(victim.parent)
    proc = snakemake(workdir, *TABLES)
    out = proc.stdout + proc.stderr
    trains = re.findall(r"^\s*(?:local)?rule train:", out, re.M)
    assert len(trains) == 1, out[-3000:]
    assert victim.exists()
    assert {p: p.stat().st_mtime_ns for p in before} == before
    assert len(read_runs(workdir)) == len(EXPECTED_CELLS)


def test_repeats_run_round_robin_so_each_cell_spans_the_job(tmp_path):
    """Repeat 0 of every cell, then repeat 1, ...: a cell's repeats are spread over the job, not
    run back to back in one minute whose machine state its interval would mistake for all."""

    def two_cells_three_repeats(c):
        c["grid"].update(strategy=["single"], world_size=[1], batch_size=[16, 32])
        c.update(repeats=3)

    config = write_config(tmp_path, two_cells_three_repeats)
    snakemake(tmp_path, *TABLES, configfile=config)
    done = (tmp_path / RESULTS / "logs" / "progress.log").read_text().splitlines()
    repeats = [int(re.search(r"/repeat~(\d+):", line).group(1)) for line in done]
    assert len(repeats) == 6 and repeats == sorted(repeats), done


def write_config(workdir, change):
    config = yaml.safe_load(TINY.read_text())
    change(config)
    workdir.mkdir(exist_ok=True)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def parse_in_process(workdir):
    """Load the workflow the way the CLI does, without a new interpreter per case;
    returns the error text (empty if it parsed)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    try:  # quiet is a set of Quietness (a bool breaks Snakemake's log filter on the plan's warnings)
        with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
            api.workflow(
                snakefile=ROOT / "Snakefile",
                workdir=workdir,
                resource_settings=ResourceSettings(cores=1),
                config_settings=ConfigSettings(),
            ).dag()
    except Exception as err:  # WorkflowError, possibly wrapping the schema's error
        parts, seen = [], err
        while seen is not None:
            parts.append(f"{seen!s} {getattr(seen, 'args', '')}")
            seen = seen.__cause__ or seen.__context__
        return "\n".join(parts)
    return ""


@pytest.mark.parametrize(
    "change,key",
    [
        (lambda c: c["grid"].update(batchsize=[8]), "batchsize"),
        (lambda c: c.update(repeats="three"), "repeats"),
        (lambda c: c["grid"].update(strategy=[]), "strategy"),
        (lambda c: c["grid"].update(model=["mlp", "alexnet"]), "model"),
        (lambda c: c["timing"].update(max_steps=-1), "max_steps"),
        (lambda c: c.update(exclude=[{"colour": "red"}]), "colour"),
        (lambda c: c.update(exclude=[{"model": "mlp"}]), "exclude"),
        (lambda c: c.update(baseline={"strategy": "no_such_strategy"}), "baseline.strategy"),
        (lambda c: c["timing"].update(max_rel_ci=0), "timing.max_rel_ci"),
        # auto fixes the per-rank batch: with strong scaling it would be weak scaling labelled speedup
        (lambda c: c["grid"].update(batch_size=[16, "auto"]), "'grid.batch_size + params.scaling'"),
        (lambda c: c["grid"].update(batch_size=["auto"], scaling=["weak", "strong"]), "'grid.batch_size + grid.scaling'"),
        (lambda c: c["params"].update(backend="nccl"), "'params.backend'"),
        (lambda c: c["grid"].update(backend=["gloo", "nccl"]), "'grid.backend + grid.device'"),
        # cells the harness would refuse at launch (params.check_cell), naming the keys and the cell
        (lambda c: c["grid"].update(dataset_size=[8]), "'grid.batch_size + grid.dataset_size': the cell batch_size=16"),
        (lambda c: (c["grid"].update(dataset_size=[24]), c["params"].update(scaling="weak")),
         "'grid.batch_size + grid.dataset_size': the cell batch_size=16, world_size=2, scaling=weak, dataset_size=24"),
        (lambda c: c["grid"].update(batch_size=[1]), "'grid.batch_size + grid.world_size'"),
        (lambda c: c["grid"].update(dataset=["mnist"], dataset_size=[70000]), "'grid.dataset + grid.dataset_size'"),
        (lambda c: c["grid"].update(strategy=["single", "pipeline"], model=["resnet18"]), "'grid.strategy + grid.model'"),
        (lambda c: c["grid"].update(strategy=["single", "pipeline"], world_size=[1, 8]),
         "'grid.strategy + grid.model + grid.world_size'"),
        (lambda c: c["grid"].update(strategy=["single", "pipeline"], batch_size=[18]),
         "'grid.batch_size + params.micro_batches'"),
        (lambda c: c.update(compare_to="no/such/baseline"), "'compare_to': no/such/baseline: no such file"),
        (lambda c: c.update(compare_to="."), "'compare_to': .: no aggregate/runs.csv"),
    ],
    ids=[
        "unknown-key", "wrong-type", "empty-axis", "bad-enum", "bad-timing", "bad-filter", "all-excluded",
        "bad-baseline", "bad-stability", "auto-strong", "auto-strong-axis", "nccl-on-cpu",
        "nccl-on-cpu-axis", "batch-over-dataset", "weak-batch-over-dataset", "batch-below-world",
        "real-dataset-too-small", "pipeline-non-sequential", "pipeline-stages-over-layers",
        "pipeline-micro-batches", "compare-to-missing", "compare-to-no-table",
    ],
)  # fmt: skip
def test_bad_config_fails_naming_the_key(tmp_path, change, key):
    write_config(tmp_path, change)
    error = parse_in_process(tmp_path)
    assert key in error, error
    assert not (tmp_path / "results").exists()


def test_bad_value_fails_on_the_command_line_and_runs_nothing(tmp_path):
    """A value only the harness knows is wrong (an unregistered strategy) stops the
    CLI before any job, naming the key; nothing is created under results/."""
    config = write_config(tmp_path, lambda c: c["grid"].update(strategy=["allreduce", "no_such_strategy"]))
    proc = snakemake(tmp_path, *TABLES, configfile=config, check=False)
    assert proc.returncode != 0
    assert "grid.strategy" in proc.stderr and "no_such_strategy" in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "results").exists()


def write_fake_mnist(root, train=64, test=16):
    """Tiny MNIST in its real on-disk format (idx files under MNIST/raw)."""
    import numpy as np

    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", train), ("t10k", test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = (np.arange(n) % 10).astype(np.uint8)
        header = np.array([0x803, n, 28, 28], dtype=">i4").tobytes()
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(header + images.tobytes())
        header = np.array([0x801, n], dtype=">i4").tobytes()
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(header + labels.tobytes())


def test_real_dataset_is_prepared_once_before_its_cells(tmp_path):
    """prepare_data runs before the cells on a real dataset (present files: no network)."""
    write_fake_mnist(tmp_path / "data")

    def mnist_grid(c):
        c["grid"].update(strategy=["single"], world_size=[1], dataset=["mnist"], dataset_size=[32])
        c["timing"].update(max_steps=2)
        c["params"].update(test_size=16)

    config = write_config(tmp_path, mnist_grid)
    proc = snakemake(tmp_path, *TABLES, configfile=config)
    out = proc.stdout + proc.stderr
    assert len(re.findall(r"^\s*(?:local)?rule prepare_data:", out, re.M)) == 1, out[-3000:]
    assert "mnist" in (tmp_path / RESULTS / "data/mnist.txt").read_text()
    (run,) = read_runs(tmp_path)
    assert (run["dataset"], run["status"]) == ("mnist", "ok"), run["reason"]


def test_auto_batch_with_strong_scaling_excluded_or_weak_plans(tmp_path):
    def auto_weak(c):
        c["grid"].update(batch_size=[16, "auto"], scaling=["weak", "strong"])
        c["exclude"].append({"batch_size": "auto", "scaling": "strong"})

    write_config(tmp_path, auto_weak)
    assert parse_in_process(tmp_path) == ""


def test_compare_to_reaches_the_report_rule(tmp_path):
    (tmp_path / "base" / "aggregate").mkdir(parents=True)
    (tmp_path / "base" / "aggregate" / "runs.csv").write_text("strategy,world_size\n")
    config = write_config(tmp_path, lambda c: c.update(compare_to="base"))
    proc = snakemake(tmp_path, "--dry-run", "--printshellcmds", configfile=config)
    (line,) = [x for x in proc.stdout.splitlines() if "ddpbench report" in x]
    assert line.rstrip().endswith("--compare-to base/aggregate/runs.csv"), line


def test_timing_keys_reach_the_launcher_but_not_max_rel_ci(tmp_path):
    config = write_config(tmp_path, lambda c: c["timing"].update(min_timed_steps=7, min_timed_s=0.5, max_rel_ci=0.1))
    proc = snakemake(tmp_path, *TABLES, "--dry-run", "--printshellcmds", configfile=config)
    commands = [line for line in proc.stdout.splitlines() if "ddpbench launch" in line]
    assert commands and all("--min-timed-steps 7 --min-timed-s 0.5" in c for c in commands), proc.stdout[-3000:]
    assert not any("rel-ci" in c or "--allow-oversubscribe" in c for c in commands)


def test_oversubscribed_cell_is_a_skipped_row_with_a_plan_time_warning(tmp_path):
    ranks = len(os.sched_getaffinity(0)) + 1  # one thread each: more than the cores

    def oversubscribed(c):
        c["grid"].update(world_size=[ranks], strategy=["allreduce"])
        c["params"].update(threads_per_rank=1)

    config = write_config(tmp_path, oversubscribed)
    proc = snakemake(tmp_path, *TABLES, configfile=config)
    assert "1 cell(s) will be skipped as oversubscribed on this machine" in proc.stderr, proc.stderr[-3000:]
    (run,) = read_runs(tmp_path)
    assert run["status"] == "skipped" and run["reason"].startswith(f"oversubscribed: {ranks} ranks x 1 thread = {ranks} >")
    assert not list((tmp_path / RESULTS / "runs").rglob("train.log"))  # no rank started


PRESETS = sorted((ROOT / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS, ids=[str(p.relative_to(ROOT / "configs")) for p in PRESETS])
def test_every_preset_plans(tmp_path, preset):
    """Each preset in configs/ (studies included) is a valid grid: the dry run plans it."""
    out = snakemake(tmp_path, "-n", "--quiet", "rules", configfile=preset).stdout
    assert "train" in out


def test_a_preset_is_not_told_of_config_yamls_excludes_it_did_not_write(tmp_path):
    """Issue 68: a preset merged over config.yaml inherits its `exclude` (lists are replaced whole,
    so one that writes none keeps config.yaml's): a grid of ddp and allreduce at p = 2 heard
    "exclude[0] matches no cell" of rules it never wrote. An unmatched exclude it writes is named."""
    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    preset = {"results": "results/mine", "repeats": 1, "grid": {"world_size": [2], "strategy": ["ddp", "allreduce"]}}
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(preset))
    out = snakemake(tmp_path, "-n", "--quiet", "rules", configfile=tmp_path / "mine.yaml")
    assert "matches no cell" not in out.stdout + out.stderr, out.stdout[-3000:]
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({**preset, "exclude": [{"strategy": "single"}]}))
    said = snakemake(tmp_path, "-n", "--quiet", "rules", configfile=tmp_path / "mine.yaml")
    said = said.stdout + said.stderr
    assert "exclude[0] matches no cell of the grid" in said and "exclude[1]" not in said, said[-3000:]


def test_dry_run_ends_with_the_plan(tmp_path):
    """`snakemake -n` prints the plan at include time, then the jobs; the plan's lines come
    again, together, as its last lines (plan.smk: repeat_plan_after_dry_run)."""
    lines = snakemake(tmp_path, "-n", "--quiet", "rules").stdout.rstrip("\n").splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith("ddpbench plan: ")]
    n = len(at) // 2
    assert n and len(at) == 2 * n, "\n".join(lines[-40:])
    assert lines[-n:] == [lines[i] for i in at[:n]], "\n".join(lines[-40:])  # the same lines, last
    assert any("Job stats" in line for line in lines[at[n - 1] : at[n]])  # the jobs in between


def test_interconnect_plans_link_cells_on_two_nodes_and_one_node_cells_once(tmp_path):
    out = snakemake(tmp_path, "-n", "-p", configfile=ROOT / "configs" / "studies" / "interconnect.yaml").stdout
    runs = set(re.findall(r"results/interconnect/runs/(\S+?)/repeat~\d+/summary\.json", out))
    linked = {r for r in runs if "link~" in r}
    assert linked and all("nodes~2" in r for r in linked)
    assert {re.search(r"link~(\w+)", r).group(1) for r in linked} == {"unshaped", "1gbit", "300mbit", "100mbit"}
    # A one-node cell reads no link: one run folder per strategy, not one per link.
    one_node = [r for r in runs if "nodes~" not in r]
    assert len(one_node) == 7 and not any("link~" in r for r in one_node)
    assert "--link 100mbit" in out and "--nnodes 2" in out
