"""The plan-time grid logic the workflow calls at include time (ddpbench.plan.grid,
ddpbench.plan.cells, ddpbench.plan.jobs), on real configs and small grids, without
Snakemake."""

import copy
import pathlib
import re
import shlex

import pytest
import yaml

from ddpbench.core.layout import Layout
from ddpbench.core.params import CellParams
from ddpbench.plan import cells as plan_cells
from ddpbench.plan import grid, jobs

ROOT = pathlib.Path(__file__).resolve().parents[2]


def merged(base, over):
    """`over` merged into `base` key by key, as Snakemake merges a --configfile."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def tiny_config():
    """config.yaml with configs/tiny.yaml over it (the keys the grid functions read)."""
    base = yaml.safe_load((ROOT / "config.yaml").read_text())
    config = merged(base, yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text()))
    config.setdefault("exclude", [])
    config.setdefault("baseline", {})
    return config


def planned(config):
    """The include-time sequence of common.smk: axes, checks, fixed/base params, cells."""
    axes = grid.grid_axes(config)
    grid.check_exclusions(config["exclude"], axes)
    grid.check_baseline(config["baseline"], axes)
    fixed = grid.fixed_cell_params(config, axes)
    base = grid.base_cell_params(config)
    warned = []
    cells = grid.effective_cells(grid.expand_grid(axes, config["exclude"], warned.append), base)
    plan_cells.check_cell_combinations(cells, fixed, axes)
    return axes, fixed, base, cells, warned


def small(**axes):
    """A frame of cells with the core axes at one value, overridden by `axes` (lists)."""
    values = {
        "device": ["cpu"], "world_size": [2], "strategy": ["ddp"], "batch_size": [16],
        "dataset_size": [64], "model": ["mlp"], "dataset": ["synthetic"], "num_workers": [0],
    }  # fmt: skip
    values.update(axes)
    return grid.expand_grid(values, [], lambda line: None)


# -- plan.grid ---------------------------------------------------------------------------
TINY_PATH = "device~cpu/world_size~{ws}/strategy~{s}/batch_size~16/dataset_size~64/model~mlp/dataset~synthetic/num_workers~0"


def test_tiny_preset_plans_its_three_cells_at_their_run_folders():
    axes, fixed, _, cells, warned = planned(tiny_config())
    assert list(axes) == [
        "device", "world_size", "strategy", "batch_size", "dataset_size", "model", "dataset", "num_workers",
    ]  # fmt: skip
    assert list(cells.index) == [
        TINY_PATH.format(ws=1, s="single"),
        TINY_PATH.format(ws=1, s="ddp"),
        TINY_PATH.format(ws=2, s="ddp"),
    ]
    assert warned == []
    # the shared values: tiny's timing and params over config.yaml's over the defaults
    assert fixed["max_steps"] == 5 and fixed["min_timed_steps"] == 3 and fixed["test_size"] == 32
    assert fixed["threads_per_rank"] == 1 and fixed["lr"] == CellParams().lr


def test_axis_order_puts_nodes_after_world_size_and_the_rest_in_parameter_order():
    order = grid.axis_order()
    assert order[:3] == ["device", "world_size", "nodes"]
    assert sorted(order) == sorted(set(CellParams.names()) | {"world_size", "nodes"})
    rest = order[order.index("num_workers") + 1 :]
    assert rest == [n for n in CellParams.names() if n in rest]


def test_grid_axes_follow_path_order_whatever_the_config_order():
    config = {"grid": {"model": ["mlp"], "bucket_mb": [1, 25], "world_size": [2, 1], "device": ["cpu"]}}
    assert list(grid.grid_axes(config).items()) == [
        ("device", ["cpu"]),
        ("world_size", [2, 1]),
        ("model", ["mlp"]),
        ("bucket_mb", [1, 25]),
    ]


@pytest.mark.parametrize(
    "axis,values,key",
    [("model", ["mlp", "alexnet"], "grid.model"), ("data_root", ["a/b"], "grid.data_root"), ("seed", [-1], "grid.seed")],
)
def test_grid_axes_refuse_a_value_naming_its_key(axis, values, key):
    with pytest.raises(grid.ConfigError) as err:
        grid.grid_axes({"grid": {axis: values}})
    assert err.value.key == key
    assert str(err.value).startswith(f"invalid config at '{key}': ")


def test_path_components():
    assert grid.is_path_component("ddp") and grid.is_path_component("0.5")
    for bad in ("", ".", "..", "a/b", "a~b"):
        assert not grid.is_path_component(bad), bad


def test_value_matches_each_filter_form():
    assert grid.value_matches(2, 2) and not grid.value_matches(2, 1)
    assert grid.value_matches("ddp", ["ddp", "zero"]) and not grid.value_matches("single", ["ddp"])
    assert not grid.value_matches(1, {"not": 1}) and grid.value_matches(2, {"not": 1})
    assert not grid.value_matches(4, {"not": [2, 4]}) and grid.value_matches(8, {"not": [2, 4]})
    assert grid.value_matches(4, {"min": 2, "max": 4}) and not grid.value_matches(8, {"min": 2, "max": 4})
    assert not grid.value_matches(1, {"min": 2})
    assert not grid.value_matches("auto", {"min": 2})  # a text value is never in a numeric range
    assert grid.value_matches(2, {"not": 1, "max": 2}) and not grid.value_matches(3, {"not": 1, "max": 2})
    cell = {"strategy": "single", "world_size": 2}
    assert grid.filter_matches(cell, {"strategy": "single", "world_size": {"not": 1}})
    assert not grid.filter_matches(cell, {"strategy": "single", "world_size": 1})


def test_exclusions_and_baseline_name_grid_axes_with_valid_values():
    axes = {"world_size": [1, 2], "strategy": ["single", "ddp"]}
    grid.check_exclusions([{"strategy": "single", "world_size": {"not": 1}}], axes)
    grid.check_baseline({"strategy": "single", "world_size": 1}, axes)
    with pytest.raises(grid.ConfigError) as err:
        grid.check_exclusions([{"strategy": "ddp"}, {"colour": "red"}], axes)
    assert err.value.key == "exclude[1].colour" and "axes: world_size, strategy" in err.value.message
    with pytest.raises(grid.ConfigError) as err:
        grid.check_exclusions([{"strategy": {"not": ["ddp", "no_such"]}}], axes)
    assert err.value.key == "exclude[0].strategy" and "no_such" in err.value.message
    with pytest.raises(grid.ConfigError) as err:
        grid.check_baseline({"strategy": "no_such_strategy"}, axes)
    assert err.value.key == "baseline.strategy"
    with pytest.raises(grid.ConfigError) as err:
        grid.check_baseline({"model": "mlp"}, axes)
    assert err.value.key == "baseline.model"


def test_grid_size_is_bounded_before_expansion():
    axes = {"world_size": [1, 2], "strategy": ["a", "b", "c"], "model": ["mlp"]}
    grid.check_grid_size(axes, repeats=10, max_runs=60)
    with pytest.raises(grid.ConfigError) as err:
        grid.check_grid_size(axes, repeats=1_000, max_runs=5_000)
    assert err.value.key == "max_runs"
    assert "6 cells (2 world_size x 3 strategy; before exclusions) x 1,000 repeats = 6,000 runs" in str(err.value)
    with pytest.raises(grid.ConfigError, match=r"max_runs \(1\)"):
        grid.check_grid_size({"model": ["mlp"]}, repeats=2, max_runs=1)


def test_expand_grid_drops_excluded_and_uneven_cells_and_says_so():
    axes = {"world_size": [1, 2, 3], "nodes": [1, 2], "strategy": ["single", "ddp"]}
    exclusions = [{"strategy": "single", "world_size": {"not": 1}}, {"strategy": "zero"}]
    warned = []
    cells = grid.expand_grid(axes, exclusions, warned.append)
    kept = {tuple(c.values()) for c in cells.to_dict(orient="records")}
    assert kept == {
        (1, 1, "single"), (1, 1, "ddp"), (2, 1, "ddp"), (2, 2, "ddp"), (3, 1, "ddp"),
    }  # fmt: skip
    assert list(cells.columns) == ["world_size", "nodes", "strategy"]
    assert warned == [
        "ddpbench: exclude[1] matches no cell of the grid",
        # world_size 1 and 3 on 2 nodes (ddp; single at 1 on 2 nodes too, not excluded)
        "ddpbench: 3 cell(s) left out: world_size is not a multiple of nodes",
    ]
    with pytest.raises(grid.ConfigError) as err:
        grid.expand_grid(axes, [{"world_size": {"min": 1}}], warned.append)
    assert err.value.key == "exclude"


def test_fixed_params_leave_axes_out_and_name_a_bad_key():
    config = {"params": {"batch_size": 32, "seed": 3}, "timing": {"max_steps": 7, "max_rel_ci": 0.1}}
    fixed = grid.fixed_cell_params(config, {"batch_size": [8, 16]})
    assert fixed["batch_size"] == CellParams().batch_size  # the axis sets it per cell
    assert fixed["seed"] == 3 and fixed["max_steps"] == 7 and "max_rel_ci" not in fixed
    with pytest.raises(grid.ConfigError) as err:
        grid.fixed_cell_params({"params": {"model": "alexnet"}, "timing": {}}, {})
    assert err.value.key == "params.model"
    with pytest.raises(grid.ConfigError) as err:
        grid.fixed_cell_params({"params": {}, "timing": {"max_steps": -1}}, {})
    assert err.value.key == "timing.max_steps"
    base = grid.base_cell_params(config)
    assert base["batch_size"] == 32 and base["max_steps"] == 7 and base["world_size"] == 1 and base["nodes"] == 1


def test_run_folders_name_core_axes_and_only_settings_that_differ_and_are_read():
    base = grid.base_cell_params({"params": {"bucket_mb": 25.0}, "timing": {}})
    ddp = {"device": "cpu", "world_size": 2, "strategy": "ddp", "bucket_mb": 25.0, "seed": 0}
    assert grid.cell_path(ddp, base) == "device~cpu/world_size~2/strategy~ddp"
    assert grid.cell_path({**ddp, "bucket_mb": 1.0}, base) == "device~cpu/world_size~2/strategy~ddp/bucket_mb~1.0"
    # single reads no bucket_mb: its folder never names it
    assert grid.cell_path({**ddp, "strategy": "single", "bucket_mb": 1.0}, base) == (
        "device~cpu/world_size~2/strategy~single"
    )


def test_effective_cells_run_a_strategy_once_per_setting_it_reads():
    base = grid.base_cell_params({"params": {}, "timing": {}})
    cells = small(world_size=[2], strategy=["single", "ddp"], bucket_mb=[1.0, 25.0])
    runs = grid.effective_cells(cells, base)
    prefix = "device~cpu/world_size~2/strategy~{}/batch_size~16/dataset_size~64/model~mlp/dataset~synthetic/num_workers~0"
    assert list(runs.index) == [prefix.format("single"), prefix.format("ddp") + "/bucket_mb~1.0", prefix.format("ddp")]
    assert runs.loc[prefix.format("single"), "bucket_mb"] == CellParams().bucket_mb


# -- plan.cells --------------------------------------------------------------------------
def test_key_of_points_at_the_axis_else_timing_or_params():
    axes = {"batch_size": [8]}
    assert plan_cells.key_of("batch_size", axes) == "grid.batch_size"
    assert plan_cells.key_of("max_steps", axes) == "timing.max_steps"
    assert plan_cells.key_of("scaling", axes) == "params.scaling"


def test_cell_combinations_refused_with_the_keys_involved():
    fixed = CellParams().as_dict()
    axes = {"batch_size": ["auto"]}
    with pytest.raises(grid.ConfigError) as err:
        plan_cells.check_cell_combinations(small(batch_size=["auto"]), fixed, axes)
    assert err.value.key == "grid.batch_size + params.scaling" and "scaling: weak" in err.value.message
    with pytest.raises(grid.ConfigError) as err:
        plan_cells.check_cell_combinations(small(backend=["nccl"]), fixed, {"backend": ["nccl"]})
    assert err.value.key == "grid.backend + params.device"
    # a global batch larger than dataset_size: the harness would refuse it at its first step
    with pytest.raises(grid.ConfigError) as err:
        plan_cells.check_cell_combinations(small(batch_size=[128]), fixed, {"batch_size": [128]})
    assert err.value.key == "grid.batch_size + params.dataset_size" and "larger than its 64" in err.value.message
    plan_cells.check_cell_combinations(small(), fixed, {})  # a valid cell passes


def test_synthetic_stand_ins_replace_real_datasets_only_when_asked():
    config = {"params": {}, "timing": {}}
    fixed, base = CellParams().as_dict(), grid.base_cell_params(config)
    cells = grid.effective_cells(small(dataset=["mnist", "synthetic"]), base)
    assert plan_cells.synthetic_stand_ins(cells, "real", fixed, base, pytest.fail) is cells
    warned = []
    stand_ins = plan_cells.synthetic_stand_ins(cells, "synthetic", fixed, base, warned.append, memory_bytes=2**40)
    assert warned == []
    assert set(stand_ins["dataset"]) == {"synthetic"}
    assert sorted(stand_ins["synthetic_shape"]) == ["cifar10", "mnist"]
    assert any(path.endswith("/synthetic_shape~mnist") for path in stand_ins.index)
    assert not any("dataset~mnist" in path for path in stand_ins.index)
    # too little memory for the samples of a cell's ranks: one warning naming the cell
    plan_cells.synthetic_stand_ins(cells, "synthetic", fixed, base, warned.append, memory_bytes=1024)
    assert len(warned) == 1 and "2 cell(s)" in warned[0] and "mnist x 64 on 2 ranks" in warned[0]


def test_oversubscribed_cells_are_counted_against_the_given_cores():
    fixed = {**CellParams().as_dict(), "threads_per_rank": 2}
    cells = small(world_size=[1, 2, 4])
    warned = []
    plan_cells.warn_oversubscribed_cells(cells, fixed, False, warned.append, cores=4)
    assert warned == [
        "ddpbench: 1 cell(s) will be skipped as oversubscribed on this machine "
        "(ranks per node x threads per rank > 4 usable cores; set allow_oversubscribe: true to run them)"
    ]
    plan_cells.warn_oversubscribed_cells(cells, fixed, True, warned.append, cores=2)
    assert "2 cell(s) will run oversubscribed" in warned[1] and "(2 usable cores" in warned[1]
    plan_cells.warn_oversubscribed_cells(cells, fixed, False, warned.append, cores=64)
    assert len(warned) == 2


def test_link_cells_warn_only_when_namespaces_cannot_be_made():
    fixed = CellParams().as_dict()
    cells = small(world_size=[2], nodes=[2], link=["none", "1gbit"])
    warned = []
    plan_cells.warn_link_cells(cells, fixed, warned.append, available=lambda: "need root")
    assert warned == [
        "ddpbench: 1 cell(s) over a link will be recorded as skipped on this machine: two network namespaces need root"
    ]
    plan_cells.warn_link_cells(cells, fixed, warned.append, available=lambda: None)
    plan_cells.warn_link_cells(small(), fixed, warned.append, available=pytest.fail)  # no link: never asked
    assert len(warned) == 1


def test_a_strategy_setting_some_strategies_do_not_read_is_named_at_plan_time():
    """The language-model preset's bucket_mb 0.43: fsdp and single do not read it (issue 58)."""
    warned = []
    axes = {"strategy": ["single", "ddp", "fsdp", "bucketed_allreduce"]}
    plan_cells.warn_unread_settings({"bucket_mb": 0.43, "lr": 0.003}, axes, warned.append)
    assert warned == ["ddpbench: params.bucket_mb 0.43 is read by bucketed_allreduce, ddp only: fsdp, single run at the "
                      "default bucket_mb 25 (it cannot change their runs) and are compared with the others as their twins"]  # fmt: skip
    warned.clear()
    plan_cells.warn_unread_settings({}, {**axes, "bucket_mb": [0.43, 25.0]}, warned.append)
    assert warned == ["ddpbench: grid.bucket_mb [0.43, 25] is read by bucketed_allreduce, ddp only: fsdp, single run "
                      "once, at the default bucket_mb 25, and are compared only with the cells at 25"]  # fmt: skip
    warned.clear()
    plan_cells.warn_unread_settings({"sync_period": 8}, {"strategy": ["ddp", "fsdp"]}, warned.append)
    assert warned == ["ddpbench: params.sync_period 8 is read by none of this grid's strategies (ddp, fsdp): it changes no run"]
    warned.clear()
    plan_cells.warn_unread_settings({"bucket_mb": 25.0}, axes, warned.append)  # the default: nothing to say
    plan_cells.warn_unread_settings({"bucket_mb": 1.0}, {"strategy": ["ddp", "zero"]}, warned.append)  # both read it
    assert warned == []


