"""`mlp` and `simple_cnn`: small networks without batch norm or dropout, so the exact strategies can be
checked for equality with `single` on them; both are an nn.Sequential, which the pipeline strategy
cuts into stages."""

from __future__ import annotations

from torch import nn

MODELS = {
    "mlp": {"kind": "image", "sequential_layers": 6, "exact": True},
    "simple_cnn": {"kind": "image", "sequential_layers": 10, "exact": True},
}
ORDER = 10


def build(name, shape, classes):
    return {"mlp": mlp, "simple_cnn": simple_cnn}[name](shape, classes)


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
