"""No write in src/ bypasses the safe file layer (issue 69, item 2).

core/safe_io.py is the one module that creates, truncates, appends to, moves or links a file:
its writes reach their folder without following a link and never write through a link or a
hard link planted at the name (docs/security.md). Anywhere else in the package, a call that
writes to a path is refused here, read from the source (ast):

- open(...) / X.open(...) with a mode that writes ("w", "a", "x", "+"; a mode that is not a
  literal counts as one), unless it writes into a `fileobj=` the layer opened (tarfile, gzip);
- os.open with O_CREAT, O_TRUNC, O_WRONLY, O_RDWR or O_APPEND (or flags not written out);
- Path.write_text / write_bytes / touch / mkdir / symlink_to / hardlink_to, os.mkdir,
  os.makedirs, os.symlink, os.link, os.replace, os.rename, shutil's copies and moves, a tar
  archive's extractall, zipfile.ZipFile(..., "w");
- writers that take a path or a file: torch.save, numpy's save/savetxt/savez, savefig, a
  DataFrame's to_csv/to_json/..., json/pickle/yaml dump: their target must be a file object,
  a name bound by a `with ... as NAME` (a handle the layer opened) or an in-memory buffer
  (io.BytesIO/StringIO, sys.stdout/stderr), never a path.

tempfile's functions stay allowed: they create exclusively, with unpredictable names, mode 0600/0700.
"""

from __future__ import annotations

import ast
import re
import textwrap

import pytest

from ddpbench import PACKAGE_DIR, REPO_ROOT

pytestmark = pytest.mark.unit

LAYER = "core/safe_io.py"
# Writes that stay outside the layer on purpose, each with its reason: (file, function) -> why.
EXCEPTIONS = {
    ("run/autobatch.py", "_reset_peak"): "the kernel's /proc/self/clear_refs, not a file in any folder",
    ("results/archive.py", "extract"): "members are unpacked into a private temporary folder with tarfile's "
    "'data' filter (no links, absolute or escaping paths); the archive reader is issue 69 item 3's",
}
_WRITE_FLAGS = {"O_CREAT", "O_TRUNC", "O_WRONLY", "O_RDWR", "O_APPEND"}
_PATH_METHODS = {"write_text", "write_bytes", "touch", "mkdir", "symlink_to", "hardlink_to", "extractall"}
_OS_CALLS = {"mkdir", "makedirs", "symlink", "link", "replace", "rename", "truncate"}
_SHUTIL_CALLS = {"copy", "copy2", "copyfile", "copytree", "move", "copymode", "copystat"}
_STREAM_MODULES = {"gzip", "bz2", "lzma", "tarfile", "io", "codecs"}  # X.open(path, mode)
# Writers whose target may be a path: the index of that argument, and its keyword names.
_TARGET_ARG = {
    "savefig": (0, {"fname"}), "savetxt": (0, {"fname"}), "savez": (0, {"file"}), "savez_compressed": (0, {"file"}),
    "to_csv": (0, {"path_or_buf"}), "to_json": (0, {"path_or_buf"}), "to_parquet": (0, {"path"}),
    "to_pickle": (0, {"path"}), "to_excel": (0, {"excel_writer"}), "to_feather": (0, {"path"}),
    "to_hdf": (0, {"path_or_buf"}), "to_latex": (0, {"buf"}), "to_html": (0, {"buf"}), "to_string": (0, {"buf"}),
    "dump": (1, {"fp", "file", "stream"}), "safe_dump": (1, {"stream"}),
}  # fmt: skip