def test_compare_to_table(tmp_path):
    assert plan_cells.compare_to_table(None, "results") is None
    other = tmp_path / "other"
    (other / "aggregate").mkdir(parents=True)
    with pytest.raises(grid.ConfigError, match="no aggregate/runs.csv in this folder"):
        plan_cells.compare_to_table(str(other), str(tmp_path / "results"))
    with pytest.raises(grid.ConfigError, match="no such file or folder"):
        plan_cells.compare_to_table(str(tmp_path / "missing.csv"), str(tmp_path / "results"))
    (other / "aggregate" / "runs.csv").write_text("run_dir\n")
    assert plan_cells.compare_to_table(str(other), "results") == str(other / "aggregate" / "runs.csv")
    with pytest.raises(grid.ConfigError, match="this study's own results") as err:
        plan_cells.compare_to_table(str(other / "aggregate" / "runs.csv"), str(other))
    assert err.value.key == "compare_to"


# -- plan.jobs ---------------------------------------------------------------------------
def test_run_folders_and_summaries():
    layout = Layout.of("results/")
    assert layout.run_dir("{cell}", "{repeat}") == "results/runs/{cell}/repeat~{repeat}"
    assert Layout.of("r").summaries({"a~1": 2, "b~2": 2}) == [
        "r/runs/a~1/repeat~0/summary.json",
        "r/runs/a~1/repeat~1/summary.json",
        "r/runs/b~2/repeat~0/summary.json",
        "r/runs/b~2/repeat~1/summary.json",
    ]
    assert layout.cell_of_summary("results/runs/a~1/b~2/repeat~3/summary.json") == "a~1/b~2"
    assert layout.round_file("{round}") == "results/design/round~{round}.json"
    assert re.fullmatch(jobs.CELL_PATTERN, TINY_PATH.format(ws=2, s="ddp"))
    assert not re.fullmatch(jobs.CELL_PATTERN, TINY_PATH.format(ws=2, s="ddp") + "/repeat~0/x")


