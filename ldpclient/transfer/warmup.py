"""Self-supervised warm-up of the student on the clean private records (``label --warmup EPOCHS``; off by default).

Before the student learns the teacher's labels of the noised queries, its layers are trained on a pretext task that
needs no label and never leaves the device: which of four rotations (0, 90, 180, 270 degrees) an image was turned by
(RotNet, Gidaris et al., ICLR 2018). Each batch holds every image of it in all four rotations, shifted at random by up
to ``pad`` pixels. The student's output layer is set aside meanwhile (a 4-way layer stands in for it) and put back
untouched, so a warmed student differs from a cold one only below its last linear layer. Like the adaptation step,
it reads the clean private records on this device only: nothing is sent, and it costs no privacy.

Measured (3 seeds, no public images): 60 epochs gained 9.1 points on the
colour digits and tied on CIFAR-10, MNIST and scikit-learn digits (+0.2, +0.9, 0.0), at about 4 times the
run's time (4.2x on CIFAR-10); 30 epochs lost about a point on three of the four sets. Hence an option, not a default.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch
from torch import nn

from ..io.records import RecordSource
from .affine import flip_crop
from .student import StudentAdam

#: Rotations the pretext tells apart (multiples of 90 degrees).
ROTATIONS = 4
#: Records per warm-up step (each in its four rotations: 256 rows a step).
WARMUP_BATCH = 64
#: Adam's learning rate for the warm-up (the training's own default).
WARMUP_LR = 1e-3


def rotations(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each image of ``images`` ``(N, C, H, W)`` (square) in its four rotations: ``(4N, C, H, W)``, all first
    rotations first, and each row's rotation index in 0..3 (times 90 degrees counter-clockwise)."""
    turned = torch.cat([torch.rot90(images, k, dims=(2, 3)) for k in range(ROTATIONS)])
    return turned, torch.arange(ROTATIONS).repeat_interleave(len(images))


def _output_layer(model: nn.Module) -> tuple[nn.Module, str, nn.Linear]:
    """``(parent, attribute name, layer)`` of the last ``nn.Linear`` of ``model``: its output layer."""
    found = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            found = (name, module)
    if found is None:
        raise ValueError("the student has no linear output layer to set aside for the warm-up")
    name, layer = found
    parent_name, _, attribute = name.rpartition(".")
    return (model.get_submodule(parent_name) if parent_name else model), attribute, layer


def rotation_warmup(
    model: nn.Module,
    records: RecordSource,
    *,
    epochs: int,
    pad: int,
    seed: int,
    device: torch.device | str = "cpu",
    on_epoch: Optional[Callable[[int], None]] = None,
) -> list[float]:
    """Train ``model`` in place on the rotation pretext over ``records`` (clean images, float in [0, 1], square)
    for ``epochs`` passes (Adam at :data:`WARMUP_LR`, :data:`WARMUP_BATCH` records a step in a shuffled order drawn
    from ``seed``, each shifted by up to ``pad`` pixels), its output layer set aside and restored; ``on_epoch(done)``
    after each pass. Dropout draws from the global RNG (the caller seeds it). Returns the pretext's accuracy per
    epoch, in [0, 1], on the batches as trained (chance 0.25)."""
    if epochs < 0:
        raise ValueError(f"epochs must be >= 0, got {epochs}")
    h, w = records.record_shape[-2:]
    if h != w:
        raise ValueError(f"the rotation warm-up needs square images, got {h}x{w}")
    parent, attribute, head = _output_layer(model)
    model.to(device)
    gen = torch.Generator().manual_seed(seed)
    setattr(parent, attribute, nn.Linear(head.in_features, ROTATIONS).to(device))
    optimiser = StudentAdam(model.parameters(), WARMUP_LR)
    history: list[float] = []
    model.train()
    try:
        for epoch in range(epochs):
            order = torch.randperm(len(records), generator=gen)
            right = 0
            for start in range(0, len(order), WARMUP_BATCH):
                ids = order[start:start + WARMUP_BATCH].numpy().astype(np.int64)
                batch = flip_crop(records.read(ids).float(), pad, flip=False, generator=gen)
                x, y = rotations(batch)
                x, y = x.to(device), y.to(device)
                logits = model(x)
                loss = nn.functional.cross_entropy(logits, y)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                right += int((logits.argmax(1) == y).sum())
            history.append(right / (ROTATIONS * len(records)))
            if on_epoch is not None:
                on_epoch(epoch + 1)
    finally:
        setattr(parent, attribute, head)
    return history


__all__ = ["ROTATIONS", "WARMUP_BATCH", "WARMUP_LR", "rotation_warmup", "rotations"]
