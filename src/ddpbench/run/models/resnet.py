"""`resnet18` and `resnet50`, torchvision's, with a 3x3 stride-1 stem and no early max-pool below
models.SMALL px (the CIFAR ResNet); larger images keep the 7x7 stride-2 stem."""

from __future__ import annotations

from torch import nn

from ddpbench.run import models

MODELS = {"resnet18": {"kind": "image", "torchvision": True}, "resnet50": {"kind": "image", "torchvision": True}}
ORDER = 30


def build(name, shape, classes):
    c, h, w = shape
    model = getattr(models._torchvision_models(), name)(num_classes=classes)
    if min(h, w) < models.SMALL:
        model.conv1 = nn.Conv2d(c, 64, 3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    else:
        model.conv1 = nn.Conv2d(c, 64, 7, stride=2, padding=3, bias=False)
    return model
