"""`vgg11`, torchvision's, adapted to small images: no pooling below 1 px and a 512 -> classes head
(the CIFAR VGG) below models.SMALL px; larger images keep the original head."""

from __future__ import annotations

from torch import nn

from ddpbench.run import models

MODELS = {"vgg11": {"kind": "image", "torchvision": True}}
ORDER = 20


def build(name, shape, classes):
    c, h, w = shape
    model = models._torchvision_models().vgg11(num_classes=classes)
    model.features[0] = nn.Conv2d(c, 64, 3, padding=1)
    if min(h, w) < models.SMALL:
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
