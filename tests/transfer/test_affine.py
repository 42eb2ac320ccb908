"""The batched weak augmentation gives torchvision's per-image RandomAffine values and draws; the training
flip and crop moves each image only within itself."""

from __future__ import annotations

import pytest
import torch
from torchvision.transforms import v2

from ldpclient.transfer.adapt import weak_augmentation
from ldpclient.transfer.affine import RandomRotateShift, flip_crop


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


def _views(image: torch.Tensor, pad: int, flip: bool) -> list[torch.Tensor]:
    """Every image ``flip_crop`` may make of ``image``: itself or its mirror, shifted by up to ``pad`` pixels."""
    h, w = image.shape[-2:]
    sources = [image, image.flip(-1)] if flip else [image]
    padded = [torch.nn.functional.pad(s[None], (pad,) * 4, mode="replicate")[0] for s in sources]
    return [p[:, dy : dy + h, dx : dx + w] for p in padded for dy in range(2 * pad + 1) for dx in range(2 * pad + 1)]


@pytest.mark.parametrize("pad, flip", [(1, True), (4, True), (2, False), (0, True)])
def test_flip_crop_makes_each_image_a_mirror_or_shift_of_itself_never_of_another(pad, flip) -> None:
    x = torch.rand(40, 3, 12, 10)
    out = flip_crop(x, pad, flip=flip, generator=torch.Generator().manual_seed(0))
    assert out.shape == x.shape
    for k in range(len(x)):
        assert any(torch.equal(out[k], v) for v in _views(x[k], pad, flip))
    assert not torch.equal(out, x)  # 40 images: some moved or mirrored
    if flip:  # about half mirrored (a pad-0 crop keeps the rest as they were)
        mirrored = sum(torch.equal(out[k], x[k].flip(-1)) for k in range(len(x))) if pad == 0 else None
        assert mirrored is None or 8 <= mirrored <= 32


def test_flip_crop_draws_from_its_generator_only_and_repeats_with_its_seed() -> None:
    x = torch.rand(16, 1, 16, 16)
    torch.manual_seed(3)
    before = torch.rand(2)
    torch.manual_seed(3)
    a = flip_crop(x, 2, generator=torch.Generator().manual_seed(5))
    assert torch.equal(torch.rand(2), before)  # the global RNG untouched
    assert torch.equal(a, flip_crop(x, 2, generator=torch.Generator().manual_seed(5)))
    with pytest.raises(ValueError, match="pad"):
        flip_crop(x, -1)
    with pytest.raises(ValueError, match="batch"):
        flip_crop(x[0], 1)
