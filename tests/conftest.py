"""Markers by folder: each part of the suite runs alone with -m unit|integration|workflow."""

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        part = pathlib.Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]
        if part in ("unit", "integration", "workflow", "security", "faults"):
            item.add_marker(getattr(pytest.mark, part))
