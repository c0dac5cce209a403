#!/usr/bin/env python3
"""A small mutation-testing runner (stdlib only): one AST change at a time, the module's
unit tests run against each, and a markdown report of the score and the survivors.

    python scripts/mutation.py                                  # every module in MODULES
    python scripts/mutation.py --module src/ddpbench/results/aggregate.py --jobs 2
    python scripts/mutation.py --module src/ddpbench/analysis/cost_model.py --max-mutants 150

Why not mutmut: it mutates the checkout in place, and several people may share one
working tree; this runner copies src/, tests/ and what the tests read into a temporary
folder once (one copy per job) and mutates only there, with PYTHONPATH pointing at the
copy's src (checked: `ddpbench.__file__` must lie inside the copy).

Score = killed / (mutants - documented equivalent). A mutant is killed when the tests
fail or time out. Equivalent mutants are listed in tests/mutation_equivalent.txt as
`module | line | mutation | why`, one a line.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import dataclasses
import os
import pathlib
import queue
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
EQUIVALENT_FILE = ROOT / "tests" / "mutation_equivalent.txt"
DEFAULT_REPORT = ROOT / "results" / "mutation" / "report.md"
# What the tests need from the repository (schema, report templates, configs are read by path).
COPIED = ("src", "tests", "pyproject.toml", "config.yaml", "configs", "workflow", "report")

# module -> the tests that pin it, and optionally the functions/classes mutated (None: all).
MODULES: dict[str, dict] = {
    "src/ddpbench/results/aggregate.py": {"tests": ["tests/unit/test_aggregate.py"], "scope": None},
    # metrics.py until the regroup (ceb7daa): what a run writes, and the step timers
    **{f"src/ddpbench/core/{name}.py": {"tests": ["tests/unit/test_metrics.py", "tests/unit/test_train.py"], "scope": None}
       for name in ("run_output", "timers")},
    **{
        f"src/ddpbench/analysis/{name}.py": {
            "tests": ["tests/unit/test_analysis.py", "tests/unit/test_interval_coverage.py"]
            + (["tests/unit/test_links.py"] if name == "links" else []),
            "scope": None,
        }
        for name in ("tables", "intervals", "health", "cells", "scaling", "fits", "cost_model", "links", "breakdowns")
    },
    # The byte/call accounting only: the hooks' default bodies are exercised by the
    # integration tests (torchrun), not by unit tests.
    "src/ddpbench/strategies/base.py": {
        "tests": ["tests/unit/test_strategies.py"],
        "scope": {"gradients", "buckets", "BucketedSum", "allreduce_bytes", "nbytes", "state_bytes", "Strategy.unsupported"},
    },
}

SWAP_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
              ast.LShift: ast.RShift}  # fmt: skip
SWAP_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
            ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}  # fmt: skip
SWAP_NAME = {"all": "any", "any": "all", "min": "max", "max": "min"}
SWAP_ATTR = {"median": "fmean", "fmean": "median", "mean": "median", "nanmedian": "nanmean", "nanmean": "nanmedian"}


@dataclasses.dataclass(frozen=True)
class Mutant:
    module: str
    line: int
    col: int
    end_line: int
    end_col: int
    what: str  # e.g. "Add->Sub": the key of the equivalent-mutants file
    replacement: str  # source text that replaces the node's segment
    original: str  # the node's original source text

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.module, self.line, self.what)


# -- generating mutants ------------------------------------------------------------------


def _name(op: type) -> str:
    return op.__name__


def _const_mutation(value):
    """n -> n+1 (0 <-> 1), floats c -> c*0.9 (0.0 -> 1.0), True <-> False; None: not mutated."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return {0: 1, 1: 0}.get(value, value + 1)
    if isinstance(value, float):
        return 1.0 if value == 0 else value * 0.9
    return None


