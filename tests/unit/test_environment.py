"""The locked torch/torchvision pair imports together and runs a model."""

import pytest

pytestmark = pytest.mark.unit


def test_torchvision_resnet18_forward():
    import torch
    import torchvision

    model = torchvision.models.resnet18(num_classes=10).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10)
    assert torch.isfinite(out).all()
    # The pair comes from one release train: torchvision's minor follows torch's.
    assert int(torchvision.__version__.split(".")[1]) == int(torch.__version__.split(".")[1]) + 14
