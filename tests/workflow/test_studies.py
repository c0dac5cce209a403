"""The study presets of configs/studies/ (docs/studies.md) planned offline: with
`--config dataset=synthetic` every cell on a real dataset trains on synthetic data of that
dataset's shape, and no data-preparation job is planned (dry runs, seconds each;
test_workflow.test_every_preset_plans dry-runs each preset as written). The studies with a
report section also run as miniatures end to end (~30 s each) and must answer in it."""

import json
import re

import pytest

from test_workflow import ROOT, snakemake

STUDIES = ROOT / "configs" / "studies"
OFFLINE = ["--config", "dataset=synthetic"]
# study -> the real datasets its grid trains on, whose shapes the synthetic stand-ins take
SHAPES = {
    "accelerators": {"cifar10"},
    "sync-dp": {"cifar10"},
    "cores-and-gpus": {"imagenette"},
    "dataset-size": {"mnist"},
    "sync-strategies": {"cifar10"},
}


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """`plan(study, *args)`: `snakemake -n -p` of a study, its train commands and the whole output.
    A dry run writes nothing the next one reads, so each (study, args) is planned once per module
    and read by every test that asks (a new interpreter and the study's plan: seconds each)."""
    planned = {}

    def plan_once(study, *args):
        if (study, args) not in planned:
            workdir = tmp_path_factory.mktemp(f"plan-{study}")
            proc = snakemake(workdir, "-n", "-p", *args, configfile=STUDIES / f"{study}.yaml")
            commands = [line for line in proc.stdout.splitlines() if "ddpbench launch" in line]
            planned[study, args] = commands, proc.stdout + proc.stderr
        return planned[study, args]

    return plan_once


@pytest.mark.parametrize("study", sorted(SHAPES))
def test_study_plans_offline_on_synthetic_data_of_the_real_shape(plan, study):
    commands, out = plan(study, *OFFLINE)
    assert commands, out[-3000:]
    for command in commands:
        assert "--dataset synthetic " in command, command
        assert re.search(r"--out '?results/[^ ]*/dataset~synthetic/", command), command
    shapes = {re.search(r"--synthetic-shape (\w+)", c).group(1) for c in commands}
    assert shapes == SHAPES[study]
    assert "prepare_data" not in out and "ddpbench data" not in out


@pytest.mark.parametrize("study", sorted(SHAPES))
def test_study_as_written_trains_on_the_real_dataset(plan, study):
    """The same preset online: the real dataset, prepared once before its cells."""
    commands, out = plan(study)
    datasets = {re.search(r"--dataset (\w+)", c).group(1) for c in commands}
    assert datasets == SHAPES[study]
    assert len(re.findall(r"^rule prepare_data:", out, re.M)) == len(SHAPES[study]), out[-3000:]


def test_offline_keeps_the_grid_it_replaces(plan):
    """Same runs, same exclusions: only the dataset of each cell changes."""
    online, _ = plan("cores-and-gpus")
    offline, _ = plan("cores-and-gpus", *OFFLINE)
    assert len(online) == len(offline) == 160  # 16 cells x 10 repeats

    def without_data(command):
        command = re.sub(r"--dataset \w+|--synthetic-shape \w+", "", command)
        return re.sub(r"(dataset|synthetic_shape)~\w+/", "", command)

    assert sorted(map(without_data, online)) == sorted(map(without_data, offline))


def test_sync_strategies_profiles_and_runs_two_nodes(plan):
    commands, _ = plan("sync-strategies", *OFFLINE)
    assert commands and all("--profile-steps 5" in c for c in commands)
    assert any("--nnodes 2" in c and "--link unshaped" in c for c in commands)


def compiled(command: str) -> str:
    """A train command's compile mode (the flag is left out at its default, none)."""
    found = re.search(r"--compile (\S+)", command)
    return found.group(1) if found else "none"


