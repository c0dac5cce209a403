"""The user's own model: a config's `model: "package.module:function"` (docs/models.md).

The contract: `function` is imported from `package.module`, found first in `model_path` (a
folder, relative to the working directory, first on sys.path while the module is imported
and the function called, not after), then in the environment. It is called with keyword
arguments only: `shape=(c, h, w), classes=K` for image data, `vocab_size=V, seq_len=T` for
token data (a function may take `**kwargs` and ignore what it does not need), and returns a `torch.nn.Module` whose output
the cell's loss accepts: logits of shape (N, K) for a batch of N images, (N, T, V) for N
token sequences (a distribution over the vocabulary at each position).

The plan checks a grid's user models before any job starts by running this module in a
subprocess (the planning process has no torch):

    ddpbench check-model --check SPEC [--model-path DIR] --kind image --shape C H W --classes K
    ddpbench check-model --check SPEC [--model-path DIR] --kind tokens --vocab-size V --seq-len T
    ddpbench check-model --check-many < checks.json                # a JSON list of such checks

Each check builds the model, runs a forward pass on a zero batch of one sample and checks
the output's shape; it prints one JSON line per check ({"model", "ok", "parameters"} or
{"model", "ok": false, "error"}) and exits 0 when all pass, 1 when one fails.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn

from ddpbench.core.params import USER_MODEL_PATTERN

KINDS = ("image", "tokens")


def _folder(model_path: str) -> Path | None:
    return Path(model_path).resolve() if model_path else None


@contextlib.contextmanager
def _on_path(folder: Path | None) -> Iterator[None]:
    """`folder` first on sys.path for the duration, then sys.path as it was."""
    if folder is None:
        yield
        return
    saved = list(sys.path)
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path[:] = saved


def _forget_if_elsewhere(module: str, folder: Path | None) -> None:
    """Where `folder` holds the module's top-level package, drop what an earlier import
    loaded from elsewhere (two folders may each hold a `models.py`), so this folder's is
    the one imported. Modules the folder does not hold are left alone."""
    top = module.split(".")[0]
    if folder is None or not ((folder / f"{top}.py").is_file() or (folder / top).is_dir()):
        return
    for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
        origin = getattr(sys.modules[name], "__file__", None)
        if origin and not Path(origin).resolve().is_relative_to(folder):
            del sys.modules[name]


def load(spec: str, model_path: str = "") -> Callable[..., Any]:
    """The function named by `spec` ("package.module:function"); ValueError naming the spec,
    where it was looked for and why it was not found."""
    if not re.fullmatch(USER_MODEL_PATTERN, spec):
        raise ValueError(f"model {spec!r} is not of the form package.module:function")
    module_name, function_name = spec.split(":")
    folder = _folder(model_path)
    where = f"model_path {model_path!r} ({folder}), then the environment" if folder else "the environment"
    if folder is not None and not folder.is_dir():
        raise ValueError(f"model {spec!r}: model_path {model_path!r} ({folder}) is not a folder")
    importlib.invalidate_caches()
    _forget_if_elsewhere(module_name, folder)
    with _on_path(folder):
        try:
            module = importlib.import_module(module_name)
        except (Exception, SystemExit) as err:  # the module's own code may raise anything
            raise ValueError(
                f"model {spec!r}: cannot import module {module_name!r} (searched {where}): {type(err).__name__}: {err}"
            ) from err
    try:
        function = getattr(module, function_name)
    except AttributeError as err:
        raise ValueError(
            f"model {spec!r}: module {module_name!r} ({getattr(module, '__file__', '?')}) has no {function_name!r}"
        ) from err
    if not callable(function):
        raise ValueError(f"model {spec!r}: {function_name!r} in {module_name!r} is a {type(function).__name__}, not a function")
    return function


def build(spec: str, model_path: str = "", **kwargs: Any) -> nn.Module:
    """Call the user's function with `kwargs` (shape=, classes= or vocab_size=, seq_len=);
    ValueError naming the spec when the call fails or returns something that is not a module."""
    function = load(spec, model_path)
    with _on_path(_folder(model_path)):  # for what the function imports when called
        return _call(spec, function, kwargs)


def source_digest(spec: str, model_path: str = "") -> str:
    """The first 16 hex digits of the sha256 of the module file that defines the user's function
    (runs record it as env.user_model_digest: runs of edited model code are never pooled)."""
    import hashlib

    function = load(spec, model_path)
    source = getattr(sys.modules.get(function.__module__), "__file__", None)
    if not source:
        return "unknown"
    return hashlib.sha256(Path(source).read_bytes()).hexdigest()[:16]


def _call(spec: str, function: Callable[..., Any], kwargs: dict[str, Any]) -> nn.Module:
    given = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    try:
        model = function(**kwargs)
    except (Exception, SystemExit) as err:
        raise ValueError(f"model {spec!r} failed when called with {given}: {type(err).__name__}: {err}") from err
    if not isinstance(model, nn.Module):
        raise ValueError(f"model {spec!r} returned a {type(model).__name__} when called with {given}, not a torch.nn.Module")
    return model


def inputs(kind: str, shape: tuple[int, ...] = (), classes: int = 0, vocab_size: int = 0, seq_len: int = 0) -> dict[str, Any]:
    """The keyword arguments of the contract for data of `kind`."""
    if kind == "tokens":
        return {"vocab_size": int(vocab_size), "seq_len": int(seq_len)}
    return {"shape": tuple(int(s) for s in shape), "classes": int(classes)}


def check(spec: str, model_path: str, kind: str, **data: Any) -> int:
    """Build the model (on the meta device, so even a large one costs no memory; on the CPU
    where the meta device fails it), run one forward pass on a zero batch of one sample and
    check the output's shape; returns the parameter count. ValueError naming the spec when
    any of it fails. What the user's code prints goes to stderr."""
    kwargs = inputs(kind, **data)
    if kind == "tokens":
        x_shape, dtype, want = (1, kwargs["seq_len"]), torch.long, (1, kwargs["seq_len"], kwargs["vocab_size"])
    else:
        x_shape, dtype, want = (1, *kwargs["shape"]), torch.float32, (1, kwargs["classes"])
    # model_path is on sys.path only while the module is imported and the function called (load,
    # _on_path), not during the forward: a module there must not shadow one the forward imports.
    with contextlib.redirect_stdout(sys.stderr):
        function = load(spec, model_path)
        for device in ("meta", "cpu"):
            try:
                with torch.device(device), _on_path(_folder(model_path)):
                    model = _call(spec, function, kwargs)
            except ValueError:
                if device == "cpu":
                    raise
                continue
            try:
                with torch.no_grad():
                    out = model.eval()(torch.zeros(x_shape, dtype=dtype, device=device))
                break
            except Exception as err:
                if device == "cpu":
                    raise ValueError(
                        f"model {spec!r}: a forward pass on a zero input of shape {x_shape} ({dtype}) failed: "
                        f"{type(err).__name__}: {err}"
                    ) from err
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        what = "logits over the classes" if kind == "image" else "logits over the vocabulary at each position"
        raise ValueError(f"model {spec!r}: its output for one sample is {got}, expected {want} ({what})")
    return sum(p.numel() for p in model.parameters())


