"""Reading a file that may come from someone else (a received results folder or archive) within
bounds: a regular file (a FIFO or a device at its name would block the reader or never end), of
at most a given size, and JSON or YAML of at most a given nesting depth or number of values (a
200 kB file of nested `[` stopped `snakemake -n` with a RecursionError; a YAML file of aliases
can stand for more values than memory holds). Each refusal is a ValueError naming the file and
the bound it passed.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any


def read_bytes(path: str | os.PathLike, max_bytes: int) -> bytes:
    """The contents of `path`, a regular file of at most `max_bytes`; OSError where it cannot be
    opened (FileNotFoundError where it is not there), ValueError where it is no regular file or larger."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO does not block the open
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: not a regular file")
        data = f.read(max_bytes + 1) if st.st_size <= max_bytes else b"x" * (max_bytes + 1)  # too large: not read
    if len(data) > max_bytes:
        raise ValueError(f"{path}: larger than the {max_bytes:,} bytes it may have")
    return data


def depth(value: Any, max_depth: int) -> int:
    """How deeply `value` (parsed JSON or YAML) nests lists and mappings, counted without recursion;
    stops counting past `max_depth` (returns max_depth + 1)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        node, level = todo.pop()
        if isinstance(node, (list, dict)):
            deepest = max(deepest, level)
            if deepest > max_depth:
                return deepest
            todo.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def read_json(path: str | os.PathLike, max_bytes: int, max_depth: int) -> Any:
    """JSON from `path` within `max_bytes` and `max_depth` (read_bytes, depth); ValueError naming
    the file and the bound otherwise."""
    data = read_bytes(path, max_bytes)
    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError(f"{path}: nested deeper than the {max_depth} levels it may have") from None
    if depth(value, max_depth) > max_depth:
        raise ValueError(f"{path}: nested deeper than the {max_depth} levels it may have")
    return value


def values(value: Any, most: int) -> int:
    """How many values `value` (parsed YAML) holds, each alias counted at every place it is used
    (as a consumer walking it would meet them), counted without recursion and only up to `most` + 1."""
    seen, todo = 0, [value]
    while todo and seen <= most:
        node = todo.pop()
        seen += 1
        if isinstance(node, dict):
            todo.extend(node.keys())
            todo.extend(node.values())
        elif isinstance(node, (list, tuple)):
            todo.extend(node)
    return seen


def read_yaml(path: str | os.PathLike, max_bytes: int, max_values: int, max_depth: int) -> Any:
    """YAML from `path` (safe_load) within `max_bytes`, `max_values` (aliases counted where used)
    and `max_depth`; ValueError naming the file and the bound otherwise."""
    import yaml

    text = read_bytes(path, max_bytes)
    try:
        value = yaml.safe_load(text)
    except RecursionError:
        raise ValueError(f"{path}: nested deeper than the {max_depth} levels it may have") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not YAML ({str(err).splitlines()[0]})") from None
    if values(value, max_values) > max_values:  # first: the depth's walk then meets at most as many
        raise ValueError(f"{path}: more than the {max_values:,} values it may hold (aliases counted where used)")
    if depth(value, max_depth) > max_depth:
        raise ValueError(f"{path}: nested deeper than the {max_depth} levels it may have")
    return value