def test_sharding_plans_its_grid_offline_as_written(plan):
    """sharding trains on synthetic data already (no real dataset to fetch): single at p = 1 and the
    four strategies at p = 2, at fp32 and bf16 x grad_accum 1 and 4, AdamW, and compiled at fp32 without
    accumulation; its report answers in its section."""
    commands, out = plan("sharding")
    assert len(commands) == 75, out[-3000:]  # 25 cells x 3 repeats
    assert "prepare_data" not in out and all("--dataset synthetic --synthetic-shape cifar10" in c for c in commands)
    assert all("--optimizer adamw" in c and "--lr 0.001" in c for c in commands)
    cells = {tuple(re.search(rf"--{k} (\S+)", c).group(1) for k in ("strategy", "precision", "grad-accum", "nproc-per-node"))
             + (compiled(c),) for c in commands}  # fmt: skip
    assert len(cells) == 25 and {c[0] for c in cells} == {"single", "ddp", "zero", "fsdp_grad_op", "fsdp"}
    assert all((c[3] == "1") == (c[0] == "single") for c in cells)
    assert {c[1:3] for c in cells if c[4] == "model"} == {("fp32", "1")} and sum(c[4] == "model" for c in cells) == 5
    (report,) = [line for line in out.splitlines() if "ddpbench report" in line]
    assert "--study sharding" in report


def test_language_model_plans_its_grid_as_written(plan):
    """language-model trains on synthetic token sequences already (nothing to fetch): gpt_tiny, single at
    p = 1 and ddp, fsdp, bucketed_allreduce at p = 2, at seq_len 128 x 64 sequences and 512 x 16 (8,192
    tokens per step each); its report answers in its section."""
    commands, out = plan("language-model")
    assert len(commands) == 48, out[-3000:]  # 16 cells x 3 repeats: 8, eager and compiled
    assert "prepare_data" not in out and "ddpbench data" not in out
    assert all("--dataset synthetic_tokens " in c and "--model gpt_tiny " in c and "--vocab-size 256 " in c
               for c in commands)  # fmt: skip
    cells = {tuple(re.search(rf"--{k} (\S+)", c).group(1) for k in ("strategy", "nproc-per-node", "seq-len", "batch-size"))
             + (compiled(c),) for c in commands}  # fmt: skip
    assert len(cells) == 16 and {c[0] for c in cells} == {"single", "ddp", "fsdp", "bucketed_allreduce"}
    assert {c[4] for c in cells} == {"none", "model"}
    assert all((c[1] == "1") == (c[0] == "single") for c in cells)
    assert {(c[2], c[3]) for c in cells} == {("128", "64"), ("512", "16")}  # the same tokens per step
    (report,) = [line for line in out.splitlines() if "ddpbench report" in line]
    assert "--study language-model" in report
    # its bucket_mb (for ddp's overlap) is one fsdp and single do not read: said, and twins kept (issue 58)
    assert "params.bucket_mb 0.43 is read by bucketed_allreduce, ddp only: fsdp, single run at the default bucket_mb 25" in out


