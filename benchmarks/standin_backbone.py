"""A stand-in for pretrained weights, made here without internet: torchvision's ResNet-18 trained with labels on
the CIFAR-10 photos of classes 0-4 (airplane, automobile, bird, cat, deer) that are not in the benchmarks' private
part, at 64x64 (each 32x32 photo resized), so that a benchmark can start a student from weights that never saw a
private photo nor a photo of classes 5-9.

It writes two files into ``benchmarks/.cache``:

* ``standin-resnet18.pth``: the state dict in torchvision's layout (its ``fc`` of 5 classes), the form of the
  files ``torchvision.models.resnet18(weights="DEFAULT")`` caches;
* ``standin-resnet18.ts``: the same network as a TorchScript feature extractor (``[0, 1]`` RGB at 64x64 in,
  its 512 pooled features out; the normalisation inside), with ``ldpclient.json`` (``input_size`` 64) among its
  extra files: the form ``--student-weights`` takes for a user's own model.

Recipe: 11,993 photos (every one of classes 0-4 outside the private part, 500 of them held out to report its
accuracy), SGD with Nesterov momentum 0.9, weight decay 5e-4, batch 128, a one-cycle rate peaking at 0.1,
``--epochs`` epochs (18), random 4-pixel-padded crops and mirror flips, seed 0::

    .venv/bin/python benchmarks/standin_backbone.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torchvision.models import resnet18

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cifar10  # noqa: E402

CACHE = Path(__file__).resolve().parent / ".cache"
STATE_FILE = CACHE / "standin-resnet18.pth"
SCRIPT_FILE = CACHE / "standin-resnet18.ts"
CLASSES = 5
INPUT_SIZE = 64


def training_photos() -> tuple[torch.Tensor, torch.Tensor]:
    """The photos of classes 0-4 outside the private part: float ``(N, 3, 32, 32)`` in [0, 1], labels int64."""
    x, y, _ = cifar10.load()
    order = np.random.default_rng(cifar10.SPLIT_SEED).permutation(len(y))
    private = set(order[: dict(cifar10.PARTS)["private"]].tolist())
    keep = np.array([i for i in range(len(y)) if y[i] < CLASSES and i not in private])
    assert not private & set(keep.tolist()), "a private photo in the stand-in's training set"
    return torch.from_numpy(x[keep]).float() / 255.0, torch.from_numpy(y[keep])


class FeatureExtractor(nn.Module):
    """``[0, 1]`` RGB ``(N, 3, 64, 64)`` to the backbone's pooled features ``(N, 512)``, normalised inside."""

    def __init__(self, backbone: nn.Module, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.body = nn.Sequential(*list(backbone.children())[:-1])
        self.register_buffer("mean", mean.view(1, 3, 1, 1))
        self.register_buffer("std", std.view(1, 3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.body((x - self.mean) / self.std), 1)


def augment(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Random crops of the 4-pixel reflect-padded photos and mirror flips, then resized to 64x64."""
    n = len(x)
    padded = nn.functional.pad(x, (4, 4, 4, 4), mode="reflect")
    dy, dx = torch.randint(0, 9, (2, n), generator=g)
    rows = dy[:, None] + torch.arange(32)[None, :]
    cols = dx[:, None] + torch.arange(32)[None, :]
    crops = padded[torch.arange(n)[:, None, None, None], torch.arange(3)[None, :, None, None],
                   rows[:, None, :, None], cols[:, None, None, :]]
    flip = torch.rand(n, generator=g) < 0.5
    crops[flip] = crops[flip].flip(-1)
    return resized(crops)


def resized(x: torch.Tensor) -> torch.Tensor:
    return nn.functional.interpolate(x, size=(INPUT_SIZE, INPUT_SIZE), mode="bilinear", align_corners=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=18)
    args = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x, y = training_photos()
    perm = torch.randperm(len(y), generator=g)
    held, train = perm[:500], perm[500:]
    mean, std = x[train].mean(dim=(0, 2, 3)), x[train].std(dim=(0, 2, 3))
    model = resnet18(num_classes=CLASSES)
    norm = FeatureExtractor(model, mean, std)  # shares the backbone's weights

    def logits(batch: torch.Tensor) -> torch.Tensor:
        return model.fc(norm(batch))

    steps = args.epochs * ((len(train) + 127) // 128)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=steps)
    t0 = time.perf_counter()
    print(f"# {len(train)} training photos, {len(held)} held out, classes 0-{CLASSES - 1}", flush=True)
    for epoch in range(args.epochs):
        model.train()
        order = train[torch.randperm(len(train), generator=g)]
        for s in range(0, len(order), 128):
            idx = order[s : s + 128]
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(logits(augment(x[idx], g)), y[idx])
            loss.backward()
            opt.step()
            sched.step()
        model.eval()
        with torch.no_grad():
            acc = float((logits(resized(x[held])).argmax(1) == y[held]).float().mean())
        print(f"epoch {epoch + 1}: loss {float(loss.detach()):.3f} held-out accuracy {acc:.3f} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), STATE_FILE)
    scripted = torch.jit.script(norm.eval())
    meta = {"input_size": INPUT_SIZE, "made_by": "benchmarks/standin_backbone.py",
            "held_out_accuracy": round(acc, 4), "epochs": args.epochs}
    torch.jit.save(scripted, str(SCRIPT_FILE), _extra_files={"ldpclient.json": json.dumps(meta)})
    print(json.dumps({"state_dict": str(STATE_FILE), "torchscript": str(SCRIPT_FILE), **meta}))


if __name__ == "__main__":
    main()
