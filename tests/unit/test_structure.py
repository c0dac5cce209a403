"""The package's structure: one-way imports between its components, no import circle, no
torch where a component promises none, and modules small enough to read.

The components and what each may import are written in ddpbench/__init__.py and each
folder's __init__; ALLOWED below is the same map, checked. Imports are read from the source
(every `import` and `from ... import`, at any depth, so a lazy import inside a function
counts too; `if TYPE_CHECKING:` blocks do not).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddpbench import PACKAGE_DIR

pytestmark = pytest.mark.unit

# Component -> the components it may import (itself always). "registry" is
# ddpbench.strategies' __init__ (plan-time facts about the strategies, no torch); "strategies"
# are the strategy modules (they run in a rank).
ALLOWED = {
    "registry": set(),
    "core": {"registry"},
    "strategies": {"registry", "core", "comm"},
    "run": {"registry", "strategies", "core", "comm", "cluster", "results"},
    "comm": {"core"},
    "cluster": {"core", "results"},
    "plan": {"registry", "core", "results", "cluster", "analysis", "stepmodel"},  # analysis: the design's statistics
    "results": {"core"},
    "analysis": {"registry", "core", "comm"},
    "stepmodel": {"registry", "core", "comm", "analysis"},  # the step model reads the analysis' tables
    "report": {"registry", "core", "results", "analysis", "comm", "plan", "stepmodel"},  # plan: the Study, its Decision
}
ALLOWED["cli"] = set(ALLOWED)  # the command line dispatches to every component
# Imports that break a rule on purpose, each with its reason.
EXCEPTIONS = {
    # `ddpbench models --write` rebuilds catalog.json by building every model (torch); reading
    # the catalog, what the workflow does, imports nothing of run/.
    ("ddpbench.plan.catalog", "ddpbench.run.models"),
    ("ddpbench.plan.catalog", "ddpbench.run.data"),
}
# Of comm, only the torch-free fits may be read by the analysis and the report.
COMM_FOR_READERS = {"ddpbench.comm.commfit"}
# Components whose every module imports without torch (checked by importing them with
# torch made unimportable).
TORCH_FREE = ("core", "plan", "results", "analysis", "stepmodel", "report", "cluster")
MAX_LINES = 600
# Modules allowed over MAX_LINES, with the reason. Keep it empty.
LARGE = {}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py")) if "__pycache__" not in p.parts}


def component(module: str) -> str | None:
    """The component of a package module; None for the package itself and its `__main__`."""
    parts = module.split(".")
    if module == "ddpbench.strategies":
        return "registry"
    if len(parts) == 2 and MODULES[module].name != "__init__.py":
        return "cli" if module == "ddpbench.cli" else None
    return parts[1] if len(parts) > 1 else None


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING"


def imports(path: Path) -> set[str]:
    """The ddpbench modules a file imports (a `from pkg import name` names the submodule
    pkg.name where that is a module, else pkg)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name.startswith("ddpbench"))
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and (child.module or "").startswith("ddpbench"):
                for alias in child.names:
                    sub = f"{child.module}.{alias.name}"
                    found.add(sub if sub in MODULES else child.module)
            visit(child)

    visit(ast.parse(path.read_text()))
    return found - {"ddpbench"}


GRAPH = {m: {i for i in imports(p) if i in MODULES} for m, p in MODULES.items()}


def broken_rules(graph: dict[str, set[str]]) -> list[str]:
    broken = []
    for module, targets in sorted(graph.items()):
        mine = component(module)
        if mine is None:
            continue
        for target in sorted(targets):
            theirs = component(target)
            if theirs in (None, mine) or (module, target) in EXCEPTIONS:
                continue
            if theirs == "comm" and mine in ("analysis", "stepmodel", "report") and target not in COMM_FOR_READERS:
                broken.append(f"{module} imports {target}: {mine}/ reads only comm's fits ({', '.join(COMM_FOR_READERS)})")
            elif theirs not in ALLOWED[mine]:
                broken.append(f"{module} imports {target}: {mine}/ may import only {sorted(ALLOWED[mine]) or 'nothing of ddpbench'}")
    return broken


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), and self-imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                members.append(w)
                if w == v:
                    break
            if len(members) > 1 or v in graph.get(v, ()):
                found.append(sorted(members))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return found


