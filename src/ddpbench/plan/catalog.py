"""The model and dataset catalog: what a grid's choices cost before anything runs.

    python -m ddpbench.plan.catalog            # the tables, as in docs/models.md
    python -m ddpbench.plan.catalog --write    # regenerate src/ddpbench/catalog.json and docs/models.md

Per model and input (the synthetic shapes at their defaults): parameters, gradient bytes
(fp32, what every data-parallel step communicates), forward FLOPs per sample (PyTorch's
FlopCounterMode: multiply-adds count 2) and the strategies it supports. Per dataset: shape,
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
from ddpbench.core.params import REAL_TRAIN_SAMPLES, SEQUENTIAL_LAYERS, CellParams

CATALOG_PATH = pathlib.Path(__file__).with_name("catalog.json")
DOCS_PATH = REPO_ROOT / "docs" / "models.md"
INPUTS = ("cifar10", "mnist", "imagenette")  # the synthetic shapes; imagenette at the default image_size
REAL_TEST_SAMPLES = {"cifar10": 10_000, "mnist": 10_000, "imagenette": 3_925}
EXACT_MODELS = ("mlp", "simple_cnn")  # no batch norm or dropout: exact strategies equal `single` bit for bit


def input_shape(name: str) -> tuple[tuple[int, int, int], int]:
    from ddpbench.run.data import synthetic_shape

    return synthetic_shape(name, CellParams().image_size)


def measure(model_name: str, input_name: str) -> dict[str, Any]:
    """One catalog row, measured from the model object."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from ddpbench.run import models

    shape, classes = input_shape(input_name)
    torch.manual_seed(0)
    model = models.build(model_name, shape, classes).eval()
    params = models.count_parameters(model)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, *shape))
    return {
        "model": model_name,
        "input": input_name,
        "shape": list(shape),
        "parameters": params,
        "gradient_bytes": 4 * params,
        "forward_flops_per_sample": int(counter.get_total_flops()),
    }


def strategies_for(model: str) -> str:
    from ddpbench import strategies

    names = strategies.names()
    if model in SEQUENTIAL_LAYERS:
        return f"all ({len(names)}); pipeline up to {SEQUENTIAL_LAYERS[model]} stages"
    return f"all but pipeline ({len(names) - 1})"


def build_catalog() -> dict[str, Any]:
    from ddpbench.run import models

    rows = [measure(m, i) for m in models._BUILDERS for i in INPUTS]
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
        "strategies": {m: strategies_for(m) for m in models._BUILDERS},
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


def forward_flops(model: str, synthetic_shape: str, image_size: int | None = None) -> float | None:
    """A model's forward FLOPs a sample (None: not listed); imagenette's scale with the image's area
    from the catalog's image_size (convolutions dominate them)."""
    row = _row(model, synthetic_shape)
    if row is None:
        return None
    scale = (image_size / load()["image_size"]) ** 2 if synthetic_shape == "imagenette" and image_size else 1.0
    return row["forward_flops_per_sample"] * scale


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
        "| model | input | shape | parameters | gradient (fp32) | forward FLOPs / sample | strategies |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in catalog["models"]:
        shape = "×".join(map(str, r["shape"]))
        lines.append(
            f"| `{r['model']}` | {r['input']} | {shape} | {r['parameters']:,} | {r['gradient_bytes'] / 2**20:.2f} MiB "
            f"| {_size(r['forward_flops_per_sample'])} | {catalog['strategies'][r['model']]} |"
        )
    lines += ["", "| dataset | shape | classes | train samples | test samples |", "|---|---|---|---|---|"]
    for d in catalog["datasets"]:
        lines.append(f"| {d['dataset']} | {'×'.join(map(str, d['shape']))} | {d['classes']} | {d['train_samples']:,} "
                     f"| {d['test_samples']:,} |")  # fmt: skip
    return "\n".join(lines) + "\n"


DOC_HEAD = """# Models and datasets

What each choice of the grid's `model` and `synthetic_shape` / `dataset` axes costs before
anything runs: parameters, the gradient every data-parallel step communicates (compare it
with `bucket_mb`: a bucket larger than the gradient means one all-reduce per step and no
overlap), and the compute per sample. `ddpbench models` (or `python -m ddpbench.plan.catalog`)
prints these tables; they are generated (`python -m ddpbench.plan.catalog --write`) and a unit
test checks them against the model objects.

"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ddpbench models", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"regenerate {CATALOG_PATH.name} and docs/models.md")
    parser.add_argument("--json", action="store_true", help="print the catalog as JSON")
    args = parser.parse_args(argv)
    catalog = build_catalog() if args.write else load()
    if args.write:
        CATALOG_PATH.write_text(json.dumps(catalog, indent=1) + "\n")
        DOCS_PATH.write_text(DOC_HEAD + markdown(catalog))
    print(json.dumps(catalog, indent=1) if args.json else markdown(catalog), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
