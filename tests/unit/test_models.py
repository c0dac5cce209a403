import pytest
import torch

from ddpbench.run import models
from ddpbench.core.params import IMAGE_MODELS


@pytest.mark.parametrize("shape", [(3, 32, 32), (1, 28, 28)])
@pytest.mark.parametrize("name", IMAGE_MODELS)
def test_small_image_output_shapes(name, shape):
    torch.manual_seed(0)
    model = models.build(name, shape, 7).eval()
    with torch.no_grad():
        out = model(torch.randn(2, *shape))
    assert out.shape == (2, 7) and torch.isfinite(out).all()


@pytest.mark.parametrize("name", IMAGE_MODELS)
def test_every_image_model_takes_a_training_step(name):
    """Forward and backward in training mode (the study miniatures run simple_cnn in place of
    the heavy studies' densenet121, so its backward is checked here)."""
    torch.manual_seed(0)
    model = models.build(name, (3, 32, 32), 7).train()
    torch.nn.functional.cross_entropy(model(torch.randn(2, 3, 32, 32)), torch.tensor([1, 5])).backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("name", ["mlp", "simple_cnn", "resnet18"])
def test_larger_images_keep_the_imagenet_stem(name):
    model = models.build(name, (3, 64, 64), 10).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 64, 64)).shape == (1, 10)


def test_same_seed_same_weights():
    torch.manual_seed(1)
    a = models.flat_parameters(models.build("simple_cnn", (3, 32, 32), 10))
    torch.manual_seed(1)
    b = models.flat_parameters(models.build("simple_cnn", (3, 32, 32), 10))
    assert torch.equal(a, b)


def test_exactness_models_have_no_batch_norm_or_dropout():
    for name in ("mlp", "simple_cnn"):
        kinds = {type(m) for m in models.build(name, (3, 32, 32), 10).modules()}
        assert not kinds & {torch.nn.BatchNorm2d, torch.nn.Dropout}


def test_the_parameter_sample_is_the_same_coordinates_for_every_run_of_a_model():
    import torch

    from ddpbench.run.models import SAMPLED, parameter_sample

    flat = torch.arange(1000, dtype=torch.float32)
    a, b = parameter_sample(flat), parameter_sample(flat.clone())
    assert a == b and len(a.split()) == SAMPLED
    values = [float(v) for v in a.split()]
    assert all(v == int(v) and 0 <= v < 1000 for v in values)  # coordinates of the vector itself
    moved = flat.clone()
    moved[int(values[0])] += 1.0
    assert parameter_sample(moved) != a  # a change at a sampled coordinate shows
