"""The networks of the grid, built for a dataset's input shape and number of classes.

torchvision's ImageNet architectures are adapted to small images (< 64 px: CIFAR-10,
MNIST) the usual way: a 3x3 stride-1 stem without the early max-pool (ResNet, DenseNet),
and for VGG no pooling below 1 px and a 512 -> classes head (the CIFAR VGG); larger
images keep the original stems and heads. `mlp` and `simple_cnn` have no batch norm or
dropout, so strategies can be checked for exact equality with `single` on them.

Language models (token data) are the GPT-style decoders of run/gpt.py. A name of the form
`module.path:function` is the user's own model (run/user_model.py, docs/models.md).
"""

from __future__ import annotations

import torch
from torch import nn

from ddpbench.core.params import is_user_model
from ddpbench.run import gpt

SMALL = 64  # images below this side get the small-image stems


def build(name: str, shape: tuple[int, ...], classes: int, *, kind: str = "image", model_path: str = ".") -> nn.Module:
    """A freshly initialised model (seed torch beforehand for identical weights) for data of
    `kind`: images of `shape` (C, H, W) in `classes` classes, or tokens: shape (seq_len,),
    classes the vocabulary size."""
    if is_user_model(name):
        from ddpbench.run import user_model

        inputs = {"vocab_size": classes, "seq_len": shape[0]} if kind == "tokens" else {"shape": tuple(shape), "classes": classes}
        return user_model.build(name, model_path, **inputs)
    if name in gpt.SIZES:
        if kind != "tokens":
            raise ValueError(f"model {name} is a language model: it needs token data (dataset synthetic_tokens)")
        return gpt.build(name, vocab_size=classes, seq_len=shape[0])
    if kind != "image":
        raise ValueError(f"model {name} classifies images: it cannot train on {kind} data")
    try:
        return _BUILDERS[name](shape, classes)
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join([*_BUILDERS, *gpt.SIZES])}") from None


def mlp(shape, classes):
    c, h, w = shape
    return nn.Sequential(
        nn.Flatten(), nn.Linear(c * h * w, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, classes)
    )


def simple_cnn(shape, classes):
    """Two conv + two linear layers, the classic small CIFAR CNN."""
    c, h, w = shape
    return nn.Sequential(
        nn.Conv2d(c, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * (h // 4) * (w // 4), 128), nn.ReLU(), nn.Linear(128, classes),
    )  # fmt: skip


def _torchvision_models():
    """torchvision.models, imported on first use: it pulls in torch._dynamo, seconds of
    start-up in every rank of cells that never use a torchvision architecture."""
    from torchvision import models

    return models


def vgg11(shape, classes):
    c, h, w = shape
    model = _torchvision_models().vgg11(num_classes=classes)
    model.features[0] = nn.Conv2d(c, 64, 3, padding=1)
    if min(h, w) < SMALL:
        side = min(h, w)
        for i, layer in enumerate(model.features):
            if isinstance(layer, nn.MaxPool2d):
                if side < 2:  # MNIST's 28 px run out of pooling before VGG's five
                    model.features[i] = nn.Identity()
                else:
                    side //= 2
        model.avgpool = nn.AdaptiveAvgPool2d(1)
        model.classifier = nn.Linear(512, classes)
    return model


def _resnet(arch: str, shape, classes):
    c, h, w = shape
    model = getattr(_torchvision_models(), arch)(num_classes=classes)
    if min(h, w) < SMALL:
        model.conv1 = nn.Conv2d(c, 64, 3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    else:
        model.conv1 = nn.Conv2d(c, 64, 7, stride=2, padding=3, bias=False)
    return model


def resnet18(shape, classes):
    return _resnet("resnet18", shape, classes)


def resnet50(shape, classes):
    return _resnet("resnet50", shape, classes)


def densenet121(shape, classes):
    c, h, w = shape
    model = _torchvision_models().densenet121(num_classes=classes)
    if min(h, w) < SMALL:
        model.features.conv0 = nn.Conv2d(c, 64, 3, stride=1, padding=1, bias=False)
        model.features.pool0 = nn.Identity()
    else:
        model.features.conv0 = nn.Conv2d(c, 64, 7, stride=2, padding=3, bias=False)
    return model


_BUILDERS = {"mlp": mlp, "simple_cnn": simple_cnn, "vgg11": vgg11, "resnet18": resnet18, "resnet50": resnet50, "densenet121": densenet121}


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
