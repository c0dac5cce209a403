"""The model and dataset catalog: what a grid's choices cost before anything runs.

    ddpbench models                  # the tables, as in docs/models.md
    ddpbench models --world-size 4   # ... and what each rank holds at 4 ranks
    ddpbench models --write          # regenerate plan/catalog.json and docs/models.md
    ddpbench models --model my_models:net --model-path DIR [--input mnist ...]
                                                     # the same row for your own model (docs/models.md)

Per model and input (the synthetic shapes at their defaults): parameters, gradient bytes
(fp32, what every data-parallel step communicates), the optimizer's state (SGD's momentum,
AdamW's two moments), forward FLOPs per sample (PyTorch's FlopCounterMode: multiply-adds
count 2) and the strategies it supports; what a rank holds for training under each way of
keeping the model (replicated, ZeRO-1, -2, -3), as a formula in the gradient's bytes: a
planning aid, the measured figures are each run's extra.held_bytes. Per dataset: shape,
classes, training and test samples. catalog.json is the committed output, so the workflow
(which plans without torch) can warn about, e.g., a DDP bucket larger than the gradient; a
unit test rebuilds every model and checks it is current.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

from ddpbench import REPO_ROOT
from ddpbench.core import safe_io
from ddpbench.core.params import IMAGE_MODELS, MODEL_FACTS, MODELS, REAL_TRAIN_SAMPLES, SEQUENTIAL_LAYERS, TOKEN_MODELS, CellParams
from ddpbench.strategies import names as strategy_names, strategy_traits

CATALOG_PATH = pathlib.Path(__file__).with_name("catalog.json")
DOCS_PATH = REPO_ROOT / "docs" / "models.md"
INPUTS = ("cifar10", "mnist", "imagenette")  # the synthetic shapes; imagenette at the default image_size
TOKEN_INPUT = "synthetic_tokens"  # token sequences at the default vocab_size and seq_len
REAL_TEST_SAMPLES = {"cifar10": 10_000, "mnist": 10_000, "imagenette": 3_925}
EXACT_MODELS = tuple(n for n, f in MODEL_FACTS.items() if f.get("exact"))  # no batch norm or dropout: equal `single` bit for bit
# Optimizer state per parameter, in parameter sizes (fp32): SGD's momentum buffer (none at
# momentum 0), AdamW's two moments (plus a 4-byte step count per parameter tensor, left out).
OPTIMIZER_STATE = {"sgd": 1, "adamw": 2}
# Of (parameters, gradients, optimizer state), the ones each rank holds 1/p of between steps.
# FSDP2's ZeRO-2 (fsdp_grad_op) reshards after backward: between steps its parameters are
# shards as ZeRO-3's are; it differs in keeping them gathered from forward to backward (peak
# memory, not held bytes).
SHARDED = {"replicated": (), "zero1": ("optimizer",), "zero2": ("parameters", "gradients", "optimizer"),
           "zero3": ("parameters", "gradients", "optimizer")}  # fmt: skip


def input_shape(name: str) -> tuple[tuple[int, ...], int]:
    """A sample's shape and the classes: (C, H, W) for images; (seq_len,) and the vocabulary
    size for tokens (the defaults)."""
    if name == TOKEN_INPUT:
        return (CellParams().seq_len,), CellParams().vocab_size
    from ddpbench.run.data import synthetic_shape

    return synthetic_shape(name, CellParams().image_size)


def measure(model_name: str, input_name: str, model_path: str = CellParams().model_path) -> dict[str, Any]:
    """One catalog row, measured from the model object (a built-in one, or the user's own
    `module.path:function`, imported from `model_path` first)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from ddpbench.run import models

    shape, classes = input_shape(input_name)
    tokens = input_name == TOKEN_INPUT
    torch.manual_seed(0)
    model = models.build(model_name, shape, classes, kind="tokens" if tokens else "image", model_path=model_path).eval()
    params = models.count_parameters(model)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, *shape, dtype=torch.long if tokens else torch.float32))
    return {
        "model": model_name,
        "input": input_name,
        "shape": list(shape),
        "parameters": params,
        "gradient_bytes": 4 * sum(p.numel() for p in model.parameters() if p.requires_grad),  # fp32
        "forward_flops_per_sample": int(counter.get_total_flops()),
    }