def test_every_import_points_the_allowed_way():
    assert broken_rules(GRAPH) == []


def test_the_rules_catch_an_import_from_the_analysis_into_the_training_process():
    graph = {m: set(t) for m, t in GRAPH.items()}
    graph["ddpbench.analysis"].add("ddpbench.run.train")
    graph["ddpbench.core.params"].add("ddpbench.plan.status")
    graph["ddpbench.report.build"].add("ddpbench.comm.commbench")
    broken = broken_rules(graph)
    assert any(b.startswith("ddpbench.analysis imports ddpbench.run.train") for b in broken), broken
    assert any(b.startswith("ddpbench.core.params imports ddpbench.plan.status") for b in broken), broken
    assert any(b.startswith("ddpbench.report.build imports ddpbench.comm.commbench") for b in broken), broken


def test_no_import_circle():
    assert circles(GRAPH) == []


def test_a_circle_is_found():
    graph = {m: set(t) for m, t in GRAPH.items()}
    graph["ddpbench.core.safe_io"].add("ddpbench.core.run_output")  # run_output imports safe_io
    assert any({"ddpbench.core.run_output", "ddpbench.core.safe_io"} <= set(c) for c in circles(graph))


def test_components_that_promise_no_torch_import_without_it():
    """Each module imported in a fresh interpreter where `import torch` fails (a finder that
    refuses it: a None in sys.modules would also fail scipy's own look for torch tensors)."""
    modules = [m for m in MODULES if component(m) in TORCH_FREE and not m.endswith(".__main__")]
    modules += ["ddpbench.strategies", "ddpbench.comm.commfit"]
    code = (
        "import sys, importlib, importlib.abc\n"
        "class NoTorch(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'torchvision'):\n"
        "            raise ImportError(f'{name} imported')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_analysis_loads_no_plotting_or_templates():
    code = (
        "import sys, importlib, pkgutil, ddpbench.analysis as a\n"
        "for m in pkgutil.walk_packages(a.__path__, 'ddpbench.analysis.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(sorted(k for k in ('matplotlib', 'jinja2', 'torch') if k in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:] or out.stdout


def test_no_module_is_too_long_to_read():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES and m not in LARGE}
    assert long == {}


def test_every_component_says_what_lives_there():
    for module, path in MODULES.items():
        if path.name == "__init__.py":
            doc = ast.get_docstring(ast.parse(path.read_text()))
            assert doc and len(doc) > 80, f"{module}: its __init__ needs a docstring saying what lives there"


def test_no_list_of_strategy_names_outside_the_strategies():
    """What a strategy is (sharded, overlapping its buckets, the settings it reads, ...) is declared on the
    strategy and answered by the registry: a tuple, list, set or dict of two or more registered strategy
    names elsewhere in the package is a list that drifts (issue 56: BUCKETED had left zero out)."""
    from ddpbench import strategies

    names = set(strategies.names())
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR).as_posix()
        if rel.startswith("strategies/"):  # (the volume laws, named for their collectives, live there too)
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else \
                [k for k in node.keys if k is not None] if isinstance(node, ast.Dict) else []  # fmt: skip
            listed = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in names]
            if len(listed) >= 2:
                found.append(f"{rel}:{node.lineno} {listed}")
    assert not found, found


def test_verdicts_are_the_enums_and_their_words_the_text_modules():
    """One vocabulary (issue 70): what a ratio's interval says is an analysis.comparison.Verdict, and its
    words are report.text's. A verdict's value (or a word of the vocabularies it replaced) as a literal
    that a verdict is compared with, returned, keyed or matched by .isin elsewhere is a second
    vocabulary (a column named after a count, a CSS class, are not verdicts and pass)."""
    from ddpbench.analysis.comparison import Verdict

    words = {v.value for v in Verdict} | {"A faster", "B faster", "no detectable difference", "equivalent within the margin"}
    home = {"analysis/comparison.py", "report/text.py"}

    def literals(node) -> list:
        inner = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return [e.value for e in inner if isinstance(e, ast.Constant) and e.value in words]

    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR).as_posix()
        if rel in home:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            used = []
            if isinstance(node, ast.Compare):
                used = [w for side in (node.left, *node.comparators) for w in literals(side)]
            elif isinstance(node, ast.Dict):
                used = [w for k in node.keys if k is not None for w in literals(k)]
            elif isinstance(node, ast.Return) and node.value is not None:
                used = literals(node.value)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "isin":
                used = [w for a in node.args for w in literals(a)]
            found += [f"{rel}:{node.lineno} {w!r}" for w in used]
    assert not found, found


