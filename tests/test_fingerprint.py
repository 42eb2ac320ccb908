"""The ledger's perceptual fingerprints (issue 45): what they are blind to, and what they tell apart."""

from __future__ import annotations

import sqlite3

import torch
import torch.nn.functional as F

from ldpclient.privacy.basis import dct_matrix
from ldpclient.privacy.ledger import fingerprint as fp


def _table() -> sqlite3.Connection:
    c = sqlite3.connect(":memory:")
    c.execute("CREATE TABLE fingerprints (source_key BLOB PRIMARY KEY, print BLOB NOT NULL)")
    return c


def _smooth(n: int, seed: int, shape: tuple[int, ...] = (1, 28, 28)) -> torch.Tensor:
    """Smooth random images in [0, 1] (low-pass noise: what a photo looks like to a fingerprint)."""
    g = torch.Generator().manual_seed(seed)
    small = torch.rand(n, shape[0], 6, 6, generator=g)
    return F.interpolate(small, size=shape[1:], mode="bicubic", align_corners=False).clamp(0, 1)


def test_the_two_matrix_products_are_the_resize_and_the_dct() -> None:
    x = torch.rand(5, 3, 30, 22)
    d = dct_matrix(fp.SIDE).to(torch.float32)
    for k, crop in enumerate(fp.CROPS):
        dy, dx = round(crop * 30), round(crop * 22)
        grey = x.mean(1, keepdim=True)[:, :, dy : 30 - dy, dx : 22 - dx]
        small = F.interpolate(grey, size=(fp.SIDE, fp.SIDE), mode="bilinear", antialias=True, align_corners=False)
        coef = (d @ small[:, 0] @ d.T)[:, : fp.FREQUENCIES, : fp.FREQUENCIES].reshape(5, -1)[:, 1:]
        assert torch.allclose(fp._prints(fp._grey(x), len(fp.CROPS))[:, k], F.normalize(coef, dim=1), atol=1e-5)


def test_blind_to_brightness_and_contrast_and_to_the_value_range() -> None:
    x = _smooth(8, 0)
    base = fp.fingerprint(x)
    for changed in (x * 0.7 + 0.2, x * 255.0, 1.5 * x - 0.3):
        assert torch.allclose(fp.fingerprint(changed), base, atol=1e-5)


def test_stored_copies_are_found_and_distinct_images_are_not() -> None:
    private, others = _smooth(50, 1), _smooth(50, 2)
    c = _table()
    fp.store(c, [bytes([k]) for k in range(50)], private)
    assert bool((fp.nearest(c, fp.fingerprint(private)) >= fp.NEAR).all())  # the int8 copies keep them near
    cropped = F.interpolate(private[:, :, 2:-2, 2:-2], size=(28, 28), mode="bilinear", antialias=True)
    assert bool((fp.nearest(c, fp.fingerprint(cropped)) >= fp.NEAR).all())  # a centre crop: a stored crop
    assert bool((fp.nearest(c, fp.fingerprint(others)) < fp.NEAR).all())


def test_nothing_is_stored_for_records_that_are_not_images_and_nothing_matches_an_empty_table() -> None:
    c = _table()
    fp.store(c, [b"a", b"b"], torch.rand(2, 16))  # tabular records: no fingerprint
    fp.store(c, [b"c"], torch.rand(1, 1, 4, 4))  # below MIN_SIDE
    assert c.execute("SELECT COUNT(*) FROM fingerprints").fetchone()[0] == 0
    assert bool(torch.isinf(fp.nearest(c, fp.fingerprint(_smooth(3, 0)))).all())
    flat = torch.full((1, 1, 28, 28), 0.5)
    fp.store(c, [b"d"], _smooth(1, 4))
    assert float(fp.nearest(c, fp.fingerprint(flat))[0]) < fp.NEAR  # a flat image's zero print matches nothing
