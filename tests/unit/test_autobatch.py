"""batch-size auto on CPU: a power of two, within the memory budget, capped by the data."""

import torch

from ddpbench.run import autobatch, models

CPU = torch.device("cpu")
SHAPE = (1, 28, 28)


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def test_respects_a_small_budget():
    model = models.build("simple_cnn", SHAPE, 10)
    budget_gb = 0.03
    found = autobatch.search(model, SHAPE, CPU, budget_gb, limit=4096, local_ranks=1)
    assert is_power_of_two(found["chosen"]) and found["chosen"] < 4096
    assert found["need_mb"] <= budget_gb * 1024
    assert found["tried"] == [2**i for i in range(len(found["tried"]))]
    assert abs(found["budget_gb"] - budget_gb) < 1e-6 and "cpu" in found["method"]


def test_capped_by_the_data_and_bigger_with_more_memory():
    model = models.build("mlp", SHAPE, 10)
    found = autobatch.search(model, SHAPE, CPU, 1.0, limit=20, local_ranks=1)
    assert found["chosen"] == 16 and found["tried"] == [1, 2, 4, 8, 16] and "capped" in found["method"]
    extra = autobatch.extra(found)
    assert extra["auto_batch"] == 16 and extra["auto_batch_tried"] == "1,2,4,8,16"


def test_default_budget_is_half_the_available_memory_shared_by_the_ranks():
    import psutil

    avail = psutil.virtual_memory().available
    assert abs(autobatch.cpu_budget_bytes(0, 2) - avail / 4) < 0.05 * avail
    assert autobatch.cpu_budget_bytes(0.5, 2) == 2**29


def test_the_batch_is_searched_on_the_model_as_it_trains(monkeypatch):
    """Issue 68: `batch_size: auto` was searched before activation checkpointing was applied, so
    a checkpointed cell got the eager batch (gpt_tiny: 328-344 MiB a trial step eager against
    144-224 MiB checkpointed) and paid the recompute without the memory it buys."""
    from ddpbench.core.params import CellParams
    from ddpbench.run import cell
    from ddpbench.run.rank import Ranks
    from ddpbench.strategies.base import blocks

    seen = []

    def search(model, *args, **kwargs):
        seen.append([type(b.forward).__name__ == "method" and b.forward.__func__.__name__ for b in blocks(model)])
        return {"chosen": 4, "tried": [1, 2, 4], "method": "test", "need_mb": 1.0, "budget_gb": 1.0}

    monkeypatch.setattr(autobatch, "search", search)
    params = CellParams(
        strategy="single", model="mlp", synthetic_shape="mnist", dataset_size=64, test_size=16, batch_size="auto", scaling="weak",
        activation_checkpointing="full",
    )  # fmt: skip
    built = cell.build_cell(params, Ranks(), CPU, None)
    assert seen and seen[0] and all(name == "recomputing" for name in seen[0]), seen
    assert built.per_rank_batch == 4 and built.auto["chosen"] == 4
