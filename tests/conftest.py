"""Markers by folder: each part of the suite runs alone with -m unit|integration|workflow.

Under pytest-xdist (`-n 2`, what scripts/test.sh runs) on 2 cores, the work is handed out in units
(`Scheduling` below; docs/testing.md has the measurements):
- every integration test is in one unit, run one after another on one worker: two torchrun
  launches at once put 4-6 ranks on 2 cores, and their collectives then wait on each other's time
  slices (test_training_options alone: 70 s wall, 83 s CPU; split over two workers: 93 s, 171 s);
- a test module is a unit, so a module- or session-scoped fixture (cells launched once, a grid
  run once, a report rendered once) is built once, on the worker that runs its tests;
- the tests of SPREAD, long and independent (each runs its own grid), are units of their own;
- the long units go first (the SPREAD tests, the longest module first, then integration, then
  workflow, faults and cluster, then security, then unit), so the many short ones fill the end
  and no worker waits on a long one at the end (xdist hands the units out in this order).
"""

import os
import pathlib
import tempfile

import pytest

# The fault tests inject faults (DDPBENCH_INJECT); anywhere else a fault variable is refused without
# this opt-in (ddpbench.run.faults.OPT_IN). Every process the tests start inherits it.
os.environ["DDPBENCH_FAULTS"] = "1"
# Cells start warm, as a user's do (ddpbench.run.warm), from servers of the suite's own, shared by
# its workers and retired when the suite ends (`pytest_unconfigure`), not a user's.
os.environ.setdefault("DDPBENCH_WARM_FOLDER", os.path.join(tempfile.gettempdir(), f"ddpbench-warm-tests-{os.getuid()}"))

# wall and CPU seconds per part and file at the end of every run (--suite-times FILE saves them)
pytest_plugins = ["suite_times"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
LONG_FIRST = {"integration": 1, "workflow": 2, "faults": 2, "cluster": 2, "security": 3, "unit": 4}
SPREAD = (  # the longest module first
    "tests/workflow/test_until_decided.py",
    "tests/workflow/test_studies.py",
    "tests/faults/test_workflow_faults.py",
    "tests/faults/test_faults.py",
    "tests/faults/test_storage_faults.py",
)


def part_of(item) -> str:
    return pathlib.Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]


def pytest_collection_modifyitems(config, items):
    for item in items:
        part = part_of(item)
        if part in ("unit", "integration", "workflow", "security", "faults"):
            item.add_marker(getattr(pytest.mark, part))
    items.sort(key=order)  # stable: modules stay whole


def order(item) -> tuple[int, int]:
    path = item.nodeid.split("::", 1)[0]
    if path in SPREAD:
        return 0, SPREAD.index(path)
    return LONG_FIRST.get(part_of(item), len(LONG_FIRST) + 1), 0


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to (see the module's docstring)."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/integration/"):
        return "tests/integration"
    return nodeid if path in SPREAD else path


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):  # the controller (or a run without workers): the suite is over
        from ddpbench.run import warm

        warm.retire_all()


def pytest_configure(config):
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(Scheduling(), "ddpbench-test-scheduling")


class Scheduling:
    """pytest-xdist's loadscope, with the units of `unit_of` (its loadgroup marks do not reach the
    scheduler under pytest 9, which no longer reads the node id that xdist rewrites)."""

    @pytest.hookimpl
    def pytest_xdist_make_scheduler(self, config, log):
        from xdist.scheduler import LoadScopeScheduling

        class ByUnit(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return unit_of(nodeid)

        # loadscope hands out the units with the most tests first unless told not to: the long
        # single-test units then went last, and one worker ran them alone for minutes at the end.
        config.option.loadscopereorder = False
        return ByUnit(config, log)
