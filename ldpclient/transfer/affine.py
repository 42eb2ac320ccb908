"""Random rotation and shift of a batch of images, one draw per image, in one ``grid_sample`` call.

torchvision's ``v2.RandomAffine(degrees, translate, interpolation=BILINEAR)`` transforms one image
per call. Called image by image over a fine-tuning batch, its per-call work (~110 µs for a 28x28
image, measured) was a fifth of a fine-tuning step. :class:`RandomRotateShift` is the same transform
for a batch: it draws the same parameters from the global RNG in the same order (per image: the angle,
then the x and the y shift), builds the same inverse matrix and sampling grid, and handles the border
the same way (a sampled mask channel, fill 0). Its output equals calling torchvision's transform on
each image in turn, value for value (``tests/transfer/test_affine.py`` compares them), so adapting with it
gives the same student as before.
"""

from __future__ import annotations

import math

import torch
from torch.nn.functional import grid_sample

#: Smallest image side (pixels) that gets geometric augmentation in training and adaptation, and the residual
#: student: below it a one-pixel shift is a large move (measured on 8x8 digits: augmentation there cost accuracy).
MIN_AUGMENT_SIDE = 16



class RandomRotateShift:
    """Rotate each image of ``(N, C, H, W)`` (float, any range) by an angle uniform in
    ``[-degrees, degrees]`` and shift it by a whole number of pixels, uniform in
    ``[-translate * W, translate * W]`` across and ``[-translate * H, translate * H]`` down, rounded;
    bilinear, with 0 outside the image. The draws come from the global RNG (callers fork it)."""

    def __init__(self, degrees: float, translate: float) -> None:
        if degrees < 0 or not 0.0 <= translate <= 1.0:
            raise ValueError(f"degrees must be >= 0 and translate in [0, 1], got {degrees}, {translate}")
        self.degrees = float(degrees)
        self.translate = float(translate)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if images.dim() != 4 or not images.is_floating_point():
            raise ValueError(f"images must be a float batch (N, C, H, W), got {images.dtype} {tuple(images.shape)}")
        n, _, h, w = images.shape
        theta = torch.tensor(self._inverse_matrices(n, h, w), dtype=images.dtype).reshape(n, 2, 3)
        ones = torch.ones((n, 1, h, w), dtype=images.dtype)
        out = grid_sample(
            torch.cat((images, ones), dim=1),
            _grid(theta, h, w),
            mode="bilinear",
            padding_mode="zeros",
            align_corners=False,
        )
        moved, mask = out[:, :-1], out[:, -1:]
        return moved.mul_(mask.expand_as(moved))  # fill 0: the part of a pixel that came from outside is 0

    def _inverse_matrices(self, n: int, h: int, w: int) -> list[list[float]]:
        """``n`` images' draws (per image the angle, then whole-pixel shifts x and y) as output-to-input maps,
        row-major 2x3. One call draws the ``3n`` numbers the per-image calls would (the same stream, in the same
        order: each is a 24-bit fraction, then scaled in double and rounded to float as ``uniform_`` does)."""
        max_dx, max_dy = float(self.translate * w), float(self.translate * h)
        low = torch.tensor([-self.degrees, -max_dx, -max_dy])
        span = (torch.tensor([self.degrees, max_dx, max_dy]) - low).double()
        draws = (torch.empty(n, 3).uniform_(0.0, 1.0).double() * span + low.double()).float()
        draws[:, 1:] = torch.round(draws[:, 1:])  # half to even, as Python's round
        return [self._inverse_matrix(angle, tx, ty) for angle, tx, ty in draws.tolist()]

    @staticmethod
    def _inverse_matrix(angle: float, tx: float, ty: float) -> list[float]:
        """The inverse of "rotate by ``angle`` degrees about the centre, then shift by (tx, ty) pixels", in
        torchvision's order of operations (its matrix with scale 1 and no shear), so the floats come out the same."""
        rot = math.radians(angle)
        cos, sin = math.cos(rot), math.sin(rot)
        m = [cos, sin, 0.0, -sin, cos, 0.0]
        m[2] += cos * -tx + sin * -ty
        m[5] += -sin * -tx + cos * -ty
        return m


def flip_crop(
    images: torch.Tensor, pad: int, *, flip: bool = True, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Each image of ``images`` ``(N, C, H, W)`` (float, any range) mirrored left to right at random (half of
    them, when ``flip``) and cropped at random from a copy padded by ``pad`` pixels with its edge values
    repeated: the same size back, shifted by up to ``pad`` pixels each way (``pad`` 0: no shift).

    Draws, from ``generator`` (None: the global RNG): the ``N`` flips first (when ``flip``), then the ``N``
    row and ``N`` column offsets."""
    if images.dim() != 4:
        raise ValueError(f"images must be a batch (N, C, H, W), got shape {tuple(images.shape)}")
    if pad < 0:
        raise ValueError(f"pad must be >= 0, got {pad}")
    n, c, h, w = images.shape
    if flip:
        mirrored = torch.rand(n, generator=generator) < 0.5
        images = torch.where(mirrored[:, None, None, None], images.flip(-1), images)
    if pad < 1:
        return images
    padded = torch.nn.functional.pad(images, (pad, pad, pad, pad), mode="replicate")
    dy, dx = torch.randint(0, 2 * pad + 1, (2, n), generator=generator)
    rows = (dy[:, None] + torch.arange(h)[None]).view(n, 1, h, 1)
    cols = (dx[:, None] + torch.arange(w)[None]).view(n, 1, 1, w)
    return padded[torch.arange(n).view(n, 1, 1, 1), torch.arange(c).view(1, -1, 1, 1), rows, cols]


def _grid(theta: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Sampling grid ``(N, H, W, 2)`` in [-1, 1] units of the maps ``theta`` ``(N, 2, 3)`` (pixel units,
    centre at 0): pixel-centre coordinates mapped by theta, then normalised by the half sizes."""
    dtype = theta.dtype
    base = torch.empty(1, h, w, 3, dtype=dtype)
    base[..., 0].copy_(torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, steps=w))
    base[..., 1].copy_(torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, steps=h).unsqueeze_(-1))
    base[..., 2].fill_(1)
    scaled = theta.transpose(1, 2).div(torch.tensor([0.5 * w, 0.5 * h], dtype=dtype))
    return base.view(1, h * w, 3).expand(theta.shape[0], -1, -1).bmm(scaled).view(-1, h, w, 2)


__all__ = ["MIN_AUGMENT_SIDE", "RandomRotateShift", "flip_crop"]
