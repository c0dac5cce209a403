"""Each axis declares what it adds to a run's launch (issue 70, item 2): a CellParams field's `launch`
(core.params.LaunchCost) is what the plan's estimate adds for it, in its numbers and its words, so that
adding an axis with a start-up cost is one declaration in core/params.py and no edit to plan/estimate.py."""

import ast
import dataclasses

import pytest

from ddpbench.core import params
from ddpbench.core.params import LAUNCH_COSTS, CellParams, LaunchCost
from ddpbench.plan import estimate

pytestmark = pytest.mark.unit

HOST = "bench-host"
QUIET = (0.0, "")


def cell(**changes):
    return {**CellParams().as_dict(), "world_size": 2, "strategy": "ddp", "min_timed_s": 0.0, **changes}


def declared(name: str) -> LaunchCost:
    return {f.name: f for f in dataclasses.fields(CellParams)}[name].metadata["launch"]


def plain_runs(p):
    """Two measured runs of `p`'s model and world size with no axis adding to their launch."""
    model, world = (p["model"], p["synthetic_shape"]), p["world_size"]
    return [estimate.MeasuredRun(("cpu", ()), model, world, 32.0, s, s, 1.0, None, None, "r") for s in (4.0, 6.0)]


def test_the_axes_that_cost_a_launch_are_the_fields_that_declare_one():
    assert set(LAUNCH_COSTS) == {"compile", "link"}
    assert all(isinstance(c, LaunchCost) and c.seconds > 0 and c.what for c in LAUNCH_COSTS.values())
    assert params.launch_costs(cell()) == {}
    assert list(params.launch_costs(cell(compile="model", link="1gbit"))) == ["compile", "link"]
    assert list(params.launch_costs({})) == []  # a field a cell lacks is at its default


def test_a_compiled_cell_costs_what_the_compile_field_declares():
    eager, compiled = cell(), cell(compile="model")
    seconds = declared("compile").seconds
    assert estimate.default_run_s(compiled, 2)[0] - estimate.default_run_s(eager, 2)[0] == seconds
    # learned from plain runs only: their launch cost plus what the field declares
    runs = plain_runs(eager)
    learned = estimate.learned_run_s(compiled, runs, 2)[0] - estimate.learned_run_s(eager, runs, 2)[0]
    assert learned == pytest.approx(seconds)


def test_a_cell_over_a_link_starts_cold_and_adds_what_the_link_field_declares():
    one, lab = cell(), cell(link="1gbit")
    link = declared("link")
    assert link.cold and estimate.default_run_s(lab, 2)[0] == estimate.COLD_RUN_S + link.seconds
    assert estimate.default_run_s(one, 2)[0] == estimate.FIXED_RUN_S


def test_the_plan_names_what_each_declared_axis_adds(tmp_path):
    cells = [cell(), cell(compile="model"), cell(link="1gbit")]
    line = estimate.time_estimate(cells, 1, 3, tmp_path / "results", host=HOST, now=QUIET, folders=[])
    for c in LAUNCH_COSTS.values():
        assert f"(+ {c.seconds:g} s {c.what})" in line, line


def test_a_new_axis_with_a_start_up_cost_is_one_declaration(monkeypatch, tmp_path):
    """A field that declares a launch cost is priced, kept apart from plain runs and named, with no edit to
    the estimate (profile_steps stands in for a new axis)."""
    monkeypatch.setitem(LAUNCH_COSTS, "profile_steps", LaunchCost(2.5, lambda v: int(v) > 0, "a profiled cell"))
    plain, profiled = cell(), cell(profile_steps=3)
    assert estimate.default_run_s(profiled, 2)[0] - estimate.default_run_s(plain, 2)[0] == 2.5
    assert estimate._kind(profiled) == ("cpu", ("profile_steps",)) != estimate._kind(plain)
    line = estimate.time_estimate([profiled], 1, 1, tmp_path / "results", host=HOST, now=QUIET, folders=[])
    assert "(+ 2.5 s a profiled cell)" in line, line


def test_the_estimate_names_no_axis_that_declares_a_launch_cost():
    """What an axis adds is read from its declaration: plan/estimate.py spells none of those fields (by
    string or name), nor their values' constants (NO_LINK, COMPILE_MODES)."""
    tree = ast.parse(open(estimate.__file__).read())
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not strings & set(LAUNCH_COSTS), strings & set(LAUNCH_COSTS)
    assert not names & {"NO_LINK", "COMPILE_MODES", "LINK_PATTERN"}, names
    # ... and a run's words in the plan come from the declarations too
    assert not [s for s in strings if any(c.what in s for c in LAUNCH_COSTS.values())]
