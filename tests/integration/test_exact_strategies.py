"""Every exact strategy, at world sizes 2 and 3, trains to the parameters of `single` on
the same global batches (max relative difference <= 1e-5), with all ranks agreeing."""

import csv
import json

import pytest
import torch

from harness_common import MODELS, WORLDS, exact_strategies

from ddpbench.core.run_output import STEP_COLUMNS

RTOL = 1e-5


def max_relative_difference(a: dict, b: dict) -> float:
    """Per tensor, max |a-b| / max |b| (infinity-norm relative error); the worst tensor."""
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max() / b[k].abs().max().clamp_min(1e-12)) for k in a)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("strategy", exact_strategies())
def test_matches_single(strategy, world, model, cells_dir, single_dir):
    run = cells_dir[world] / f"{strategy}-{model}"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "ok", summary["reason"]
    ours = torch.load(run / "params.pt")
    single = torch.load(single_dir / f"single-{model}" / "params.pt")
    assert max_relative_difference(ours, single) <= RTOL
    # Every rank holds the same parameters as rank 0 (measured in the run, all-reduced).
    assert summary["extra"]["param_rank_max_abs_diff"] <= RTOL * max(v.abs().max() for v in single.values())
    # The same losses as single, step by step (rank-weighted mean of the ranks' losses).
    steps = [list(csv.DictReader(open(run / f"steps_rank{r}.csv"))) for r in range(world)]
    single_steps = list(csv.DictReader(open(single_dir / f"single-{model}" / "steps_rank0.csv")))
    for i, ref in enumerate(single_steps):
        loss = sum(float(s[i]["loss"]) * int(s[i]["samples"]) for s in steps) / sum(int(s[i]["samples"]) for s in steps)
        assert loss == pytest.approx(float(ref["loss"]), rel=1e-4)


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("strategy", exact_strategies())
def test_outputs_follow_the_contract(strategy, world, cells_dir):
    run = cells_dir[world] / f"{strategy}-mlp"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == world and summary["nodes"] == 1
    assert summary["global_batch"] == 10 and summary["total_steps"] == 12 and summary["timed_steps"] == 10
    assert summary["comm_calls_per_step"] >= 1 and summary["comm_bytes_per_step"] > 0
    assert summary["samples_per_s"] > 0 and summary["step_time_median_s"] > 0
    assert summary["compute_comm_ratio"] > 0 and summary["phase_exposed_comm_s"] <= summary["phase_comm_s"] + 1e-9
    assert summary["env"]["backend"] == "gloo" and len(summary["peak_rss_mb_per_rank"]) == world
    samples = 0
    for r in range(world):
        with open(run / f"steps_rank{r}.csv") as f:
            reader = csv.DictReader(f)
            assert tuple(reader.fieldnames) == STEP_COLUMNS
            rows = list(reader)
        assert [int(x["step"]) for x in rows] == list(range(12))
        assert {int(x["rank"]) for x in rows} == {r}
        assert [int(x["timed"]) for x in rows] == [0, 0] + [1] * 10
        assert [int(x["epoch"]) for x in rows] == [0] * 9 + [1] * 3
        for x in rows:
            parts = ("data_s", "forward_s", "backward_s", "exposed_comm_s", "optimizer_s", "other_s")
            assert sum(float(x[k]) for k in parts) == pytest.approx(float(x["total_s"]), rel=1e-6, abs=1e-9)
            assert int(x["comm_calls"]) >= 1
        samples += int(rows[0]["samples"])
    assert samples == 10  # the ranks' shares make up the global batch


@pytest.mark.parametrize("world", WORLDS)
def test_zero_counts_its_parameter_all_gather(world, cells_dir):
    """ZeRO sends ddp's gradient all-reduce plus its parameter broadcasts, which move
    (p-1)/p of the model's bytes per rank (all-gather convention); crediting each rank its
    own shard only undercounted by about p-1 from p = 3."""
    zero = json.loads((cells_dir[world] / "zero-mlp" / "summary.json").read_text())
    ddp = json.loads((cells_dir[world] / "ddp-mlp" / "summary.json").read_text())
    model_bytes = 4 * zero["extra"]["model_parameters"]
    expected = ddp["comm_bytes_per_step"] + round(model_bytes * (world - 1) / world)
    assert zero["comm_bytes_per_step"] == pytest.approx(expected, abs=1)
    assert zero["extra"]["comm_volume"] == "allreduce_allgather"