MAX_FUNCTION_LINES = 80


def test_no_function_is_too_long_to_read():
    """A function is read whole: over MAX_FUNCTION_LINES lines (its body and docstring) it is several
    steps that want their own names (issue 56 split execute, diagnose, train_loop, winner_findings)."""
    long = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {n} lines")
    assert long == [], long


def test_no_module_spells_a_run_record_column():
    """The extra_*/env_* columns of runs.csv (summary.json's extra and env fields) are named in
    core.run_record alone (Extra, Env): a column spelled as a literal elsewhere drifts from the field
    that fills it (issue 56)."""
    column = re.compile(r"^(extra|env)_[a-z0-9_]+$")
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR).as_posix()
        if rel == "core/run_record.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and column.match(node.value):
                found.append(f"{rel}:{node.lineno} {node.value!r}")
    assert not found, found


# The components whose code writes summary.json (the ranks, the launcher, the lab, the strategies);
# the analysis and the report read runs.csv through the columns above.
WRITERS = ("run", "strategies", "core", "cluster", "comm")
# Field names that are also keys of another record in a writer, each with that record.
OTHER_RECORDS = {
    "micro_batches": "a cell parameter (core.params) as well as the pipeline's extra field",
    "host": "an energy reading's and a process sample's host", "cores": "a peak record's",
    "other_cpu_frac": "a measured peak's record (core.peaks)", "backend": "a cell parameter",
    "torch": "a package's version key", "torchvision": "a model family's package", "python": "the warm key's",
    "cuda": "a device name",
}  # fmt: skip


def _literal_keys(tree: ast.AST):
    """String constants used as keys: in a dict display, a subscript, or .get/.pop/.setdefault."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            yield from (k for k in node.keys if isinstance(k, ast.Constant))
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            yield node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args \
                and node.func.attr in ("get", "pop", "setdefault") and isinstance(node.args[0], ast.Constant):  # fmt: skip
            yield node.args[0]


def test_the_run_record_is_typed_where_it_is_written():
    """Issue 70, item 4: a writer fills summary.json's extra and env blocks through
    run_record.extra(...) and run_record.env(...), whose keywords must be fields of Extra and Env
    (a TypeError otherwise); a field's name as a literal key in a writer would bypass that check."""
    from ddpbench.core import run_record as R

    fields = {R.field(c) for ns in (R.Extra, R.Env) for c in R.columns(ns).values()}
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR).as_posix()
        if rel == "core/run_record.py" or rel.split("/")[0] not in WRITERS:
            continue
        for key in _literal_keys(ast.parse(path.read_text())):
            if isinstance(key.value, str) and key.value in fields and key.value not in OTHER_RECORDS:
                found.append(f"{rel}:{key.lineno} {key.value!r}")
    assert not found, found
    with pytest.raises(TypeError, match="extra.*compile_seconds"):
        R.extra(compile_s=1.0, compile_seconds=1.0)
    with pytest.raises(TypeError, match="env.*hostname"):
        R.env(host="h", hostname="h")
    assert R.env(**{R.ENV_VARS: {}}) == {R.ENV_VARS: {}}


# -- one command line: the `ddpbench` verbs (issue 56, point 6) -----------------------------------

