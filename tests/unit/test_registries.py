"""The one registry pattern (issue 56): strategies, models, studies and kinds of finding are each a
folder of modules, one per entry, found by a module-level declaration. Each test drops a new module
into a scratch copy of the package and checks that its registry finds it with nothing else changed
(a hard-coded list anywhere on the way would leave it out), and that the plan-time facts are read
without torch or pandas.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from ddpbench import PACKAGE_DIR

pytestmark = pytest.mark.unit

# One new entry per registry, each alone in its own new module.
NEW_MODULES = {
    "strategies/dummy_sync.py": '''
        SETTINGS = ("bucket_mb",)
        from ddpbench.strategies.base import Strategy
        class DummySync(Strategy):
            name = "dummy_sync"
            min_world = 3
            comm_volume = "gather_scatter"
        STRATEGY = DummySync()
    ''',
    "run/models/dummy_family.py": '''
        from torch import nn
        MODELS = {"dummy_net": {"kind": "image", "sequential_layers": 2, "exact": True}}
        ORDER = 45
        def build(name, shape, classes):
            c, h, w = shape
            return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, classes))
    ''',
    "report/studies/dummy_study.py": '''
        from ddpbench.report.studies.common import Study
        STUDY = Study("dummy-study", "Dummy", "Is a new study found?", (), lambda d: (["a"], [["1"]], "", ["Found."]))
    ''',
    "report/findings/dummy_topic.py": '''
        from ddpbench.report.findings.common import Finding
        KINDS = {"dummy": dict(find=lambda t: [Finding("dummy", "A new kind is found.", "cells")],
                               at_most=1, order=15, trim=5, drop=5)}
    ''',
}

# Run in the scratch copy: what each registry answers, first the plan-time ones (no torch, no pandas).
PROBE = '''
import json, sys
out = {}
from ddpbench import strategies
from ddpbench.core import params
from ddpbench.plan import config_schema
out["strategies"] = list(strategies.names())
t = strategies.strategy_traits("dummy_sync")
out["traits"] = [t.min_world, list(strategies.strategy_settings("dummy_sync")), strategies.unread_settings("dummy_sync")[:1]]
out["models"] = list(params.MODELS)
out["sequential"] = params.SEQUENTIAL_LAYERS
out["schema_studies"] = list(config_schema.STUDIES)
out["study_schema"] = config_schema.build_schema()["properties"]["study"]["anyOf"][1]
out["plan_loaded"] = sorted(m for m in ("torch", "pandas") if m in sys.modules)
from ddpbench.plan import grid
grid.check_studies({"study": ["dummy-study", "sync-dp"]})  # the plan's check reads the same folder
from ddpbench.report import findings, studies
out["studies"] = sorted(studies.STUDIES)
out["section"] = studies.section("dummy-study", *[__import__("pandas").DataFrame()] * 3).findings
out["kinds"] = list(findings.kinds())
out["findings"] = [f.kind for f in findings.findings(None, None, None, None, None)]
from ddpbench.run import models
out["built"] = models.count_parameters(models.build("dummy_net", (1, 2, 2), 3))
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    """The registries' answers in a copy of the package with NEW_MODULES dropped in."""
    root = tmp_path_factory.mktemp("scratch")
    shutil.copytree(PACKAGE_DIR, root / "src" / "ddpbench", ignore=shutil.ignore_patterns("__pycache__"))
    for rel, text in NEW_MODULES.items():
        (root / "src" / "ddpbench" / rel).write_text(textwrap.dedent(text))
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_new_strategy_module_is_registered_with_its_traits(answers):
    assert "dummy_sync" in answers["strategies"]
    assert answers["traits"] == [3, ["bucket_mb"], ["powersgd_rank"]]


def test_a_new_model_family_is_registered_in_its_order_and_builds(answers):
    models = answers["models"]
    assert models.index("densenet121") < models.index("dummy_net") < models.index("gpt_tiny")  # ORDER 45
    assert answers["sequential"]["dummy_net"] == 2
    assert answers["built"] == 4 * 3 + 3


def test_a_new_study_module_is_registered_and_planned_with_no_schema_change(answers):
    """The schema leaves study names to the plan's check (grid.check_studies, run in PROBE), which
    reads the registry's folder: a new study regenerates nothing."""
    assert "dummy-study" in answers["studies"] and "dummy-study" in answers["schema_studies"]
    assert "enum" not in answers["study_schema"], answers["study_schema"]
    assert answers["section"] == ["Found."]


def test_a_new_findings_module_is_registered_in_its_order(answers):
    assert answers["kinds"][:3] == ["winner", "dummy", "memory"]  # order 15
    assert answers["findings"] == ["dummy"]


def test_the_plan_reads_its_registries_without_torch_or_pandas(answers):
    assert answers["plan_loaded"] == []


def test_the_schema_and_the_report_list_the_same_studies():
    from ddpbench.plan import config_schema
    from ddpbench.report import studies

    assert config_schema.STUDIES == studies.names() == tuple(sorted(studies.STUDIES))


def test_a_declaration_that_is_not_a_literal_is_refused(tmp_path):
    from ddpbench.core import registry

    (tmp_path / "entry.py").write_text("MODELS = dict(a=1)\n")
    (tmp_path / "helper.py").write_text("X = 1\n")
    assert registry.entries([tmp_path], "MODELS") == ("entry",)
    with pytest.raises(ValueError, match="must be a literal"):
        registry.declared([tmp_path], "entry", "MODELS")
    assert registry.declared([tmp_path], "helper", "MODELS", None) is None


def test_each_family_builds_the_models_it_declares():
    """A family's MODELS (read without importing it) are the models its build makes: the GPT sizes
    are the declared names, and every declared image model builds for a small image."""
    pytest.importorskip("torch")
    from ddpbench.core.params import MODEL_FACTS
    from ddpbench.run import models
    from ddpbench.run.models import gpt

    assert set(gpt.MODELS) == set(gpt.SIZES) == {n for n, f in MODEL_FACTS.items() if f["family"] == "gpt"}
    for name, facts in MODEL_FACTS.items():
        if facts["kind"] == "image":
            assert models.count_parameters(models.build(name, (1, 8, 8), 3)) > 0, name
