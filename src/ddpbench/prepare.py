"""Prepare a real dataset once, before any training rank needs it.

    python -m ddpbench.prepare --dataset cifar10 --root data [--image-size 160] [--marker FILE]

Downloads CIFAR-10, MNIST or Imagenette into ``--root`` in torchvision's on-disk layout
(what `ddpbench.data` reads with ``download=False``), unless the files are already there:
presence is checked by file names, not checksums, so a prepared, copied or hand-made
folder is used as it is and nothing is fetched twice. Ranks never download.
``--marker`` records what was found or fetched (the workflow's `prepare_data` output).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time
from typing import Any

DATASETS = ("cifar10", "mnist", "imagenette")


def imagenette_variant(image_size: int) -> str:
    """The smallest published Imagenette variant at least as large as image_size."""
    if image_size <= 160:
        return "160px"
    if image_size <= 320:
        return "320px"
    return "full"


def expected_files(dataset: str, root: str | os.PathLike, image_size: int = 160) -> list[pathlib.Path]:
    """Files (or folders) whose presence means `dataset` is prepared under `root`."""
    from torchvision import datasets

    root = pathlib.Path(root)
    if dataset == "cifar10":
        cls = datasets.CIFAR10
        folder = root / cls.base_folder
        names = [name for name, _md5 in cls.train_list + cls.test_list] + [cls.meta["filename"]]
        return [folder / name for name in names]
    if dataset == "mnist":
        raw = root / "MNIST" / "raw"
        return [raw / os.path.splitext(name)[0] for name, _md5 in datasets.MNIST.resources]
    if dataset == "imagenette":
        url, _md5 = datasets.Imagenette._ARCHIVES[imagenette_variant(image_size)]
        folder = root / pathlib.Path(url).name.removesuffix(".tgz")
        return [folder / "train", folder / "val"]
    raise ValueError(f"unknown dataset {dataset!r}; expected one of {', '.join(DATASETS)}")


def download(dataset: str, root: str | os.PathLike, image_size: int = 160) -> None:
    """Fetch both splits with torchvision (needs network access)."""
    from torchvision import datasets

    root = str(root)
    if dataset == "cifar10":
        datasets.CIFAR10(root, train=True, download=True)
        datasets.CIFAR10(root, train=False, download=True)
    elif dataset == "mnist":
        datasets.MNIST(root, train=True, download=True)
        datasets.MNIST(root, train=False, download=True)
    elif dataset == "imagenette":
        size = imagenette_variant(image_size)
        datasets.Imagenette(root, split="train", size=size, download=True)
        datasets.Imagenette(root, split="val", size=size, download=True)
    else:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {', '.join(DATASETS)}")


def prepare(dataset: str, root: str | os.PathLike, image_size: int = 160) -> dict[str, Any]:
    """Make sure `dataset` is under `root`; download only what is missing."""
    pathlib.Path(root).mkdir(parents=True, exist_ok=True)
    files = expected_files(dataset, root, image_size)
    missing = [p for p in files if not p.exists()]
    if missing:
        download(dataset, root, image_size)
        still = [str(p) for p in files if not p.exists()]
        if still:
            raise RuntimeError(f"{dataset}: still missing after download: {', '.join(still)}")
    return {
        "dataset": dataset,
        "root": str(root),
        "image_size": image_size,
        "downloaded": bool(missing),
        "files": [str(p) for p in files],
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddpbench.prepare", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, choices=DATASETS)
    parser.add_argument("--root", required=True, help="data_root of the cells")
    parser.add_argument("--image-size", type=int, default=160, help="imagenette: picks the smallest variant >= this")
    parser.add_argument("--marker", help="write a JSON record of the prepared files here")
    args = parser.parse_args(argv)
    try:
        info = prepare(args.dataset, args.root, args.image_size)
    except Exception as err:  # a network error is the usual cause: say so plainly
        print(f"[ddpbench] prepare {args.dataset}: failed: {err}", file=sys.stderr)
        return 1
    if args.marker:
        marker = pathlib.Path(args.marker)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(info, indent=2) + "\n")
    what = "downloaded" if info["downloaded"] else "already present"
    print(f"[ddpbench] prepare {args.dataset}: {what} in {args.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