def _mode_writes(node: ast.expr | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(c in node.value for c in "wax+")
    return True  # not a literal: cannot be shown to read


def _arg(call: ast.Call, index: int, names: set[str]) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg in names:
            return kw.value
    return call.args[index] if len(call.args) > index else None


def _flag_names(node: ast.expr) -> set[str] | None:
    """The os.O_* names or-ed together in `node`; None when something else is in it."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _flag_names(node.left), _flag_names(node.right)
        return None if left is None or right is None else left | right
    if isinstance(node, ast.Attribute) and node.attr.startswith("O_"):
        return {node.attr}
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) >= 2:
        value = node.args[1]
        return {value.value} if isinstance(value, ast.Constant) else None
    return None


def _handles(tree: ast.AST) -> set[str]:
    """Names that hold a file object: `with ... as NAME` targets and in-memory buffers."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
            names.add(node.optional_vars.id)
        elif isinstance(node, ast.Assign) and _in_memory(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _in_memory(node: ast.expr) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in ("BytesIO", "StringIO")
    return isinstance(node, ast.Attribute) and node.attr in ("stdout", "stderr")


def _writes(call: ast.Call, handles: set[str]) -> str | None:
    """Why `call` writes to a path outside the layer, or None."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
    if name == "open" and owner == "os":
        flags = _flag_names(_arg(call, 1, {"flags"}) or ast.Constant(0))
        return "os.open writing" if flags is None or flags & _WRITE_FLAGS else None
    if name == "open" and not any(kw.arg == "fileobj" for kw in call.keywords):
        index = 1 if isinstance(func, ast.Name) or owner in _STREAM_MODULES else 0  # open(path, mode); Path.open(mode)
        return f"{owner + '.' if owner else ''}open for writing" if _mode_writes(_arg(call, index, {"mode"})) else None
    if name == "ZipFile":
        return "zipfile.ZipFile for writing" if _mode_writes(_arg(call, 1, {"mode"})) else None
    if name in _PATH_METHODS and owner not in ("os", "shutil"):
        return f".{name}()"
    if owner == "os" and name in _OS_CALLS or owner == "shutil" and name in _SHUTIL_CALLS:
        return f"{owner}.{name}"
    if name == "save" or name in _TARGET_ARG:
        index, names = (1, {"f"}) if owner == "torch" else (0, {"file"}) if name == "save" else _TARGET_ARG[name]
        target = _arg(call, index, names)
        handle = target is None or _in_memory(target) or isinstance(target, ast.Name) and target.id in handles
        return None if handle else f"{owner + '.' if owner else '.'}{name} to a path"
    return None


def bare_writes(source: str, rel: str) -> list[str]:
    """Each write in `source` (the module at `rel` under the package) that bypasses the layer."""
    tree = ast.parse(source)
    handles = _handles(tree)
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call) and (why := _writes(child, handles)) and (rel, function) not in EXCEPTIONS:
                found.append(f"{rel}:{child.lineno} {why}")
            visit(child, inner)

    visit(tree, "")
    return found


def test_no_write_in_the_package_bypasses_the_safe_layer():
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR).as_posix()
        if rel != LAYER:
            found += bare_writes(path.read_text(), rel)
    assert not found, "write through core.safe_io (atomic_write, open_log, open_fd, make_dir, move): " + str(found)


PLANTED = textwrap.dedent(
    """
    import io, json, os, shutil, tarfile, zipfile, torch
    from pathlib import Path

    def writes(path, fd_flags, mode, df, fig, obj):
        open(path, "w")
        open(path, mode)
        open(path, "ab")
        open(path, "r+")
        Path(path).open("x")
        Path(path).write_text("x")
        path.write_bytes(b"x")
        path.touch()
        path.mkdir(parents=True)
        os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.open(path, fd_flags)
        os.makedirs(path)
        os.replace(path, path)
        shutil.copyfile(path, path)
        shutil.move(path, path)
        tarfile.open(path, "w:gz")
        zipfile.ZipFile(path, "w")
        torch.save(obj, path)
        df.to_csv(path)
        fig.savefig(path)
        json.dump(obj, open(path))
    """
)
READS = textwrap.dedent(
    """
    import io, json, os, sys, tarfile, torch
    from pathlib import Path
    from ddpbench.core import safe_io

    def reads(path, df, fig, obj):
        open(path)
        open(path, "rb")
        Path(path).open()
        os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        tarfile.open(path, "r:*")
        buf = io.BytesIO()
        fig.savefig(buf, format="svg")
        df.to_csv(index=False)
        json.dump(obj, sys.stdout)
        with safe_io.atomic_write(path, "wb") as handle, tarfile.open(fileobj=handle, mode="w:gz") as tar:
            torch.save(obj, handle)
            df.to_csv(handle)
    """
)


def test_the_rule_catches_each_planted_write_and_passes_reads():
    found = bare_writes(PLANTED, "planted.py")
    assert len(found) == 21, found  # every call in `writes` (json.dump's target is no handle; its open(path) reads)
    assert any("open for writing" in f for f in found) and any("os.open writing" in f for f in found)
    assert any(".write_text()" in f for f in found) and any("torch.save to a path" in f for f in found)
    assert bare_writes(READS, "reads.py") == []


def test_an_exception_is_one_function_of_one_file():
    source = "def _reset_peak():\n    open('/proc/self/clear_refs', 'w')\ndef other():\n    open('x', 'w')\n"
    assert bare_writes(source, "run/autobatch.py") == ["run/autobatch.py:4 open for writing"]


# -- the workflow's writes under its results folder ----------------------------------------------
# A folder of the results folder replaced by a link after the workflow's start-of-run check must
# not be followed by any later write (docs/security.md, "The safe file layer").

RULES = sorted((REPO_ROOT / "workflow" / "rules").glob("*.smk"))
# The verbs whose rules write under the results folder outside run folders: each is told it
# (--results; the launcher derives it from its run folder, layout.results_of_run).
TOLD_RESULTS = ("aggregate", "report", "decide", "data", "archive")


def _rules(text: str) -> dict[str, str]:
    """Each rule's or checkpoint's text, by name."""
    parts = re.split(r"^(?:rule|checkpoint) (\w+):\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def _shell(rule: str) -> str:
    """The text of a rule's shell: block (up to the next keyword at its indentation, or the end)."""
    found = re.search(r"^    shell:\n(.*?)(?=^    \w+:|^\S|\Z)", rule, flags=re.M | re.S)
    return found.group(1) if found else ""


def _calls(text: str, names: tuple[str, ...]) -> list[str]:
    """Each call of one of `names` in `text`, its arguments included (balanced parentheses)."""
    calls = []
    for match in re.finditer(r"\b(" + "|".join(map(re.escape, names)) + r")\(", text):
        depth, end = 1, match.end()
        while depth and end < len(text):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        calls.append(text[match.start() : end])
    return calls


def test_no_rule_writes_through_a_shell_redirection():
    """A shell's `>` opens its file following every link (O_TRUNC, no O_NOFOLLOW): a job's output
    and log are written by its verb (--log, --record), through the safe layer."""
    found = [f"{path.name}: {name}" for path in RULES for name, rule in _rules(path.read_text()).items()
             if ">" in _shell(rule)]  # fmt: skip
    assert not found, found


def test_each_verb_writing_under_the_results_folder_is_told_it():
    shells = {name: _shell(rule) for path in RULES for name, rule in _rules(path.read_text()).items()}
    calls = {verb: [n for n, s in shells.items() if f"python -m ddpbench {verb} " in s] for verb in TOLD_RESULTS}
    assert all(calls.values()), calls  # each verb has its rule (the check below looks at something)
    untold = [n for names in calls.values() for n in names if "--results {params.results:q}" not in shells[n]]
    assert not untold, f"rules whose verb writes under the results folder without --results: {untold}"


def test_the_workflows_own_writes_are_anchored_at_the_results_folder():
    """onstart's writes (the config, invocations.log, the plan file, the progress file) pass
    root=RESULTS, and no .smk file writes past the layer."""
    writers = ("atomic_write_text", "atomic_write", "open_log", "open_fd", "make_dir", "move", "progress.start")
    calls = [(path.name, call) for path in RULES for call in _calls(path.read_text(), writers)]
    assert len(calls) >= 4, calls
    assert [c for c in calls if "root=RESULTS" not in c[1]] == []
    bare = [(path.name, w) for path in RULES for w in (".mkdir(", ".write_text(", "open(") if w in path.read_text()]
    assert bare == [], bare