def test_bad_dataset_override_fails_naming_the_key(tmp_path):
    proc = snakemake(tmp_path, "-n", "--config", "dataset=foo", configfile=STUDIES / "sync-dp.yaml", check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr  # Snakemake prints the parse error on stdout
    assert "invalid config at 'dataset'" in out and "'foo'" in out, out[-3000:]
    assert not (tmp_path / "results").exists()


def test_an_unknown_study_fails_naming_the_key_and_the_studies(tmp_path):
    """The schema takes any word for `study` (a new study module changes no schema); the plan
    refuses one with no report section in one line, before any job."""
    proc = snakemake(tmp_path, "-n", "--config", "study=sync-dpp", configfile=STUDIES / "sync-dp.yaml", check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "invalid config at 'study': unknown study 'sync-dpp'" in out and "sync-dp, sync-strategies" in out, out[-3000:]
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("study", sorted(SHAPES))
def test_a_study_with_a_report_section_passes_its_name_to_the_report(plan, study):
    _, out = plan(study, *OFFLINE)
    (report,) = [line for line in out.splitlines() if "ddpbench report" in line]
    assert f"--study {study}" in report


def test_the_config_knows_the_studies_that_have_a_report_section():
    from ddpbench.plan import config_schema
    from ddpbench.report import studies

    assert config_schema.STUDIES == tuple(sorted(studies.STUDIES))


# A study's miniature: its grid (models, strategies, the axes it asks about) on tiny synthetic
# data of the real shape, a few steps, one repeat, world sizes that fit 2 cores; end to end.
MINIATURE = [
    "--config", "dataset=synthetic", "repeats=1", "allow_oversubscribe=false", "results=results/miniature",
    "report_pdf=false",  # the HTML report is the one read; report.tex's PDF has its own tests
    'grid={"world_size": [1, 2], "dataset_size": [256, 512]}',
    'timing={"warmup_steps": 1, "min_timed_steps": 2, "min_timed_s": 0.0, "max_steps": 4, "epochs": 1}',
    'params={"test_size": 32}',  # the held-out set evaluated once a run: enough for its loss and accuracy
]  # fmt: skip


@pytest.mark.parametrize("study, figures, answer, extra", [
    # the four strategies at p = 2 and single, one dataset size (5 runs)
    ("sync-dp", ["phases.svg", "speedup.svg"], "the share of each step spent communicating",
     ['grid={"world_size": [1, 2], "dataset_size": [256]}']),
    ("dataset-size", ["dataset_size.svg", "fixed_cost.svg"], "p = 2", []),
    # simple_cnn in DenseNet-121's place (38 s -> 10 s here; densenet121's training step is
    # tests/unit/test_models.py's), 32 px, batch 32 (the CPU part's), one dataset size; the CUDA cells skip
    ("cores-and-gpus", ["phases.svg", "speedup.svg", "throughput.svg"], "On cpu, the number of processes with the highest throughput",
     ['grid={"world_size": [1, 2], "dataset_size": [256], "batch_size": [32], "image_size": [32], "model": ["simple_cnn"]}']),
    # simple_cnn in VGG-11's place (31 s -> 19 s here; vgg11's training step is tests/unit/test_models.py's),
    # a small batch, one node, one dataset size; 2 profiled steps
    ("sync-strategies", ["profile.svg", "rank_skew.svg"], "The fastest strategy here is",
     ['grid={"world_size": [1, 2], "nodes": [1], "dataset_size": [256], "batch_size": [32], "model": ["simple_cnn"]}',
      'timing={"warmup_steps": 1, "min_timed_steps": 2, "min_timed_s": 0.0, "max_steps": 4, "epochs": 1, "profile_steps": 2}']),
    # fp32, no accumulation: single and the four strategies at p = 2 (5 runs)
    ("sharding", ["memory_held.svg", "strategy_bars.svg"], "fsdp shards its parameters, gradients and optimizer state",
     ['grid={"world_size": [1, 2], "dataset_size": [256], "precision": ["fp32"], "grad_accum": [1], "compile": ["none"]}']),
    # the simple CNN: batch 32, 128 and auto x 0 and 2 DataLoader workers, the strategies at 2; two epochs
    # gpt_tiny: single and ddp at sequence length 128, eager and compiled (4 runs; the longer
    # sequences' sentence is the section's unit test's)
    ("language-model", ["throughput.svg", "speedup.svg"], "With compile=model instead of none, the throughput per strategy",
     ['grid={"world_size": [1, 2], "dataset_size": [256], "strategy": ["single", "ddp"], "seq_len": [128], "batch_size": [64]}']),
    ("accelerators", ["epoch_throughput.svg", "strategy_bars.svg", "memory_vs_batch.svg"],
     "the batch × DataLoader-workers sweep peaks at",
     ['grid={"world_size": [1, 2], "dataset_size": [256], "model": ["simple_cnn"], "batch_size": [32, 128, "auto"]}',
      'timing={"warmup_steps": 1, "min_timed_steps": 2, "min_timed_s": 0.0, "max_steps": 4, "epochs": 2}']),
])  # fmt: skip
def test_a_studys_miniature_runs_end_to_end_and_answers_in_its_section(tmp_path, study, figures, answer, extra):
    snakemake(tmp_path, *MINIATURE, *extra, configfile=STUDIES / f"{study}.yaml")
    out = tmp_path / "results" / "miniature"
    runs = list((out / "runs").rglob("summary.json"))
    assert runs and all(json.loads(p.read_text())["status"] in ("ok", "skipped") for p in runs)
    html = (out / "report" / "report.html").read_text()
    start = html.index(f'<section id="study-{study}"')
    section = html[start : html.index("</section>", start)]
    assert "The answer." in section and answer in section, section[:2000]
    assert f'id="study-{study}-table"' in section and section.count("<tr>") >= 3  # a header and the cells
    for name in figures:  # (gNN-<name> in a grid of figure groups, e.g. one per device)
        assert [f for f in (out / "report" / "figures").iterdir() if f.name == name or f.name[4:] == name], name
    # report_pdf: false reached the report: no PDF, no figure drawn for one
    assert not list((out / "report").rglob("*.pdf")) and "switched off" in html