def strategies_for(model: str) -> str:
    """The strategies `model` trains with (not counted: a new strategy leaves the catalog current)."""
    if model in SEQUENTIAL_LAYERS:
        return f"all; pipeline up to {SEQUENTIAL_LAYERS[model]} stages"
    return "all but pipeline"


def build_catalog() -> dict[str, Any]:
    rows = [measure(m, i) for m in IMAGE_MODELS for i in INPUTS]
    rows += [measure(m, TOKEN_INPUT) for m in TOKEN_MODELS]  # at the default vocab_size and seq_len
    datasets = []
    for name in INPUTS:
        shape, classes = input_shape(name)
        datasets.append({
            "dataset": name, "shape": list(shape), "classes": classes,
            "train_samples": REAL_TRAIN_SAMPLES[name], "test_samples": REAL_TEST_SAMPLES[name],
        })  # fmt: skip
    return {
        "image_size": CellParams().image_size,
        "models": rows,
        "strategies": {m: strategies_for(m) for m in MODELS},
        "datasets": datasets,
    }


def load() -> dict[str, Any]:
    """The committed catalog (no torch needed)."""
    return json.loads(CATALOG_PATH.read_text())


def _row(model: str, synthetic_shape: str) -> dict[str, Any] | None:
    return next((r for r in load()["models"] if r["model"] == model and r["input"] == synthetic_shape), None)


def gradient_bytes(model: str, synthetic_shape: str) -> int | None:
    """A model's gradient size for an input, from the committed catalog (None: not listed)."""
    row = _row(model, synthetic_shape)
    return row["gradient_bytes"] if row else None


def forward_flops(
    model: str, synthetic_shape: str, image_size: int | None = None, seq_len: int | None = None
) -> float | None:
    """A model's forward FLOPs a sample (None: not listed); imagenette's scale with the image's area
    from the catalog's image_size (convolutions dominate them), a token sequence's with its length
    from the default seq_len (linear: the weights' matmuls dominate a small context)."""
    row = _row(model, synthetic_shape)
    if row is None:
        return None
    scale = (image_size / load()["image_size"]) ** 2 if synthetic_shape == "imagenette" and image_size else 1.0
    if synthetic_shape == TOKEN_INPUT and seq_len:
        scale = seq_len / row["shape"][0]
    return row["forward_flops_per_sample"] * scale


def optimizer_state_bytes(gradient: int, optimizer: str = "sgd", momentum: float = 0.9) -> int:
    """Bytes of optimizer state for a model whose fp32 gradient is `gradient` bytes."""
    if optimizer == "sgd" and not momentum:
        return 0
    return OPTIMIZER_STATE[optimizer] * gradient


def sharding(strategy: str) -> str:
    """How `strategy` keeps the model: replicated, zero1, zero2, zero3 or stages (pipeline): its
    base.Strategy.sharding, from the registry (replicated for a name the registry lacks)."""
    return strategy_traits(strategy).sharding if strategy in strategy_names() else "replicated"


def held_bytes(
    model: str, synthetic_shape: str, strategy: str, world: int, optimizer: str = "sgd", momentum: float = 0.9
) -> dict[str, int] | None:
    """What one rank holds for training, a planning estimate: parameters, gradients and optimizer
    state in fp32, a sharded one at 1/p (a run's extra.held_bytes is the largest rank's, measured:
    FSDP pads each parameter's rows to a multiple of p, ZeRO-1 shards whole parameters). None:
    the model is not listed, or the pipeline (each rank holds its stage's layers)."""
    return _held(gradient_bytes(model, synthetic_shape), strategy, world, optimizer, momentum)


