"""The one registry pattern: a package folder, one module per entry, a module-level declaration.

Strategies, models, studies and kinds of finding are each a folder of modules; a module is an entry
when it assigns the registry's declaration at module level (a strategy `STRATEGY`, a model family
`MODELS`, a study `STUDY`, a topic of findings `KINDS`), and adding one is adding a module. This
module finds the entries and reads literal declarations from their source with `ast`, without
importing them, so the plan knows the models and the study names without torch or pandas; the
registry in each package's __init__ imports its entries where it needs them (the report's studies
and findings) or only on demand (a strategy, a model's builder). ddpbench.strategies keeps its own
copy of this reading: its __init__ imports nothing of ddpbench (tests/unit/test_structure.py).
"""

from __future__ import annotations

import ast
import pathlib
import pkgutil
from typing import Any, Iterable

_MISSING = object()


def _assigned(tree: ast.Module, name: str) -> ast.expr | None:
    """The value of the last module-level `name = ...` (or `name: T = ...`) in a parsed module."""
    value = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            value = node.value
        elif isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == name and node.value is not None:
            value = node.value
    return value


def _source(path: Iterable[str | pathlib.Path], module: str) -> pathlib.Path:
    for folder in path:
        if (file := pathlib.Path(folder) / f"{module}.py").is_file():
            return file
    raise LookupError(f"no module {module}.py in {', '.join(map(str, path))}")


def entries(path: Iterable[str | pathlib.Path], declaration: str) -> tuple[str, ...]:
    """The modules on `path` (a package's __path__, or its folder in a list) that assign
    `declaration` at module level, sorted by name: the registry's entries. Read from the source,
    not imported; a module whose name starts with _ is never one."""
    path = [str(p) for p in path]
    found = []
    for m in pkgutil.iter_modules(path):
        if m.name.startswith("_") or m.ispkg:
            continue
        if _assigned(ast.parse(_source(path, m.name).read_text()), declaration) is not None:
            found.append(m.name)
    return tuple(sorted(found))


def declared(path: Iterable[str | pathlib.Path], module: str, declaration: str, default: Any = _MISSING) -> Any:
    """The value of entry `module`'s `declaration`, which must be a literal (numbers, strings,
    tuples, lists, dicts, sets), read from its source without importing it: `default` where the
    module does not assign it (a LookupError if no default is given), a ValueError naming the module
    where the value is not a literal."""
    path = [str(p) for p in path]
    file = _source(path, module)
    value = _assigned(ast.parse(file.read_text()), declaration)
    if value is None:
        if default is _MISSING:
            raise LookupError(f"{file} assigns no {declaration}")
        return default
    try:
        return ast.literal_eval(value)
    except ValueError:
        raise ValueError(f"{file}: {declaration} must be a literal (read without importing the module)") from None