def test_a_cells_params_flags_and_resources():
    fixed = {**CellParams().as_dict(), "data_root": "d;id;#", "timeout_s": 150.0, "threads_per_rank": 0}
    cell = {"device": "cpu", "world_size": 4, "nodes": 2, "strategy": "single", "bucket_mb": 1.0}
    params = jobs.params_of_cell(cell, fixed)
    assert list(params) == list(CellParams.names())
    assert params["strategy"] == "single" and params["bucket_mb"] == CellParams().bucket_mb  # unread
    flags = jobs.launch_flags(params)
    assert "--data-root 'd;id;#'" in flags and "--strategy single" in flags
    assert shlex.split(flags)[:2] == ["--device", "cpu"] and len(shlex.split(flags)) == 2 * len(params)
    assert jobs.topology_flags(4, 2) == "--nproc-per-node 2 --nnodes 2"
    assert jobs.topology_flags(3, 1) == "--nproc-per-node 3"
    assert jobs.cell_threads(params, 4) == 4
    assert jobs.cell_threads({**params, "threads_per_rank": 3}, 4) == 12
    assert jobs.cell_gpus(params, 4, 2) == 0 and jobs.cell_gpus({**params, "device": "cuda"}, 4, 2) == 2
    assert jobs.runtime_minutes(params) == 7


def test_planned_runs_and_preflight_cells_of_the_tiny_preset():
    config = tiny_config()
    _, fixed, _, cells, _ = planned(config)
    by_path = dict(zip(cells.index, cells.to_dict(orient="records")))
    plan = jobs.planned_runs(by_path, fixed, range(2), "results/tiny")
    assert len(plan) == 6
    run = plan[f"results/tiny/runs/{TINY_PATH.format(ws=2, s='ddp')}/repeat~1"]
    assert run["world_size"] == 2 and run["nodes"] == 1 and run["strategy"] == "ddp" and run["max_steps"] == 5
    pre = jobs.preflight_cells(by_path.values(), fixed)
    assert [(c["world_size"], c["strategy"]) for c in pre] == [(1, "single"), (1, "ddp"), (2, "ddp")]
    assert all(c["test_size"] == 32 and c["dataset"] == "synthetic" for c in pre)
