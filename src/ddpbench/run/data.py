"""Training and test data, and the sharding that makes data parallelism exact.

Sharding: every epoch has one global permutation of the training subset, drawn from
(seed, epoch) and identical on every rank. Step s takes the global batch
perm[s*B : (s+1)*B] and rank r takes the r-th contiguous part of it (sizes differ by at
most one). So the union of the ranks' batches at a step is exactly the batch a single
process gets at that step, whatever the world size; only full global batches are used
(an epoch has dataset_size // B steps), so every step has the same global batch.

Datasets: `synthetic_tokens` is token sequences for next-token prediction (the GPT
models), generated from the seed: a fixed random Markov chain in which each token has a
few likely successors, so the loss falls from ln(vocab_size) towards the chain's entropy;
a sample is (tokens[:-1], tokens[1:]). `synthetic` is generated in memory from the seed (class prototypes, smooth in
space, plus noise: loss falls, accuracy rises above chance); cifar10, mnist and
imagenette are read with torchvision's readers from `data_root` and are never
downloaded by a training rank: fetch them beforehand with
`ddpbench data --dataset cifar10 --data-root DIR`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Dataset, Subset

# The harness's batches, torch-free in core.params (the plan and the step model's predictions derive them too)
from ddpbench.core.params import batch_sizes  # noqa: F401

SYNTHETIC_SHAPES = {"cifar10": ((3, 32, 32), 10), "mnist": ((1, 28, 28), 10), "imagenette": ((3, 0, 0), 10)}
_NORMALIZE = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "mnist": ((0.1307,), (0.3081,)),
    "imagenette": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}


@dataclass
class Data:
    """`shape` is a sample's: (C, H, W) for images, (seq_len,) for tokens; `classes` is
    the number of labels, for tokens the vocabulary (a label per position)."""

    train: Dataset
    test: Dataset | None
    shape: tuple[int, ...]
    classes: int
    kind: str = "image"


class TensorData(Dataset):
    """In-memory samples; `__getitems__` hands the DataLoader a whole batch at once."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __getitems__(self, indices: Sequence[int]):
        idx = torch.as_tensor(indices)
        return self.x[idx], self.y[idx]


def _batch_as_is(batch):
    return batch


def synthetic(shape: tuple[int, int, int], classes: int, n: int, seed: int) -> TensorData:
    """n samples: label-dependent smooth prototype (4x4 upsampled) + unit Gaussian noise."""
    g = torch.Generator().manual_seed(seed)
    c, h, w = shape
    coarse = torch.randn(classes, c, 4, 4, generator=g)
    prototypes = torch.nn.functional.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False)
    y = torch.randint(classes, (n,), generator=g)
    x = 0.5 * prototypes[y] + torch.randn(n, c, h, w, generator=g)
    return TensorData(x, y)


SUCCESSORS = 4  # likely next tokens of each token in synthetic_tokens' chain


