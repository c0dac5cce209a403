"""`densenet121`, torchvision's, with a 3x3 stride-1 stem and no early pooling below models.SMALL px;
larger images keep the 7x7 stride-2 stem."""

from __future__ import annotations

from torch import nn

from ddpbench.run import models

MODELS = {"densenet121": {"kind": "image", "torchvision": True}}
ORDER = 40


def build(name, shape, classes):
    c, h, w = shape
    model = models._torchvision_models().densenet121(num_classes=classes)
    if min(h, w) < models.SMALL:
        model.features.conv0 = nn.Conv2d(c, 64, 3, stride=1, padding=1, bias=False)
        model.features.pool0 = nn.Identity()
    else:
        model.features.conv0 = nn.Conv2d(c, 64, 7, stride=2, padding=3, bias=False)
    return model
