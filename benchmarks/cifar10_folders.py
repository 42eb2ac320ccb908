"""Write the CIFAR-10 split (``cifar10.split()``) as PNG folders, for timing ``ldpclient label`` end to end on
photos against the mock teacher::

    .venv/bin/python benchmarks/cifar10_folders.py /tmp/cifar
    # /tmp/cifar/teacher/<class>/*.png (16,000), /tmp/cifar/private/*.png (1,000), /tmp/cifar/public/*.png (5,000)
    .venv/bin/python -m mock_server --port 8123 --train-folder /tmp/cifar/teacher --image-size 32 --channels 3 \\
        [--arch resnet] --epochs 30 &
    .venv/bin/ldpclient label /tmp/cifar/private --teacher http://127.0.0.1:8123/v2/models/digits --baseline \\
        [--public /tmp/cifar/public]

The private and public files are named by their index only (no class in the name); an existing folder is
left as it is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cifar10  # noqa: E402


def write(root: Path) -> None:
    _, _, classes = cifar10.load()
    parts = cifar10.split()
    for part in ("teacher", "private", "public"):
        images, labels = parts[part]
        folder = root / part
        if folder.exists():
            print(f"{folder} exists: left as it is")
            continue
        for k, (image, label) in enumerate(zip(images, labels, strict=True)):
            where = folder / classes[int(label)] if part == "teacher" else folder
            where.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.ascontiguousarray(image.transpose(1, 2, 0))).save(where / f"{k:05d}.png")
        print(f"{folder}: {len(images)} photos")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root", type=Path, help="folder to write teacher/, private/ and public/ into")
    write(p.parse_args(argv).root)


if __name__ == "__main__":
    main()