def _held(grad: int | None, strategy: str, world: int, optimizer: str = "sgd", momentum: float = 0.9) -> dict[str, int] | None:
    kind = sharding(strategy)
    if grad is None or kind not in SHARDED:
        return None
    full = {"parameters": grad, "gradients": grad, "optimizer": optimizer_state_bytes(grad, optimizer, momentum)}
    held = {k: -(-v // world) if k in SHARDED[kind] else v for k, v in full.items()}
    return {**held, "total": sum(held.values())}


def _size(n: float) -> str:
    for unit in ("", " K", " M", " G", " T"):
        if abs(n) < 1000:
            return f"{n:.3g}{unit}"
        n /= 1000
    return f"{n:.3g} P"


def markdown(catalog: dict[str, Any]) -> str:
    lines = [
        f"Forward FLOPs per sample (a training step costs about three times that); imagenette at the default "
        f"image_size {catalog['image_size']} px. Exact strategies equal `single` bit for bit on "
        f"{', '.join(EXACT_MODELS)} (no batch norm or dropout).",
        "",
        f"The GPT models (run/models/gpt.py: pre-norm decoder blocks, causal attention, tied head, no dropout, "
        f"so exact strategies end where `single` ends on them as well) are measured on synthetic_tokens "
        f"at the default vocab_size {CellParams().vocab_size} and seq_len {CellParams().seq_len}: a "
        f"sample is one sequence, its FLOPs those of all its tokens. The embedding grows with the "
        f"vocabulary and the context, so at GPT-2's 50,257 tokens and context 1,024 gpt2_small has "
        f"124,439,808 parameters and gpt2_medium 354,823,168 (tests/unit/test_gpt.py).",
        "",
        model_table(catalog).rstrip("\n"),
    ]
    lines += ["", HELD_HEAD.rstrip("\n")]
    lines += ["", "| dataset | shape | classes | train samples | test samples |", "|---|---|---|---|---|"]
    for d in catalog["datasets"]:
        lines.append(f"| {d['dataset']} | {'×'.join(map(str, d['shape']))} | {d['classes']} | {d['train_samples']:,} "
                     f"| {d['test_samples']:,} |")  # fmt: skip
    lines.append(f"| synthetic_tokens | seq_len (default {CellParams().seq_len}) token ids | vocab_size (default "
                 f"{CellParams().vocab_size}) per position | dataset_size (generated) | test_size (generated) |")  # fmt: skip
    return "\n".join(lines) + "\n"


def model_table(catalog: dict[str, Any]) -> str:
    """The catalog's model rows as a Markdown table."""
    lines = [
        "| model | input | shape | parameters | gradient (fp32) | optimizer state sgd / adamw | forward FLOPs / sample "
        "| strategies |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in catalog["models"]:
        shape = "×".join(map(str, r["shape"]))
        state = " / ".join(f"{optimizer_state_bytes(r['gradient_bytes'], o) / 2**20:.2f}" for o in OPTIMIZER_STATE)
        lines.append(
            f"| `{r['model']}` | {r['input']} | {shape} | {r['parameters']:,} | {r['gradient_bytes'] / 2**20:.2f} MiB "
            f"| {state} MiB | {_size(r['forward_flops_per_sample'])} | {catalog['strategies'][r['model']]} |"
        )
    return "\n".join(lines) + "\n"


HELD_HEAD = """What a rank holds for training (a run's `extra.held_bytes`: its parameters + gradients + optimizer
state, counted from its own tensors or shards; [metrics.md](metrics.md)), with P the gradient's bytes
above, p the world size and k the optimizer state's share (1: SGD with momentum, 0 without; 2: AdamW).
`ddpbench models --world-size 4 --optimizer adamw` prints it for every model at 4 ranks. Transient
copies are not in it but in the peak memory: FSDP's gathered parameters (ZeRO-2: every unit's, up to P,
from forward to backward; ZeRO-3: one or two units' at a time; FSDP2 reshards ZeRO-2's after backward,
so between steps it holds what ZeRO-3 holds), DDP's buckets (another P), activations.

| strategies | parameters | gradients | optimizer state | held per rank |
|---|---|---|---|---|
| the others (replicated) | P | P | k·P | (2 + k)·P |
| `zero` (ZeRO-1) | P | P | k·P/p (whole parameters: the largest rank's share can be more) | (2 + k/p)·P |
| `fsdp_grad_op` (ZeRO-2), `fsdp` (ZeRO-3) | P/p | P/p | k·P/p | (2 + k)·P/p (each parameter's rows padded to a multiple of p) |
| `pipeline` | its stage's | its stage's | k × its stage's | (2 + k) × its stage's parameters (stages are cut at equal multiply-accumulates, not parameters) |
"""


def held_table(catalog: dict[str, Any], world: int, optimizer: str = "sgd") -> str:
    """Held bytes per rank (MiB) at `world` ranks for every model and input, per sharding."""
    kinds = ["replicated", "zero1", "zero3"]  # zero2 holds what zero3 does between steps
    names = {"replicated": "replicated (ddp, ...)", "zero1": "zero", "zero3": "fsdp, fsdp_grad_op"}
    lines = [
        f"Held per rank at p = {world} with {optimizer} (MiB: parameters + gradients + optimizer state, fp32):",
        "",
        "| model | input | " + " | ".join(names[k] for k in kinds) + " |",
        "|---|---|" + "---|" * len(kinds),
    ]
    strategy = {sharding(n): n for n in strategy_names() if sharding(n) != "replicated"}  # one of each kind
    for r in catalog["models"]:
        held = [_held(r["gradient_bytes"], strategy.get(k, "ddp"), world, optimizer) for k in kinds]
        lines.append(f"| `{r['model']}` | {r['input']} | " + " | ".join(f"{h['total'] / 2**20:.2f}" for h in held) + " |")
    return "\n".join(lines) + "\n"


DOC_HEAD = """# Models and datasets

What each choice of the grid's `model` and `synthetic_shape` / `dataset` axes costs before
anything runs: parameters, the gradient every data-parallel step communicates (compare it
with `bucket_mb`: a bucket larger than the gradient means one all-reduce per step and no
overlap), the optimizer's state, what a rank holds under DDP, ZeRO and FSDP, and the compute
per sample. `ddpbench models`
prints these tables; they are generated (`ddpbench models --write`) and a unit
test checks them against the model objects. [Your own model](#your-own-model) gets the same row
from `ddpbench models --model module.path:function`.

"""
# The hand-written part of docs/models.md from this heading on: --write keeps it as it is.
HAND_WRITTEN = "## Your own model"


def hand_written(doc: str) -> str:
    """The part of `doc` (docs/models.md's text) that --write keeps: from HAND_WRITTEN on."""
    at = doc.find("\n" + HAND_WRITTEN)
    return doc[at:] if at >= 0 else ""


def user_model_catalog(spec: str, model_path: str, inputs: list[str]) -> dict[str, Any]:
    """A catalog of one user model, measured for each of `inputs` (no datasets)."""
    return {
        "image_size": CellParams().image_size,
        "models": [measure(spec, name, model_path) for name in inputs],
        "strategies": {spec: strategies_for(spec)},
        "datasets": [],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ddpbench models", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"regenerate {CATALOG_PATH.name} and docs/models.md")
    parser.add_argument("--json", action="store_true", help="print the catalog as JSON")
    parser.add_argument("--world-size", type=int, metavar="P", help="also print what each rank holds at P ranks")
    parser.add_argument("--optimizer", choices=tuple(OPTIMIZER_STATE), default="sgd", help="for --world-size (default sgd)")
    parser.add_argument("--model", metavar="SPEC", help="measure your own model, package.module:function (runs its code)")
    parser.add_argument("--model-path", default=CellParams().model_path, metavar="DIR",
                        help="with --model: folder searched first for the module (default: the working directory)")  # fmt: skip
    parser.add_argument("--input", action="append", choices=(*INPUTS, TOKEN_INPUT),
                        help="with --model: the data it is measured on, repeatable (default cifar10)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.world_size is not None and args.world_size < 1:
        parser.error("--world-size must be at least 1")
    if args.model is not None:
        if args.write:
            parser.error("--model measures your model only: it is not written into the catalog")
        try:
            catalog = user_model_catalog(args.model, args.model_path, args.input or ["cifar10"])
        except ValueError as err:  # the import or the call failed, or no module: the message names it
            parser.exit(1, f"error: {err}\n")
        except Exception as err:  # the model's own forward pass on the input
            parser.exit(1, f"error: model {args.model!r}: {type(err).__name__}: {err}\n")
        print(json.dumps(catalog, indent=1) if args.json else model_table(catalog), end="")
        if args.world_size and not args.json:
            print("\n" + held_table(catalog, args.world_size, args.optimizer), end="")
        return 0
    if args.input:
        parser.error("--input goes with --model")
    catalog = build_catalog() if args.write else load()
    if args.write:
        safe_io.atomic_write_text(CATALOG_PATH, json.dumps(catalog, indent=1) + "\n")
        kept = hand_written(DOCS_PATH.read_text()) if DOCS_PATH.exists() else ""
        safe_io.atomic_write_text(DOCS_PATH, DOC_HEAD + markdown(catalog) + kept)
    print(json.dumps(catalog, indent=1) if args.json else markdown(catalog), end="")
    if args.world_size and not args.json:
        print("\n" + held_table(catalog, args.world_size, args.optimizer), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
