#!/usr/bin/env python3
"""Write envs/ddpbench.yaml (a conda environment) from uv.lock, so it cannot drift.

The environment is what `uv sync --locked --no-dev` installs on Linux x86_64 with
Python 3.11 (the Python of the CPU and CUDA images): every package of the project's
runtime dependency closure, pinned `name==version` under `pip:`. The project itself is
not in it: rules run it from the working copy (`PYTHONPATH=src`) or from an image.

    python scripts/sync_envs.py          # rewrite envs/ddpbench.yaml
    python scripts/sync_envs.py --check  # exit 1 if the file differs from the lock

tests/unit/test_version_drift.py runs the check.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tomllib

from packaging.markers import Marker

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOCK = ROOT / "uv.lock"
ENV_FILE = ROOT / "envs" / "ddpbench.yaml"
PROJECT = "ddpbench"
PYTHON = "3.11"  # the images' Python (Debian bookworm's python3; python3.11 on Ubuntu 22.04)

# The platform the environment is resolved for (markers in the lock are evaluated here).
MARKER_ENV = {
    "python_version": PYTHON,
    "python_full_version": PYTHON + ".2",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "extra": "",
}


def locked_closure(lock_path: pathlib.Path = LOCK, env: dict | None = None) -> dict[str, str]:
    """{name: version} of the project's non-dev dependency closure under `env`."""
    env = {**MARKER_ENV, **(env or {})}
    lock = tomllib.loads(lock_path.read_text())
    by_name: dict[str, list[dict]] = {}
    for pkg in lock["package"]:
        by_name.setdefault(pkg["name"], []).append(pkg)

    def resolve(dep: dict) -> dict:
        candidates = by_name[dep["name"]]
        if "version" in dep:
            candidates = [p for p in candidates if p["version"] == dep["version"]]
        if len(candidates) != 1:
            raise ValueError(f"uv.lock: cannot pick one package for {dep}")
        return candidates[0]

    def applies(dep: dict) -> bool:
        return "marker" not in dep or Marker(dep["marker"]).evaluate(env)

    (project,) = by_name[PROJECT]
    out: dict[str, str] = {}
    todo = [d for d in project.get("dependencies", []) if applies(d)]
    seen_extras: set[tuple[str, str]] = set()
    while todo:
        dep = todo.pop()
        pkg = resolve(dep)
        name = pkg["name"]
        if name in out and out[name] != pkg["version"]:
            raise ValueError(f"uv.lock: {name} needed at {out[name]} and {pkg['version']}")
        new = name not in out
        out[name] = pkg["version"]
        if new:
            todo += [d for d in pkg.get("dependencies", []) if applies(d)]
        for extra in dep.get("extra", []):
            if (name, extra) not in seen_extras:
                seen_extras.add((name, extra))
                deps = pkg.get("optional-dependencies", {}).get(extra, [])
                todo += [d for d in deps if applies(d)]
    return dict(sorted(out.items()))


def env_file_pins(path: pathlib.Path) -> tuple[str | None, dict[str, str]]:
    """(python version, {name: version}) pinned by a conda environment file."""
    import yaml

    deps = yaml.safe_load(path.read_text())["dependencies"]
    python = next((d.split("=", 1)[1] for d in deps if isinstance(d, str) and d.startswith("python=")), None)
    pip = [line for d in deps if isinstance(d, dict) for line in d.get("pip", [])]
    return python, dict(line.split("==", 1) for line in pip)


def render(pins: dict[str, str]) -> str:
    lines = [
        "# Generated from uv.lock by scripts/sync_envs.py -- do not edit by hand.",
        "# The runtime closure of `uv sync --locked --no-dev` on Linux x86_64, Python "
        + PYTHON
        + ".",
        "# tests/unit/test_version_drift.py fails when this file and the lock disagree.",
        "name: ddpbench",
        "channels:",
        "  - conda-forge",
        "  - nodefaults",
        "dependencies:",
        f"  - python={PYTHON}",
        "  - pip",
        "  - pip:",
    ]
    lines += [f"      - {name}=={version}" for name, version in pins.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 on drift")
    args = ap.parse_args(argv)
    pins = locked_closure()
    text = render(pins)
    if args.check:
        # Compare what is pinned, not the text: comments and layout may differ.
        if not ENV_FILE.exists() or env_file_pins(ENV_FILE) != (PYTHON, pins):
            print(f"{ENV_FILE.relative_to(ROOT)} is out of date: run scripts/sync_envs.py")
            return 1
        return 0
    ENV_FILE.parent.mkdir(exist_ok=True)
    ENV_FILE.write_text(text)
    print(f"wrote {ENV_FILE.relative_to(ROOT)} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