def synthetic_tokens(vocab_size: int, seq_len: int, n: int, seed: int) -> TensorData:
    """n sequences of seq_len + 1 tokens from a fixed random Markov chain (drawn from the
    seed): each token is followed by one of SUCCESSORS tokens with Dirichlet(1) weights.
    Inputs are the first seq_len tokens, targets the last seq_len (shifted by one)."""
    g = torch.Generator().manual_seed(seed)
    successors = torch.randint(vocab_size, (vocab_size, min(SUCCESSORS, vocab_size)), generator=g)
    weights = -torch.rand(vocab_size, successors.shape[1], generator=g).log()  # Dirichlet(1), unnormalised
    cumulative = (weights / weights.sum(1, keepdim=True)).cumsum(1)
    tokens = torch.empty(n, seq_len + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(vocab_size, (n,), generator=g)
    draws = torch.rand(seq_len, n, 1, generator=g)
    for t in range(seq_len):
        row = tokens[:, t]
        pick = torch.searchsorted(cumulative[row], draws[t]).clamp_(max=successors.shape[1] - 1)
        tokens[:, t + 1] = successors[row].gather(1, pick).squeeze(1)
    return TensorData(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())


def synthetic_shape(name: str, image_size: int) -> tuple[tuple[int, int, int], int]:
    """(C, H, W) and classes of a synthetic dataset; imagenette's side is image_size."""
    (c, h, w), classes = SYNTHETIC_SHAPES[name]
    return ((c, image_size, image_size) if h == 0 else (c, h, w)), classes


def load(params: Any) -> Data:
    """The cell's training subset (dataset_size samples) and test set (test_size samples)."""
    if params.dataset == "synthetic_tokens":
        both = synthetic_tokens(params.vocab_size, params.seq_len, params.dataset_size + params.test_size, params.seed)
        n = params.dataset_size
        test = TensorData(both.x[n:], both.y[n:]) if params.test_size else None
        return Data(TensorData(both.x[:n], both.y[:n]), test, (params.seq_len,), params.vocab_size, "tokens")
    if params.dataset == "synthetic":
        shape, classes = synthetic_shape(params.synthetic_shape, params.image_size)
        both = synthetic(shape, classes, params.dataset_size + params.test_size, params.seed)
        n = params.dataset_size
        train = TensorData(both.x[:n], both.y[:n])
        test = TensorData(both.x[n:], both.y[n:]) if params.test_size else None
        return Data(train, test, shape, classes)
    train, test, shape = _torchvision(params.dataset, params.data_root, params.image_size)
    if len(train) < params.dataset_size:
        raise ValueError(f"dataset_size {params.dataset_size} exceeds the {len(train)} samples of {params.dataset}")
    return Data(
        _subset(train, params.dataset_size, params.seed),
        _subset(test, min(params.test_size, len(test)), params.seed) if params.test_size else None,
        shape,
        10,
    )


def _subset(ds: Dataset, n: int, seed: int) -> Dataset:
    """A seeded random subset: real datasets may be stored sorted by class (Imagenette)."""
    idx = torch.randperm(len(ds), generator=torch.Generator().manual_seed(seed))[:n]
    return Subset(ds, idx.tolist())


def _torchvision(name: str, root: str, image_size: int, download: bool = False):
    import torchvision.datasets as tvd
    import torchvision.transforms as T

    mean, std = _NORMALIZE[name]
    to_tensor = [T.ToTensor(), T.Normalize(mean, std)]
    try:
        if name == "cifar10":
            tf = T.Compose(to_tensor)
            make = lambda train: tvd.CIFAR10(root, train=train, download=download, transform=tf)  # noqa: E731
            shape = (3, 32, 32)
        elif name == "mnist":
            tf = T.Compose(to_tensor)
            make = lambda train: tvd.MNIST(root, train=train, download=download, transform=tf)  # noqa: E731
            shape = (1, 28, 28)
        elif name == "imagenette":
            tf = T.Compose([T.Resize(image_size), T.CenterCrop(image_size), *to_tensor])
            size = _imagenette_size(root, image_size)
            split = {True: "train", False: "val"}
            make = lambda train: tvd.Imagenette(root, split[train], size, download=download, transform=tf)  # noqa: E731
            shape = (3, image_size, image_size)
        else:
            raise ValueError(f"unknown dataset {name!r}")
        return make(True), make(False), shape
    except RuntimeError as e:  # torchvision: "Dataset not found or corrupted ..."
        raise RuntimeError(
            f"{name} not found under data_root={root!r} ({e}); ranks never download: fetch it first with "
            f"`ddpbench data --dataset {name} --data-root {root}`"
        ) from None


def _imagenette_size(root: str, image_size: int) -> str:
    """The smallest downloaded Imagenette variant whose images are at least image_size."""
    variants = [("160px", 160, "imagenette2-160"), ("320px", 320, "imagenette2-320"), ("full", 10**9, "imagenette2")]
    present = [v for v in variants if (Path(root) / v[2]).is_dir()]
    for size, side, _ in present:
        if image_size <= side:
            return size
    return present[-1][0] if present else "160px" if image_size <= 160 else "320px"


class ShardedBatchSampler:
    """This rank's sample indices for each step (see the module docstring)."""

    def __init__(self, n: int, global_batch: int, rank: int, world: int, seed: int):
        if global_batch > n:
            raise ValueError(f"global batch {global_batch} is larger than the {n} training samples")
        if global_batch < world:
            raise ValueError(f"global batch {global_batch} is smaller than the world size {world}")
        self.n, self.global_batch, self.rank, self.world, self.seed = n, global_batch, rank, world, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n // self.global_batch

    def global_batches(self) -> Iterator[torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        perm = torch.randperm(self.n, generator=g)
        for s in range(len(self)):
            yield perm[s * self.global_batch : (s + 1) * self.global_batch]

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.global_batches():
            yield torch.tensor_split(batch, self.world)[self.rank].tolist()


def train_loader(data: Data, sampler: ShardedBatchSampler, num_workers: int, pin_memory: bool) -> DataLoader:
    batched = isinstance(data.train, TensorData)
    return DataLoader(
        data.train,
        batch_sampler=sampler,
        num_workers=num_workers,
        collate_fn=_batch_as_is if batched else None,
        pin_memory=pin_memory,
        persistent_workers=num_workers > 0,
    )


def test_batches(data: Data, rank: int, world: int, batch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's contiguous share of the test set, in batches."""
    if data.test is None:
        return
    share = torch.tensor_split(torch.arange(len(data.test)), world)[rank].tolist()
    for i in range(0, len(share), batch):
        idx = share[i : i + batch]
        if isinstance(data.test, TensorData):
            yield data.test.__getitems__(idx)
        else:
            xs, ys = zip(*(data.test[j] for j in idx))
            yield torch.stack(xs), torch.as_tensor(ys)


def main(argv: list[str] | None = None) -> int:
    """Fetch a real dataset into data_root (the one place that downloads)."""
    parser = argparse.ArgumentParser(prog="ddpbench data", description=main.__doc__)
    parser.add_argument("--dataset", required=True, choices=sorted(_NORMALIZE))
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--image-size", type=int, default=160)
    parser.add_argument("--record", type=Path, help="also write the result line here (the workflow's marker)")
    parser.add_argument("--log", type=Path, help="write the output here; only the result line goes to stdout")
    parser.add_argument("--results", type=Path,
                        help="the results folder --record and --log lie in (the workflow's): no folder below it is "
                             "followed if it is a link, whenever it was planted")  # fmt: skip
    args = parser.parse_args(argv)
    from ddpbench.core import safe_io, storage

    with safe_io.anchor_writes_at(args.results), storage.output_to(args.log) as output:
        safe_io.make_dir(args.data_root)
        train, test, shape = _torchvision(args.dataset, args.data_root, args.image_size, download=True)
        line = f"{args.dataset}: {len(train)} train, {len(test)} test samples of shape {shape} in {args.data_root}"
        if args.record:
            safe_io.atomic_write_text(args.record, line + "\n")
        output.say(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
