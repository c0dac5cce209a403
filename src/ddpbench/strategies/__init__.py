"""Gradient-synchronisation strategies: one module each, discovered by name, and the registry.

This __init__ is the registry: what the plan needs of every strategy (its name, the settings
it reads, the world sizes it runs at), read from the modules' source without importing them,
so the workflow validates and plans a grid without torch, and the communication volume laws the
strategies declare (`COMM_VOLUME`, `comm_volume_factor`). It imports nothing of ddpbench.
The strategy modules themselves run inside a rank (torch): they import core (core.timers among it) and
comm.collectives, never the analysis or the report.

A strategy module `ddpbench/strategies/<name>.py` defines `STRATEGY`, an instance of
`ddpbench.strategies.base.Strategy`, and `SETTINGS`, the strategy-specific cell
parameters it reads (of `STRATEGY_SETTINGS`: bucket_mb, powersgd_rank, ...), read
without importing the module: changing any other one cannot change its runs, so the
workflow neither reruns it nor runs it once per value. `get(name)` imports a strategy on
demand, so listing the registry (for validation) never imports torch.
"""

from __future__ import annotations

import ast
import functools
import importlib
import pathlib
import pkgutil
from dataclasses import dataclass
from typing import Any


def names() -> tuple[str, ...]:
    """Registered strategies: one module each in ddpbench.strategies (no torch import)."""
    return tuple(
        sorted(
            m.name
            for m in pkgutil.iter_modules(__path__)
            if not m.name.startswith("_") and m.name != "base"
        )
    )


# Cell parameters that only some strategies read; each strategy module lists the ones it
# reads in SETTINGS. Every other cell parameter applies to every strategy.
STRATEGY_SETTINGS = ("bucket_mb", "powersgd_rank", "powersgd_start_iter", "sync_period", "micro_batches")


@functools.cache
def strategy_settings(name: str) -> tuple[str, ...]:
    """The STRATEGY_SETTINGS strategy `name` reads: its module's SETTINGS, read from the
    source without importing it (the workflow plans without torch)."""
    path = pathlib.Path(__path__[0]) / f"{name}.py"
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SETTINGS" for t in node.targets):
            settings = tuple(ast.literal_eval(node.value))
            unknown = sorted(set(settings) - set(STRATEGY_SETTINGS))
            if unknown:
                raise ValueError(f"{path}: SETTINGS names {unknown[0]!r}, not one of {STRATEGY_SETTINGS}")
            return settings
    raise ValueError(f"{path} defines no SETTINGS (the strategy-specific cell parameters it reads)")


def unread_settings(strategy: str) -> tuple[str, ...]:
    """The strategy settings `strategy` does not read."""
    return tuple(s for s in STRATEGY_SETTINGS if s not in strategy_settings(strategy))


@dataclass(frozen=True)
class StrategyTraits:
    """What the plan needs of a strategy, read from its source without importing it
    (base.Strategy's class attributes and whether it overrides data_shard)."""

    min_world: int
    max_world: int | None
    point_to_point: bool
    shards_per_rank: bool  # base data_shard: each rank reads its own slice of the global batch
    imports_dynamo: bool  # its wrap imports torch._dynamo (base.Strategy.imports_dynamo)
    sharding: str  # base.Strategy.sharding: replicated, zero1, zero2, zero3 or stages
    schedule: str  # base.Strategy.schedule: when its communication runs against the computation (SCHEDULES)
    comm_volume: str  # base.Strategy.comm_volume: how its bytes per step grow with p (COMM_VOLUME)
    mixed_precision: bool  # base.Strategy.mixed_precision: it trains under autocast (bf16, fp16)

    @property
    def overlaps_buckets(self) -> bool:
        """DDP and its subclasses: bucket_mb buckets overlapping backward (the plan warns where one bucket holds all)."""
        return self.schedule == "overlap"
    def unsupported(self, world: int) -> bool:
        """base.Strategy.unsupported: the harness records such a cell as skipped (world_size_refusal's rule)."""
        return world_size_refusal("", world, self.min_world, self.max_world) is not None


def world_size_refusal(strategy: str, world: int, min_world: int, max_world: int | None) -> str | None:
    """Why `strategy` cannot run at `world` ranks (the skipped summary's reason), or None:
    one text for base.Strategy.unsupported (the ranks) and the launcher, which decides it
    from strategy_traits before starting torchrun."""
    if world < min_world or (max_world is not None and world > max_world):
        hi = "" if max_world is None else f" and <= {max_world}"
        return f"strategy {strategy} needs a world size >= {min_world}{hi}, got {world}"
    return None


