import gzip
import struct
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ddpbench.run import data
from ddpbench.core.params import CellParams


def rank_batches(n, global_batch, world, seed, epoch):
    out = []
    for rank in range(world):
        s = data.ShardedBatchSampler(n, global_batch, rank, world, seed)
        s.set_epoch(epoch)
        out.append(list(s))
    return out


@pytest.mark.parametrize("scaling", ["strong", "weak"])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_union_of_rank_batches_is_the_single_batch(world, scaling):
    n, batch, seed = 103, 12, 5
    global_batch, per_rank = data.batch_sizes(batch, scaling, world)
    for epoch in (0, 1):
        s1 = data.ShardedBatchSampler(n, global_batch, 0, 1, seed)
        s1.set_epoch(epoch)
        single = list(s1)
        ranks = rank_batches(n, global_batch, world, seed, epoch)
        assert all(len(r) == len(single) == n // global_batch for r in ranks)
        for step, expected in enumerate(single):
            parts = [r[step] for r in ranks]
            assert sum(parts, []) == expected  # contiguous split, in rank order
            assert max(map(len, parts)) == per_rank and max(map(len, parts)) - min(map(len, parts)) <= 1


def test_epochs_reshuffle_and_seed_decides():
    a = rank_batches(50, 10, 1, 0, 0)[0]
    assert a != rank_batches(50, 10, 1, 0, 1)[0]
    assert a == rank_batches(50, 10, 1, 0, 0)[0]
    assert a != rank_batches(50, 10, 1, 1, 0)[0]


def test_batch_sizes():
    assert data.batch_sizes(64, "strong", 4) == (64, 16)
    assert data.batch_sizes(10, "strong", 3) == (10, 4)
    assert data.batch_sizes(64, "weak", 4) == (256, 64)


def test_impossible_batches_are_errors():
    with pytest.raises(ValueError, match="larger"):
        data.ShardedBatchSampler(10, 11, 0, 1, 0)
    with pytest.raises(ValueError, match="smaller than the world size"):
        data.ShardedBatchSampler(10, 2, 0, 3, 0)


def test_synthetic_is_deterministic_and_learnable():
    p = CellParams(strategy="single", dataset_size=600, test_size=200, synthetic_shape="mnist", seed=4)
    a, b = data.load(p), data.load(p)
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.test.y, b.test.y)
    assert a.shape == (1, 28, 28) and a.classes == 10 and len(a.train) == 600 and len(a.test) == 200
    # Class structure: nearest class mean (from the training split) beats chance on the test split.
    x, y = a.train.x.flatten(1), a.train.y
    means = torch.stack([x[y == c].mean(0) for c in range(10)])
    pred = torch.cdist(a.test.x.flatten(1), means).argmin(1)
    assert (pred == a.test.y).float().mean() > 0.5


def test_loader_yields_this_ranks_samples():
    p = CellParams(strategy="single", dataset_size=40, test_size=0, synthetic_shape="mnist")
    d = data.load(p)
    sampler = data.ShardedBatchSampler(40, 8, 1, 2, 0)
    x, y = next(iter(data.train_loader(d, sampler, 0, False)))
    idx = next(iter(sampler))
    assert torch.equal(x, d.train.x[idx]) and torch.equal(y, d.train.y[idx])


def _idx(path, array, magic):
    with gzip.open(path, "wb") if str(path).endswith(".gz") else open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", s) for s in array.shape) + array.tobytes())


def test_mnist_reader_on_tiny_files_in_the_real_format(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 20), ("t10k", 8)):
        _idx(raw / f"{split}-images-idx3-ubyte", rng.integers(0, 255, (n, 28, 28), dtype=np.uint8), 0x803)
        _idx(raw / f"{split}-labels-idx1-ubyte", rng.integers(0, 10, (n,), dtype=np.uint8), 0x801)
    p = CellParams(strategy="single", dataset="mnist", data_root=str(tmp_path), dataset_size=16, test_size=5)
    d = data.load(p)
    assert d.shape == (1, 28, 28) and len(d.train) == 16 and len(d.test) == 5
    x, y = d.train[0]
    assert x.shape == (1, 28, 28) and 0 <= int(y) < 10
    xs, ys = next(data.test_batches(d, 0, 1, 64))
    assert xs.shape == (5, 1, 28, 28)


def test_missing_real_data_says_how_to_fetch_it(tmp_path):
    p = CellParams(strategy="single", dataset="cifar10", data_root=str(tmp_path))
    with pytest.raises(RuntimeError, match="ddpbench data --dataset cifar10"):
        data.load(p)


def test_imagenette_reader_on_tiny_jpegs(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", 4), ("val", 2)):
        for wnid in ("n01440764", "n02102040"):
            folder = tmp_path / "imagenette2-160" / split / wnid
            folder.mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 255, (180, 200, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{wnid}_{i}.JPEG")
    p = CellParams(strategy="single", dataset="imagenette", data_root=str(tmp_path), image_size=48, dataset_size=6,
                   test_size=3)  # fmt: skip
    d = data.load(p)
    assert d.shape == (3, 48, 48) and d.classes == 10 and len(d.train) == 6 and len(d.test) == 3
    x, y = d.train[0]
    assert x.shape == (3, 48, 48) and int(y) in (0, 1)
    assert {int(d.train[i][1]) for i in range(6)} == {0, 1}  # a seeded subset, not the first class only


def test_synthetic_imagenette_takes_its_side_from_image_size():
    from ddpbench.run import data

    assert data.synthetic_shape("imagenette", 96) == ((3, 96, 96), 10)
    assert data.synthetic_shape("cifar10", 96) == ((3, 32, 32), 10)