def _mutations(node: ast.AST):
    """(description, mutated copy of the node) for every mutation of one node."""
    import copy

    def with_(**changes):
        new = copy.deepcopy(node)
        for k, v in changes.items():
            setattr(new, k, v)
        return new

    if isinstance(node, ast.BinOp) and type(node.op) in SWAP_BINOP:
        new_op = SWAP_BINOP[type(node.op)]
        yield f"{_name(type(node.op))}->{_name(new_op)}", with_(op=new_op())
    elif isinstance(node, ast.AugAssign) and type(node.op) in SWAP_BINOP:
        new_op = SWAP_BINOP[type(node.op)]
        yield f"Aug{_name(type(node.op))}->Aug{_name(new_op)}", with_(op=new_op())
    elif isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in SWAP_CMP:
                ops = list(node.ops)
                ops[i] = SWAP_CMP[type(op)]()
                yield f"{_name(type(op))}->{_name(type(ops[i]))}", with_(ops=ops)
    elif isinstance(node, ast.BoolOp):
        new_op = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield f"{_name(type(node.op))}->{_name(new_op)}", with_(op=new_op())
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        yield f"drop-{_name(type(node.op))}", node.operand
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SWAP_NAME:
        yield f"{node.func.id}->{SWAP_NAME[node.func.id]}", with_(func=ast.Name(SWAP_NAME[node.func.id], ast.Load()))
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SWAP_ATTR:
        func = copy.deepcopy(node.func)
        func.attr = SWAP_ATTR[node.func.attr]
        yield f"{node.func.attr}->{func.attr}", with_(func=func)
    elif isinstance(node, ast.Constant):
        new = _const_mutation(node.value)
        if new is not None:
            yield f"{node.value!r}->{new!r}", ast.Constant(new)
    elif isinstance(node, ast.Continue):
        yield "continue->break", ast.Break()
    elif isinstance(node, ast.Break):
        yield "break->continue", ast.Continue()
    elif isinstance(node, ast.Return) and node.value is not None:
        if not (isinstance(node.value, ast.Constant) and node.value.value is None):
            yield "return->None", ast.Return(ast.Constant(None))


class _Collector(ast.NodeVisitor):
    """Walks the module, remembering the enclosing Class.function, skipping what is not
    behaviour: docstrings, annotations, f-strings (odd positions in 3.11), decorators."""

    def __init__(self, scope: set[str] | None):
        self.scope, self.stack, self.nodes = scope, [], []

    def _in_scope(self) -> bool:
        if self.scope is None:
            return True
        return any(".".join(self.stack[: i + 1]) in self.scope for i in range(len(self.stack)))

    def _visit_def(self, node):
        self.stack.append(node.name)
        for default in [*node.args.defaults, *[d for d in node.args.kw_defaults if d is not None]]:
            self.visit(default)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        for stmt in body:
            self.visit(stmt)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _visit_def

    def visit_ClassDef(self, node):
        self.stack.append(node.name)
        for stmt in node.body:
            self.visit(stmt)
        self.stack.pop()

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self.visit(node.value)

    def visit_JoinedStr(self, node):
        pass

    def generic_visit(self, node):
        if self._in_scope() and getattr(node, "end_col_offset", None) is not None:
            self.nodes.append(node)
        super().generic_visit(node)

    def visit_Expr(self, node):  # a bare string statement (docstring-like) is not mutated
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            self.generic_visit(node)


def _offset(lines: list[str], line: int, col: int) -> int:
    """Character offset of (1-based line, UTF-8 byte column) in the source."""
    before = sum(len(x) for x in lines[: line - 1])
    return before + len(lines[line - 1].encode()[:col].decode())


def generate(module: str, source: str, scope: set[str] | None) -> list[Mutant]:
    tree = ast.parse(source)
    collector = _Collector(scope)
    collector.visit(tree)
    lines = source.splitlines(keepends=True)
    mutants, seen = [], {}
    for node in collector.nodes:
        for what, new in _mutations(node):
            # The same mutation twice on one line: number it, so the key stays unique.
            seen[(node.lineno, what)] = n = seen.get((node.lineno, what), 0) + 1
            what = what if n == 1 else f"{what} #{n}"
            start = _offset(lines, node.lineno, node.col_offset)
            end = _offset(lines, node.end_lineno, node.end_col_offset)
            text = ast.unparse(new)
            # Parentheses keep an expression's precedence wherever it is spliced in.
            replacement = text if isinstance(node, ast.stmt) else f"({text})"
            mutated = source[:start] + replacement + source[end:]
            try:
                compile(mutated, module, "exec")
            except SyntaxError:
                continue  # e.g. `break` outside a loop
            mutants.append(
                Mutant(module, node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, what, replacement,
                       source[start:end])  # fmt: skip
            )
    return mutants