@functools.cache
def _strategy_classes() -> dict[str, tuple[list[str], dict[str, Any], set[str]]]:
    """Every class of the strategy package: name -> (base names, literal class
    attributes, method names)."""
    classes: dict[str, tuple[list[str], dict[str, Any], set[str]]] = {}
    for path in sorted(pathlib.Path(__path__[0]).glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
            attrs: dict[str, Any] = {}
            methods: set[str] = set()
            for item in node.body:
                target = value = None
                if isinstance(item, ast.Assign) and len(item.targets) == 1:
                    target, value = item.targets[0], item.value
                elif isinstance(item, ast.AnnAssign) and item.value is not None:
                    target, value = item.target, item.value
                elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    methods.add(item.name)
                if isinstance(target, ast.Name):
                    try:
                        attrs[target.id] = ast.literal_eval(value)
                    except ValueError:
                        pass
            classes[node.name] = (bases, attrs, methods)
    return classes


@functools.cache
def strategy_traits(name: str) -> StrategyTraits:
    """The traits of strategy `name` (its module's STRATEGY = SomeClass()), resolved along
    the class's bases as Python would (single inheritance within the package)."""
    path = pathlib.Path(__path__[0]) / f"{name}.py"
    cls = None
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "STRATEGY" for t in node.targets):
            if isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
                cls = node.value.func.id
    if cls is None:
        raise ValueError(f"{path} defines no STRATEGY = SomeStrategy()")
    classes = _strategy_classes()
    chain = []
    while cls in classes and cls not in chain:
        chain.append(cls)
        bases = classes[cls][0]
        cls = bases[0] if bases else None
    if not chain or chain[-1] != "Strategy":
        raise ValueError(f"{path}: STRATEGY's class does not derive from base.Strategy within the package")

    def attr(key: str) -> Any:
        return next(classes[c][1][key] for c in chain if key in classes[c][1])

    data_shard_from = next(c for c in chain if "data_shard" in classes[c][2])
    traits = StrategyTraits(
        attr("min_world"), attr("max_world"), attr("point_to_point"), data_shard_from == "Strategy",
        attr("imports_dynamo"), attr("sharding"), attr("schedule"), attr("comm_volume"), attr("mixed_precision"),
    )  # fmt: skip
    if traits.sharding not in SHARDINGS:
        raise ValueError(f"{path}: sharding {traits.sharding!r} is not one of {SHARDINGS}")
    if traits.schedule not in SCHEDULES:
        raise ValueError(f"{path}: schedule {traits.schedule!r} is not one of {SCHEDULES}")
    if traits.comm_volume not in COMM_VOLUME:
        raise ValueError(f"{path}: comm_volume {traits.comm_volume!r} is not one of {tuple(COMM_VOLUME)}")
    return traits


# Bytes the busiest rank sends per step, per byte of gradient M, as a function of the world size
# p: the volume law a strategy's communication follows (base.Strategy.comm_volume names it; the
# cost model scales measured bytes with it). Written so that p may be a number or a numpy array.
COMM_VOLUME = {
    "allreduce": lambda p: 2 * (p - 1) / p,  # ring all-reduce (nccl-tests' bus convention)
    "gather_scatter": lambda p: p - 1,  # the root sends every worker the sum
    "allreduce_allgather": lambda p: 3 * (p - 1) / p,  # ZeRO-1: gradients + parameter all-gather
    # FSDP: parameters all-gathered twice per step (ZeRO-3: forward and backward) or once
    # (ZeRO-2), gradients reduce-scattered once; each (p-1)/p of M in the ring convention.
    "sharded_zero3": lambda p: 3 * (p - 1) / p,
    "sharded_zero2": lambda p: 2 * (p - 1) / p,
    "point_to_point": lambda p: p * 0 + 1,  # pipeline activations: per stage, not per p
    "none": lambda p: p * 0,
}


def comm_volume_factor(law: str, p):
    """Bytes sent by the busiest rank per byte of M at world size p under `law`."""
    if law not in COMM_VOLUME:
        raise ValueError(f"unknown communication volume law {law!r}; known: {', '.join(COMM_VOLUME)}")
    return COMM_VOLUME[law](p)


# When a strategy's communication runs against its computation (base.Strategy.schedule).
SCHEDULES = ("blocking", "overlap", "root", "prefetch", "periodic", "stages", "none")


# How a strategy keeps the model between steps (base.Strategy.sharding), least sharded first.
SHARDINGS = ("replicated", "zero1", "zero2", "zero3", "stages")
ZERO = ("zero1", "zero2", "zero3")  # ZeRO's stages: optimizer state, + gradients, + parameters


#: The replicated strategy that the sharded ones are measured against (memory held, throughput):
#: PyTorch's DDP, every rank holding everything.
REFERENCE = "ddp"


def sharded() -> tuple[str, ...]:
    """The strategies that shard the model's training state across data-parallel ranks (ZeRO-1, -2,
    -3), least sharded first: what the memory analysis compares against a replicated one."""
    zero = [(ZERO.index(strategy_traits(n).sharding), n) for n in names() if strategy_traits(n).sharding in ZERO]
    return tuple(n for _, n in sorted(zero))


def get(name: str) -> Any:
    """The registered strategy `name`, a base.Strategy (imported on demand: the registry itself
    never imports the strategy modules; ValueError naming the registered ones otherwise)."""
    if name not in names():
        raise ValueError(f"unknown strategy {name!r}; registered: {', '.join(names())}")
    strategy = importlib.import_module(f"{__name__}.{name}").STRATEGY
    if strategy.name != name:
        raise ValueError(f"module {name}.py registers a strategy named {strategy.name!r}")
    return strategy
