"""The user's own model end to end: the examples under examples/models (outside the package),
copied to a folder of a scratch working directory and named by a relative model_path, train a
ddp cell at world size 2 through the launcher; the workflow's plan refuses a wrong one,
naming it, before any job exists."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "models"
FLAGS = [
    "--strategy", "ddp", "--model-path", "my_models", "--dataset-size", "64", "--test-size", "16",
    "--batch-size", "8", "--max-steps", "6", "--warmup-steps", "1", "--seed", "3",
]  # fmt: skip


def env():
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def launch(workdir, out, *flags):
    """`python -m ddpbench launch` at world size 2 in `workdir`, as a workflow job runs it."""
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", "2", "--out", str(out), *FLAGS, *flags]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=300, env=env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    train_log = (out / "train.log").read_text() if (out / "train.log").exists() else ""
    assert summary["status"] == "ok", f"{summary.get('reason')}\n{train_log[-3000:]}"
    return summary


@pytest.fixture
def workdir(tmp_path):
    shutil.copytree(EXAMPLES, tmp_path / "my_models", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_an_image_model_from_a_folder_outside_the_package_trains_a_ddp_cell_at_p2(workdir):
    spec = "tiny_convnet:tiny_convnet"
    summary = launch(workdir, workdir / "run", "--model", spec, "--synthetic-shape", "mnist")
    assert summary["world_size"] == 2 and summary["env"]["backend"] == "gloo"
    assert summary["params"]["model"] == spec and summary["params"]["model_path"] == "my_models"
    assert summary["timed_steps"] > 0 and summary["samples_per_s"] > 0 and summary["test_loss"] > 0


def test_a_token_model_from_a_folder_outside_the_package_trains_a_ddp_cell_at_p2(workdir):
    flags = ["--model", "tiny_lm:tiny_lm", "--dataset", "synthetic_tokens", "--vocab-size", "32", "--seq-len", "16"]
    summary = launch(workdir, workdir / "run", *flags)
    assert summary["world_size"] == 2 and summary["params"]["model"] == "tiny_lm:tiny_lm"
    assert summary["timed_steps"] > 0 and summary["test_loss"] > 0


def dry_run(workdir, model):
    config = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    config["grid"]["model"] = ["mlp", model]
    config["params"]["model_path"] = "my_models"
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    cmd = [
        sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
        "--configfile", str(workdir / "config.yaml"), "--cores", "1", "-n", "--quiet", "rules",
    ]  # fmt: skip
    path = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=300, env={**env(), "PATH": path})


def test_the_plan_refuses_a_wrong_model_naming_it_before_any_job(workdir):
    bad = dry_run(workdir, "tiny_convnet:no_such_function")
    said = bad.stdout + bad.stderr  # Snakemake prints the WorkflowError on stdout
    assert bad.returncode != 0
    expected = "invalid config at 'grid.model + params.model_path': model 'tiny_convnet:no_such_function': "
    assert expected in said and "has no 'no_such_function'" in said, said[-3000:]
    assert not (workdir / "results").exists()
    good = dry_run(workdir, "tiny_convnet:tiny_convnet")
    assert good.returncode == 0, (good.stdout + good.stderr)[-3000:]