# The package's top level: the package, `python -m ddpbench VERB` and the `ddpbench` command (its
# verbs in cli.SUBCOMMANDS). A `python -m ddpbench.<name>` alias is a second command line.
TOP_LEVEL = {"__init__.py", "__main__.py", "cli.py"}
MODULE_PATH = re.compile(r"(?<![\w.])ddpbench\.[a-z_]+(?:\.[a-z_]+)*")
# `-m MODULE` commands written in text (docstrings too): a verb's module only where torchrun or
# srun must start it by module (the rank, the collective sweep, the node launcher).
STARTED_BY_MODULE = {"ddpbench.run.train", "ddpbench.comm.commbench", "ddpbench.cluster.slurm"}
MODULE_COMMAND = re.compile(r"-m (ddpbench(?:\.[a-z_]+)+)")
# The files that may write a module path as a string (not in a docstring), and which: where a
# process is started with `-m` (torchrun and srun need a module) and importlib's lazy imports.
# cli.SUBCOMMANDS, the verbs' table, names modules relative to the package and is not matched.
PROCESS_STARTS = {
    "run/launch.py": {"ddpbench.run.torchrun", "ddpbench.run.train"},  # torchrun, and the ranks it starts
    "run/torchrun.py": {"ddpbench.run.torchrun", "ddpbench.run.train"},  # the forked ranks' entry points
    "cluster/slurm.py": {"ddpbench.cluster.slurm", "ddpbench.run.launch"},  # srun's task per node, its launcher
    "cluster/netlab.py": {"ddpbench.run.launch"},  # each namespace's launcher
    "comm/commbench.py": {"ddpbench.comm.commbench"},  # its usage line: torchrun ... -m ddpbench.comm.commbench
    "core/sysinfo.py": {"ddpbench.run.train"},  # the recorded command line of a rank torchrun started
    "plan/user_models.py": {"ddpbench.run.user_model"},  # the plan's model check (a subprocess with torch)
    "analysis/__init__.py": {"ddpbench.analysis"},  # importlib: its names are loaded on first use
}
# Files that still write a module path where the verb belongs (usage, help, messages,
# docstrings): owned by other work in progress in 2026-11. Each leaves this set when its
# file says `ddpbench VERB` (`python -m ddpbench.report` no longer exists: report/build.py's prog).
def _docstrings(tree: ast.AST) -> set[int]:
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    return {id(n.body[0].value) for n in nodes if n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}  # fmt: skip


def test_module_paths_are_written_only_where_a_process_is_started():
    """A module path in a string is a second name for a command: users, messages and help say
    `ddpbench VERB` (the one command line, cli.SUBCOMMANDS), and a module path is written only
    where a process is started by module (PROCESS_STARTS). A `-m ddpbench.<module>` command, in a
    docstring too, names a verb's module only where torchrun or srun start it (issue 56)."""
    from ddpbench import cli

    verb_modules = {f"ddpbench.{module}" for module, _ in cli.SUBCOMMANDS.values()} - STARTED_BY_MODULE
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR).as_posix()
        tree = ast.parse(path.read_text())
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            commands = set(MODULE_COMMAND.findall(node.value)) & verb_modules
            paths = set() if id(node) in docstrings else set(MODULE_PATH.findall(node.value))
            found += [f"{rel}:{node.lineno} {p}" for p in sorted(commands | (paths - PROCESS_STARTS.get(rel, set())))]
    assert not found, found


def test_the_package_root_holds_no_command_aliases():
    """The package's top level is the package, its `python -m ddpbench VERB` and the command; no
    `__main__` elsewhere (`python -m ddpbench.report` was one): each stage is a verb whose module
    has a `main(argv)`."""
    from ddpbench import cli

    assert {p.name for p in PACKAGE_DIR.glob("*.py")} == TOP_LEVEL
    assert [p.relative_to(PACKAGE_DIR).as_posix() for p in PACKAGE_DIR.rglob("__main__.py")] == ["__main__.py"]
    for verb, (module, _) in cli.SUBCOMMANDS.items():
        tree = ast.parse((PACKAGE_DIR / f"{module.replace('.', '/')}.py").read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body), f"{verb}: {module} has no main(argv)"


def test_the_rules_call_the_verbs():
    """The workflow's shell commands call `python -m ddpbench VERB` (no console script needed in
    a container), never a module path."""
    from ddpbench import cli

    rules = PACKAGE_DIR.parents[1] / "workflow" / "rules"
    called, found = set(), []
    for path in sorted(rules.glob("*.smk")):
        text = path.read_text()
        called |= set(re.findall(r"python -m ddpbench ([\w-]+)", text))
        found += [f"{path.name}: {m}" for m in re.findall(r"python -m (ddpbench\.[\w.]+)", text)]
    assert not found, found
    assert called and called <= set(cli.SUBCOMMANDS), called - set(cli.SUBCOMMANDS)
