"""The one typed, validated definition of a grid cell's parameters.

`CellParams` is what `ddpbench train` accepts (one ``--kebab-case`` flag
per field) and what the workflow validates every config axis against, so a value the
harness would reject fails before any job runs, naming the offending key.

Launch-level settings (world size, nodes, repeat) are not cell parameters of the
training process: torchrun sets the world size, the workflow sets the repeat.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from ddpbench import PACKAGE_DIR, strategies
from ddpbench.core import registry
from ddpbench.strategies import StrategyTraits, strategy_settings, strategy_traits, unread_settings

DEVICES = ("cpu", "cuda")
SCALINGS = ("strong", "weak")
# The built-in models: one module per family in ddpbench/run/models/ declares MODELS (name -> facts)
# and ORDER; read here from the source, without torch (the registry there builds them).
MODELS_PATH = (PACKAGE_DIR / "run" / "models",)
MODEL_KINDS = ("image", "tokens")
# What a family may declare of a model: kind (required, one of MODEL_KINDS), torchvision (built by
# torchvision.models), sequential_layers (an nn.Sequential of that many layers), exact (no batch
# norm or dropout: exact strategies equal `single` bit for bit).
MODEL_FACT_TYPES = {"kind": str, "torchvision": bool, "sequential_layers": int, "exact": bool}


def model_facts(path=MODELS_PATH) -> dict[str, dict[str, Any]]:
    """name -> facts (its family's declaration, plus `family`) of every model the families on `path`
    declare, in the families' ORDER (then by name) and each family's own order."""
    families = sorted(registry.entries(path, "MODELS"), key=lambda f: (registry.declared(path, f, "ORDER", 0), f))
    facts: dict[str, dict[str, Any]] = {}
    for family in families:
        for name, declared in registry.declared(path, family, "MODELS").items():
            wrong = [k for k, v in declared.items() if not isinstance(v, MODEL_FACT_TYPES.get(k, ()))]
            if wrong or declared.get("kind") not in MODEL_KINDS or name in facts:
                raise ValueError(f"run/models/{family}.py: model {name!r}: its kind must be one of {MODEL_KINDS} and its "
                                 f"facts of {MODEL_FACT_TYPES} (wrong: {wrong}), its name not another family's")  # fmt: skip
            facts[name] = {**declared, "family": family}
    return facts


MODEL_FACTS = model_facts()
IMAGE_MODELS = tuple(n for n, f in MODEL_FACTS.items() if f["kind"] == "image")
TORCHVISION_MODELS = tuple(n for n, f in MODEL_FACTS.items() if f.get("torchvision"))  # built by torchvision.models
TOKEN_MODELS = tuple(n for n, f in MODEL_FACTS.items() if f["kind"] == "tokens")  # GPT-style decoders (run/models/gpt.py)
MODELS = IMAGE_MODELS + TOKEN_MODELS
# The user's own model: `package.module:function`, imported from the environment or model_path.
USER_MODEL_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
TOKEN_DATASETS = ("synthetic_tokens",)  # sequences of token ids: next-token prediction
DATASETS = ("synthetic", "cifar10", "mnist", "imagenette") + TOKEN_DATASETS
SYNTHETIC_SHAPES = ("cifar10", "mnist", "imagenette")
BACKENDS = ("auto", "gloo", "nccl")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
OPTIMIZERS = ("sgd", "adamw")
COMPILE_MODES = ("none", "model")
CHECKPOINTING = ("none", "full", "selective")
MEMORY_FORMATS = ("contiguous", "channels_last")
# Between the nodes of a multi-node cell: none (the machine's own network, or a cluster's),
# or two network namespaces on this machine joined by a veth pair (ddpbench.cluster.netlab),
# unshaped or shaped to a token-bucket rate.
NO_LINK = "none"
LINK_PATTERN = r"none|unshaped|[0-9]+(\.[0-9]+)?(kbit|mbit|gbit)"
# What a cell over a link adds to its run (a second launcher per node, the namespaces, the bandwidth
# probe): lab cells cost 5-11 s fixed against 3 s for one node (the interconnect preset, docs/clusters.md).
LAB_RUN_S = 4.0
# What compiling a cell's blocks adds to its run on a CPU (inductor, 2 cores): 10-17 s for an MLP's
# three blocks with a cold cache, 1-3 s warm (measured 2026-11-27; docs/harness.md).
COMPILE_RUN_S = 10.0


# A free-text value (a path): printable, bounded. Commands always quote it; this keeps
# newlines and terminal escapes out of logs and flags.
TEXT_VALUE = re.compile(r"[^\x00-\x1f\x7f]{1,4096}")


class ParamError(ValueError):
    """A cell parameter has a bad value; the message names it and what is allowed."""

    def __init__(self, name: str, value: Any, allowed: str):
        self.name, self.value, self.allowed = name, value, allowed
        flag = "--" + name.replace("_", "-")
        super().__init__(f"invalid value for '{name}' ({flag}): {value!r}; allowed: {allowed}")


def _always(values: Mapping[str, Any]) -> bool:
    return True


def effective_params(values: Mapping[str, Any], nodes: int | None = None) -> dict[str, Any]:
    """`values` with every setting the cell does not read at its default: its strategy's unread
    settings, and each field whose `read_if` (declared on the field: the link for a one-node cell,
    momentum for adamw, the token settings for images, ...) is false for the cell. Two cells that
    differ only there are one measurement (one run folder, one set of runs), and a change to such a
    setting changes none of those runs. `nodes`: the cell's, where `values` (cell parameters only) lacks it."""
    defaults = {f.name: f.default for f in dataclasses.fields(CellParams)}
    cell = {**values, "nodes": values.get("nodes", 1) if nodes is None else nodes}
    unread = {*unread_settings(values["strategy"])}
    unread |= {f.name for f in dataclasses.fields(CellParams) if not f.metadata.get("read_if", _always)(cell)}
    return {k: (defaults[k] if k in unread else v) for k, v in values.items()}


@dataclass(frozen=True)
class LaunchCost:
    """What an axis adds to a run's fixed seconds (its launch, before the first step) where `applies` to
    the cell's value: `seconds`, named `what` in the plan's text; `cold`: such a cell cannot start warm
    (run.warm). The plan's estimate (plan.estimate) knows the axes that cost a launch only by this."""

    seconds: float
    applies: Callable[[Any], bool]
    what: str
    cold: bool = False


def _p(default: Any, help: str, **checks: Any) -> Any:
    """A field with its help and what it declares of itself: its checks (choices, minimum, pattern, ...);
    `read_if`, the cells that read it at all (a predicate of the cell's values: elsewhere it is one
    measurement whatever it says, effective_params); `baseline=False`, that a single-worker `single`
    run does not read it (SAME_AT_BASELINE); `launch`, the LaunchCost it adds to a run (LAUNCH_COSTS)."""
    return field(default=default, metadata={"help": help, **checks})


def _tokens(values: Mapping[str, Any]) -> bool:
    return values.get("dataset", "synthetic") in TOKEN_DATASETS


@dataclass(frozen=True)
class CellParams:
    """Every parameter of one grid cell, with its default and its allowed values."""

    device: str = _p("cpu", "cpu (gloo) or cuda (NCCL)", choices=DEVICES)
    backend: str = _p(
        "auto", "process-group backend: auto is gloo on cpu, nccl on cuda; gloo on cuda lets ranks share a GPU", choices=BACKENDS
    )
    strategy: str = _p("ddp", "gradient-sync strategy (one module each in src/ddpbench/strategies/)", choices=strategies.names)
    batch_size: int | str = _p(
        64, "global batch (scaling=strong) or per-rank batch (scaling=weak); 'auto' searches", minimum=1, maximum=2**20, auto=True
    )
    scaling: str = _p("strong", "strong: global batch fixed; weak: per-rank batch fixed", choices=SCALINGS, baseline=False)
    model: str = _p(
        "mlp", "network to train: a built-in one, or your own as module.path:function (docs/models.md)",
        pattern="|".join(MODELS) + "|" + USER_MODEL_PATTERN,
        pattern_text=" | ".join(MODELS) + " | module.path:function (your own model)",
    )
    dataset: str = _p(
        "synthetic", "training data (synthetic_tokens: token sequences from a fixed random Markov chain, for the GPT models)",
        choices=DATASETS,
    )
    synthetic_shape: str = _p(
        "cifar10", "shape and classes of the synthetic data (imagenette: 3 x image_size px, 10 classes)", choices=SYNTHETIC_SHAPES
    )
    data_root: str = _p("data", "folder holding real datasets (prepared beforehand, never downloaded by a rank)", baseline=False)
    image_size: int = _p(160, "side of the square images for imagenette", minimum=8, maximum=4096)
    vocab_size: int = _p(256, "synthetic_tokens: tokens in the vocabulary", minimum=2, maximum=2**20, read_if=_tokens)
    seq_len: int = _p(128, "synthetic_tokens: tokens per sequence (the GPT models' context)", minimum=2, maximum=2**16,
                      read_if=_tokens)  # fmt: skip
    model_path: str = _p(".", "folder put first on the import path for a model given as module.path:function",
                         read_if=lambda v: is_user_model(v.get("model", "mlp")))  # fmt: skip
    dataset_size: int = _p(4096, "training samples used (a subset of the dataset)", minimum=1, maximum=10**9)
    test_size: int = _p(512, "held-out samples for test loss/accuracy (0: none)", minimum=0, maximum=10**8)
    epochs: int = _p(1, "passes over the training subset at least (the run goes on until the timing minimums are met)", minimum=1, maximum=10**6)
    max_steps: int = _p(0, "cap on the steps of a run, over epochs and timing minimums (0: no cap)", minimum=0, maximum=10**9)
    warmup_steps: int = _p(2, "steps after the first (of the steady state) that are excluded from timing", minimum=0, maximum=10**6)
    min_timed_steps: int = _p(20, "the run goes on until at least this many steps are timed (bounded by max_steps)", minimum=0, maximum=10**6)
    min_timed_s: float = _p(1.0, "... and until the timed steps last at least this many seconds (bounded by max_steps, timeout_s)", minimum=0.0, maximum=86400.0)
    profile_steps: int = _p(
        0, "after the timed steps (never among them), steps run under torch.profiler: the top operators by self time "
        "(profile.csv) and the profiler's overhead (0: off)", minimum=0, maximum=10**4, baseline=False,
    )
    num_workers: int = _p(0, "DataLoader worker processes per rank", minimum=0, maximum=256)
    threads_per_rank: int = _p(0, "torch/OpenMP threads per rank (0: cores // local processes, at least 1)", minimum=0, maximum=1024)
    seed: int = _p(0, "seed for data, initial weights and sampling", minimum=0, maximum=2**63 - 1)
    lr: float = _p(0.05, "learning rate", exclusive_minimum=0.0, maximum=1000.0)
    momentum: float = _p(0.9, "SGD momentum (sgd only)", minimum=0.0, maximum=1.0,
                         read_if=lambda v: v.get("optimizer", "sgd") != "adamw")  # AdamW's betas are fixed
    optimizer: str = _p("sgd", "sgd (with momentum) or adamw (decoupled weight decay, betas 0.9/0.999)", choices=OPTIMIZERS)
    weight_decay: float = _p(0.0, "weight decay: added to the gradient (sgd), decoupled (adamw)", minimum=0.0, maximum=10.0)
    precision: str = _p(
        "fp32", "fp32; tf32 (CUDA matmuls in TF32); bf16 or fp16: autocast for forward and loss (fp16 with a dynamic "
        "loss scale); the FSDP strategies also keep their gathered parameters in it and reduce gradients in fp32",
        choices=PRECISIONS,
    )
    grad_accum: int = _p(
        1, "micro-batches per optimizer step: each rank splits its share of the global batch into this many and "
        "synchronises once per step", minimum=1, maximum=4096,
    )
    compile: str = _p(
        "none", "torch.compile: none (eager) or model (each block's forward and the loss compiled, fullgraph; the compile is in the "
        "untimed first step, and a recompile in a timed step fails the run)", choices=COMPILE_MODES,
        launch=LaunchCost(COMPILE_RUN_S, lambda v: v != "none", "a compiled cell"),
    )
    activation_checkpointing: str = _p(
        "none", "recompute activations in the backward instead of keeping them: none, full (every block), selective "
        "(every other block); the MFU counts the model's FLOPs, the HFU the recompute too", choices=CHECKPOINTING,
    )
    memory_format: str = _p(
        "contiguous", "layout of an image model's convolution weights and batches: contiguous (NCHW) or channels_last "
        "(NHWC, what cuDNN's and oneDNN's fastest convolutions read; the model converted whole before training, each "
        "batch as it reaches the device; token models have no such tensors)", choices=MEMORY_FORMATS,
        read_if=lambda v: not _tokens(v),
    )
    bucket_mb: float = _p(25.0, "bucket size in MiB (bucketed_allreduce; DDP bucket_cap_mb)", exclusive_minimum=0.0, maximum=65536.0)
    timeout_s: float = _p(600.0, "process-group timeout and wall-clock limit of the cell", exclusive_minimum=0.0, maximum=604800.0,
                          baseline=False)  # fmt: skip
    powersgd_rank: int = _p(2, "PowerSGD matrix approximation rank", minimum=1, maximum=4096)
    powersgd_start_iter: int = _p(10, "PowerSGD: steps of plain all-reduce before compression starts", minimum=1, maximum=10**6)
    sync_period: int = _p(4, "local_sgd: steps between parameter averaging", minimum=1, maximum=10**6)
    micro_batches: int = _p(4, "pipeline: micro-batches per step", minimum=1, maximum=4096)
    memory_budget_gb: float = _p(0.0, "batch-size auto on CPU: memory budget (0: half of available RAM)", minimum=0.0, maximum=1e6)
    link: str = _p(
        NO_LINK, "network between the 2 nodes of a cell: none (this machine's or the cluster's), or two network namespaces "
        "on this machine joined by a veth link, unshaped or shaped to a rate (root; nodes 2)", pattern=LINK_PATTERN,
        pattern_text="none, unshaped or a rate like 10gbit, 1gbit, 100mbit, 500kbit",
        read_if=lambda v: int(v.get("nodes", 1)) > 1, baseline=False,  # a link joins nodes
        launch=LaunchCost(LAB_RUN_S, lambda v: v != NO_LINK, "a cell over a link", cold=True),  # a launcher per node
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _check(f, getattr(self, f.name)))
        check_auto_batch_scaling(self.batch_size, self.scaling)
        check_backend(self.backend, self.device)

    @property
    def process_group_backend(self) -> str:
        """The torch.distributed backend this cell uses."""
        return backend_for(self.backend, self.device)

    # -- conversions -------------------------------------------------------------------
    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "CellParams":
        """Build from a mapping (config cell, parsed CLI); unknown keys are an error."""
        unknown = sorted(set(values) - set(cls.names()))
        if unknown:
            raise ParamError(unknown[0], values[unknown[0]], "one of the cell parameters: " + ", ".join(cls.names()))
        return cls(**dict(values))

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_argv(self, only_changed: bool = False) -> list[str]:
        """The train command-line flags that reproduce these parameters."""
        argv: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if only_changed and value == f.default:
                continue
            argv += ["--" + f.name.replace("_", "-"), str(value)]
        return argv

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """One --kebab-case flag per field; values stay strings until validation."""
        for f in dataclasses.fields(cls):
            allowed = _allowed_text(f)
            parser.add_argument(
                "--" + f.name.replace("_", "-"),
                dest=f.name,
                default=f.default,
                metavar=f.name.upper(),
                help=f"{f.metadata['help']} (default: {f.default}; allowed: {allowed})",
            )

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> "CellParams":
        return cls.from_mapping({name: getattr(ns, name) for name in cls.names()})

    @classmethod
    def parse_args(
        cls, parser: argparse.ArgumentParser, argv: list[str] | None = None
    ) -> tuple[argparse.Namespace, "CellParams"]:
        """Add the cell flags to `parser`, parse `argv`, validate; a bad value exits 2
        with the message naming the parameter (before anything expensive starts)."""
        cls.add_arguments(parser)
        args = parser.parse_args(argv)
        try:
            return args, cls.from_namespace(args)
        except ParamError as e:
            parser.exit(2, f"error: {e}\n")


def _choices(f: dataclasses.Field) -> tuple[str, ...] | None:
    choices = f.metadata.get("choices")
    return choices() if callable(choices) else choices


def _allowed_text(f: dataclasses.Field) -> str:
    choices = _choices(f)
    if choices is not None:
        return " | ".join(choices)
    if "pattern_text" in f.metadata:
        return f.metadata["pattern_text"]
    kind = {int: "an integer", float: "a finite number", str: "a non-empty string without control characters"}[_base_type(f)]
    bounds = []
    if "minimum" in f.metadata:
        bounds.append(f">= {f.metadata['minimum']}")
    if "exclusive_minimum" in f.metadata:
        bounds.append(f"> {f.metadata['exclusive_minimum']}")
    if "maximum" in f.metadata:
        bounds.append(f"<= {f.metadata['maximum']}")
    text = kind + (" " + " and ".join(bounds) if bounds else "")
    return text + (" or 'auto'" if f.metadata.get("auto") else "")


def _base_type(f: dataclasses.Field) -> type:
    return type(f.default)


def _check(f: dataclasses.Field, value: Any) -> Any:
    """Coerce `value` (possibly a CLI string) to the field's type and check its range."""
    allowed = _allowed_text(f)
    if f.metadata.get("auto") and value == "auto":
        return "auto"
    kind = _base_type(f)
    try:
        if isinstance(value, bool):
            raise TypeError
        if kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise TypeError
            value = int(str(value)) if isinstance(value, str) else int(value)
        elif kind is float:
            value = float(value)
            if not math.isfinite(value):  # NaN passes every comparison below
                raise ValueError
        elif kind is str:
            if not isinstance(value, str) or not TEXT_VALUE.fullmatch(value):
                raise TypeError
    except (TypeError, ValueError):
        raise ParamError(f.name, value, allowed) from None
    choices = _choices(f)
    if choices is not None and value not in choices:
        raise ParamError(f.name, value, allowed)
    md = f.metadata
    if "pattern" in md and not re.fullmatch(md["pattern"], value):
        raise ParamError(f.name, value, allowed)
    if ("minimum" in md and value < md["minimum"]) or ("maximum" in md and value > md["maximum"]):
        raise ParamError(f.name, value, allowed)
    if "exclusive_minimum" in md and value <= md["exclusive_minimum"]:
        raise ParamError(f.name, value, allowed)
    return value


AUTO_NEEDS_WEAK = (
    "weak when batch_size is 'auto': auto picks the largest per-rank batch that fits one "
    "device, so the global batch grows with world size (weak scaling, not speedup)"
)


# name -> what the field adds to a run's launch, of the fields that declare it (`launch`), in field order.
LAUNCH_COSTS: dict[str, LaunchCost] = {
    f.name: f.metadata["launch"] for f in dataclasses.fields(CellParams) if "launch" in f.metadata
}


def launch_costs(values: Mapping[str, Any]) -> dict[str, LaunchCost]:
    """Of LAUNCH_COSTS, those that cell `values` adds to its run (a field it lacks: at its default)."""
    defaults = {f.name: f.default for f in dataclasses.fields(CellParams)}
    return {n: c for n, c in LAUNCH_COSTS.items() if c.applies(values.get(n, defaults[n]))}


# Settings that cannot change a single-worker `single` run (declared `baseline=False`, and every
# strategy's own settings): analysis.tables ignores them where no baseline matches exactly.
SAME_AT_BASELINE = tuple(f.name for f in dataclasses.fields(CellParams)
                         if f.metadata.get("baseline") is False or f.name in unread_settings("single"))  # fmt: skip


def check_auto_batch_scaling(batch_size: Any, scaling: Any) -> None:
    """batch_size 'auto' fixes the per-rank batch, which only weak scaling may label."""
    if batch_size == "auto" and scaling == "strong":
        raise ParamError("scaling", scaling, AUTO_NEEDS_WEAK)


def backend_for(backend: str, device: str) -> str:
    if backend == "auto":
        return "nccl" if device == "cuda" else "gloo"
    return backend


def batch_sizes(batch_size: int, scaling: str, world: int) -> tuple[int, int]:
    """(global batch, per-rank batch): strong keeps the global batch, weak the per-rank one.
    Under strong scaling with a global batch not divisible by the world size, the
    per-rank batch is the largest shard."""
    if scaling == "weak":
        return batch_size * world, batch_size
    return batch_size, -(-batch_size // world)


def check_backend(backend: Any, device: Any) -> None:
    """NCCL moves CUDA tensors only."""
    if backend == "nccl" and device != "cuda":
        raise ParamError("backend", backend, "auto or gloo with device cpu (NCCL needs CUDA)")


# -- cells the harness would refuse before training, known from the config alone --------
# Training samples of each real dataset's train split (torchvision's readers): data.load
# refuses a larger dataset_size.
REAL_TRAIN_SAMPLES = {"cifar10": 50_000, "mnist": 60_000, "imagenette": 9_469}
# The models that are an nn.Sequential, with their number of layers (their families' declarations):
# a strategy that cuts the model into stages (sharding "stages": pipeline) cuts only those, into
# world_size consecutive non-empty stages (tests check these against models.build).
SEQUENTIAL_LAYERS = {n: f["sequential_layers"] for n, f in MODEL_FACTS.items() if "sequential_layers" in f}
PIPELINE = "pipeline"  # the strategy that cuts stages (named by tests; check_cell asks traits, never names)
# A strategy that reads this setting splits each step's global batch into that many micro-batches itself.
MICRO_BATCHES = "micro_batches"


class CellConflict(ParamError):
    """Values valid alone that no run can train with together; `names` are the cell
    parameters (or world_size) involved, the message names the cell's values."""

    def __init__(self, names: Iterable[str], message: str):
        self.names = tuple(names)
        self.name, self.value, self.allowed = self.names[0], None, message
        ValueError.__init__(self, message)


def check_cell(values: Mapping[str, Any]) -> None:
    """Refuse a cell (every CellParams field plus world_size) that the harness would
    refuse before or at its first step, whatever machine runs it: CellConflict naming the
    parameters involved and the cell's values. A cell the harness records as skipped by
    design (a strategy at a world size it does not support; a point-to-point strategy
    over gloo on CUDA) is left alone: it stays a row of the results.

    Refused: a real dataset_size beyond the dataset's training samples; a strategy that cuts
    the model into stages (pipeline) with a model that is not an nn.Sequential, or with more
    stages (world_size) than the model has layers; a global batch (batch_size under strong
    scaling, batch_size x world_size under weak) larger than dataset_size, or, where each rank
    reads its own slice of it, smaller than world_size; a strategy that reads micro_batches with
    a global batch they do not split evenly. batch_size 'auto' is only known at run time: not
    checked. What a strategy is comes from its traits and SETTINGS, never its name."""
    world = int(values["world_size"])
    nodes = int(values.get("nodes", 1))
    if values.get("link", NO_LINK) != NO_LINK and nodes > 2:
        raise CellConflict(("link", "nodes"), f"link {values['link']} joins the two nodes of a lab on this machine, not {nodes}")
    strategy, dataset = values["strategy"], values["dataset"]
    traits = strategy_traits(strategy)
    if traits.unsupported(world):
        return
    gloo_on_cuda = values["device"] == "cuda" and backend_for(values["backend"], values["device"]) == "gloo"
    if gloo_on_cuda and traits.point_to_point and world > 1:
        return
    size = int(values["dataset_size"])
    if dataset in REAL_TRAIN_SAMPLES and size > REAL_TRAIN_SAMPLES[dataset]:
        raise CellConflict(
            ("dataset", "dataset_size"),
            f"dataset_size {size} exceeds the {REAL_TRAIN_SAMPLES[dataset]} training samples of {dataset}",
        )
    check_stages(values, traits)
    check_model_data(values)
    check_training_setup(values)
    batch = values["batch_size"]
    if batch == "auto":
        return
    scaling = values["scaling"]
    global_batch = int(batch) * world if scaling == "weak" else int(batch)
    cell = f"batch_size={batch}, world_size={world}, scaling={scaling}, dataset_size={size}"
    how = f"batch_size x world_size = {global_batch}" if scaling == "weak" else f"batch_size = {global_batch}"
    if global_batch > size:
        raise CellConflict(
            ("batch_size", "dataset_size"),
            f"the cell {cell} has a global batch ({how}) larger than its {size} training samples",
        )
    if traits.shards_per_rank and global_batch < world:
        raise CellConflict(
            ("batch_size", "world_size"),
            f"the cell {cell}, strategy={strategy} has a global batch of {global_batch}, smaller than the "
            f"world size {world}: a rank would get no sample",
        )
    accum = int(values.get("grad_accum", 1))
    if accum > 1 and traits.shards_per_rank and global_batch < world * accum:
        raise CellConflict(
            ("batch_size", "grad_accum"),
            f"the cell {cell}, strategy={strategy}, grad_accum={accum} has a global batch of {global_batch}: "
            f"{world} ranks x {accum} micro-batches need at least {world * accum} samples, or a micro-batch is empty",
        )
    micro = int(values.get(MICRO_BATCHES, 1))
    if MICRO_BATCHES in strategy_settings(strategy) and global_batch % micro:
        raise CellConflict(
            ("batch_size", MICRO_BATCHES),
            f"the cell {cell}, strategy={strategy}, micro_batches={micro} has a global batch "
            f"({how}) that does not split into {micro} equal micro-batches",
        )


def check_stages(values: Mapping[str, Any], traits: StrategyTraits) -> None:
    """A strategy that cuts the model into stages (its sharding) cuts only an nn.Sequential, one stage a rank."""
    strategy, model, world = values["strategy"], values["model"], int(values["world_size"])
    if traits.sharding != "stages":
        return
    if model not in SEQUENTIAL_LAYERS:
        raise CellConflict(
            ("strategy", "model"),
            f"strategy {strategy} cuts only an nn.Sequential model into stages ({', '.join(SEQUENTIAL_LAYERS)}), "
            f"not {model}",
        )
    if world > SEQUENTIAL_LAYERS[model]:
        raise CellConflict(
            ("strategy", "model", "world_size"),
            f"strategy {strategy} at world_size {world} needs {world} stages; {model} has "
            f"{SEQUENTIAL_LAYERS[model]} layers",
        )


def is_user_model(model: str) -> bool:
    return model not in MODELS and re.fullmatch(USER_MODEL_PATTERN, model) is not None


def data_kind(dataset: str) -> str:
    """What a dataset's samples are: "tokens" (sequences of ids) or "image" (C x H x W)."""
    return "tokens" if dataset in TOKEN_DATASETS else "image"


def check_model_data(values: Mapping[str, Any]) -> None:
    """Refuse a built-in model on data of the other kind: an image classifier on token
    sequences, a language model on images. A user's model is checked at plan time by
    building it (plan.user_models)."""
    model, dataset = values["model"], values["dataset"]
    if is_user_model(model):
        return
    kind = data_kind(dataset)
    if kind == "tokens" and model not in TOKEN_MODELS:
        raise CellConflict(
            ("model", "dataset"),
            f"model {model} classifies images; dataset {dataset} is token sequences: use one of {', '.join(TOKEN_MODELS)}",
        )
    if kind == "image" and model in TOKEN_MODELS:
        raise CellConflict(
            ("model", "dataset"),
            f"model {model} is a language model over token sequences; dataset {dataset} is images: "
            f"use dataset {TOKEN_DATASETS[0]}",
        )


def check_training_setup(values: Mapping[str, Any]) -> None:
    """Refuse a precision the cell's device cannot run, the precision, accumulation or optimizer a
    strategy has no meaning for, and a layout it cannot shard (CellConflict naming the key and the
    strategy)."""
    strategy, precision = values["strategy"], values.get("precision", "fp32")
    if precision == "tf32" and values["device"] != "cuda":
        raise CellConflict(
            ("precision", "device"),
            "precision tf32 is a mode of CUDA's matrix multiplications (TensorFloat-32 tensor cores); "
            f"device {values['device']} has no such mode: use fp32 or bf16",
        )
    traits = strategy_traits(strategy)
    fully_sharded = traits.sharding in ("zero2", "zero3")  # FSDP2's fully_shard
    if values.get("memory_format", "contiguous") == "channels_last" and fully_sharded:
        raise CellConflict(
            ("memory_format", "strategy"),
            f"strategy {strategy} shards each parameter with FSDP2 (fully_shard), which refuses a non-contiguous "
            "one, and channels_last convolution weights are: use memory_format contiguous with it",
        )
    if MICRO_BATCHES in strategy_settings(strategy) and int(values.get("grad_accum", 1)) > 1:
        raise CellConflict(
            ("grad_accum", "strategy"),
            f"strategy {strategy} accumulates its micro_batches already (one optimizer step per global batch); "
            f"grad_accum {values['grad_accum']} would split them again: leave grad_accum at 1",
        )
    if not traits.mixed_precision and precision not in ("fp32", "tf32"):  # tf32: no autocast
        raise CellConflict(
            ("precision", "strategy"),
            f"strategy {strategy} is measured in fp32 only: mixed precision ({precision}) is not implemented "
            "for it (base.Strategy.mixed_precision); use fp32",
        )


def check_values(name: str, values: Iterable[Any]) -> None:
    """Validate every value of one config axis against the cell parameter `name`."""
    fields = {f.name: f for f in dataclasses.fields(CellParams)}
    if name not in fields:
        raise ParamError(name, list(values), "one of the cell parameters: " + ", ".join(fields))
    for value in values:
        _check(fields[name], value)
