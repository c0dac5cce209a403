"""Markers by folder: each part of the suite runs alone with -m unit|integration|workflow."""

import pathlib

import pytest

# wall and CPU seconds per part and file at the end of every run (--suite-times FILE saves them)
pytest_plugins = ["suite_times"]

ROOT = pathlib.Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        part = pathlib.Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]
        if part in ("unit", "integration", "workflow", "security", "faults"):
            item.add_marker(getattr(pytest.mark, part))
