"""Gradient-synchronisation strategies: one module each, discovered by name.

A strategy module `ddpbench/strategies/<name>.py` defines `STRATEGY`, an instance of
`ddpbench.strategies.base.Strategy`, and `SETTINGS`, the strategy-specific cell
parameters it reads (of `params.STRATEGY_SETTINGS`: bucket_mb, powersgd_rank, ...), read
without importing the module: changing any other one cannot change its runs, so the
workflow neither reruns it nor runs it once per value. `get(name)` imports a strategy on
demand, so listing the registry (for validation) never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpbench.strategies.base import Strategy


def names() -> tuple[str, ...]:
    from ddpbench.params import strategy_names

    return strategy_names()


def get(name: str) -> "Strategy":
    """The registered strategy `name` (ValueError naming the registered ones otherwise)."""
    if name not in names():
        raise ValueError(f"unknown strategy {name!r}; registered: {', '.join(names())}")
    strategy = importlib.import_module(f"{__name__}.{name}").STRATEGY
    if strategy.name != name:
        raise ValueError(f"module {name}.py registers a strategy named {strategy.name!r}")
    return strategy
