"""The views of a clean record that the adapted student's labels average over.

The adapted student labels each record it is unsure of (its top softmax output on the record as it is below
:data:`UNSURE_BELOW`) by its mean softmax over the record as it is and under the changes it was fine-tuned on
(test-time views); a record it is surer of keeps its output as it is (measured, its views would not change its
label, and skipping them spares most of their prediction passes). The views: the four one-pixel shifts of its
weak augmentation (records of :data:`~ldpclient.transfer.affine.MIN_AUGMENT_SIDE` pixels and more, as adaptation
shifts only those) and each image change the student was found to keep
(:mod:`~ldpclient.transfer.image_changes`). A view is read on demand
from the records (:class:`ViewedRecords`) and is fixed by the record's position, so it draws no random number
and reads the same in any batch. Values keep the records' range: a shift repeats the edge pixels, and the
changes work within each image's own range.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
from torch.nn import functional

from ..io.records import RecordSource
from .affine import MIN_AUGMENT_SIDE
from .image_changes import CHANGES, known

#: A view: ``(images (N, C, H, W), their positions (N,)) -> images`` of the same shape.
View = Callable[[torch.Tensor, np.ndarray], torch.Tensor]

#: The top softmax output (in [0, 1]) below which a record is labelled through its views: measured (3 seeds each), the
#: labels were as good as with every record through its views (colour digits 76.0 against 76.0, Fashion-MNIST 74.5
#: against 74.5, MNIST 92.6 against 92.6), with 37-42 %, 22-31 % and 4-6 % of the records below it.
UNSURE_BELOW = 0.8
#: The one-pixel shifts (rows, columns) the labels are averaged over.
SHIFT_STEPS: tuple[tuple[int, int], ...] = ((0, 1), (0, -1), (1, 0), (-1, 0))
#: The orders of a colour image's channels other than its own: the ``channels`` view of the record at position
#: ``i`` shows order ``i`` modulo their number.
OTHER_ORDERS: tuple[tuple[int, int, int], ...] = ((1, 2, 0), (2, 0, 1), (0, 2, 1), (2, 1, 0), (1, 0, 2))


def shifted(rows: int, columns: int) -> View:
    """The records moved by ``rows`` and ``columns`` pixels (each -1, 0 or 1), the edge pixels repeated."""
    if abs(rows) > 1 or abs(columns) > 1:
        raise ValueError(f"a view shifts by at most one pixel, got ({rows}, {columns})")

    def view(images: torch.Tensor, positions: np.ndarray) -> torch.Tensor:
        h, w = images.shape[-2:]
        padded = functional.pad(images, (1, 1, 1, 1), mode="replicate")
        return padded[..., 1 + rows : 1 + rows + h, 1 + columns : 1 + columns + w].contiguous()

    return view


def changed(name: str) -> View:
    """The records under the image change ``name`` (:data:`~ldpclient.transfer.image_changes.CHANGES`);
    ``channels`` shows each in one of :data:`OTHER_ORDERS`, by its position."""
    known((name,))
    if name != "channels":
        return lambda images, positions: CHANGES[name](images, None)

    def view(images: torch.Tensor, positions: np.ndarray) -> torch.Tensor:
        orders = torch.tensor(OTHER_ORDERS)[torch.from_numpy(positions % len(OTHER_ORDERS))]
        return images[torch.arange(len(images))[:, None], orders]

    return view


def label_views(kept: Sequence[str], side: int) -> tuple[View, ...]:
    """The views besides the records as they are, for records of smaller side ``side`` pixels whose student kept
    the changes ``kept``: the one-pixel shifts (none below :data:`~ldpclient.transfer.affine.MIN_AUGMENT_SIDE`),
    then each kept change."""
    shifts = () if side < MIN_AUGMENT_SIDE else tuple(shifted(r, c) for r, c in SHIFT_STEPS)
    return shifts + tuple(changed(name) for name in kept)


def unsure(probs: torch.Tensor, below: float) -> torch.Tensor:
    """Positions (int64, ascending) of the records whose top output in ``probs`` (float ``(N, K)`` softmax) is below
    ``below``: the ones labelled through their views."""
    return torch.nonzero(probs.max(1).values < below).flatten()


class ViewedRecords:
    """The records of ``source`` (a :class:`~ldpclient.io.records.RecordSource`) under ``view``, read on demand."""

    def __init__(self, source: RecordSource, view: View) -> None:
        self.source, self.view = source, view

    @property
    def record_shape(self) -> tuple[int, ...]:
        return tuple(self.source.record_shape)

    def __len__(self) -> int:
        return len(self.source)

    def read(self, indices: Sequence[int] | np.ndarray) -> torch.Tensor:
        positions = np.asarray(indices, dtype=np.int64)
        return self.view(self.source.read(positions).float(), positions)


__all__ = [
    "OTHER_ORDERS", "SHIFT_STEPS", "UNSURE_BELOW", "View", "ViewedRecords", "changed", "label_views", "shifted",
    "unsure",
]
