"""The networks of the grid, built for a dataset's input shape and number of classes.

This __init__ is the registry of the models: one module per family, each declaring `MODELS` (name ->
its facts: `kind` image or tokens, and where they apply `torchvision` (built by
torchvision.models), `sequential_layers` (an nn.Sequential the pipeline strategy can cut, with its
number of layers) and `exact` (no batch norm or dropout: exact strategies equal `single` bit for
bit)), `ORDER` (where the family's models stand in the lists: the schema, the catalog, the docs) and
`build(name, shape, classes)`. The plan reads the declarations without torch (core.params:
MODELS, IMAGE_MODELS, TOKEN_MODELS, TORCHVISION_MODELS, SEQUENTIAL_LAYERS, MODEL_FACTS); `build`
here imports a family on demand. Adding a model is adding it to a family's MODELS and build, or
adding a family module (and regenerating plan/catalog.json).

The families: `small` (mlp, simple_cnn), `vgg`, `resnet`, `densenet` (torchvision's ImageNet
architectures adapted to small images the usual way: below SMALL px a 3x3 stride-1 stem without
the early max-pool, and for VGG no pooling below 1 px and a 512 -> classes head, the CIFAR VGG;
larger images keep the original stems and heads) and `gpt`, the GPT-style decoders on token
data. A name of the form `module.path:function` is the user's own model (run/user_model.py,
docs/models.md).
"""

from __future__ import annotations

import importlib

import torch
from torch import nn

from ddpbench.core import params

SMALL = 64  # images below this side get the small-image stems


def build(name: str, shape: tuple[int, ...], classes: int, *, kind: str = "image", model_path: str = ".") -> nn.Module:
    """A freshly initialised model (seed torch beforehand for identical weights) for data of
    `kind`: images of `shape` (C, H, W) in `classes` classes, or tokens: shape (seq_len,),
    classes the vocabulary size."""
    if params.is_user_model(name):
        from ddpbench.run import user_model

        inputs = {"vocab_size": classes, "seq_len": shape[0]} if kind == "tokens" else {"shape": tuple(shape), "classes": classes}
        return user_model.build(name, model_path, **inputs)
    facts = params.MODEL_FACTS.get(name, {})
    if facts.get("kind") == "tokens":
        if kind != "tokens":
            raise ValueError(f"model {name} is a language model: it needs token data (dataset synthetic_tokens)")
    elif kind != "image":
        raise ValueError(f"model {name} classifies images: it cannot train on {kind} data")
    if not facts:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(params.MODEL_FACTS)}")
    return importlib.import_module(f"{__name__}.{facts['family']}").build(name, tuple(shape), classes)


def _torchvision_models():
    """torchvision.models, imported on first use: it pulls in torch._dynamo, seconds of
    start-up in every rank of cells that never use a torchvision architecture."""
    from torchvision import models

    return models


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def flat_parameters(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


SAMPLED = 32  # coordinates of the final parameter vector a run records (extra.param_sample)


def parameter_sample(flat: torch.Tensor, k: int = SAMPLED) -> str:
    """The flat parameter vector at k coordinates drawn from a fixed generator (the same ones for every
    run of a model), as text: runs of different cells compare their final weights by the relative
    distance of these samples, a vector where the norm is one number (two models can share a norm)."""
    idx = torch.randint(flat.numel(), (k,), generator=torch.Generator().manual_seed(0))
    return " ".join(f"{float(v):.9g}" for v in flat.detach().cpu()[idx])