def apply(source: str, m: Mutant) -> str:
    lines = source.splitlines(keepends=True)
    start, end = _offset(lines, m.line, m.col), _offset(lines, m.end_line, m.end_col)
    return source[:start] + m.replacement + source[end:]


# -- running ---------------------------------------------------------------------------------


def make_copy() -> pathlib.Path:
    """A private copy of what the tests need; nothing in the checkout is ever written."""
    dest = pathlib.Path(tempfile.mkdtemp(prefix="ddpbench-mutation-"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


def _env(copy: pathlib.Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(copy / "src")  # ahead of the editable install's .pth entry
    # No bytecode: a mutant of the same size written within one second would reuse a stale .pyc.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def check_copy_is_imported(copy: pathlib.Path) -> None:
    out = subprocess.run([sys.executable, "-c", "import ddpbench; print(ddpbench.__file__)"], cwd=copy,
                         env=_env(copy), capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    if not pathlib.Path(out).resolve().is_relative_to(copy.resolve()):
        raise SystemExit(f"tests would import {out}, not the copy in {copy}")


def run_tests(copy: pathlib.Path, tests: list[str], timeout: float) -> str:
    """'killed', 'survived' or 'timeout' for the module file as it is now in the copy."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        proc = subprocess.run(cmd, cwd=copy, env=_env(copy), capture_output=True, timeout=timeout,
                              start_new_session=True)  # fmt: skip
    except subprocess.TimeoutExpired:
        return "timeout"
    return "survived" if proc.returncode == 0 else "killed"


def _write_atomic(path: pathlib.Path, text: bytes) -> None:
    tmp = path.with_name(f".{path.name}.mutant.{os.getpid()}")
    tmp.write_bytes(text)
    os.replace(tmp, path)


def run_mutant(copy: pathlib.Path, m: Mutant, original: bytes, tests: list[str], timeout: float) -> str:
    path = copy / m.module
    try:
        _write_atomic(path, apply(original.decode(), m).encode())
        return run_tests(copy, tests, timeout)
    finally:
        _write_atomic(path, original)
        if path.read_bytes() != original:  # never go on with a mutated module
            raise RuntimeError(f"{path} was not restored")


# -- equivalent mutants and the report ----------------------------------------------------------


def load_equivalent(path: pathlib.Path = EQUIVALENT_FILE) -> dict[tuple[str, int, str], str]:
    """`module | line | mutation | why` lines; '#' starts a comment."""
    known = {}
    if not path.exists():
        return known
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):  # whole-line comments only: "1->0 #2" is a name
            continue
        module, lineno, what, why = (p.strip() for p in line.split("|", 3))
        if not why:
            raise SystemExit(f"{path}: an equivalent mutant needs a reason: {raw}")
        known[(module, int(lineno), what)] = why
    return known


def module_section(module: str, results: list[tuple[Mutant, str]], equivalent: dict, total: int,
                   seconds: float) -> tuple[str, list[str]]:  # fmt: skip
    counts = {k: sum(1 for _, s in results if s == k) for k in ("killed", "timeout", "survived", "equivalent")}
    scored = len(results) - counts["equivalent"]
    score = 100.0 * (counts["killed"] + counts["timeout"]) / scored if scored else 100.0
    sampled = "all" if len(results) == total else f"{len(results)} of {total} (sampled)"
    row = (f"| `{module}` | {sampled} | {counts['killed']} | {counts['timeout']} | {counts['survived']} | "
           f"{counts['equivalent']} | **{score:.1f} %** | {seconds:.0f} s |")  # fmt: skip
    lines = [f"### `{module}`", ""]
    survivors = [m for m, s in results if s == "survived"]
    lines += [f"Surviving mutants: {len(survivors)}", ""]
    for m in survivors:
        lines.append(f"- L{m.line} `{m.what}`: `{_short(m.original)}` → `{_short(m.replacement)}`")
    equiv = [m for m, s in results if s == "equivalent"]
    if equiv:
        lines += ["", "Documented equivalent (not scored):", ""]
        lines += [f"- L{m.line} `{m.what}`: {equivalent[m.key]}" for m in equiv]
    if len(results) == total:  # an entry no mutant matches: the code moved, re-judge it
        run = {m.key for m, _ in results}
        stale = [k for k in equivalent if k[0] == module and k not in run]
        if stale:
            lines += ["", "Unused entries of the equivalent-mutants file (line moved?):", ""]
            lines += [f"- L{line} `{what}`" for _, line, what in stale]
    return row, lines + [""]


def _short(text: str, limit: int = 90) -> str:
    text = " ".join(text.split()).replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", action="append", choices=sorted(MODULES), help="module to mutate (repeatable; default: all)")
    parser.add_argument("--max-mutants", type=int, help="a deterministic sample of at most N mutants per module")
    parser.add_argument("--jobs", type=int, default=1, help="mutants tested in parallel (one copy each)")
    parser.add_argument("--timeout", type=float, help="seconds per mutant (default: 5x the unmutated run + 10)")
    parser.add_argument("--report", type=pathlib.Path, default=DEFAULT_REPORT, help="markdown report to write")
    parser.add_argument("--list", action="store_true", help="only list the mutants")
    args = parser.parse_args(argv)

    equivalent = load_equivalent()
    modules = args.module or list(MODULES)
    copies: queue.Queue[pathlib.Path] = queue.Queue()
    if not args.list:
        for _ in range(max(1, args.jobs)):
            copies.put(make_copy())
    rows, sections = [], []
    try:
        for module in modules:
            cfg = MODULES[module]
            original = (ROOT / module).read_bytes()
            mutants = generate(module, original.decode(), cfg["scope"])
            total = len(mutants)
            if args.max_mutants and total > args.max_mutants:
                mutants = sorted(random.Random(0).sample(mutants, args.max_mutants), key=lambda m: (m.line, m.col))
            if args.list:
                for m in mutants:
                    print(f"{module}:{m.line}: {m.what}: {_short(m.original)} -> {_short(m.replacement)}")
                continue
            rows_for, seconds = _run_module(module, cfg, mutants, original, equivalent, copies, args)
            row, lines = module_section(module, rows_for, equivalent, total, seconds)
            rows.append(row)
            sections += lines
    finally:
        while not copies.empty():
            shutil.rmtree(copies.get(), ignore_errors=True)
    if args.list:
        return 0
    header = ["# Mutation testing", "", f"`python scripts/mutation.py` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).",
              "Score = (killed + timeout) / (mutants - documented equivalent).", "",
              "| module | mutants | killed | timeout | survived | equivalent | score | time |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text("\n".join(header + rows + [""] + sections))
    print("\n".join(rows))
    print(f"[mutation] report: {args.report}")
    return 0


def _run_module(module, cfg, mutants, original, equivalent, copies, args):
    """Baseline first (the tests must pass unmutated), then every mutant."""
    start = time.monotonic()
    copy = copies.get()
    try:
        check_copy_is_imported(copy)
        t0 = time.monotonic()
        if run_tests(copy, cfg["tests"], timeout=600) != "survived":
            raise SystemExit(f"{module}: its tests fail without any mutation: {' '.join(cfg['tests'])}")
        baseline = time.monotonic() - t0
    finally:
        copies.put(copy)
    timeout = args.timeout or 5 * baseline + 10

    def one(m: Mutant) -> tuple[Mutant, str]:
        if m.key in equivalent:
            return m, "equivalent"
        copy = copies.get()
        try:
            return m, run_mutant(copy, m, original, cfg["tests"], timeout)
        finally:
            copies.put(copy)

    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for i, (m, status) in enumerate(pool.map(one, mutants), 1):
            results.append((m, status))
            print(f"[{i}/{len(mutants)}] {module}:{m.line} {m.what}: {status}", flush=True)
    return results, time.monotonic() - start


if __name__ == "__main__":
    sys.exit(main())
