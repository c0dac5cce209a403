"""The user's own model (`model: "package.module:function"`): importing and building it
(run.user_model), its plan-time check (plan.user_models) and its catalog row (plan.catalog)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from ddpbench.core.params import CellParams
from ddpbench.plan import catalog, user_models
from ddpbench.plan.grid import ConfigError
from ddpbench.run import models, user_model

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "models"

GOOD = """
import torch
from torch import nn

def net(shape, classes, **kwargs):
    c, h, w = shape
    return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, 7), nn.ReLU(), nn.Linear(7, classes))

def not_a_module(shape, classes):
    return "a string"

def positional_only(shape, /, classes):
    return nn.Linear(1, 1)

def wrong_output(shape, classes, **kwargs):
    c, h, w = shape
    return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, classes + 1))

class NeedsData(nn.Module):  # .item() has no value on the meta device: checked on the CPU
    def __init__(self, shape, classes):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))
        self.head = nn.Linear(shape[0] * shape[1] * shape[2], classes)

    def forward(self, x):
        return self.head(x.flatten(1)) * float(self.scale.item())

def needs_data(shape, classes):
    return NeedsData(shape, classes)
"""


def module_in(folder: Path, name: str, body: str = GOOD) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(body))
    return folder


IMAGE = {"shape": (1, 4, 4), "classes": 3}


def test_build_imports_from_the_model_path_and_leaves_sys_path_as_it_was(tmp_path):
    folder = module_in(tmp_path / "mine", "um_good")
    before = list(sys.path)
    model = user_model.build("um_good:net", str(folder), **IMAGE)
    assert sys.path == before
    assert isinstance(model, torch.nn.Module) and model(torch.zeros(2, 1, 4, 4)).shape == (2, 3)
    assert Path(sys.modules["um_good"].__file__).parent == folder


def test_a_relative_model_path_is_the_working_directorys(tmp_path, monkeypatch):
    module_in(tmp_path / "rel", "um_relative")
    monkeypatch.chdir(tmp_path)
    assert user_model.build("um_relative:net", "rel", **IMAGE)[1].out_features == 7


def test_the_model_paths_module_wins_over_one_of_the_same_name_imported_before(tmp_path):
    module_in(tmp_path / "a", "um_twice", "from torch import nn\ndef net(**kw):\n    return nn.Linear(1, 1)\n")
    module_in(tmp_path / "b", "um_twice", "from torch import nn\ndef net(**kw):\n    return nn.Linear(2, 2)\n")
    assert user_model.build("um_twice:net", str(tmp_path / "a")).in_features == 1
    assert user_model.build("um_twice:net", str(tmp_path / "b")).in_features == 2


@pytest.mark.parametrize(
    "spec,words",
    [
        ("um_nowhere.models:net", ["'um_nowhere.models:net'", "cannot import module 'um_nowhere.models'", "ModuleNotFoundError"]),
        ("um_errors:nope", ["'um_errors:nope'", "has no 'nope'"]),
        ("um_errors:torch", ["'um_errors:torch'", "is a module, not a function"]),
        ("um_errors:not_a_module", ["'um_errors:not_a_module'", "returned a str", "not a torch.nn.Module"]),
        ("um_errors:positional_only", ["'um_errors:positional_only'", "TypeError", "shape=(1, 4, 4), classes=3"]),
    ],
    ids=["no-module", "no-function", "not-callable", "not-a-module", "wrong-signature"],
)
def test_a_wrong_model_is_a_value_error_naming_it(tmp_path, spec, words):
    folder = module_in(tmp_path / "errs", "um_errors")
    with pytest.raises(ValueError) as err:
        user_model.build(spec, str(folder), **IMAGE)
    for word in words:
        assert word in str(err.value)
    if spec.startswith("um_nowhere"):
        assert str(folder) in str(err.value)  # where it was looked for


def test_an_import_that_raises_names_the_model(tmp_path):
    folder = module_in(tmp_path / "raising", "um_raises", "raise RuntimeError('broken on purpose')\n")
    with pytest.raises(ValueError, match=r"'um_raises:net'.*RuntimeError: broken on purpose"):
        user_model.load("um_raises:net", str(folder))
    with pytest.raises(ValueError, match="is not a folder"):
        user_model.load("um_raises:net", str(tmp_path / "missing"))


def test_the_model_path_is_not_on_sys_path_during_the_check_forward(tmp_path):
    """Issue 54: model_path stayed first on the import path for the whole build and forward of the
    check, so a module there shadowed any the forward imported lazily."""
    body = """
        import os, sys
        from torch import nn
        HERE = os.path.dirname(os.path.abspath(__file__))

        class Net(nn.Module):
            def __init__(self, classes):
                super().__init__()
                self.head = nn.Linear(16, classes)

            def forward(self, x):
                if HERE in sys.path:
                    raise RuntimeError("model_path is still on sys.path in the forward")
                return self.head(x.flatten(1))

        def net(shape, classes):
            assert HERE in sys.path  # the call is part of the contract
            return Net(classes)
        """
    folder = module_in(tmp_path / "lazy", "um_lazy", body)
    before = list(sys.path)
    assert user_model.check("um_lazy:net", str(folder), "image", **IMAGE) == 16 * 3 + 3
    assert sys.path == before


def test_check_counts_parameters_and_checks_the_output_shape(tmp_path):
    folder = str(module_in(tmp_path / "chk", "um_check"))
    assert user_model.check("um_check:net", folder, "image", **IMAGE) == 16 * 7 + 7 + 7 * 3 + 3
    assert user_model.check("um_check:needs_data", folder, "image", **IMAGE) == 1 + 16 * 3 + 3  # CPU fallback
    with pytest.raises(ValueError, match=r"'um_check:wrong_output'.*\(1, 4\), expected \(1, 3\)"):
        user_model.check("um_check:wrong_output", folder, "image", **IMAGE)


def test_check_of_the_example_language_model():
    assert user_model.check("tiny_lm:tiny_lm", str(EXAMPLES), "tokens", vocab_size=32, seq_len=8) > 0
    with pytest.raises(ValueError, match=r"'tiny_convnet:tiny_convnet' failed when called with vocab_size=32, seq_len=8: TypeError"):
        user_model.check("tiny_convnet:tiny_convnet", str(EXAMPLES), "tokens", vocab_size=32, seq_len=8)


def test_check_command_prints_json_and_exits_by_the_result(tmp_path, capsys):
    folder = str(module_in(tmp_path / "cli", "um_cli"))
    assert user_model.main(["--check", "um_cli:net", "--model-path", folder, "--shape", "1", "4", "4", "--classes", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"model": "um_cli:net", "model_path": folder, "ok": True, "parameters": 16 * 7 + 7 + 7 * 3 + 3}
    assert user_model.main(["--check", "um_cli:nope", "--model-path", folder]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and "'um_cli:nope'" in out["error"]


@pytest.mark.slow
def test_check_runs_as_a_module_with_the_users_prints_kept_off_stdout(tmp_path):
    folder = module_in(tmp_path / "loud", "um_loud", "print('hello')\nfrom torch import nn\ndef net(**kw):\n    return nn.Linear(3, 2)\n")
    cmd = [sys.executable, "-m", "ddpbench.run.user_model", "--check", "um_loud:net", "--model-path", str(folder)]
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1, bad.stderr  # a (1, 3, 32, 32) image into Linear(3, 2): wrong shape
    assert "hello" in bad.stderr and "hello" not in bad.stdout
    assert json.loads(bad.stdout)["ok"] is False


# -- the plan ----------------------------------------------------------------------------
def cells(*models):
    return pd.DataFrame({"world_size": [2] * len(models), "model": list(models)})


def fixed(**changes):
    return {**CellParams().as_dict(), **changes}


@pytest.mark.slow
def test_the_plan_refuses_a_wrong_model_naming_it_and_its_model_path(tmp_path):
    folder = str(module_in(tmp_path / "plan", "um_plan"))
    axes = {"model": ["mlp", "um_plan:net", "um_plan:nope"]}
    with pytest.raises(ConfigError) as err:
        user_models.check_grid(cells("mlp", "um_plan:net", "um_plan:nope"), fixed(model_path=folder), axes)
    text = str(err.value)
    assert "'grid.model + params.model_path'" in text and "'um_plan:nope'" in text and folder in text
    assert "'um_plan:net'" not in text  # the good one is not blamed
    user_models.check_grid(cells("mlp", "um_plan:net"), fixed(model_path=folder), axes)  # passes


def test_the_plan_checks_each_distinct_model_and_input_once_and_nothing_for_built_ins():
    def refuse(checks):
        raise AssertionError("no subprocess for built-in models")

    user_models.check_grid(cells("mlp", "resnet18"), fixed(), {}, run=refuse)
    grid = pd.DataFrame({
        "world_size": [1, 2, 2, 2, 2],
        "model": ["a.b:c"] * 4 + ["mlp"],
        "synthetic_shape": ["mnist", "mnist", "cifar10", "imagenette", "mnist"],
        "image_size": [160, 160, 160, 96, 160],
    })  # fmt: skip
    checks = user_models.grid_checks(grid, fixed())
    assert [c["shape"] for c in checks] == [[1, 28, 28], [3, 32, 32], [3, 96, 96]]
    tokens = user_models.grid_checks(cells("a.b:c"), fixed(dataset="synthetic_tokens", vocab_size=50, seq_len=9))
    assert tokens == [{"model": "a.b:c", "model_path": ".", "kind": "tokens", "vocab_size": 50, "seq_len": 9}]


def test_a_planning_python_without_torch_warns_instead_of_refusing():
    said = []

    def no_torch(checks):
        return subprocess.CompletedProcess([], 1, "", "ModuleNotFoundError: No module named 'torch'\n")

    user_models.check_grid(cells("a.b:c"), fixed(), {}, warn=said.append, run=no_torch)
    assert len(said) == 1 and "a.b:c" in said[0] and "no torch" in said[0]

    def crash(checks):
        return subprocess.CompletedProcess([], -11, "", "Segmentation fault\n")

    with pytest.raises(ConfigError, match=r"a\.b:c.*exit status -11.*Segmentation fault"):
        user_models.check_grid(cells("a.b:c"), fixed(), {}, run=crash)


# -- the catalog -------------------------------------------------------------------------
def own_counts(model, x):
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model.eval()(x)
    return sum(p.numel() for p in model.parameters()), counter.get_total_flops()


def test_the_catalog_measures_a_user_model_as_its_own_counts():
    row = catalog.measure("tiny_convnet:tiny_convnet", "mnist", str(EXAMPLES))
    mine = user_model.build("tiny_convnet:tiny_convnet", str(EXAMPLES), shape=(1, 28, 28), classes=10)
    params, flops = own_counts(mine, torch.zeros(1, 1, 28, 28))
    assert row["parameters"] == params and row["gradient_bytes"] == 4 * params
    assert row["forward_flops_per_sample"] == flops > 0
    assert row["shape"] == [1, 28, 28] and row["model"] == "tiny_convnet:tiny_convnet"


def test_the_catalog_measures_a_token_model_on_token_ids():
    row = catalog.measure("tiny_lm:tiny_lm", "synthetic_tokens", str(EXAMPLES))
    v, t = CellParams().vocab_size, CellParams().seq_len
    params, flops = own_counts(user_model.build("tiny_lm:tiny_lm", str(EXAMPLES), vocab_size=v, seq_len=t), torch.zeros(1, t, dtype=torch.long))
    assert (row["parameters"], row["forward_flops_per_sample"], row["shape"]) == (params, flops, [t])


def test_models_command_prints_the_user_models_row(capsys):
    spec = "tiny_convnet:tiny_convnet"
    assert catalog.main(["--model", spec, "--model-path", str(EXAMPLES), "--input", "mnist", "--input", "cifar10", "--world-size", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(f"| `{spec}` |")]
    params = models.count_parameters(user_model.build(spec, str(EXAMPLES), shape=(1, 28, 28), classes=10))
    assert len(rows) == 4 and f"| {params:,} |" in rows[0]  # two inputs, and held per rank at p = 2
    assert "all but pipeline" in rows[0] and "Held per rank at p = 2" in out


def test_models_command_refuses_a_wrong_model_and_write_with_model(capsys):
    with pytest.raises(SystemExit) as exit_:
        catalog.main(["--model", "tiny_convnet:nope", "--model-path", str(EXAMPLES)])
    assert exit_.value.code == 1 and "'tiny_convnet:nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        catalog.main(["--model", "tiny_convnet:tiny_convnet", "--write"])


def test_write_keeps_the_hand_written_section_of_the_models_page(tmp_path, monkeypatch, capsys):
    doc = catalog.DOCS_PATH.read_text()
    tail = catalog.hand_written(doc)
    assert tail.startswith("\n## Your own model") and "model_path" in tail
    assert doc == catalog.DOC_HEAD + catalog.markdown(catalog.load()) + tail  # what --write writes
    assert catalog.hand_written("# x\n\nno such section\n") == ""
    committed = catalog.load()  # --write, without rebuilding every model, into a scratch page
    page = tmp_path / "models.md"
    page.write_text("stale tables\n\n## Your own model\n\nkept as written\n")
    monkeypatch.setattr(catalog, "DOCS_PATH", page)
    monkeypatch.setattr(catalog, "CATALOG_PATH", tmp_path / "catalog.json")
    monkeypatch.setattr(catalog, "build_catalog", lambda: committed)
    assert catalog.main(["--write"]) == 0
    assert page.read_text() == catalog.DOC_HEAD + catalog.markdown(committed) + "\n## Your own model\n\nkept as written\n"


def test_the_model_path_is_on_the_import_path_while_the_function_runs(tmp_path):
    folder = module_in(tmp_path / "lazy", "um_lazy", "def net(**kw):\n    import um_lazy_parts\n    return um_lazy_parts.make()\n")
    module_in(folder, "um_lazy_parts", "from torch import nn\ndef make():\n    return nn.Linear(3, 1)\n")
    assert user_model.build("um_lazy:net", str(folder)).in_features == 3


def test_runs_of_edited_model_code_are_never_pooled(tmp_path):
    """The module's source digest is part of a run's version (analysis.tables.run_version)."""
    from ddpbench.analysis.tables import run_version

    module_in(tmp_path, "digested")
    before = user_model.source_digest("digested:net", str(tmp_path))
    assert before == user_model.source_digest("digested:net", str(tmp_path)) and len(before) == 16
    (tmp_path / "digested.py").write_text((tmp_path / "digested.py").read_text() + "\n# edited\n")
    sys.modules.pop("digested", None)
    after = user_model.source_digest("digested:net", str(tmp_path))
    assert after != before
    runs = pd.DataFrame({"env_code_fingerprint": ["c1", "c1", "c1"], "env_user_model_digest": [before, after, None]})
    versions = run_version(runs)
    assert versions.nunique() == 3 and versions[2] == "c1"  # a built-in model's run: the code alone
