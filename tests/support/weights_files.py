"""Tiny weights files made by the tests themselves (nothing is downloaded): TorchScript feature extractors, with or
without the ``ldpclient.json`` that says their input size."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from ldpclient.transfer.pretrained import METADATA_FILE


class Extractor(nn.Module):
    """RGB (N, 3, 16, 16) in [0, 1] to 6 features: a 3x3 convolution and the mean of each channel."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)).mean(dim=(2, 3))


class FixedSize(nn.Module):
    """Takes only 16x16 inputs: a linear layer over the flattened image, 4 features."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3 * 16 * 16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(x, 1))


def script_file(path: Path, module: nn.Module | None = None, meta: object = None) -> Path:
    """``module`` (default: :class:`Extractor`, seeded) saved as TorchScript at ``path`` with ``meta`` as its
    ldpclient.json (default ``{"input_size": 16}``; ``""``: no such file)."""
    torch.manual_seed(0)
    scripted = torch.jit.script((module or Extractor()).eval())
    meta = {"input_size": 16} if meta is None else meta
    extra = {} if meta == "" else {METADATA_FILE: meta if isinstance(meta, str) else json.dumps(meta)}
    torch.jit.save(scripted, str(path), _extra_files=extra)
    return path
