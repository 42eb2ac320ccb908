"""Bundled digits loader and deterministic index splits."""

import pytest
import torch

from ldpclient.io.datasets import DIGITS_CLASS_NAMES, load_digits_images, split_indices


def test_native_digits_are_8x8_in_unit_range():
    x, y = load_digits_images(size=8)
    assert x.shape == (1797, 1, 8, 8) and x.dtype == torch.float32
    assert y.shape == (1797,) and y.dtype == torch.int64
    assert float(x.min()) == 0.0 and float(x.max()) == 1.0
    assert set(y.tolist()) == set(range(10))
    assert len(DIGITS_CLASS_NAMES) == 10
    # native grey levels are multiples of 1/16
    assert torch.allclose(x * 16, (x * 16).round())


def test_resized_digits_match_native_means():
    x8, y8 = load_digits_images(size=8)
    x28, y28 = load_digits_images()
    assert x28.shape == (1797, 1, 28, 28)
    assert torch.equal(y8, y28)
    assert 0.0 <= float(x28.min()) and float(x28.max()) <= 1.0
    # bilinear resizing keeps the overall intensity close to the native image's
    assert torch.allclose(x28.mean(dim=(1, 2, 3)), x8.mean(dim=(1, 2, 3)), atol=0.05)


def test_bad_size_rejected():
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="size"):
            load_digits_images(size=bad)


def test_split_indices_disjoint_complete_deterministic():
    a = split_indices(100, [0.7, 0.2, 0.1], seed=3)
    b = split_indices(100, [0.7, 0.2, 0.1], seed=3)
    c = split_indices(100, [0.7, 0.2, 0.1], seed=4)
    assert [len(s) for s in a] == [70, 20, 10]
    assert all(torch.equal(s, t) for s, t in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0])
    allidx = torch.cat(a)
    assert allidx.dtype == torch.int64
    assert sorted(allidx.tolist()) == list(range(100))


def test_split_indices_partial_and_rounding():
    parts = split_indices(10, [1 / 3, 1 / 3], seed=0)
    assert [len(p) for p in parts] == [3, 4]  # round(3.33)=3, round(6.67)=7
    assert len(set(torch.cat(parts).tolist())) == 7
    assert split_indices(0, [0.5, 0.5])[0].numel() == 0


@pytest.mark.parametrize(
    "n,fracs,match",
    [(-1, [0.5], "n must"), (10, [], "at least one"), (10, [0.0], r"\(0, 1\]"),
     (10, [0.6, 0.6], "more than 1"), (10, [float("nan")], r"\(0, 1\]")],
)
def test_split_indices_bad_input(n, fracs, match):
    with pytest.raises(ValueError, match=match):
        split_indices(n, fracs)
