"""Train a benchmark teacher on an accelerator and keep it where ``bench_adapt.cached_teacher`` looks for it.

The residual CIFAR-10 teacher (``--teacher resnet``, :data:`bench_adapt.RESNET_EPOCHS` epochs of
``mock_server.teacher.train_resnet``) takes about half an hour on two idle cores, longer beside other runs. This
script cuts the work in two. ``export`` writes the teacher's 16,000 training photos (uint8, the fixed split of
``cifar10.py``) and the epoch count to one file that can travel to a machine with a GPU. ``train`` there, with only
numpy, torch and this checkout, trains the same recipe on the GPU (the order, flips and shifts drawn on the CPU from
the same seed) and writes the weights. Copied to ``benchmarks/.cache/teacher-cifar10-32-resnet.pt``, every
benchmark's ``--teacher resnet`` / ``--arch resnet`` uses them::

    .venv/bin/python benchmarks/teacher_on_device.py export benchmarks/.cache/cifar10-teacher-part.npz
    python3 benchmarks/teacher_on_device.py train benchmarks/.cache/cifar10-teacher-part.npz OUT.pt --device cuda

A GPU's arithmetic differs from the CPU's in rounding, so these weights are not bit for bit the CPU's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))


def export(path: Path) -> None:
    """The teacher's photos and labels, and the recipe's epoch count (so ``train`` needs no ldpclient extras)."""
    import cifar10
    from bench_adapt import RESNET_EPOCHS

    images, labels = cifar10.split()["teacher"]
    np.savez(path, images=images, labels=labels, epochs=RESNET_EPOCHS)
    print(f"wrote {len(labels)} teacher photos to {path}")


def train(path: Path, out: Path, device: str) -> None:
    from mock_server.teacher import train_resnet

    with np.load(path) as data:
        x = torch.from_numpy(data["images"]).float() / 255.0
        y = torch.from_numpy(data["labels"]).long()
        epochs = int(data["epochs"])
    t0 = time.perf_counter()
    model = train_resnet(x, y, 10, epochs=epochs, seed=0, device=device)
    print(f"trained the resnet teacher on {len(y)} photos, {epochs} epochs, on {device} in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    torch.save(model.state_dict(), out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("export").add_argument("path", type=Path)
    t = sub.add_parser("train")
    t.add_argument("path", type=Path)
    t.add_argument("out", type=Path)
    t.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if args.verb == "export":
        export(args.path)
    else:
        train(args.path, args.out, args.device)


if __name__ == "__main__":
    main()