def _run(one: dict[str, Any]) -> dict[str, Any]:
    spec = one["model"]
    try:
        data = {k: one[k] for k in ("shape", "classes", "vocab_size", "seq_len") if k in one}
        params = check(spec, one.get("model_path", ""), one.get("kind", "image"), **data)
    except ValueError as err:
        return {"model": spec, "model_path": one.get("model_path", ""), "ok": False, "error": str(err)}
    return {"model": spec, "model_path": one.get("model_path", ""), "ok": True, "parameters": params}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ddpbench check-model", description="Check a user's model (module.path:function) as the plan does."
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--check", metavar="SPEC", help="the model, package.module:function")
    what.add_argument("--check-many", action="store_true", help="read a JSON list of checks from stdin")
    parser.add_argument("--model-path", default="", help="folder searched first for the module")
    parser.add_argument("--kind", choices=KINDS, default="image", help="image or token data (default image)")
    parser.add_argument("--shape", type=int, nargs=3, metavar=("C", "H", "W"), default=(3, 32, 32))
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--vocab-size", type=int, default=256)
    parser.add_argument("--seq-len", type=int, default=128)
    args = parser.parse_args(argv)
    if args.check_many:
        checks = json.load(sys.stdin)
    else:
        checks = [{
            "model": args.check, "model_path": args.model_path, "kind": args.kind, "shape": args.shape,
            "classes": args.classes, "vocab_size": args.vocab_size, "seq_len": args.seq_len,
        }]  # fmt: skip
    results = [_run(one) for one in checks]
    for result in results:
        print(json.dumps(result), flush=True)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
