"""The batched weak augmentation gives torchvision's per-image RandomAffine values and draws."""

from __future__ import annotations

import pytest
import torch
from torchvision.transforms import v2

from ldpclient.transfer.adapt import weak_augmentation
from ldpclient.transfer.affine import RandomRotateShift


@pytest.mark.parametrize("shape", [(64, 1, 28, 28), (9, 3, 32, 32), (5, 1, 16, 16), (6, 2, 20, 24), (1, 1, 17, 17)])
@pytest.mark.parametrize("degrees, translate", [(5.0, None), (30.0, 0.2), (0.0, 0.0)])
def test_a_batch_gets_the_values_and_draws_of_torchvisions_transform_image_by_image(shape, degrees, translate) -> None:
    frac = 1.0 / shape[-1] if translate is None else translate
    x = torch.rand(*shape) * 2 - 0.5  # any range: values outside [0, 1] too
    reference = v2.RandomAffine(degrees=degrees, translate=(frac, frac), interpolation=v2.InterpolationMode.BILINEAR)
    torch.manual_seed(7)
    expected = torch.stack([reference(image) for image in x])
    after_expected = torch.rand(3)
    torch.manual_seed(7)
    got = RandomRotateShift(degrees, frac)(x)
    assert torch.equal(got, expected)
    assert torch.equal(torch.rand(3), after_expected)  # the same number of draws from the global RNG


def test_no_rotation_and_no_shift_leaves_the_images_as_they_were() -> None:
    x = torch.rand(4, 3, 12, 10)
    assert torch.allclose(RandomRotateShift(0.0, 0.0)(x), x, atol=1e-6)


def test_a_shift_moves_the_image_by_whole_pixels_and_fills_with_zero() -> None:
    x = torch.zeros(200, 1, 9, 9)
    x[:, :, 4, 4] = 1.0
    out = RandomRotateShift(0.0, 1.0 / 9)(x)
    moved = {tuple(int(v) for v in torch.nonzero(o[0] > 0.5)[0]) for o in out}
    assert moved <= {(4 + dy, 4 + dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)} and len(moved) > 1
    assert torch.allclose(out.sum(dim=(1, 2, 3)), torch.ones(200), atol=1e-5)  # a whole-pixel move keeps the dot whole


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="translate"):
        RandomRotateShift(5.0, 1.5)
    with pytest.raises(ValueError, match="float batch"):
        RandomRotateShift(5.0, 0.1)(torch.zeros(1, 8, 8))
    with pytest.raises(ValueError, match="float batch"):
        RandomRotateShift(5.0, 0.1)(torch.zeros(2, 1, 8, 8, dtype=torch.uint8))


def test_the_default_weak_augmentation_is_the_batched_transform_from_16_pixels() -> None:
    assert weak_augmentation(15) is None
    aug = weak_augmentation(28)
    assert isinstance(aug, RandomRotateShift) and aug.degrees == 5.0 and aug.translate == 1.0 / 28
