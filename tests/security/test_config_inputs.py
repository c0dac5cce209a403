"""Untrusted configs (issue 22, points 3 and 5): what a config may put into a command is
quoted or refused, and numbers that would exhaust the machine or mean nothing are refused
by name before any job exists. Each case runs `snakemake -n -p` on the repository's
Snakefile in a temporary folder."""

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
import yaml

from ddpbench.core.params import ParamError, check_values

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"


def dry_run(workdir, *config, configfile=TINY):
    """`snakemake -n -p` of the tiny grid with --config overrides; returns the process."""
    cmd = [
        sys.executable, "-m", "snakemake",
        "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
        "--configfile", str(configfile), "--cores", "1", "-n", "-p",
        *(["--config", *config] if config else []),
    ]  # fmt: skip
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=env, timeout=300)
    proc.output = proc.stdout + proc.stderr  # snakemake prints its errors to either
    return proc


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    return tmp_path


def shell_commands(proc):
    return [line for line in proc.stdout.splitlines() if line.startswith("Shell command:")] or [
        line for line in proc.stdout.splitlines() if "python -m ddpbench" in line
    ]


def test_data_root_with_shell_metacharacters_is_inert(workdir):
    """Before: `--data-root d;id;#` unquoted, so `id` ran as a command of its own."""
    proc = dry_run(workdir, 'params={"data_root": "d;id;#"}', 'grid={"dataset": ["mnist"]}')
    assert proc.returncode == 0, proc.output[-3000:]
    prepare = [c for c in shell_commands(proc) if "ddpbench data" in c]
    assert prepare and all("--data-root 'd;id;#'" in c for c in prepare), prepare
    train = [c for c in shell_commands(proc) if "ddpbench launch" in c]
    assert train and all("--data-root 'd;id;#'" in c for c in train)


@pytest.mark.parametrize("value", ["ddp;id", "a$(id)", "x'y", 'x"y', "a b", "a`id`"])
def test_axis_strings_beyond_a_safe_alphabet_are_refused(workdir, value):
    proc = dry_run(workdir, "grid=" + json.dumps({"strategy": [value]}))
    assert proc.returncode != 0
    assert "invalid config at 'grid.strategy" in proc.output, proc.output[-2000:]


def test_image_that_is_not_a_uri_or_path_is_refused(workdir):
    proc = dry_run(workdir, 'images={"cpu": "img.sif; id"}')
    assert proc.returncode != 0 and "invalid config at 'images.cpu'" in proc.output, proc.output[-2000:]


def test_every_path_and_value_in_the_commands_is_quoted(workdir):
    """Every run folder and log path in a job's command is one shell word, quoted."""
    proc = dry_run(workdir)
    assert proc.returncode == 0, proc.output[-3000:]
    for command in shell_commands(proc):
        if "ddpbench.run.launch" in command:
            assert "--out 'results/tiny/runs/" in command and "--log 'results/tiny/logs/train/" in command, command


def test_a_huge_grid_is_refused_before_it_is_expanded(workdir):
    """Before: 10^6 cells x 1,000 repeats were expanded in memory (3.8 GB, MemoryError)."""
    axis = list(range(1, 11))
    config = workdir / "huge.yaml"
    grid = {"world_size": axis, "batch_size": axis, "dataset_size": axis, "seed": axis,
            "test_size": axis, "warmup_steps": axis}  # fmt: skip
    config.write_text(yaml.safe_dump({"grid": grid, "repeats": 1000}))
    start = time.monotonic()
    proc = dry_run(workdir, configfile=config)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert "invalid config at 'max_runs'" in proc.output and "1,000 repeats" in proc.output, proc.output[-2000:]
    assert "6,000,000 cells" in proc.output  # 10^6 x the 6 strategies of config.yaml
    assert elapsed < 30  # the check itself is instant; snakemake's start-up dominates
    # the limit is a setting: raised, the same check passes (the grid is then expanded)
    small = workdir / "small.yaml"
    small.write_text(yaml.safe_dump({"grid": {"seed": [0, 1, 2]}, "repeats": 2}))
    # config.yaml's world sizes x strategies x 3 seeds = 36 cells (before exclusions) x 2
    assert "= 72 runs, more than max_runs (71)" in dry_run(workdir, "max_runs=71", configfile=small).output
    assert dry_run(workdir, "max_runs=72", configfile=small).returncode == 0


@pytest.mark.parametrize(
    "override, key",
    [
        ('timing={"timeout_s": .nan}', "timing.timeout_s"),
        ('timing={"timeout_s": .inf}', "timing.timeout_s"),
        ('params={"lr": .nan}', "params.lr"),
        ('params={"momentum": .nan}', "params.momentum"),
        ('timing={"max_rel_ci": .nan}', "timing.max_rel_ci"),
    ],
)
def test_non_finite_numbers_are_refused_naming_the_key(workdir, override, key):
    proc = dry_run(workdir, override)
    assert proc.returncode != 0
    assert f"invalid config at '{key}'" in proc.output and "Traceback" not in proc.output, proc.output[-2000:]


@pytest.mark.parametrize(
    "override, key",
    [
        ('grid={"world_size": [100000]}', "grid.world_size"),
        ('grid={"num_workers": [100000]}', "grid.num_workers"),
        ('grid={"dataset_size": [1000000000000]}', "grid.dataset_size"),
    ],
)
def test_sizes_beyond_their_upper_bound_are_refused_naming_the_key(workdir, override, key):
    proc = dry_run(workdir, override)
    assert proc.returncode != 0 and f"invalid config at '{key}" in proc.output, proc.output[-2000:]


def test_numbers_given_on_the_command_line_are_numbers(workdir):
    """Before: `--config 'params={"bucket_mb": 10.0}'` was refused ("'10.0' is not of
    type 'number'"): snakemake leaves nested --config values strings."""
    proc = dry_run(workdir, 'params={"bucket_mb": 10.0}', 'timing={"max_steps": 3}')
    assert proc.returncode == 0, proc.output[-2000:]
    assert "--bucket-mb 10.0" in proc.stdout and "--max-steps 3" in proc.stdout


@pytest.mark.parametrize(
    "name, value",
    [("timeout_s", float("nan")), ("lr", float("inf")), ("dataset_size", 10**12), ("num_workers", 10**5),
     ("data_root", "a\nb"), ("data_root", ""), ("momentum", float("nan"))],
)  # fmt: skip
def test_the_harness_refuses_the_same_values(name, value):
    """The launcher's and the ranks' own flags go through the same checks."""
    with pytest.raises(ParamError, match=f"'{name}'"):
        check_values(name, [value])
