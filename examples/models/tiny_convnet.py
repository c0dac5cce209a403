"""An example of your own model for ddpbench (docs/models.md, "Your own model").

    model: "tiny_convnet:tiny_convnet"
    model_path: examples/models

ddpbench calls the function with keyword arguments: shape=(c, h, w) and classes=K for image
data. It returns an nn.Module whose output for a batch of N images is N x K logits.
"""

from torch import nn


def tiny_convnet(shape, classes, **kwargs):
    """Two 3x3 convolutions, global average pooling and a linear head: any image size."""
    c, _, _ = shape
    return nn.Sequential(
        nn.Conv2d(c, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes),
    )  # fmt: skip
