"""Where the suite's time goes: wall and CPU seconds per part (marker folder) and per file,
printed at the end of every run; `--suite-times FILE` also saves them as JSON, and
`python scripts/suite_times.py A.json [B.json]` turns one or two such files into the
before/after table of docs/testing.md.

CPU is this process's and its waited-for children's (torchrun, snakemake and their ranks),
so CPU/wall tells a test that computes from one that waits (sleeps, timeouts, I/O); under
pytest-xdist each worker measures its own tests and the controller adds them up.
"""

from __future__ import annotations

import collections
import json
import resource
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_addoption(parser):
    parser.addoption("--suite-times", metavar="FILE", help="save wall and CPU seconds per test, file and part as JSON")


def _cpu_of(phase: str):
    """A hookwrapper for one phase (setup, call, teardown): its CPU seconds as a user property."""

    @pytest.hookimpl(hookwrapper=True)
    def wrapper(item):
        start = _cpu()
        yield
        item.user_properties.append((f"cpu_{phase}", _cpu() - start))

    return wrapper


pytest_runtest_setup = _cpu_of("setup")
pytest_runtest_call = _cpu_of("call")
pytest_runtest_teardown = _cpu_of("teardown")


class Recorder:
    def __init__(self, config):
        self.config = config
        self.tests: dict[str, dict] = {}
        self.started = time.monotonic()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report):
        test = self.tests.setdefault(report.nodeid, {"wall_s": 0.0, "cpu_s": 0.0})
        test["wall_s"] += report.duration
        test["cpu_s"] += sum(v for k, v in report.user_properties if k == f"cpu_{report.when}")

    def summary(self) -> dict:
        by_part, by_file = collections.defaultdict(_zero), collections.defaultdict(_zero)
        for nodeid, t in self.tests.items():
            path = nodeid.split("::", 1)[0]
            part = Path(path).parts[1] if path.startswith("tests/") else path
            for table, key in ((by_part, part), (by_file, path)):
                table[key]["tests"] += 1
                table[key]["wall_s"] += t["wall_s"]
                table[key]["cpu_s"] += t["cpu_s"]
        return {
            "session_wall_s": time.monotonic() - self.started,
            "parts": dict(by_part),
            "files": dict(by_file),
            "tests": self.tests,
        }

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter):
        if not self.tests:
            return
        summary = self.summary()
        write = terminalreporter.write_line
        terminalreporter.section("time by part and file (wall = sum of tests' durations; CPU incl. children)")
        write(f"{'':44s} {'tests':>6s} {'wall s':>8s} {'CPU s':>8s} {'CPU/wall':>8s}")
        for title, table, limit in (("part", summary["parts"], None), ("file", summary["files"], 20)):
            rows = sorted(table.items(), key=lambda kv: -kv[1]["wall_s"])[:limit]
            for name, t in rows:
                ratio = t["cpu_s"] / t["wall_s"] if t["wall_s"] else 0.0
                write(f"{title} {name:39.39s} {t['tests']:6d} {t['wall_s']:8.1f} {t['cpu_s']:8.1f} {ratio:8.2f}")
        write(f"session wall {summary['session_wall_s']:.1f} s")
        path = self.config.getoption("--suite-times")
        if path:
            Path(path).write_text(json.dumps(summary, indent=1))
            write(f"saved to {path}")


def _zero() -> dict:
    return {"tests": 0, "wall_s": 0.0, "cpu_s": 0.0}


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) adds up
        config.pluginmanager.register(Recorder(config), "suite-times-recorder")
